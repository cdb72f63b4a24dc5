"""What the agent tells people: JSON lines (always to its log file; to stderr too when stderr is
not a terminal, or plain lines where a log of such lines holds them) and, on a terminal, a live
display of its devices, its job and the job's progress."""

from __future__ import annotations

import json
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any, Protocol

from rich.console import Console, Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from pipeline.progress import ProgressLines

__all__ = ["AgentLog", "LineStream"]


class LineStream(Protocol):
    """Where the lines go besides the file: stderr, or anything that writes text."""

    def write(self, text: str, /) -> int: ...
    def flush(self) -> None: ...
    def isatty(self) -> bool: ...


class AgentLog:
    """`plain`: the stream gets "event key=value ..." lines, not JSON (the file keeps JSON): for a log
    that is read by people beside other plain lines (`benchfarm up`'s)."""

    def __init__(self, log_file: Path | None, *, terminal: bool | None = None, stream: LineStream | None = None,
                 plain: bool = False) -> None:
        self.stream: LineStream = stream or sys.stderr
        self.terminal = self.stream.isatty() if terminal is None else terminal
        self.plain = plain
        self._progress_lines = ProgressLines(
            lambda description, done, total: self.event("progress", stage=description, done=done, total=total))
        self._lock = threading.Lock()
        self._file: IO[str] | None = None
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            self._file = log_file.open("a", buffering=1)
        self.state: dict[str, Any] = {"agent": "", "server": "", "devices": {}, "job": None, "progress": None,
                                      "recent": []}
        self._live: Live | None = None
        if self.terminal:   # rich takes an IO[str]; a LineStream is the part of one this log writes to
            self._live = Live(self._render(), console=Console(file=self.stream),  # type: ignore[arg-type]
                              refresh_per_second=4, transient=False)
            self._live.start()

    def event(self, event: str, **fields: Any) -> None:
        record = {"ts": datetime.now(UTC).isoformat(timespec="milliseconds"), "event": event, **fields}
        line = json.dumps(record, default=str)
        with self._lock:
            if self._file is not None:
                self._file.write(line + "\n")
            summary = " ".join(f"{k}={v}" for k, v in fields.items() if k not in ("document",))
            if not self.terminal:
                self.stream.write((f"{event} {summary}".rstrip() if self.plain else line) + "\n")
                self.stream.flush()
            self.state["recent"] = (self.state["recent"] + [f"{time.strftime('%H:%M:%S')} {event} {summary}"])[-8:]
        self._refresh()

    def update(self, **state: Any) -> None:
        with self._lock:
            self.state.update(state)
        self._refresh()

    def progress(self, description: str, done: int, total: int) -> None:
        """run_bundle's progress callback: the display always; the log as each stage starts and ends,
        and every few seconds in between (`ProgressLines`)."""
        self.update(progress=(description, done, total))
        self._progress_lines(description, done, total)

    def close(self) -> None:
        if self._live is not None:
            self._live.stop()
        if self._file is not None:
            self._file.close()

    def _refresh(self) -> None:
        if self._live is not None:
            self._live.update(self._render())

    def _render(self) -> Group:
        state = self.state
        devices = Table("device", "class", "state", box=None, title=f"agent {state['agent']} -> {state['server']}",
                        title_justify="left")
        for uid, (device_class, online) in sorted(state["devices"].items()):
            devices.add_row(uid, device_class, "[green]online[/]" if online else "[red]gone[/]")
        job = state["job"]
        lines = [Text(f"job {job}" if job else "waiting for a job")]
        if job and state["progress"]:
            description, done, total = state["progress"]
            lines.append(Text(f"  {description} ({done}/{total})"))
        lines.extend(Text(r, style="dim") for r in state["recent"])
        return Group(devices, *lines)
