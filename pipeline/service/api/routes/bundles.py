"""Bundle hosting (agent scope): a bundle's file list with sizes and sha256, and its files,
streamed. A path is confined to its bundle's folder; agents check every file against the manifest
(artifacts) or this list (everything else), and the manifest against the digest."""

from __future__ import annotations

import hashlib
from pathlib import Path

from fastapi import APIRouter, HTTPException
from fastapi.responses import FileResponse
from pydantic import BaseModel

from pipeline.service.api.deps import SessionDep, require_scope
from pipeline.service.api.schemas import ERROR_RESPONSES
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store import queue

router = APIRouter(route_class=StrictJsonRoute, tags=["bundles"], dependencies=[require_scope("agent")], responses=ERROR_RESPONSES)
_HASH_CHUNK = 1 << 20


class BundleFile(BaseModel):
    path: str
    size: int
    sha256: str


class BundleListing(BaseModel):
    digest: str
    files: list[BundleFile]


def _root(session: SessionDep, digest: str) -> Path:
    path = queue.bundle_path(session, digest)
    if path is None:
        raise HTTPException(404, f"no bundle {digest}")
    root = Path(path).resolve()
    if not root.is_dir():
        raise HTTPException(410, f"bundle {digest} is registered but its folder {root} is gone from the service")
    return root


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@router.get("/bundles/{digest}/manifest", response_model=BundleListing,
            summary="Every file of a bundle with its size and sha256")
def listing(digest: str, session: SessionDep) -> BundleListing:
    root = _root(session, digest)
    files = [BundleFile(path=p.relative_to(root).as_posix(), size=p.stat().st_size, sha256=_sha256(p))
             for p in sorted(root.rglob("*")) if p.is_file() and not p.is_symlink()]
    return BundleListing(digest=digest, files=files)


@router.get("/bundles/{digest}/files/{path:path}", response_class=FileResponse,
            summary="One file of a bundle, streamed")
def file(digest: str, path: str, session: SessionDep) -> FileResponse:
    root = _root(session, digest)
    target = (root / path).resolve()
    if not target.is_relative_to(root) or path.startswith("/"):
        raise HTTPException(404, f"{path}: not a file of bundle {digest}")
    if not target.is_file():
        raise HTTPException(404, f"{path}: not a file of bundle {digest}")
    return FileResponse(target, media_type="application/octet-stream")
