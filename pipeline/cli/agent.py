"""Commands of a device host: the agent, its pre-flight check, one job as a Buildkite step, resending
a result the service refused."""

from __future__ import annotations

import argparse
from pathlib import Path

from pipeline.cli.common import CliError, out_console
from pipeline.config import Settings


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
                      f"{summary['ok']} ok, {summary['not_ok']} not ok"
                      + (f"; timed in {summary['timing_groups']} groups, one copy of every case being over the "
                         "device's placement budget" if summary["timing_groups"] > 1 else ""),
                      markup=False, highlight=False)
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
