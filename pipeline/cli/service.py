"""Commands that run and administer the service: serve, builder, database, schemas, tokens, users,
the Buildkite pipeline and the GitHub report."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from pipeline.cli.common import (
    CliError,
    err_console,
    full_sha,
    listen_on,
    out_console,
    sigterm_as_interrupt,
    split_targets,
)
from pipeline.config import Settings


def cmd_serve(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.service.embedded import PortTakenError, check_port_free, serve_embedded

    settings = listen_on(args, settings)
    try:
        check_port_free(settings.host, settings.port)
    except PortTakenError as exc:
        raise CliError(str(exc)) from None
    return serve_embedded(settings, suite=None, ref="HEAD", run_on_start=False, access_log=args.verbose)


def cmd_builder(args: argparse.Namespace, settings: Settings) -> int:
    """The service's builder as a process of its own (a builder host, the compose file's `builder`):
    builds the bundles triggered runs wait for, from the suite checkout, into BENCHFARM_HOME (which
    the service must read too), until stopped. Ctrl-C or SIGTERM hands an unfinished build back."""
    from pipeline.build.suite_loader import locate_suite
    from pipeline.orchestration.dispatch.triggers import Builder
    from pipeline.results.store.db import open_store, shown_url

    suite = args.suite or settings.dispatch.suite_path
    if not suite:
        raise CliError("no suite checkout to build from: give --suite PATH (a suite folder in a git checkout the "
                       "service's webhook fetches into) or set BENCHFARM_DISPATCH__SUITE_PATH")
    location = locate_suite(Path(suite))

    sigterm_as_interrupt("stopped (SIGTERM)")   # docker stop, systemctl stop: as Ctrl-C
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


def cmd_db(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.results.store.db import open_store, shown_url

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
    from pipeline.results.store.db import open_store, session_scope

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
    from pipeline.results.store.db import open_store, session_scope, shown_url

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
    from pipeline.orchestration.buildkite import PipelineRequest, build_pipeline, render_pipeline

    commit, base = full_sha(args.commit), full_sha(args.base) if args.base else None
    try:
        request = PipelineRequest(
            commit=commit, base=base, pr=args.pr, device_classes=split_targets(args.device_classes) or [],
            targets=split_targets(args.targets), repository=args.repository or settings.repository or None,
            cases=args.cases or None, kind=args.kind or None)
    except ValueError as exc:
        raise CliError(str(exc)) from None
    sys.stdout.write(render_pipeline(build_pipeline(request, settings.buildkite), args.format))
    return 0


def cmd_report(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.pr_comments.outbox import deliver, flush
    from pipeline.pr_comments.report import report_for_commit

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
    from pipeline.results.store.db import open_store, session_scope

    with session_scope(open_store(settings.database_url)) as session:
        report = report_for_commit(session, settings=settings, repository=repository, sha=args.commit, pr=args.pr,
                                   base_sha=args.base, device_classes=split_targets(args.device_classes))
    delivery = deliver(report, settings)
    if delivery.posted is None:
        raise CliError(f"{delivery.error}; the report is kept in {delivery.kept_at} (`benchfarm report flush` posts it)")
    out_console.print(f"{report.key}: {report.title} ({report.conclusion})", markup=False, highlight=False)
    return 0
