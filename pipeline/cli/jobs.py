"""Commands that ask a running service for work and show it: trigger, bisect, jobs."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from pipeline.cli.common import CliError, out_console, service_call, split_targets
from pipeline.config import Settings


def cmd_trigger(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.remote import trigger

    if bool(args.ref) == bool(args.commit):
        raise CliError("give --ref REF or --commit SHA")
    if not (args.token or settings.api_token.get_secret_value() or settings.agent.token.get_secret_value()):
        raise CliError("no token: a trigger needs a token with the user scope; make one with `benchfarm token "
                       "create --name NAME --scope user` on the service's host and pass it with --token (or set "
                       "BENCHFARM_API_TOKEN)")
    result = service_call(args, settings, lambda: trigger(
        settings, ref=args.ref, commit=args.commit, device_classes=split_targets(args.device_class) or [],
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
        shown = service_call(args, settings, lambda: get_bisection(settings, number, server=args.server,
                                                                    token=args.token))
        _print_bisection(shown)
        return 0
    if not (args.token or settings.api_token.get_secret_value() or settings.agent.token.get_secret_value()):
        raise CliError("no token: a bisection needs a token with the user scope; make one with `benchfarm token "
                       "create --name NAME --scope user` and pass it with --token (or set BENCHFARM_API_TOKEN)")
    try:
        made = service_call(args, settings, lambda: bisect(settings, server=args.server, token=args.token,
                                                           **{field: number}))
    except ServiceError as exc:
        raise CliError(exc.message) from None
    _print_bisection(made)
    out_console.print(f"follow it with `benchfarm bisect bisection/{made['id']}` or on the regressions page",
                      markup=False, highlight=False)
    return 0


def cmd_jobs(args: argparse.Namespace, settings: Settings) -> int:
    from pipeline.remote import list_jobs

    jobs = service_call(args, settings, lambda: list_jobs(
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
