"""The agent's result spool: a job's outcome is written to disk (atomically) before it is sent,
and stays there until the service acknowledged it, so that neither an agent restart nor a service
outage loses measured results. One JSON file per job: {"job_id", "agent", "document"}."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.contracts import ResultDocument

__all__ = ["Spool", "SpoolError", "Spooled"]


class SpoolError(OSError):
    """A result document could not be written to the spool (no space left, read-only): its
    message names the spool, the job and the system's reason."""


@dataclass(frozen=True)
class Spooled:
    path: Path
    job_id: str
    agent: str
    document: dict[str, Any]


class Spool:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.rejected = root / "rejected"
        self.root.mkdir(parents=True, exist_ok=True)

    def put(self, *, job_id: str, agent: str, document: ResultDocument) -> Spooled:
        body: dict[str, Any] = {"job_id": job_id, "agent": agent, "document": document.model_dump(mode="json")}
        path = self.root / f"{job_id}.json"
        partial = path.with_name(f".{path.name}.part")
        try:
            with partial.open("w") as out:
                json.dump(body, out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(partial, path)
        except OSError as exc:   # a full or read-only file system: leave no partial file behind
            partial.unlink(missing_ok=True)
            raise SpoolError(f"the agent's spool {self.root} cannot keep the results of job {job_id}: "
                             f"{exc.strerror or exc}") from exc
        return Spooled(path, job_id, agent, body["document"])

    def pending(self) -> list[Spooled]:
        """What is waiting to be sent, oldest first."""
        items = []
        for path in sorted(self.root.glob("*.json"), key=lambda p: p.stat().st_mtime):
            body = json.loads(path.read_text())
            items.append(Spooled(path, body["job_id"], body["agent"], body["document"]))
        return items

    def done(self, item: Spooled) -> None:
        item.path.unlink(missing_ok=True)

    def reject(self, item: Spooled) -> Path:
        self.rejected.mkdir(exist_ok=True)
        target = self.rejected / item.path.name
        os.replace(item.path, target)
        return target
