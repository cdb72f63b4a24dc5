"""Commands of one machine: build the suite, run it here, compare stored results, the embedded service."""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from pathlib import Path

from pipeline.cli.common import (
    CliError,
    checkout_repository,
    err_console,
    full_sha,
    listen_on,
    out_console,
    progress_bar,
    sigterm_as_interrupt,
    split_targets,
    suite_and_ref,
)
from pipeline.config import Settings


def cmd_run(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.local_pipeline import CasesRefused, run_pipeline
    from pipeline.pr_comments.table import code_table, compile_table, terminal_table
    from pipeline.results.store.db import open_store, shown_url

    suite, ref = suite_and_ref(args, args.ref)
    sigterm_as_interrupt()   # a terminated run records its unfinished jobs as cancelled, as Ctrl-C does
    engine = open_store(settings.database_url)
    with progress_bar() as progress:
        try:
            outcome = run_pipeline(
                settings=settings, engine=engine, suite=suite, ref=ref,
                targets=split_targets(args.targets), progress=progress, paired=not args.unpaired, cases=args.cases,
            )
        except CasesRefused as exc:   # says what to do: no traceback to offer
            raise CliError(str(exc)) from None
    for comparison in outcome.comparisons:
        out_console.print(terminal_table(comparison))
        if (code := code_table(comparison)) is not None:
            out_console.print(code)
    if outcome.compiled is not None and outcome.compiled.changes:
        out_console.print(compile_table(outcome.compiled))
    if outcome.not_run_here is not None:
        out_console.print(outcome.not_run_here.describe(args.cases), markup=False, highlight=False)
    for device_class, error in outcome.failed_jobs.items():
        err_console.print(f"[bold red]job on {device_class} failed:[/] {error}", markup=True, highlight=False)
    out_console.print(f"run {outcome.run_id} of {outcome.repository}@{outcome.sha[:10]} stored in {shown_url(settings.database_url)}")
    return 1 if outcome.failed_jobs else 0


def cmd_compare(args: argparse.Namespace, settings: Settings) -> int:
    """Two commits' stored results: `compare BASE HEAD` on every device class HEAD has results on."""
    from pipeline.pr_comments.comment import compile_section
    from pipeline.pr_comments.report import report_for_commit
    from pipeline.pr_comments.table import code_table, compile_table, terminal_table
    from pipeline.results.store.compare import (
        CompareError,
        combine,
        compare,
        result_device_classes,
    )
    from pipeline.results.store.compile_stats import compare_compile
    from pipeline.results.store.db import open_store, session_scope, shown_url

    base, head = full_sha(args.base), full_sha(args.head)
    repository = args.repository or settings.repository or checkout_repository()
    with session_scope(open_store(settings.database_url)) as session:
        try:
            classes = (split_targets(args.device_classes)
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
                markdown = compile_section(compiled, public_url=settings.public_url, repository=repository)
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
            if (code := code_table(comparison)) is not None:
                out_console.print(code)
        if compiled.changes:
            out_console.print(compile_table(compiled))
        elif compiled.base_sha is not None:
            out_console.print(f"compile statistics: {compiled.summary}", markup=False, highlight=False)
    return 0


def cmd_build(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.agents.devices import discover_local_devices, plan_targets
    from pipeline.build.bundle import build_bundle
    from pipeline.build.suite_loader import locate_suite, resolve_commit

    suite, ref = suite_and_ref(args, args.commit)
    location = locate_suite(suite)
    sha = resolve_commit(location, ref)
    if args.targets == "all":
        from pipeline.build.bundle import ALL_TARGETS

        targets = list(ALL_TARGETS)
    else:
        targets = split_targets(args.targets) or plan_targets(discover_local_devices(settings.phones), None)
    out = Path(args.out) if args.out else settings.bundles_dir
    with progress_bar() as progress:
        bundle_dir, manifest = build_bundle(
            location=location, sha=sha, targets=targets, out_dir=out, cache_dir=settings.cache_dir,
            workers=settings.build_workers, progress=progress, repository=settings.repository or None,
            host_lock=settings.measurement.host_lock,
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


def cmd_up(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.service.embedded import HomeTakenError, PortTakenError, check_port_free, hold_home, serve_embedded

    settings = listen_on(args, settings)
    with ExitStack() as held:
        try:
            # first the folder (another up on it likely holds the port too: name that up), then the port,
            # both before the suite: they are the first things to fix
            held.enter_context(hold_home(settings.home))
            check_port_free(settings.host, settings.port)
        except (HomeTakenError, PortTakenError) as exc:
            raise CliError(str(exc)) from None
        suite, ref = suite_and_ref(args, args.ref, note=not args.no_run)   # --no-run benchmarks nothing now
        return serve_embedded(settings, suite=suite, ref=ref, run_on_start=not args.no_run, access_log=args.verbose)
