"""Reports that could not be posted, kept on disk until `benchfarm report flush` posts them.

One JSON file per pull request (or pushed commit) under `<home>/outbox/`, written atomically
(a temporary file in the same folder, then a rename): a newer report for the same pull request
replaces the older one, as the sticky comment would. A store-backed outbox (a table) can replace
this once the service posts reports itself (the webhook work).
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Settings
from pipeline.pr_comments.github import GitHubError, GitHubPoster, Posted
from pipeline.pr_comments.report import Report

__all__ = ["Delivery", "Outbox", "deliver", "flush"]

log = logging.getLogger(__name__)


class Outbox:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def path_for(self, report: Report) -> Path:
        digest = hashlib.sha256(report.key.encode()).hexdigest()[:16]
        readable = "".join(c if c.isalnum() or c in "-_" else "_" for c in report.key)[:80]
        return self.folder / f"{readable}-{digest}.json"

    def keep(self, report: Report) -> Path:
        self.folder.mkdir(parents=True, exist_ok=True)
        target = self.path_for(report)
        fd, tmp = tempfile.mkstemp(dir=self.folder, prefix=".tmp-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(report.to_json())
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return target

    def pending(self) -> Iterator[tuple[Path, Report]]:
        """Kept reports, oldest file first; unreadable files are logged and left alone."""
        if not self.folder.is_dir():
            return
        for path in sorted(self.folder.glob("[!.]*.json"), key=lambda p: p.stat().st_mtime):
            try:
                yield path, Report.from_json(path.read_text(encoding="utf-8"))
            except (OSError, ValueError, TypeError) as exc:
                log.warning("outbox file %s is not a report: %s", path, exc)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)


@dataclass(frozen=True)
class Delivery:
    posted: Posted | None
    kept_at: Path | None       # where the report waits when it could not be posted
    error: str | None


def deliver(report: Report, settings: Settings, *, poster: GitHubPoster | None = None) -> Delivery:
    """Post the report; on any failure keep it in the outbox and say why."""
    outbox = Outbox(settings.outbox_dir)
    try:
        posted = (poster or GitHubPoster(settings.github)).post(report)
    except GitHubError as exc:
        return Delivery(None, outbox.keep(report), str(exc))
    outbox.remove(outbox.path_for(report))   # an older kept report of the same PR is now stale
    return Delivery(posted, None, None)


def flush(settings: Settings, *, poster: GitHubPoster | None = None) -> list[tuple[Report, Delivery]]:
    """Post every kept report; the posted ones leave the outbox, the others stay."""
    outbox = Outbox(settings.outbox_dir)
    done = []
    for path, report in list(outbox.pending()):
        try:
            posted = (poster := poster or GitHubPoster(settings.github)).post(report)
        except GitHubError as exc:
            done.append((report, Delivery(None, path, str(exc))))
            continue
        outbox.remove(path)
        done.append((report, Delivery(posted, None, None)))
    return done
