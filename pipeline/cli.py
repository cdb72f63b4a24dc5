"""`benchfarm`: the one command. Each subcommand parses its flags and calls one module; no logic here."""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from pipeline import __version__
from pipeline.config import Settings, SettingsError, load_settings

err_console = Console(stderr=True)
out_console = Console(width=None if sys.stdout.isatty() else 160)  # pipes get whole case ids


T = TypeVar("T")


class CliError(RuntimeError):
    """A user-facing failure: printed as one line, exit status 1."""


BUILD_WORDS = ("compiled", "cached", "failed", "recorded", "reused")
"""The first words of the builder's progress lines (`build.bundle`), one stage for the progress bar."""


def _split_targets(text: str | None) -> list[str] | None:
    return [t.strip() for t in text.split(",") if t.strip()] if text else None


@contextmanager
def _progress_bar() -> Iterator[Callable[[str, int, int], None]]:
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


def _suite_and_ref(args: argparse.Namespace, ref: str, *, note: bool = True) -> tuple[Path, str]:
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


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.local_pipeline import run_pipeline
    from pipeline.pr_comments.table import compile_table, terminal_table
    from pipeline.store.db import open_store, shown_url

    suite, ref = _suite_and_ref(args, args.ref)
    engine = open_store(settings.database_url)
    with _progress_bar() as progress:
        outcome = run_pipeline(
            settings=settings, engine=engine, suite=suite, ref=ref,
            targets=_split_targets(args.targets), progress=progress, paired=not args.unpaired, cases=args.cases,
        )
    for comparison in outcome.comparisons:
        out_console.print(terminal_table(comparison))
    if outcome.compiled is not None and outcome.compiled.changes:
        out_console.print(compile_table(outcome.compiled))
    for device_class, error in outcome.failed_jobs.items():
        err_console.print(f"[bold red]job on {device_class} failed:[/] {error}", markup=True, highlight=False)
    out_console.print(f"run {outcome.run_id} of {outcome.repository}@{outcome.sha[:10]} stored in {shown_url(settings.database_url)}")
    return 1 if outcome.failed_jobs else 0


def _listen_on(args: argparse.Namespace, settings: Settings) -> Settings:
    """The settings with --host / --port applied (public_url derived again unless it is set)."""
    given = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    return load_settings(**given) if given else settings


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    """Two commits' stored results: `compare BASE HEAD` on every device class HEAD has results on."""
    from pipeline.pr_comments.report import compile_section, report_for_commit
    from pipeline.pr_comments.table import compile_table, terminal_table
    from pipeline.store.compare import (
        CompareError,
        combine,
        compare,
        result_device_classes,
    )
    from pipeline.store.compile_stats import compare_compile
    from pipeline.store.db import open_store, session_scope, shown_url

    base, head = _full_sha(args.base), _full_sha(args.head)
    repository = args.repository or settings.repository or _checkout_repository()
    with session_scope(open_store(settings.database_url)) as session:
        try:
            classes = (_split_targets(args.device_classes)
                       or result_device_classes(session, repository=repository, head_sha=head))
            compiled = compare_compile(session, repository, head_sha=head, base_sha=base)
            if not classes and not compiled.compared:
                raise CliError(f"{head[:10]} has no results in {shown_url(settings.database_url)}: benchmark it first "
                               f"(`benchfarm run --ref {args.head}`)")
            comparisons = [compare(session, repository=repository, head_sha=head, device_class=name,
                                   settings=settings.compare, base_sha=base) for name in classes]
            markdown = ""
            if args.format == "markdown" and classes:
                markdown = report_for_commit(session, settings=settings, repository=repository, sha=head,
                                             base_sha=base, device_classes=classes).body
            elif args.format == "markdown":  # a build-only head (no latency results): its compile section alone
                markdown = (compile_section(compiled, public_url=settings.public_url, repository=repository)
                            or f"**Compile:** {compiled.summary}")
        except CompareError as exc:
            raise CliError(f"{exc} (in {shown_url(settings.database_url)}, repository {repository})") from None
    if args.format == "json":
        document = combine(repository, head, comparisons).model_copy(update={"compile": compiled})
        sys.stdout.write(json.dumps(document.model_dump(mode="json"), indent=2) + "\n")
    elif args.format == "markdown":
        sys.stdout.write(markdown.rstrip("\n") + "\n")
    else:
        for comparison in comparisons:
            out_console.print(terminal_table(comparison))
        if compiled.changes:
            out_console.print(compile_table(compiled))
        elif compiled.base_sha is not None:
            out_console.print(f"compile statistics: {compiled.summary}", markup=False, highlight=False)
    return 0


def _checkout_repository() -> str:
    """The repository name runs in the working directory's checkout are stored under."""
    from pipeline.build.suite_loader import SuiteError, locate_suite

    try:
        return locate_suite(Path.cwd()).repository
    except SuiteError:
        raise CliError("which repository? pass --repository NAME (or run this inside the suite's checkout)") from None


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.service.embedded import check_port_free, serve_embedded

    settings = _listen_on(args, settings)
    check_port_free(settings.host, settings.port)   # before the suite: a taken port is the first thing to fix
    suite, ref = _suite_and_ref(args, args.ref, note=not args.no_run)   # --no-run benchmarks nothing now
    return serve_embedded(settings, suite=suite, ref=ref, run_on_start=not args.no_run, access_log=args.verbose)


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.service.embedded import serve_embedded

    return serve_embedded(_listen_on(args, settings), suite=None, ref="HEAD", run_on_start=False,
                          access_log=args.verbose)


def cmd_builder(args: argparse.Namespace, settings: Settings) -> int:
    """The service's builder as a process of its own (a builder host, the compose file's `builder`):
    builds the bundles triggered runs wait for, from the suite checkout, into BENCHFARM_HOME (which
    the service must read too), until stopped. Ctrl-C or SIGTERM hands an unfinished build back."""
    import signal

    from pipeline.build.suite_loader import locate_suite
    from pipeline.dispatch.triggers import Builder
    from pipeline.store.db import open_store, shown_url

    suite = args.suite or settings.dispatch.suite_path
    if not suite:
        raise CliError("no suite checkout to build from: give --suite PATH (a suite folder in a git checkout the "
                       "service's webhook fetches into) or set BENCHFARM_DISPATCH__SUITE_PATH")
    location = locate_suite(Path(suite))

    def terminate(signum: int, frame: object) -> None:
        raise KeyboardInterrupt("stopped (SIGTERM)")

    signal.signal(signal.SIGTERM, terminate)   # docker stop, systemctl stop: as Ctrl-C
    engine = open_store(settings.database_url)
    builder = Builder(settings, engine, suite=location.path)
    err_console.print(f"benchfarm builder: building triggered runs from {location.path} into {settings.bundles_dir} "
                      f"(store {shown_url(settings.database_url)}; Ctrl-C stops)", markup=False, highlight=False,
                      soft_wrap=True)
    try:
        builder.run()   # the thread's loop, in this process's main thread
    finally:
        engine.dispose()
    return 0


def cmd_build(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.devices import discover_local_devices
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit
    from pipeline.local_pipeline import plan_targets

    suite, ref = _suite_and_ref(args, args.commit)
    location = locate_suite(suite)
    sha = resolve_commit(location, ref)
    if args.targets == "all":
        from pipeline.build.bundle import ALL_TARGETS

        targets = list(ALL_TARGETS)
    else:
        targets = _split_targets(args.targets) or plan_targets(discover_local_devices(settings.phones), None)
    out = Path(args.out) if args.out else settings.bundles_dir
    with _progress_bar() as progress:
        bundle_dir, manifest = build_bundle(
            location=location, sha=sha, targets=targets, out_dir=out, cache_dir=settings.cache_dir,
            workers=settings.build_workers, progress=progress, repository=settings.repository or None,
        )
    failed = [e for e in manifest.entries if e.status == "failed"]
    out_console.print(f"bundle {bundle_dir}: {len(manifest.entries) - len(failed)} built, {len(failed)} failed")
    for entry in failed:
        out_console.print(f"  failed {entry.case} on {entry.target}: {(entry.error or '').splitlines()[-1:]}", markup=False)
    return 0


def cmd_devices(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.devices import discover_local_devices

    for device in discover_local_devices(settings.phones):
        cls = device.device_class
        out_console.print(f"{cls.name}\t{cls.kind}\t{','.join(cls.targets)}\t{device.info.name}", markup=False)
    return 0


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.store.db import open_store, shown_url

    open_store(settings.database_url)
    out_console.print(f"{shown_url(settings.database_url)}: migrated to the newest revision", markup=False)
    return 0


def cmd_schemas(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.contracts import SCHEMA_DIR, SCHEMA_MODELS, schema_of, write_schemas

    if args.write:
        for path in write_schemas():
            out_console.print(str(path), markup=False)
        return 0
    stale = [n for n in SCHEMA_MODELS
             if json.loads((SCHEMA_DIR / f"{n}.schema.json").read_text()) != schema_of(n)]
    if stale:
        raise CliError(f"stale schemas: {', '.join(stale)}; run `benchfarm schemas --write`")
    out_console.print(f"{len(SCHEMA_MODELS)} schemas current in {SCHEMA_DIR}", markup=False)
    return 0


def cmd_token(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.service import auth
    from pipeline.store.db import open_store, session_scope

    engine = open_store(settings.database_url)
    with session_scope(engine) as session:
        if args.action == "create":
            token = auth.create_token(session, name=args.name, scopes=args.scope)
            out_console.print(token, markup=False, highlight=False, soft_wrap=True)
            err_console.print(f"token {args.name!r} ({', '.join(args.scope)}) created; it is shown only this once",
                              markup=False, highlight=False)
        elif args.action == "list":
            for t in auth.list_tokens(session):
                state = f"revoked {t.revoked_at:%Y-%m-%d %H:%M}" if t.revoked_at else "active"
                used = f"{t.last_used_at:%Y-%m-%d %H:%M}" if t.last_used_at else "never used"
                out_console.print(f"{t.name}\t{','.join(t.scopes)}\tcreated {t.created_at:%Y-%m-%d %H:%M}\t{used}\t{state}",
                                  markup=False, highlight=False)
        else:
            auth.revoke_token(session, name=args.name)
            out_console.print(f"token {args.name!r} revoked", markup=False, highlight=False)
    return 0


def cmd_user(args: argparse.Namespace, settings: Settings) -> int:
    """A password user of the web UI, made straight in the store (the first one needs no API token)."""
    import getpass

    from pipeline.service import users
    from pipeline.store.db import open_store, session_scope, shown_url

    if args.password_stdin:
        password = sys.stdin.readline().rstrip("\r\n")
    else:
        password = getpass.getpass(f"password for {args.name}: ")
        if getpass.getpass("again: ") != password:
            err_console.print("benchfarm user create: the passwords differ", markup=False, highlight=False)
            return 1
    engine = open_store(settings.database_url)
    with session_scope(engine) as session:
        made = users.create_user(session, name=args.name, password=password, scopes=args.scope or ["user"])
    err_console.print(f"user {made.name!r} ({', '.join(made.scopes)}) created in {shown_url(settings.database_url)}",
                      markup=False, highlight=False)
    return 0


def cmd_pipeline(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.orchestration import PipelineRequest, build_pipeline, render_pipeline

    commit, base = _full_sha(args.commit), _full_sha(args.base) if args.base else None
    try:
        request = PipelineRequest(
            commit=commit, base=base, pr=args.pr,
            device_classes=_split_targets(args.device_classes or settings.buildkite.device_classes) or [],
            targets=_split_targets(args.targets), repository=args.repository or settings.repository or None,
            cases=args.cases or settings.buildkite.cases or None, kind=args.kind or settings.buildkite.run_kind or None)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    sys.stdout.write(render_pipeline(build_pipeline(request, settings.buildkite), args.format))
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.pr_comments import deliver, flush, report_for_commit

    if args.action == "flush":
        results = flush(settings)
        for report, delivery in results:
            state = "posted" if delivery.posted else f"kept: {delivery.error}"
            out_console.print(f"{report.key}: {state}", markup=False, highlight=False)
        if not results:
            out_console.print(f"outbox {settings.outbox_dir} is empty", markup=False, highlight=False)
        return 1 if any(d.posted is None for _, d in results) else 0
    if not args.commit:
        raise CliError("report needs --commit SHA (or the action flush)")
    repository = args.repository or settings.repository
    if not repository:
        raise CliError("which repository? pass --repository OWNER/NAME or set BENCHFARM_REPOSITORY")
    from pipeline.store.db import open_store, session_scope

    with session_scope(open_store(settings.database_url)) as session:
        report = report_for_commit(session, settings=settings, repository=repository, sha=args.commit, pr=args.pr,
                                   base_sha=args.base, device_classes=_split_targets(args.device_classes))
    delivery = deliver(report, settings)
    if delivery.posted is None:
        raise CliError(f"{delivery.error}; the report is kept in {delivery.kept_at} (`benchfarm report flush` posts it)")
    out_console.print(f"{report.key}: {report.title} ({report.conclusion})", markup=False, highlight=False)
    return 0


def cmd_agent(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.agent import run_agent

    run_agent(settings, server=args.server, token=args.token, name=args.name, max_jobs=args.max_jobs)
    return 0


def cmd_doctor(args: argparse.Namespace, settings: Settings) -> int:
    """Check this host before it joins the farm; exit 1 when a check fails."""
    from rich.text import Text

    from pipeline.agents.doctor import run_checks

    update: dict[str, object] = {}
    if args.server:
        update["server_url"] = args.server
    if args.token:
        from pydantic import SecretStr

        update["token"] = SecretStr(args.token)
    if update:
        settings = settings.model_copy(update={"agent": settings.agent.model_copy(update=update)})
    checks = run_checks(settings, min_free_gb=args.min_free_gb)
    styles = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}
    for check in checks:
        line = Text(f"{check.outcome.upper() if check.outcome == 'fail' else check.outcome:>4}  ",
                    style=styles[check.outcome])
        line.append(f"{check.name}: {check.detail}", style="")
        out_console.print(line, highlight=False)
        if check.fix and check.outcome in ("fail", "warn"):
            out_console.print(Text(f"      fix: {check.fix}"), highlight=False)
    failed = [c.name for c in checks if c.outcome == "fail"]
    if failed:
        raise CliError(f"not ready: {', '.join(failed)}")
    return 0


def cmd_run_job(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.run_job import run_job

    summary = run_job(settings, bundle=Path(args.bundle), device_class=args.device_class,
                      base_bundle=Path(args.base_bundle) if args.base_bundle else None, cases=args.cases,
                      kind=args.kind)
    out_console.print(f"job {summary['job_id']} of run {summary['run_id']}: {summary['results']} results, "
                      f"{summary['ok']} ok, {summary['not_ok']} not ok", markup=False, highlight=False)
    return 0


def cmd_resend(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.remote import resend

    path = Path(args.path)
    if not path.is_file():
        raise CliError(f"{path}: no such file (a kept result: <agent dir>/spool/rejected/<job>.json)")
    r = resend(settings, path, server=args.server, token=args.token)
    out_console.print(f"job {r['job_id']}: {r['stored']} results stored, {r['duplicates']} already there, "
                      f"{r['samples']} samples, in {r['chunks']} uploads; job {r['job']}. {path} can go.",
                      markup=False, highlight=False)
    return 0


def _service_call(args: argparse.Namespace, settings: Settings, call: Callable[[], T]) -> T:
    """`call` (a request to the service); an unreachable service is a CliError saying what to do."""
    from pipeline.agents.client import Unreachable

    try:
        return call()
    except Unreachable:
        url = args.server or settings.agent.server_url or settings.public_url
        raise CliError(f"no benchfarm service answers at {url}: start one (`benchfarm up` or `benchfarm serve`), "
                       "or name it with --server URL (or BENCHFARM_AGENT__SERVER_URL)") from None


def _full_sha(ref: str) -> str:
    """`ref` as a full commit sha: a 40-digit sha as it is, else resolved in the working directory's checkout."""
    import re

    from pipeline.build.suite_loader import SuiteError, locate_suite, resolve_commit

    if re.fullmatch(r"[0-9a-f]{40}", ref):
        return ref
    try:
        return resolve_commit(locate_suite(Path.cwd()), ref)
    except SuiteError as exc:
        raise CliError(f"{ref!r} is not a full commit sha, and it cannot be resolved here: {exc}") from None


def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.remote import trigger

    if bool(args.ref) == bool(args.commit):
        raise CliError("give --ref REF or --commit SHA")
    if not (args.token or settings.api_token.get_secret_value() or settings.agent.token.get_secret_value()):
        raise CliError("no token: a trigger needs a token with the user scope; make one with `benchfarm token "
                       "create --name NAME --scope user` on the service's host and pass it with --token (or set "
                       "BENCHFARM_API_TOKEN)")
    result = _service_call(args, settings, lambda: trigger(settings, ref=args.ref, commit=args.commit, device_classes=_split_targets(args.device_class) or [],
                     cases=args.cases, repository=args.repository, server=args.server, token=args.token))
    if result.get("buildkite_build") is not None:
        out_console.print(f"Buildkite build {result['buildkite_build']} of {result['repository']}@{result['commit'][:10]}:"
                          f" {result['buildkite_url']}", markup=False, highlight=False, soft_wrap=True)
        out_console.print(f"run {result['run_id']} (its device steps make it and these jobs)", markup=False,
                          highlight=False)
    else:
        source = f"bundle {result['bundle_digest'][:12]}" if result["bundle_digest"] else "a build first"
        out_console.print(f"run {result['run_id']}: {result['repository']}@{result['commit'][:10]} queued ({source})",
                          markup=False, highlight=False)
    for device_class, job_id in result["jobs"].items():
        out_console.print(f"  job {job_id} on {device_class}", markup=False, highlight=False)
    return 0


def _print_bisection(b: dict[str, Any]) -> None:
    def say(text: str) -> None:
        out_console.print(text, markup=False, highlight=False, soft_wrap=True)

    say(f"bisection {b['id']} of change point {b['change_point_id']} ({', '.join(b['cases'])} on {b['device_class']}): "
        f"{b['base'][:10]}..{b['bad'][:10]}" + (f", {b['commits']} commits" if b["commits"] else "") + f"; {b['state']}")
    for s in b["steps"]:
        change = f"{s['change']:+.1%} [{s['ci_low']:+.1%}, {s['ci_high']:+.1%}]" if s["change"] is not None else ""
        again = f" (run {s['reading']})" if s.get("reading", 1) > 1 else ""
        say(f"  {s['commit'][:10]}  {s['state'] + again:16}  {change:28}  {s['verdict'] or ''}"
            + (f"  ({s['reason'][:120]})" if s["state"] == "skipped" and s["reason"] else ""))
    if b["summary"] or b["reason"]:
        say(f"  {b['summary'] or b['reason']}")


def cmd_bisect(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.client import ServiceError
    from pipeline.remote import bisect, bisect_target, get_bisection

    try:
        field, number = bisect_target(args.target)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    if field == "bisection_id":
        shown = _service_call(args, settings, lambda: get_bisection(settings, number, server=args.server,
                                                                     token=args.token))
        _print_bisection(shown)
        return 0
    if not (args.token or settings.api_token.get_secret_value() or settings.agent.token.get_secret_value()):
        raise CliError("no token: a bisection needs a token with the user scope; make one with `benchfarm token "
                       "create --name NAME --scope user` and pass it with --token (or set BENCHFARM_API_TOKEN)")
    try:
        made = _service_call(args, settings, lambda: bisect(settings, server=args.server, token=args.token,
                                                            **{field: number}))
    except ServiceError as exc:
        raise CliError(exc.message) from None
    _print_bisection(made)
    out_console.print(f"follow it with `benchfarm bisect bisection/{made['id']}` or on the regressions page",
                      markup=False, highlight=False)
    return 0


def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.remote import list_jobs

    jobs = _service_call(args, settings, lambda: list_jobs(
        settings, status=args.status, run_id=args.run, limit=args.limit, server=args.server, token=args.token))
    if args.json:
        sys.stdout.write(json.dumps(jobs, indent=2) + "\n")
        return 0
    for j in jobs:
        state = j["status"] + (f" (waiting for {j['waiting_for']})" if j["waiting_for"] else "")
        who = f" by {j['agent']}" if j["agent"] else ""
        line = (f"{j['id']}\t{j['device_class']}\t{j['commit'][:10]}\t{state}{who}\t"
                f"attempt {j['attempts']}/{j['max_attempts']}" + (f"\t{j['error']}" if j["error"] else ""))
        out_console.print(line, markup=False, highlight=False)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="benchfarm", description="Continuous benchmarking for GPU and mobile kernels.")
    parser.add_argument("--version", action="version", version=f"benchfarm {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def suite_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--suite", help="suite folder in a git checkout (default: kernels/ of the git checkout "
                       "you are in)")
        p.add_argument("--worktree", action="store_true", help="benchmark the suite folder as it is on disk, "
                       "uncommitted edits included: it is committed on top of HEAD as a commit of its own, "
                       "labelled 'benchfarm: working tree', kept under refs/benchfarm/worktree/ and on no branch "
                       "(your index, branch and files are not touched); without it only committed content is "
                       "benchmarked, and uncommitted changes are listed")

    def listen_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--host", help="address to listen on (default BENCHFARM_HOST, else 127.0.0.1)")
        p.add_argument("--port", type=int, help="port to listen on (default BENCHFARM_PORT, else 8080)")

    p = sub.add_parser("run", help="build the suite at a commit, run it on this machine, store and compare")
    suite_flags(p)
    p.add_argument("--ref", default="HEAD", help="commit or ref of the suite checkout (default HEAD)")
    p.add_argument("--targets", help="comma-separated targets (default: all this machine runs)")
    p.add_argument("--unpaired", action="store_true",
                   help="do not time the base commit's bundle interleaved with this one, even where it is kept")
    p.add_argument("--cases", help="run only the cases whose id matches this glob, e.g. 'gemm/*/bf16/*' "
                   "(the whole suite is built; compiles are cached)")
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("up", help="the embedded service: store, in-process agent, a run of HEAD, web UI")
    suite_flags(p)
    p.add_argument("--ref", default="HEAD")
    p.add_argument("--no-run", action="store_true", help="serve only; do not benchmark on start")
    listen_flags(p)
    p.set_defaults(func=cmd_up)

    p = sub.add_parser("serve", help="the service alone (API and pages)")
    listen_flags(p)
    p.set_defaults(func=cmd_serve)

    p = sub.add_parser("builder", help="build the bundles of triggered runs, beside a service (dispatch.builder=false)")
    p.add_argument("--suite", help="suite folder in the git checkout the service fetches into "
                   "(default BENCHFARM_DISPATCH__SUITE_PATH)")
    p.set_defaults(func=cmd_builder)

    p = sub.add_parser("compare", help="compare two commits' stored results (base, then head) on each device class")
    p.add_argument("base", help="the base commit: a sha, or a ref of the checkout you are in")
    p.add_argument("head", help="the head commit, compared against base")
    p.add_argument("--format", choices=["table", "json", "markdown"], default="table",
                   help="table: the terminal's; json: every row and count; markdown: the pull request comment")
    p.add_argument("--device-classes", help="comma-separated (default: every one head has results on)")
    p.add_argument("--repository", help="repository name in the store (default: the checkout's, as `run` stores it)")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("build", help="compile the suite at a commit into a bundle")
    suite_flags(p)
    p.add_argument("--commit", default="HEAD")
    p.add_argument("--targets", help="comma-separated targets, or 'all' (every target this builder compiles for, "
                   "GPUs included; default: this machine's)")
    p.add_argument("--out", help="bundle folder parent (default <home>/bundles)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("devices", help="list this machine's devices and their device classes")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("db", help="database maintenance")
    p.add_argument("action", choices=["upgrade"])
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("token", help="API tokens: create (shown once), list, revoke")
    token_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    t = token_sub.add_parser("create", help="create a token and print it (only this once)")
    t.add_argument("--name", required=True, help="a name to list and revoke it by, e.g. agent-h100-1")
    t.add_argument("--scope", action="append", required=True, choices=["agent", "user", "admin"],
                   help="agent: upload results; user: read, trigger, triage; admin: everything (repeatable)")
    token_sub.add_parser("list", help="list tokens (names, scopes, use; never the tokens)")
    t = token_sub.add_parser("revoke", help="revoke a token by name")
    t.add_argument("name")
    p.set_defaults(func=cmd_token)

    p = sub.add_parser("user", help="password users of the web UI: create")
    user_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    u = user_sub.add_parser("create", help="create a user who signs in to the web UI with a password")
    u.add_argument("--name", required=True, help="letters, digits, '.', '_', '@' or '-'")
    u.add_argument("--password-stdin", action="store_true", help="read the password from stdin's first line "
                   "(default: asked twice on the terminal)")
    u.add_argument("--scope", action="append", choices=["user", "admin"],
                   help="user: browse, trigger, triage (default); admin: also manage users and tokens (repeatable)")
    p.set_defaults(func=cmd_user)

    p = sub.add_parser("schemas", help="check (or --write) the committed JSON Schemas")
    p.add_argument("--write", action="store_true")
    p.set_defaults(func=cmd_schemas)

    p = sub.add_parser("pipeline", help="print the Buildkite pipeline for a commit (for buildkite-agent pipeline upload)")
    p.add_argument("--commit", required=True, help="the commit to benchmark: a full sha, or a ref (HEAD, a branch) "
                   "of the checkout you are in")
    p.add_argument("--base", help="the base commit, built and run beside it (paired); a sha or a ref like --commit")
    p.add_argument("--pr", type=int, help="pull request number: the report goes on it")
    p.add_argument("--device-classes", help="comma-separated device classes; one queue each "
                   "(default BENCHFARM_BUILDKITE__DEVICE_CLASSES, e.g. from the pipeline's environment)")
    p.add_argument("--cases", help="glob over case ids the device steps run (default BENCHFARM_BUILDKITE__CASES: all)")
    p.add_argument("--kind", choices=["adhoc", "push", "pr", "nightly"],
                   help="what the device steps record the run as (default BENCHFARM_BUILDKITE__RUN_KIND, else "
                   "from the build)")
    p.add_argument("--targets", help="comma-separated targets to build (default: benchfarm build's)")
    p.add_argument("--repository", help="OWNER/NAME (default BENCHFARM_REPOSITORY)")
    p.add_argument("--format", choices=["json", "yaml"], default="json")
    p.set_defaults(func=cmd_pipeline)

    def service_flags(p: argparse.ArgumentParser) -> None:
        p.add_argument("--server", help="the service's URL (default BENCHFARM_AGENT__SERVER_URL, else public_url)")
        p.add_argument("--token", help="bearer token (default BENCHFARM_API_TOKEN / BENCHFARM_AGENT__TOKEN)")

    p = sub.add_parser("agent", help="the device agent: register this host's devices, claim and run jobs")
    p.add_argument("--server", help="the service's URL (default BENCHFARM_AGENT__SERVER_URL, else public_url)")
    p.add_argument("--token", help="an agent-scope token (default BENCHFARM_AGENT__TOKEN)")
    p.add_argument("--name", help="agent name (default BENCHFARM_AGENT__NAME, else benchfarm-agent@HOST)")
    p.add_argument("--max-jobs", type=int, help="exit after this many jobs")
    p.set_defaults(func=cmd_agent)

    p = sub.add_parser("doctor", help="check this host before it joins: service, token, disk, GPUs, phones")
    p.add_argument("--server", help="the service's URL (default: agent.server_url)")
    p.add_argument("--token", help="the agent token (default: agent.token)")
    p.add_argument("--min-free-gb", type=float, default=5.0, help="disk the agent's work folder needs (default 5)")
    p.set_defaults(func=cmd_doctor)
    p = sub.add_parser("run-job", help="run a bundle on this host's device of a class and upload (a Buildkite step)")
    p.add_argument("--bundle", required=True, help="the bundle folder")
    p.add_argument("--device-class", required=True)
    p.add_argument("--base-bundle", help="the base commit's bundle, run interleaved (paired)")
    p.add_argument("--cases", help="run only the cases whose id matches this glob (default: every case)")
    p.add_argument("--kind", choices=["adhoc", "push", "pr", "nightly"],
                   help="what the run is recorded as (default: from the Buildkite build)")
    p.set_defaults(func=cmd_run_job)

    p = sub.add_parser("resend", help="deliver a result document an agent kept after the service refused it")
    p.add_argument("path", help="the kept file (spool/rejected/<job>.json in the agent's folder) or a result document")
    service_flags(p)
    p.set_defaults(func=cmd_resend)

    p = sub.add_parser("trigger", help="queue an ad-hoc run of a ref or commit on device classes")
    p.add_argument("--ref", help="a ref of the service's suite checkout (branch, tag, HEAD)")
    p.add_argument("--commit", help="a commit sha")
    p.add_argument("--device-class", required=True, help="comma-separated device classes")
    p.add_argument("--cases", help="glob over case ids (default: every case)")
    p.add_argument("--repository", help="OWNER/NAME (default: the service's)")
    service_flags(p)
    p.set_defaults(func=cmd_trigger)

    p = sub.add_parser("bisect", help="find the commit that made a change point: bisect its commit range")
    p.add_argument("target", metavar="SERIES|CHANGE_POINT",
                   help="series/ID (its newest confirmed change point), cp/ID, or a page address naming one; "
                        "bisection/ID shows a bisection and its steps")
    service_flags(p)
    p.set_defaults(func=cmd_bisect)

    p = sub.add_parser("jobs", help="list the service's jobs with their state")
    p.add_argument("--status", choices=["queued", "running", "done", "failed"])
    p.add_argument("--run", help="only this run's jobs")
    p.add_argument("--limit", type=int, default=50)
    p.add_argument("--json", action="store_true")
    service_flags(p)
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("report", help="post a commit's comparison on GitHub (comment, check); flush: post kept reports")
    p.add_argument("action", nargs="?", choices=["post", "flush"], default="post")
    p.add_argument("--commit", help="the head commit")
    p.add_argument("--pr", type=int, help="pull request number (none: a push; check or status only)")
    p.add_argument("--base", help="base commit (default: the newest ancestor with results)")
    p.add_argument("--device-classes", help="comma-separated (default: every one that ran the commit)")
    p.add_argument("--repository", help="OWNER/NAME (default BENCHFARM_REPOSITORY)")
    p.set_defaults(func=cmd_report)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        logging.getLogger("pipeline").setLevel(logging.DEBUG if args.verbose else settings.log_level)
        return int(args.func(args, settings))
    except SettingsError as exc:
        err_console.print(f"benchfarm: {exc}", markup=False, highlight=False)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C: one line (what was cancelled, where the command says it)
        what = f": {exc}" if str(exc) else ""
        err_console.print(f"benchfarm {args.command}: interrupted{what}", markup=False, highlight=False, soft_wrap=True)
        return 130
    except Exception as exc:  # every failure a user can cause ends in one line naming it
        if args.verbose:
            err_console.print_exception()
        # a CliError says what to do already; for anything else the traceback may help
        hint = "" if args.verbose or isinstance(exc, CliError) else " (-v shows the traceback)"
        err_console.print(f"benchfarm {args.command}: error: {exc}{hint}", markup=False, highlight=False,
                          soft_wrap=True)
        return 1


if __name__ == "__main__":
    sys.exit(main())
