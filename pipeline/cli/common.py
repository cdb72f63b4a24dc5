"""What the subcommands share: the consoles, the one-line error, the progress bar, the suite and
ref a command benchmarks, calls to a service and commit names."""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from pipeline.config import Settings, load_settings

__all__ = ["BUILD_WORDS", "CliError", "checkout_repository", "err_console", "full_sha", "listen_on", "out_console",
           "progress_bar", "service_call", "sigterm_as_interrupt", "split_targets", "suite_and_ref"]

err_console = Console(stderr=True)
out_console = Console(width=None if sys.stdout.isatty() else 160)  # pipes get whole case ids


T = TypeVar("T")


class CliError(RuntimeError):
    """A user-facing failure: printed as one line, exit status 1."""


def sigterm_as_interrupt(message: str = "SIGTERM") -> None:
    """From now on SIGTERM (kill, systemctl stop, docker stop) raises KeyboardInterrupt(message) in the
    main thread, as Ctrl-C does: the command cleans up the same way (a run records its unfinished
    jobs as cancelled) instead of dying with its work left `running`."""

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt(message)

    signal.signal(signal.SIGTERM, terminate)


BUILD_WORDS = ("compiled", "cached", "failed", "recorded", "reused")
"""The first words of the builder's progress lines (`build.bundle`), one stage for the progress bar."""


def split_targets(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


@contextmanager
def progress_bar() -> Iterator[Callable[[str, int, int], None]]:
    """A live progress display on stderr; yields the (description, done, total) callback."""
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=err_console, transient=False) as bar:
        tasks: dict[str, TaskID] = {}

        def report(description: str, done: int, total: int) -> None:
            # one bar per stage: "checking: …", "timing: …"; the build's "compiled/cached/failed … for
            # T" lines share one counter (a target's colon must not make a bar per case)
            first = description.split(" ", 1)[0].rstrip(":")
            stage = "build" if first in BUILD_WORDS else first
            if stage not in tasks:
                tasks[stage] = bar.add_task(description, total=max(total, 1))
            bar.update(tasks[stage], description=description, completed=done, total=max(total, 1))

        yield report


def suite_and_ref(args: argparse.Namespace, ref: str, *, note: bool = True) -> tuple[Path, str]:
    """The suite folder (--suite, else `kernels/` of the working directory's checkout) and what to
    benchmark: `ref`, or with --worktree a commit of the working tree on top of HEAD. Uncommitted
    changes that a run of HEAD leaves out are named on stderr."""
    from pipeline.build.suite_loader import (
        WORKTREE_REF_PREFIX,
        commit_worktree,
        default_suite,
        locate_suite,
        resolve_commit,
        uncommitted_changes,
    )

    suite = Path(args.suite) if args.suite else default_suite()
    location = locate_suite(suite)
    if args.worktree:
        if ref != "HEAD":
            raise CliError(f"--worktree benchmarks the working tree on top of HEAD; it cannot be combined with {ref!r}")
        sha = commit_worktree(location)
        err_console.print(f"benchmarking the working tree of {location.path} as commit {sha[:10]} (uncommitted "
                          f"changes on top of HEAD, kept as {WORKTREE_REF_PREFIX}{sha[:10]}…; on no branch)",
                          markup=False, highlight=False, soft_wrap=True)
        return suite, sha
    head = resolve_commit(location, "HEAD")
    if note and resolve_commit(location, ref) == head and (changes := uncommitted_changes(location)):
        shown = ", ".join(changes[:10]) + (f" and {len(changes) - 10} more" if len(changes) > 10 else "")
        err_console.print(f"note: uncommitted changes are NOT benchmarked (only commit {head[:10]} is): {shown}; "
                          "commit them, or add --worktree to benchmark the working tree",
                          markup=False, highlight=False, soft_wrap=True)
    return suite, ref


def listen_on(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings with --host / --port applied (public_url derived again unless it is set)."""
    given = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    return load_settings(**given) if given else settings


def checkout_repository() -> str:
    """The repository name runs in the working directory's checkout are stored under."""
    from pipeline.build.suite_loader import SuiteError, locate_suite

    try:
        return locate_suite(Path.cwd()).repository
    except SuiteError:
        raise CliError("which repository? pass --repository NAME (or run this inside the suite's checkout)") from None


def service_call(args: argparse.Namespace, settings: Settings, call: Callable[[], T]) -> T:
    """`call` (a request to the service); an unreachable service is a CliError saying what to do."""
    from pipeline.agents.client import Unreachable

    try:
        return call()
    except Unreachable:
        url = args.server or settings.agent.server_url or settings.public_url
        raise CliError(f"no benchfarm service answers at {url}: start one (`benchfarm up` or `benchfarm serve`), "
                       "or name it with --server URL (or BENCHFARM_AGENT__SERVER_URL)") from None


def full_sha(ref: str) -> str:
    """`ref` as a full commit sha: a 40-digit sha as it is, else resolved in the working directory's checkout."""
    import re

    from pipeline.build.suite_loader import SuiteError, locate_suite, resolve_commit

    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref
    try:
        return resolve_commit(locate_suite(Path.cwd()), ref)
    except SuiteError as exc:
        raise CliError(f"{ref!r} is not a full commit sha, and it cannot be resolved here: {exc}") from None
