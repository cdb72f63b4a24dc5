"""The one settings object: environment variables `BENCHFARM_*`, an optional TOML file, defaults.

Precedence: environment, then the file named by `BENCHFARM_CONFIG` (or `./benchfarm.toml` when it
exists), then the embedded defaults (SQLite under `./.benchfarm/`, service on 127.0.0.1:8080). The
file is found and read each time a Settings is made (pydantic-settings' TOML source); `load_settings`
names a wrong or removed setting and where it came from. What is a setting and what is an argument:
docs/design.md, "Settings".
"""

from __future__ import annotations

import os
import tomllib
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

from pydantic import (
    BaseModel,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from pipeline.contracts.rounds import MAX_PVALUE, NOISE_FACTOR, PAIRED_MIN_CHANGE
from pipeline.host_lock import DEFAULT_HOST_LOCK

ENV_PREFIX = "BENCHFARM_"


class SettingsError(RuntimeError):
    """A setting with a wrong value; the message names the setting and where it came from."""


_NO_EFFECT = ("removed: it had no effect (a timing round ends on its share of min_time_s and min_samples; a case "
              "stops on its rounds: round_ci_target unpaired, the verdict paired); delete it")
REMOVED_SETTINGS: dict[str, str] = {
    "measurement.max_rel_noise": _NO_EFFECT,
    "measurement.noise": _NO_EFFECT,
    "buildkite.device_classes": "removed: the device classes of one pipeline upload are its argument, `benchfarm "
                                "pipeline --device-classes` (default: BENCHFARM_PIPELINE_DEVICE_CLASSES in the "
                                "pipeline's or the build's environment)",
    "buildkite.cases": "removed: `benchfarm pipeline --cases` (default: BENCHFARM_PIPELINE_CASES in the build's "
                       "environment)",
    "buildkite.run_kind": "removed: `benchfarm pipeline --kind` (default: BENCHFARM_PIPELINE_KIND in the build's "
                          "environment)",
    "github.comment_max_chars": "removed: GitHub's limit on a comment's body is a constant "
                                "(pipeline.pr_comments.comment.COMMENT_MAX_CHARS); delete it",
}
"""Settings of earlier versions -> why they are gone and what to do instead: a file or environment that
still sets one stops the command with this message (as any unknown setting does), not with "extra inputs"."""

PIPELINE_ARGUMENTS: dict[str, str] = {"device_classes": "BENCHFARM_PIPELINE_DEVICE_CLASSES",
                                      "cases": "BENCHFARM_PIPELINE_CASES", "kind": "BENCHFARM_PIPELINE_KIND"}
"""Environment variables that are arguments, not settings: the defaults of `benchfarm pipeline`'s flags of
the same names, set in a Buildkite pipeline's environment or in that of a build the service creates."""


GPU_MEASUREMENT: dict[str, float | int | str] = {"min_time_s": 0.1, "max_time_s": 15.0,
                                                 "placement_total_bytes": 40 << 30, "max_samples": 1500,
                                                 "rounds": 16, "timing_budget_s": 300.0}
"""GPU budget after NVBench's cold-measurement defaults (a 15 s timeout), with 0.1 s of kernel time per
case (a side) over its first rounds instead of NVBench's 0.5 s: NVBench times one run, where a case here is
timed in at least `min_rounds` rounds on other buffer copies, the verdict's replicate is the round, and an
undecided case gets more rounds. At most 1500 samples (pairs) over the first rounds, 500 a round: a
5 us kernel's 0.1 s would be 20,000 samples, each with an L2 flush, a gate and a clock reading around it,
for a round level that a few hundred pairs already give to a few hundredths of a percent. Undecided cases
take up to 16 rounds, within 300 s of timing a job (2 x H200, issue 30: the paired nightly of the suite
in 231-257 s at 0.2 s and 3000 samples, every case decided same by its third to thirteenth round)."""

PHONE_MEASUREMENT: dict[str, float | int | str] = {"rounds": 8, "timing_budget_s": 900.0}
"""Phones: each round pushes and starts IREE's tools over adb (seconds, not milliseconds) and cools
down between cases, so fewer extra rounds and a longer job."""


def default_device_overrides() -> dict[str, dict[str, float | int | str]]:
    """`MeasurementSettings.device_overrides` unless configured: the GPU and phone kinds' budgets."""
    return {"gpu": dict(GPU_MEASUREMENT), "phone": dict(PHONE_MEASUREMENT)}


class MeasurementSettings(BaseModel):
    """How a job checks and times its cases (docs/design.md, "Measurement"): warm-up, then rounds of
    samples, round-robin over the cases; a round of a case ends on its share of the time and sample
    minimums (`pipeline.agents.measure.per_round`), or its share of max_time_s; a case takes more rounds
    only while its verdict is undecided. Defaults suit CPUs; `device_overrides` changes them per device
    class (by its name, else its kind: `cpu`, `gpu`, `phone`; `pipeline.agents.measure.for_device`)."""

    model_config = SettingsConfigDict(extra="forbid")

    warmup_s: float = Field(default=0.05, ge=0)
    min_samples: int = Field(default=10, ge=2)
    min_time_s: float = Field(default=0.3, ge=0)
    max_time_s: float = Field(default=3.0, gt=0)
    throttle_threshold: float = Field(
        default=0.75, ge=0, lt=1,
        description="a sample taken with the SM clock under this fraction of the default clock is discarded (NVBench); "
        "0: never")
    throttle_backoff_s: float = Field(
        default=0.05, ge=0, description="pause after a throttled sample; grows while throttling goes on (NVBench)")
    max_samples: int = Field(
        default=0, ge=0,
        description="most samples (paired: pairs) a case takes over its first min_rounds rounds, split evenly over "
        "them, even when min_time_s is not reached yet (0: no cap): a microsecond kernel's time budget would be "
        "tens of thousands of samples whose per-sample overhead is most of the job")
    rounds: int = Field(
        default=12, ge=1, le=100,
        description="the most rounds a case is timed in (cases go round-robin, so a passing disturbance on the host "
        "lands on every case a little); a case takes more than min_rounds only while undecided")
    min_rounds: int = Field(
        default=3, ge=1, le=100,
        description="rounds every timed case gets; after them a case stops once decided: paired, once its verdict "
        "(pipeline.contracts.rounds.classify, with the case's threshold) is same or different; unpaired, once the "
        "95% interval of its own level is within round_ci_target (the sample budget is spread over these rounds)")
    round_ci_target: float = Field(
        default=0.005, gt=0, lt=1,
        description="unpaired cases: stop timing once the half-width of the 95% interval of the case's round-level "
        "log level is at most this")
    timing_budget_s: float = Field(
        default=120.0, gt=0,
        description="seconds of timing a job spends before it stops giving undecided cases more rounds (each case "
        "still gets min_rounds); what is left undecided is reported inconclusive")
    placements: int = Field(
        default=4, ge=1, le=16,
        description="buffer copies each case holds (same values); round r is timed on copy r mod n, so a run "
        "averages placements instead of carrying one copy's fixed offset (docs/design.md, Measurement)")
    placement_bytes: int = Field(
        default=256 * 1024 * 1024, ge=0,
        description="byte budget for a case's copies: a case whose buffers are larger gets fewer (at least one)")
    placement_total_bytes: int | None = Field(
        default=None, ge=0,
        description="byte budget for the copies of all of a job's timed cases together (they are held at once): "
        "within it, cases that placement_bytes left on fewer copies get more, evenly, up to placements; a job "
        "over it gives copies back from its largest cases first (at least one each). None: placement_bytes only "
        "(`pipeline.agents.placement`)")
    placement_memory_fraction: float = Field(
        default=0.6, gt=0, le=1,
        description="with placement_total_bytes, the job's copies also stay within this fraction of the device "
        "memory free when the job starts (a runner that can tell: CUDA), so a smaller GPU than the budget was "
        "set for is not run out of memory: 0.6 keeps 40 GiB on an 80 GiB H100, ~13 GiB on a 24 GiB L4")
    unchanged_sentinels: int = Field(
        default=4, ge=0,
        description="pull-request jobs time the cases whose binary differs from the base's and this many unchanged "
        "ones (rotating with the run, as drift sentinels); the rest are reported unchanged, not timed")
    time_same_code: bool = Field(
        default=False,
        description="pull-request jobs also time the cases whose binary differs from the base's but whose code "
        "does not (`BundleEntry.code_digest`: a rename); false: they are 'unchanged (same code)', not timed, "
        "as identical binaries are")
    host_lock: str = Field(
        default=DEFAULT_HOST_LOCK,
        description="file lock this host's benchfarm processes share: timing on a CPU device holds it alone and "
        "compiles hold it together, so no build runs beside CPU timing (`pipeline.host_lock`); '': no lock")
    counters: Literal["auto", "off"] = Field(
        default="auto",
        description="hardware counters (instructions, DRAM bytes, L2 hit rate, occupancy) of each checked binary, "
        "taken once per binary and device class outside the timed rounds (`pipeline.agents.counters`): auto, where "
        "this host has a profiler (ncu; CPU perf events), else each result says why not; off: not taken, and said so")
    counters_timeout_s: float = Field(
        default=300.0, gt=0, description="the most seconds one binary's profiling may take before it is given up "
        "(and the result says so)")
    device_overrides: dict[str, dict[str, float | int | str]] = Field(
        default_factory=default_device_overrides,
        description="device class name or kind -> settings that differ there; a class's name wins over its kind. "
        "Those given to Settings (file, environment, arguments) are laid over the defaults key by key: setting one "
        "GPU class's value keeps the GPU defaults; given to MeasurementSettings itself, they replace them ({}: none)",
    )

    @field_validator("device_overrides")
    @classmethod
    def _known_overrides(cls, value: dict[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
        for key, changes in value.items():
            removed = sorted(name for name in changes if f"measurement.{name}" in REMOVED_SETTINGS)
            if removed:
                raise ValueError(f"device_overrides[{key!r}] sets {removed[0]}, "
                                 + REMOVED_SETTINGS[f"measurement.{removed[0]}"])
            unknown = set(changes) - (set(cls.model_fields) - {"device_overrides"})
            if unknown:
                raise ValueError(f"device_overrides[{key!r}] sets unknown measurement settings {sorted(unknown)}")
        return value


class CompareSettings(BaseModel):
    model_config = SettingsConfigDict(extra="forbid")

    min_change: float = Field(default=0.05, gt=0, lt=1, description="smallest relative change called a regression")
    paired_min_change: float = Field(
        default=PAIRED_MIN_CHANGE, gt=0, lt=1,
        description="the same for paired results (base and head interleaved in one job) of a case whose paired noise "
        "on the device class is not learned yet (fewer than 5 A/A calibrations): its threshold")
    paired_floor: float = Field(
        default=0.005, gt=0, lt=1,
        description="the least a paired case's threshold goes down to once its noise is learned: threshold = "
        "max(paired_floor, noise_factor x noise). Paired A/A of the CUDA suite on an H100 (4 jobs, 656 rows): "
        "largest |change| per case median 0.12 %, 90th percentile 0.37 %; at 0.5 %, 0 of 656 rows would have "
        "been different (docs/benchmarks/history.md, issue 11, twelfth session)")
    max_pvalue: float = Field(default=MAX_PVALUE, gt=0, lt=1,
                              description="largest p-value (a t-test over timing rounds) of a change called regressed "
                              "or improved")
    min_samples: int = Field(default=5, ge=2, description="fewer samples on a side: insufficient data")
    min_rounds: int = Field(default=3, ge=2, description="fewer timing rounds on a side: insufficient data")
    noise_factor: float = Field(
        default=NOISE_FACTOR, ge=0,
        description="once a case's noise on the device class is learned, its threshold is max(the floor, noise_factor x "
        "that noise), the floor being paired_floor (paired) or min_change: 3 standard deviations of a change between identical code pass 0.27 % of the time (normal noise), "
        "and absorb the uncertainty of a noise learned from a few runs (pipeline.results.analysis.stats.threshold)")
    same_binary_shortcut: bool = Field(
        default=True,
        description="a case whose head and base binaries are identical is 'unchanged (same binary)', never regressed "
        "or improved; false: judged by its timings like any other (A/A measurements)")
    default_run_noise: float = Field(
        default=0.03, ge=0, lt=1,
        description="unpaired comparisons: the sd of one run's level (relative) assumed for a case whose series has "
        "no learned run-to-run noise yet (Series.noise_unpaired, after 5 runs): the rounds of one run cannot show how "
        "much two runs of one binary differ, so a fresh series' threshold assumes this much between-run noise; its "
        "test pools the run level from the comparison's other rows (20 or more), or else assumes this too; "
        "0: none assumed")
    ancestor_walk: int = Field(default=50, ge=1, description="how many first-parent ancestors to search for a base")


class GitHubSettings(BaseModel):
    """Posting reports on GitHub: the sticky PR comment and the check run (or commit status)."""

    model_config = SettingsConfigDict(extra="forbid")

    api_url: str = Field(default="https://api.github.com", description="REST API root (GitHub Enterprise: https://HOST/api/v3)")
    token: SecretStr = Field(default=SecretStr(""), description="a token (PAT or Actions token); reports go as commit statuses")
    app_id: str = Field(default="", description="GitHub App id; with app_private_key, reports go as check runs")
    app_private_key: SecretStr = Field(default=SecretStr(""), description="the App's PEM private key, or a path to it")
    installation_id: int | None = Field(default=None, description="the App's installation; empty: looked up from the repository")
    bot_login: str = Field(default="", description="whose comments are ours; empty: asked of GitHub (/user or /app)")
    report_as: str = Field(default="auto", pattern=r"^(auto|check_run|status)$",
                           description="auto: a check run with App auth, a commit status with a token")
    verdict_policy: str = Field(default="fail", pattern=r"^(fail|neutral)$",
                                description="what regressions or errors make the check: fail, or neutral (reported only)")
    check_name: str = Field(default="benchfarm", description="name of the check run, context of the commit status")
    comment_top_n: int = Field(default=20, ge=1, description="rows shown per section before linking to the full comparison")
    retries: int = Field(default=5, ge=0, le=20, description="retries of one request: rate limits always; connection errors and 502/503/504 only where a "
                         "repeat is harmless (docs/design.md, \"HTTP retries\")")
    backoff_s: float = Field(default=1.0, ge=0, description="exponential back-off factor between retries")
    max_wait_s: float = Field(default=120.0, ge=0, description="longest single wait (Retry-After, rate-limit reset) before giving up")
    seconds_between_writes: float = Field(default=1.0, ge=0, description="GitHub asks for a pause between content writes")
    timeout_s: int = Field(default=30, ge=1)
    # The webhook (POST /api/v1/webhooks/github, `pipeline.service.github_webhook`)
    webhook_secret: SecretStr = Field(
        default=SecretStr(""), description="the webhook's secret: deliveries must carry its X-Hub-Signature-256; "
        "empty: every delivery is refused (401) and nothing is queued")
    trusted_label: str = Field(
        default="benchfarm:run", min_length=1,
        description="a pull request from a fork runs on devices only while it carries this label (a maintainer adds "
        "it after reading the change); adding it to any pull request runs it again")
    device_classes: list[str] = Field(
        default_factory=list,
        description="device classes that pull requests and pushes run on; empty: every class with an online device")
    fetch_remote: str = Field(
        default="origin", description="remote of the service's suite checkout that pull request heads are fetched "
        "from (refs/pull/N/head); a checkout without it fetches from the payload's clone URL")

    @property
    def uses_app(self) -> bool:
        return bool(self.app_id and self.app_private_key.get_secret_value())

    def private_key_pem(self) -> str:
        """The App's private key: the setting itself, or the file it names."""
        value = self.app_private_key.get_secret_value().strip()
        if value and not value.startswith("-----BEGIN") and Path(value).expanduser().is_file():
            return Path(value).expanduser().read_text()
        return value


class BuildkiteSettings(BaseModel):
    """The dynamic Buildkite pipeline: queues, time limits, retries."""

    model_config = SettingsConfigDict(extra="forbid")

    builder_queue: str = Field(default="benchfarm-builder", description="queue of the CPU builders")
    device_queue_prefix: str = Field(default="benchfarm-", description="a device class's queue is this plus its name")
    report_queue: str = Field(default="benchfarm-builder", description="queue of the step that posts the report")
    build_timeout_min: int = Field(default=60, ge=1)
    run_timeout_min: int = Field(default=120, ge=1)
    report_timeout_min: int = Field(default=15, ge=1)
    agent_lost_retries: int = Field(default=2, ge=0, le=10, description="automatic retries when an agent is lost or stopped")
    bundle_dir: str = Field(default="bundle", description="folder the bundle is built into and uploaded from, relative to the checkout")
    suite_dir: str = Field(default="", description="the suite folder relative to the checkout, passed to benchfarm build "
                           "as --suite; empty: benchfarm's default")
    # Builds through Buildkite's REST API: with all three set, a webhook delivery creates a Buildkite build
    # (whose pipeline upload step runs `benchfarm pipeline`) instead of queueing jobs on the built-in dispatcher.
    api_url: str = Field(default="https://api.buildkite.com", description="Buildkite's REST API root")
    api_token: SecretStr = Field(default=SecretStr(""), description="a Buildkite API access token with write_builds")
    organization: str = Field(default="", description="the organization's slug")
    pipeline: str = Field(default="", description="the pipeline's slug")


class AnalysisSettings(BaseModel):
    """Change-point detection on default-branch histories (`pipeline.results.analysis.changepoints`)."""

    model_config = SettingsConfigDict(extra="forbid")

    window: int = Field(default=50, ge=6, description="commits per analysis window")
    max_pvalue: float = Field(default=0.001, gt=0, lt=1, description="largest p-value of a reported change point")
    min_magnitude: float = Field(
        default=0.02, ge=0, lt=1,
        description="smallest |relative change| of a reported change point, unless the series sets its own")
    min_size: int = Field(default=3, ge=2, description="commits at the new level before a change point is reported")
    confirm_size: int = Field(default=8, ge=2, description="commits from a reported change point to the newest, "
                              "its own included, before it is confirmed (and alerted)")
    confirm_pvalue: float = Field(default=1e-8, gt=0, lt=1, description="largest p-value of a confirmed change "
                                  "point; a reported one above it stays suspected")
    hold_pvalue: float = Field(default=0.01, gt=0, lt=1, description="a confirmed change point stays confirmed while "
                               "the commits from it differ from those before it at this p-value (hysteresis)")
    processes: int = Field(default=0, ge=0, description="worker processes that analyse an upload's series (each "
                           "series' history is analysed on its own); 0: one per core, at most 8; 1: none (in the "
                           "process that stores the upload)")


class AlertSettings(BaseModel):
    """Where a confirmed history regression is announced (`pipeline.service.alerts`), once per change point."""

    model_config = SettingsConfigDict(extra="forbid")

    webhook_url: SecretStr = Field(default=SecretStr(""), description="a Slack-compatible incoming webhook "
                                   "(JSON {\"text\": ...}); empty: no alerts")
    owners: dict[str, str] = Field(default_factory=dict, description="case-id glob -> who owns those series "
                                   "(a Slack mention such as <@U123>, a name, or an e-mail address, which is also "
                                   "mailed), named in the alert")
    smtp_url: SecretStr = Field(default=SecretStr(""), description="e-mail alerts through this server: "
                                "smtp://[user:password@]host[:port] (STARTTLS when offered) or smtps://…; empty: none")
    email_from: str = Field(default="benchfarm@localhost", description="the alerts' sender address")
    email_to: list[str] = Field(default_factory=list, description="addresses mailed every alert (owners' "
                                "addresses get their series' alerts too)")
    period_s: float = Field(default=10.0, gt=0, description="how often the service looks for new regressions")

    @model_validator(mode="after")
    def _smtp_url_is_a_server(self) -> AlertSettings:
        url = self.smtp_url.get_secret_value()
        if url:
            parts = urlsplit(url)
            if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
                raise ValueError("smtp_url: give smtp://[user:password@]host[:port] or smtps://… (the password "
                                 "is hidden here)")
        return self


class BisectSettings(BaseModel):
    """Bisection of a confirmed change point's commit range to its culprit (`pipeline.orchestration.dispatch.bisect`)."""

    model_config = SettingsConfigDict(extra="forbid")

    auto: bool = Field(default=True, description="bisect a regression as soon as it is confirmed over a range of more "
                       "than one first-parent commit (the service needs a suite checkout: dispatch.suite_path)")
    auto_within_h: float = Field(default=24.0, gt=0, description="only change points confirmed this recently are "
                                 "bisected automatically (an upgraded store does not bisect its whole past)")
    # 16: one culprit in the longest range (max_range, 2000 commits) takes 1 + 11 probes with no noise,
    # a change spread over two commits of 16 about 12 with the repeats that confirm it (tests/e2e/test_bisect.py
    # once stopped there at 12); the slack is for a repeated or off-level probe
    max_steps: int = Field(default=16, ge=1, le=200, description="jobs one bisection may run at most")
    max_device_s: float = Field(default=3600.0, gt=0, description="device time (seconds of its jobs) one bisection may "
                                "use at most")
    max_active: int = Field(default=4, ge=1, description="bisections running at once; later ones wait queued")
    min_share: float = Field(default=0.2, gt=0, le=1, description="a commit is searched for when it moved the level by "
                             "at least this share of the whole change, in log ratio (and by compare.paired_min_change)")
    max_range: int = Field(default=2000, ge=2, description="longest first-parent range bisected, in commits")
    period_s: float = Field(default=2.0, gt=0, description="how often the service advances bisections")


class PhoneSettings(BaseModel):
    """Android phones reached through `adb` (`pipeline.agents.adb`, `pipeline.agents.runners.adb_runner`).

    A phone has no Python: the agent pushes each case's .vmfb, its inputs and two IREE tools
    (`iree-run-module` for the correctness check, `iree-benchmark-module` for timing) built for the
    phone. `iree_tools_dir` holds those two binaries: an Android arm64 build of IREE's runtime tools
    for real phones (the aarch64 Linux binaries of the `iree-base-runtime` manylinux wheel are
    glibc programs and run only where a glibc loader exists, e.g. under qemu-aarch64 in the tests).
    """

    model_config = SettingsConfigDict(extra="forbid")

    enabled: bool = Field(default=False, description="discover phones with `adb devices -l` (a host with phones attached)")
    adb: str = Field(default="adb", description="the adb client binary")
    adb_server_socket: str = Field(default="", description="ADB_SERVER_SOCKET for the client, e.g. tcp:127.0.0.1:5037; empty: adb's default")
    adb_timeout_s: float = Field(default=120.0, gt=0, description="longest single adb command (push, shell)")
    iree_tools_dir: Path = Field(default=Path(""), description="folder with iree-run-module and iree-benchmark-module built for the phone")
    remote_dir: str = Field(default="/data/local/tmp/benchfarm", pattern=r"^/", description="the agent's folder on the phone")
    targets: list[str] = Field(default_factory=lambda: ["llvm-cpu:aarch64-android"], min_length=1,
                               description="targets a phone device class runs")
    abis: list[str] = Field(default_factory=lambda: ["arm64-v8a"], description="ro.product.cpu.abi values those targets run on")
    clusters: dict[str, dict[str, str]] = Field(
        default_factory=dict,
        description="ro.product.model -> {cluster name: taskset hex mask}, one device class per cluster, e.g. "
        "{\"Pixel 8 Pro\": {\"big\": \"100\", \"mid\": \"f0\"}}; a model not listed gets one class, `big`: the "
        "cpufreq policy with the highest cpuinfo_max_freq")
    repetitions: int = Field(default=10, ge=1, le=1000, description="iree-benchmark-module repetitions per call; one sample each")
    repetition_min_time_s: float = Field(default=0.05, gt=0, description="time each repetition runs the kernel for (mean = the sample)")
    cooldown_max_c: float = Field(default=40.0, description="before each timed call, wait until every thermal zone is under this")
    cooldown_timeout_s: float = Field(default=120.0, ge=0, description="give up waiting (the case records it) after this")
    cooldown_poll_s: float = Field(default=2.0, gt=0, description="how often thermal zones are read while waiting")
    thermal_zones: list[str] = Field(default_factory=list, description="thermal zone types watched; empty: every zone")


class WebSettings(BaseModel):
    """The history web UI (`pipeline.service.web`): who may browse, signed sessions, roofline ceilings, page sizes."""

    model_config = SettingsConfigDict(extra="forbid")

    public: bool = Field(default=True, description="anyone may browse (pages and API reads); false: sign-in (or a "
                         "bearer token with the user scope) is needed to read anything")
    secret_key: SecretStr = Field(default=SecretStr(""), description="signs session cookies; empty: a random key per "
                                  "process (sessions end when the service restarts; set it when several processes serve)")
    session_hours: float = Field(default=12.0, gt=0, description="a sign-in lasts this long")
    ceilings: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="device class -> {\"flops\": peak FLOP/s, \"bytes\": peak B/s} for the roofline; a device class not "
        "listed gets ceilings derived from its best measured case")
    page_rows: int = Field(default=100, ge=1, le=5000, description="rows per page of the compare page's tables (each "
                           "device class) and the roofline's table: a farm's comparison can hold 20,000 rows")
    dashboard_tiles: int = Field(default=40, ge=1, le=5000, description="series shown per family x device class on the "
                                 "dashboard, regressed and improved first; the group's own view lists up to "
                                 "`group_tiles`")
    group_tiles: int = Field(default=1000, ge=1, le=20000, description="series shown when the dashboard's filters "
                             "leave one family on one device class")


class DispatchSettings(BaseModel):
    """The built-in dispatcher on the service side: job leases, long polls, the builder of triggered runs."""

    model_config = SettingsConfigDict(extra="forbid")

    lease_s: float = Field(default=60.0, gt=0, description="a claimed job's lease; an agent's heartbeat renews it")
    max_attempts: int = Field(default=3, ge=1, le=100, description="claims of one job before an expired lease fails it")
    claim_wait_s: float = Field(default=20.0, ge=0, le=300, description="how long a claim waits for a job (long poll)")
    claim_poll_s: float = Field(default=0.5, gt=0, description="how often a waiting claim looks again")
    agent_offline_s: float = Field(default=90.0, gt=0, description="no heartbeat for this long: agent and devices offline")
    suite_path: str = Field(default="", description="suite folder in a git checkout that triggered runs are built from")
    builder: bool = Field(default=True, description="the service builds triggered runs in a thread of its own (with "
                          "suite_path); false where `benchfarm builder` processes do the builds")
    build_targets: list[str] = Field(default_factory=list, description="extra targets every triggered build compiles")
    nightly_at: str = Field(default="", pattern=r"^$|^([01]\d|2[0-3]):[0-5]\d$",
                            description="UTC time (HH:MM) of the nightly run of the whole suite on every device "
                            "class; empty: none")
    nightly_ref: str = Field(default="HEAD", description="what the nightly runs, resolved in the suite checkout "
                             "(dispatch.suite_path; keep it fetched); without one, the stored default-branch head")


class AgentSettings(BaseModel):
    """`benchfarm agent` and `benchfarm run-job`: which service, which devices, where to cache and spool."""

    model_config = SettingsConfigDict(extra="forbid")

    server_url: str = Field(default="", description="the service's URL; empty: public_url")
    token: SecretStr = Field(default=SecretStr(""), description="an agent-scope token (benchfarm token create --scope agent)")
    name: str = Field(default="", description="the agent's name; empty: benchfarm-agent@<hostname>")
    gpu_lock_clocks: str = Field(
        default="", pattern=r"^$|^\d{2,5},\d{2,5}$",
        description="MIN,MAX (MHz): the SM clocks infra/agent's GPU unit locks while the agent runs (nvidia-smi "
        "--lock-gpu-clocks, where the driver allows); recorded in a GPU's device info when it runs within them")
    device_classes: dict[str, str] = Field(
        default_factory=dict,
        description="discovered device class -> class to register it as; an empty value leaves the device out")
    only_classes: list[str] = Field(default_factory=list, description="register only these (mapped) classes; empty: all")
    heartbeat_s: float = Field(default=10.0, gt=0, description="heartbeat and device re-discovery period")
    work_dir: Path | None = Field(default=None, description="bundle cache, result spool and log; empty: <home>/agent")
    timeout_s: float = Field(default=30.0, gt=0, description="HTTP timeout of one request (a claim adds its wait)")
    retries: int = Field(default=5, ge=0, description="retries of one request on connection errors and 502/503/504, where a repeat "
                         "is harmless (docs/design.md, \"HTTP retries\")")
    backoff_s: float = Field(default=0.5, ge=0, description="first back-off between retries, doubled up to backoff_max_s")
    backoff_max_s: float = Field(default=10.0, gt=0)
    upload_chunk_bytes: int = Field(
        default=4 * 1024 * 1024, ge=64 * 1024,
        description="a result document is uploaded in chunks of case results of at most this many bytes each "
                    "(keep it well below the service's max_upload_bytes)")


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter="__", extra="forbid", validate_default=True,
        nested_model_default_partial_update=True,   # a group's keys from any source laid over its defaults
    )

    home: Path = Field(default=Path(".benchfarm"), description="where the embedded store, bundles and caches live")
    database_url: str = Field(default="", description="SQLAlchemy URL; empty: SQLite at <home>/benchfarm.db")
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=1, le=65535)
    public_url: str = Field(default="", description="how people reach the service; empty: http://host:port")
    repository: str = Field(default="", description="repository name stored with runs; empty: the checkout's folder name")
    api_token: SecretStr = Field(
        default=SecretStr(""), description="bearer token for writes through the API; empty: API writes disabled"
    )
    max_upload_bytes: int = Field(default=16 * 1024 * 1024, ge=1024, description="largest request body accepted")
    log_level: str = Field(default="INFO", pattern=r"^(DEBUG|INFO|WARNING|ERROR)$")
    build_workers: int = Field(default=0, ge=0, description="parallel compile processes; 0: one per core")
    measurement: MeasurementSettings = MeasurementSettings()
    compare: CompareSettings = CompareSettings()
    analysis: AnalysisSettings = AnalysisSettings()
    alerts: AlertSettings = AlertSettings()
    bisect: BisectSettings = BisectSettings()
    github: GitHubSettings = GitHubSettings()
    buildkite: BuildkiteSettings = BuildkiteSettings()
    web: WebSettings = WebSettings()
    phones: PhoneSettings = PhoneSettings()
    dispatch: DispatchSettings = DispatchSettings()
    agent: AgentSettings = AgentSettings()

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        """Precedence, first wins: explicit arguments, the environment, the config file (`config_file`),
        defaults. pydantic-settings merges them key by key at every depth (`nested_model_default_partial_update`),
        so `BENCHFARM_MEASUREMENT__MIN_SAMPLES` replaces `min_samples` of the file's `[measurement]` and keeps
        its other keys, and `[measurement.device_overrides.X]` keeps the GPU and phone defaults."""
        return init_settings, env_settings, TomlConfigSettingsSource(settings_cls, toml_file=config_file())

    @field_validator("database_url")
    @classmethod
    def _known_database(cls, value: str) -> str:
        if value and not value.startswith(("sqlite", "postgresql")):
            raise ValueError("must be a sqlite:// or postgresql:// URL")
        return value

    @model_validator(mode="after")
    def _derive(self) -> Settings:
        if not self.database_url:
            self.database_url = f"sqlite:///{(self.home / 'benchfarm.db').as_posix()}"
        if not self.public_url:
            self.public_url = f"http://{self.host}:{self.port}"
        return self

    @property
    def bundles_dir(self) -> Path:
        return self.home / "bundles"

    @property
    def cache_dir(self) -> Path:
        return self.home / "cache"

    @property
    def work_dir(self) -> Path:
        return self.home / "work"

    @property
    def agent_dir(self) -> Path:
        """The agent's bundle cache (`bundles/`), result spool (`spool/`) and log (`agent.log`)."""
        return self.agent.work_dir or self.home / "agent"

    @property
    def outbox_dir(self) -> Path:
        """Reports that could not be posted yet, one JSON file each (`benchfarm report flush`)."""
        return self.home / "outbox"


def config_file() -> Path | None:
    """The TOML file settings are read from: the one BENCHFARM_CONFIG names, else ./benchfarm.toml if any."""
    named = os.environ.get(f"{ENV_PREFIX}CONFIG")
    if named:
        path = Path(named)
        if not path.is_file():
            raise SettingsError(f"{ENV_PREFIX}CONFIG names {path}, which is not a file")
        return path
    default = Path("benchfarm.toml")
    return default if default.is_file() else None


def _describe(error: Any, source: str) -> str:
    loc = [str(p) for p in error["loc"]]
    name = ".".join(loc)
    env_name = ENV_PREFIX + "__".join(loc).upper()
    removed = REMOVED_SETTINGS.get(name) if error["type"] == "extra_forbidden" else None
    return f"{name} (env {env_name}, or in {source}): {removed or error['msg']}"


def load_settings(**overrides: Any) -> Settings:
    """Read settings once at start; a wrong value raises SettingsError naming it."""
    path = config_file()
    not_settings = {f"{ENV_PREFIX}CONFIG", *PIPELINE_ARGUMENTS.values()}
    unknown_env = sorted(
        k for k in os.environ
        if k.startswith(ENV_PREFIX) and k not in not_settings
        and k[len(ENV_PREFIX):].split("__")[0].lower() not in Settings.model_fields
    )
    if unknown_env:
        raise SettingsError(f"unknown setting {unknown_env[0]}; known: " + ", ".join(
            ENV_PREFIX + name.upper() for name in Settings.model_fields))
    try:
        return Settings(**overrides)   # the file is read here, by the TOML source
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise SettingsError(f"config file {path} is not valid TOML: {exc}") from None
    except ValidationError as exc:
        source = str(path) if path else "the config file"
        lines = [_describe(e, source) for e in exc.errors(include_url=False)]
        raise SettingsError("wrong setting: " + "; ".join(lines)) from None


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return load_settings()
