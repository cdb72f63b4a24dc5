"""`benchfarm`: the one command. Each subcommand parses its flags and calls one module; no logic
here. The commands live by audience: `local` (one machine), `service`, `agent` (device hosts), `jobs`
(asking a service); `common` holds what they share."""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Sequence

from pipeline import __version__
from pipeline.cli.agent import cmd_agent, cmd_doctor, cmd_resend, cmd_run_job
from pipeline.cli.common import CliError, err_console
from pipeline.cli.jobs import cmd_bisect, cmd_jobs, cmd_trigger
from pipeline.cli.local import cmd_build, cmd_compare, cmd_devices, cmd_run, cmd_up
from pipeline.cli.service import (
    cmd_builder,
    cmd_db,
    cmd_pipeline,
    cmd_report,
    cmd_schemas,
    cmd_serve,
    cmd_token,
    cmd_user,
)
from pipeline.config import PIPELINE_ARGUMENTS, SettingsError, load_settings


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
    p.add_argument("--ref", default="HEAD", help="commit or ref of the suite checkout benchmarked on start "
                   "(default HEAD; nothing with --no-run)")
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
    p.add_argument("--commit", default="HEAD", help="commit or ref of the suite checkout to build (default HEAD)")
    p.add_argument("--targets", help="comma-separated targets, or 'all' (every target this builder compiles for, "
                   "GPUs included; default: this machine's)")
    p.add_argument("--out", help="bundle folder parent (default <home>/bundles)")
    p.set_defaults(func=cmd_build)

    p = sub.add_parser("devices", help="list this machine's devices and their device classes")
    p.set_defaults(func=cmd_devices)

    p = sub.add_parser("db", help="database maintenance")
    p.add_argument("action", choices=["upgrade"], help="upgrade: apply the store's migrations (serve and up do it "
                   "on start)")
    p.set_defaults(func=cmd_db)

    p = sub.add_parser("token", help="API tokens: create (shown once), list, revoke")
    token_sub = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    t = token_sub.add_parser("create", help="create a token and print it (only this once)")
    t.add_argument("--name", required=True, help="a name to list and revoke it by, e.g. agent-h100-1")
    t.add_argument("--scope", action="append", required=True, choices=["agent", "user", "admin"],
                   help="agent: upload results; user: read, trigger, triage; admin: everything (repeatable)")
    token_sub.add_parser("list", help="list tokens (names, scopes, use; never the tokens)")
    t = token_sub.add_parser("revoke", help="revoke a token by name")
    t.add_argument("name", help="the name it was created with")
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
    p.add_argument("--write", action="store_true", help="write the schemas generated from the models instead of "
                   "checking that the committed ones match")
    p.set_defaults(func=cmd_schemas)

    p = sub.add_parser("pipeline", help="print the Buildkite pipeline for a commit (for buildkite-agent pipeline upload)")
    p.add_argument("--commit", required=True, help="the commit to benchmark: a full sha, or a ref (HEAD, a branch) "
                   "of the checkout you are in")
    p.add_argument("--base", help="the base commit, built and run beside it (paired); a sha or a ref like --commit")
    p.add_argument("--pr", type=int, help="pull request number: the report goes on it")
    # a build's arguments: flags, else the build's environment (what the service sets on a build it creates)
    p.add_argument("--device-classes", default=os.environ.get(PIPELINE_ARGUMENTS["device_classes"]),
                   help="comma-separated device classes; one queue each (default "
                   f"{PIPELINE_ARGUMENTS['device_classes']}, e.g. from the pipeline's environment)")
    p.add_argument("--cases", default=os.environ.get(PIPELINE_ARGUMENTS["cases"]),
                   help=f"glob over case ids the device steps run (default {PIPELINE_ARGUMENTS['cases']}: all)")
    p.add_argument("--kind", choices=["adhoc", "push", "pr", "nightly"],
                   default=os.environ.get(PIPELINE_ARGUMENTS["kind"]),
                   help=f"what the device steps record the run as (default {PIPELINE_ARGUMENTS['kind']}, else "
                   "from the build)")
    p.add_argument("--targets", help="comma-separated targets to build (default: benchfarm build's)")
    p.add_argument("--repository", help="OWNER/NAME (default BENCHFARM_REPOSITORY)")
    p.add_argument("--format", choices=["json", "yaml"], default="json", help="the pipeline's format (default json)")
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
    p.add_argument("--device-class", required=True, help="the device class to run on (`benchfarm devices` lists "
                   "this host's)")
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
    p.add_argument("--status", choices=["queued", "running", "done", "failed"], help="only jobs in this state")
    p.add_argument("--run", help="only this run's jobs")
    p.add_argument("--limit", type=int, default=50, help="at most this many jobs (default 50)")
    p.add_argument("--json", action="store_true", help="the service's JSON instead of a table")
    service_flags(p)
    p.set_defaults(func=cmd_jobs)

    p = sub.add_parser("report", help="post a commit's comparison on GitHub (comment, check); flush: post kept reports")
    p.add_argument("action", nargs="?", choices=["post", "flush"], default="post",
                   help="post (default): report --commit; flush: post the reports GitHub refused earlier")
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

__all__ = ["build_parser", "main"]
