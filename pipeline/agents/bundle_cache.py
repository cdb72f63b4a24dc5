"""Bundles fetched from the service into a local cache keyed by digest, every file verified.

The manifest must hash to the digest the job names (canonical JSON, as the store computes it);
every artifact must match the sha256 the manifest gives it (computed by the builder: end to end);
every other file (the suite's sources) must match the sha256 of the service's file list. A bundle
that fails any check is refused with the file and both hashes named, and nothing of it is kept.
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

from pipeline.agents.client import ServiceClient
from pipeline.contracts import BundleManifest, ContractError, bundle_digest
from pipeline.contracts.bundle_dir import MANIFEST, load_bundle

__all__ = ["BundleRefused", "fetch_bundle"]

_VERIFIED = ".verified"


class BundleRefused(RuntimeError):
    """The bundle failed verification; the message names the file and the hashes."""


def fetch_bundle(client: ServiceClient, digest: str, cache_dir: Path) -> tuple[Path, BundleManifest]:
    """The verified bundle `digest` in `cache_dir/<digest>`, downloaded unless already there."""
    final = cache_dir / digest
    if (final / _VERIFIED).is_file():
        return final, load_bundle(final)
    listing = client.get(f"bundles/{digest}/manifest")
    tmp = cache_dir / f".tmp-{digest[:16]}-{uuid.uuid4().hex[:8]}"
    try:
        listed = {f["path"]: f["sha256"] for f in listing["files"]}
        if MANIFEST not in listed:
            raise BundleRefused(f"bundle {digest}: the service lists no {MANIFEST}")
        got = {path: client.download(f"bundles/{digest}/files/{path}", tmp / path) for path in listed}
        try:
            manifest = load_bundle(tmp)
        except ContractError as exc:
            raise BundleRefused(f"bundle {digest}: {MANIFEST} does not validate: {exc}") from None
        if bundle_digest(manifest) != digest:
            raise BundleRefused(f"bundle {digest}: {MANIFEST} hashes to {bundle_digest(manifest)}, not the job's digest")
        artifacts = {}
        for entry in manifest.entries:
            if entry.artifact is not None:
                if entry.artifact.path not in got:
                    raise BundleRefused(f"bundle {digest}: artifact {entry.artifact.path} of {entry.case} is missing")
                artifacts[entry.artifact.path] = entry.artifact.sha256
        for path, sha in sorted(got.items()):
            expected, source = (artifacts[path], "the manifest's") if path in artifacts else (listed[path], "the listed")
            if path != MANIFEST and sha != expected:
                raise BundleRefused(f"bundle {digest}: {path}: sha256 {sha} does not match {source} {expected}")
        (tmp / _VERIFIED).write_text("ok\n")
        try:
            tmp.rename(final)
        except OSError:  # another process of this agent host verified it first
            if not (final / _VERIFIED).is_file():
                raise
        return final, load_bundle(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
