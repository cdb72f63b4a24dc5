"""The store's tables, as typed SQLAlchemy 2.0 models.

Conventions:
- integer surrogate keys; the tables that grow with every upload (`case_results`, `measurements`)
  use 64-bit keys (plain INTEGER on SQLite, where only INTEGER PRIMARY KEY is the row id);
- runs and jobs are keyed by a string UUID, because agents and the API pass those ids around;
- a foreign key column is named after the table it points to plus `_id` and holds that table's
  surrogate key. Hence `cases.case_id` is the case's *text* id (`family/name/shape/dtype/impl`,
  read back as a `CaseId`: `CaseIdText`), while `series.case_id` / `case_results.case_id` hold `cases.id`;
- every timestamp is timezone-aware UTC (`UTCDateTime`);
- constraint names come from one naming convention, so migrations name them identically.

`Bundle.digest` is the sha256 of the manifest in canonical JSON (see `ingest.bundle_digest`):
content-addressed, so re-uploading a manifest is idempotent and a rebuild of the same commit with
different compile statistics is a second bundle.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, ClassVar

import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

from pipeline.contracts.ids import CASE_ID_MAX_LENGTH, CaseId
from pipeline.results.store.states import (
    AGENT_STATES,
    BISECTION_STATES,
    BISECTION_STEP_STATES,
    BUILD_STATUSES,
    CASE_STATUSES,
    COMPILE_STATUSES,
    DELIVERY_STATES,
    DIRECTIONS,
    JOB_STATUSES,
    LIFECYCLE,
    REPORT_STATES,
    RUN_KINDS,
    RUN_STATUSES,
    TRIAGE_STATES,
)

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


# 64-bit on PostgreSQL; on SQLite only "INTEGER PRIMARY KEY" autoincrements (and is 64-bit anyway).
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def utcnow() -> datetime:
    return datetime.now(UTC)


class UTCDateTime(sa.TypeDecorator[datetime]):
    """Timezone-aware UTC in and out, on both backends.

    A naive datetime handed in is taken to be UTC already. PostgreSQL stores `timestamptz`;
    SQLite stores the naive UTC text and gets its zone back on the way out.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class CaseIdText(sa.TypeDecorator[CaseId]):
    """A case id stored as its text and read back as a `CaseId`: the store hands out typed ids, so
    nothing above it splits the text. Bound values may be a CaseId or its text.

    Read leniently (`CaseId.parse(..., lenient=True)`): the text was validated on the way in, and a
    row written around the contract must still show (escaped) rather than break a page.
    """

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: CaseId | str | None, dialect: Dialect) -> str | None:
        return None if value is None else str(value)

    def process_result_value(self, value: str | None, dialect: Dialect) -> CaseId | None:
        return None if value is None else CaseId.parse(value, lenient=True)


def _one_of(column: str, values: tuple[str, ...], name: str) -> sa.CheckConstraint:
    listed = ", ".join(f"'{v}'" for v in values)
    return sa.CheckConstraint(f"{column} IN ({listed})", name=name)


class Base(DeclarativeBase):
    if TYPE_CHECKING:   # every model maps one table (DeclarativeBase types it as any FROM clause)
        __table__: ClassVar[sa.Table]
    metadata = sa.MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime(), dict[str, Any]: sa.JSON(), list[str]: sa.JSON()}


class Repository(Base):
    __tablename__ = "repositories"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    url: Mapped[str | None] = mapped_column(sa.String(500))
    default_branch: Mapped[str] = mapped_column(sa.String(200), default="main")


class Commit(Base):
    __tablename__ = "commits"
    __table_args__ = (
        sa.UniqueConstraint("repository_id", "sha"),
        sa.Index(None, "repository_id", "committed_at"),
        sa.Index(None, "repository_id", "branch", "committed_at"),
        sa.Index(None, "repository_id", "generation"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    repository_id: Mapped[int] = mapped_column(sa.ForeignKey("repositories.id", ondelete="CASCADE"))
    sha: Mapped[str] = mapped_column(sa.String(40))
    message: Mapped[str] = mapped_column(sa.Text, default="")
    author: Mapped[str] = mapped_column(sa.String(300), default="")
    committed_at: Mapped[datetime]
    branch: Mapped[str | None] = mapped_column(sa.String(300))
    pull_request: Mapped[int | None]
    generation: Mapped[int] = mapped_column(default=0, server_default="0")
    """How many recorded first-parent ancestors the commit has (0: its first parent is not recorded);
    kept by `ingest.record_commits` as commits come in, in any order. History is ordered by it (then
    commit time, then storage order), never by commit time first: commits of one second, or with
    clocks that disagree, still come in the order of `git log --first-parent`."""

    repository: Mapped[Repository] = relationship()
    parents: Mapped[list[CommitParent]] = relationship(
        order_by="CommitParent.position", cascade="all, delete-orphan", back_populates="commit"
    )


class CommitParent(Base):
    """Parent shas in git order; position 0 is the first parent. The parent need not be recorded."""

    __tablename__ = "commit_parents"

    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id", ondelete="CASCADE"), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    parent_sha: Mapped[str] = mapped_column(sa.String(40))

    commit: Mapped[Commit] = relationship(back_populates="parents")


class DeviceClassRow(Base):
    __tablename__ = "device_classes"
    __table_args__ = (_one_of("kind", ("cpu", "gpu", "phone"), "kind"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    targets: Mapped[list[str]]
    runtime: Mapped[str] = mapped_column(sa.String(32))
    hal_driver: Mapped[str | None] = mapped_column(sa.String(64))
    description: Mapped[str] = mapped_column(sa.Text, default="")


class Device(Base):
    __tablename__ = "devices"

    id: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str] = mapped_column(sa.String(200), unique=True)
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("device_classes.id"))
    name: Mapped[str] = mapped_column(sa.String(200), default="")
    host: Mapped[str] = mapped_column(sa.String(200), default="")
    driver: Mapped[str | None] = mapped_column(sa.String(200))
    first_seen: Mapped[datetime] = mapped_column(default=utcnow)
    last_seen: Mapped[datetime] = mapped_column(default=utcnow)
    agent_id: Mapped[int | None] = mapped_column(sa.ForeignKey("agents.id", ondelete="SET NULL"))
    """The agent that last registered this device (dispatcher); None for devices only seen in results."""
    online: Mapped[bool] = mapped_column(default=False, server_default=sa.false())
    """Listed by its agent's latest registration or heartbeat, and that agent is online."""


class Case(Base):
    __tablename__ = "cases"

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[CaseId] = mapped_column(CaseIdText(CASE_ID_MAX_LENGTH), unique=True)
    family: Mapped[str] = mapped_column(sa.String(100))
    name: Mapped[str] = mapped_column(sa.String(200))
    shape: Mapped[str] = mapped_column(sa.String(200))
    dtype: Mapped[str] = mapped_column(sa.String(32))
    impl: Mapped[str] = mapped_column(sa.String(64))
    model: Mapped[str] = mapped_column(sa.String(200), default="")


class Series(Base):
    """case x device class x metric (docs/design.md, "Identities"), with its analysis settings and state.

    `min_magnitude` / `lower_is_better`: per-series overrides (None: the analysis settings' minimum
    magnitude, the metric's direction in `pipeline.contracts.METRICS`). `history_points` and
    `analyzed_at` are written by `analysis`: how many default-branch commits the last analysis saw
    (0: no default-branch data) and when.
    """

    __tablename__ = "series"
    __table_args__ = (sa.UniqueConstraint("case_id", "device_class_id", "metric"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    case_id: Mapped[int] = mapped_column(sa.ForeignKey("cases.id"))
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("device_classes.id"))
    metric: Mapped[str] = mapped_column(sa.String(32))
    min_magnitude: Mapped[float | None] = mapped_column(sa.Double)
    lower_is_better: Mapped[bool | None]
    history_points: Mapped[int] = mapped_column(default=0, server_default="0")
    analyzed_at: Mapped[datetime | None]
    noise_paired: Mapped[float | None] = mapped_column(sa.Double)
    """Relative standard deviation of a paired change between identical binaries (A/A), learned
    from the series' history; None until known."""
    noise_unpaired: Mapped[float | None] = mapped_column(sa.Double)
    """Relative standard deviation of the run-to-run change of the median, learned from history."""


class Bundle(Base):
    __tablename__ = "bundles"

    id: Mapped[int] = mapped_column(primary_key=True)
    digest: Mapped[str] = mapped_column(sa.String(64), unique=True)
    repository_id: Mapped[int] = mapped_column(sa.ForeignKey("repositories.id"))
    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"), index=True)
    suite_digest: Mapped[str] = mapped_column(sa.String(100))
    path: Mapped[str] = mapped_column(sa.String(1000))
    created_at: Mapped[datetime]


class CompileStat(Base):
    __tablename__ = "compile_stats"
    __table_args__ = (
        sa.UniqueConstraint("bundle_id", "case_id", "target"),
        _one_of("status", COMPILE_STATUSES, "status"),
        # a compile series' history (`compile_stats.compile_history`) reads one case on one target
        sa.Index(None, "case_id", "target"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    bundle_id: Mapped[int] = mapped_column(sa.ForeignKey("bundles.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(sa.ForeignKey("cases.id"))
    target: Mapped[str] = mapped_column(sa.String(100))
    status: Mapped[str] = mapped_column(sa.String(16))
    error: Mapped[str | None] = mapped_column(sa.Text)
    compiler: Mapped[str | None] = mapped_column(sa.String(100))
    compiler_version: Mapped[str | None] = mapped_column(sa.String(100))
    compile_time_s: Mapped[float | None] = mapped_column(sa.Double)
    binary_bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    registers: Mapped[int | None]
    spills: Mapped[int | None]
    shared_bytes: Mapped[int | None]
    flops: Mapped[int | None] = mapped_column(sa.BigInteger)
    """floating-point operations per call (the manifest entry's), for the roofline"""
    bytes: Mapped[int | None] = mapped_column(sa.BigInteger)
    """minimum bytes moved per call (the manifest entry's), for the roofline"""
    code_tool: Mapped[str | None] = mapped_column(sa.String(200))
    """what read the artifact's code (the manifest entry's `code.tool`); None: the entry has no code evidence"""
    code_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """sha256 of the normalized listing (`code.digest`, a `code_listings` row when the bundle's files were read)"""
    code_unavailable: Mapped[str | None] = mapped_column(sa.Text)
    """why there is no listing (`code.unavailable`: a target without a disassembler)"""
    instructions: Mapped[dict[str, Any] | None] = mapped_column(sa.JSON)
    """the instruction mix (`code.instructions`: total and by_class)"""


class CodeListing(Base):
    """A normalized instruction listing (`pipeline.build.disassembly`), stored once per digest for every
    bundle entry that has it: what the comparisons diff without the bundle."""

    __tablename__ = "code_listings"

    digest: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    opcodes: Mapped[dict[str, int]] = mapped_column(sa.JSON)
    """opcode -> how many instructions of the listing have it (`code.opcode_counts`)"""
    listing: Mapped[bytes] = mapped_column(sa.LargeBinary, deferred=True)
    """the listing's UTF-8 text, zlib-compressed"""


class Run(Base):
    __tablename__ = "runs"
    __table_args__ = (_one_of("kind", RUN_KINDS, "kind"), _one_of("status", RUN_STATUSES, "status"))

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    repository_id: Mapped[int] = mapped_column(sa.ForeignKey("repositories.id"))
    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"), index=True)
    kind: Mapped[str] = mapped_column(sa.String(16))
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    created_at: Mapped[datetime] = mapped_column(default=utcnow, index=True)
    finished_at: Mapped[datetime | None]
    error: Mapped[str | None] = mapped_column(sa.Text)

    commit: Mapped[Commit] = relationship()
    repository: Mapped[Repository] = relationship()
    jobs: Mapped[list[Job]] = relationship(back_populates="run", order_by="Job.created_at, Job.id")


class Job(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "device_class_id"),
        _one_of("status", JOB_STATUSES, "status"),
        sa.Index(None, "status", "device_class_id"),
    )

    id: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"))
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("device_classes.id"))
    status: Mapped[str] = mapped_column(sa.String(16), default="queued")
    attempts: Mapped[int] = mapped_column(default=0)
    error: Mapped[str | None] = mapped_column(sa.Text)
    agent: Mapped[str | None] = mapped_column(sa.String(200))
    bundle_digest: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    # The job queue (`store.queue`): a queued job is claimable once it has a bundle.
    base_bundle_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """Paired jobs: the base commit's bundle, run interleaved with `bundle_digest`."""
    cases: Mapped[str | None] = mapped_column(sa.String(400))
    """A glob over case ids (fnmatch) narrowing what the job runs; None: every case."""
    max_attempts: Mapped[int] = mapped_column(default=3, server_default="3")
    lease_owner: Mapped[str | None] = mapped_column(sa.String(200))
    lease_expires_at: Mapped[datetime | None]
    device_id: Mapped[int | None] = mapped_column(sa.ForeignKey("devices.id", ondelete="SET NULL"))
    """The device that runs (or ran) the job's latest attempt."""
    progress: Mapped[str | None] = mapped_column(sa.String(300))
    """What the running attempt is doing, as its agent's last heartbeat said ("timing: round 3/8 ...",
    "timing: waiting for a compile on this host ..."); cleared when the job is claimed."""
    environment: Mapped[dict[str, str] | None] = mapped_column(sa.JSON, deferred=True)
    """The result document's `environment` (host, runtime versions, checks run and reused, placement
    budget, timing groups), from the job's latest upload that stored results."""
    owner: Mapped[str | None] = mapped_column(sa.String(300))
    """The local process that runs the job without a lease (`benchfarm run`): `host:pid:start` (the
    process's start time, so that a pid used again is not taken for it); None for jobs of agents,
    which hold leases. `queue.reap_orphaned_local_jobs` fails an unfinished job whose owner is gone."""

    run: Mapped[Run] = relationship(back_populates="jobs")
    device_class: Mapped[DeviceClassRow] = relationship()


class CaseResultRow(Base):
    """One case on one target in one job; upload is idempotent on (job, case, target)."""

    __tablename__ = "case_results"
    __table_args__ = (
        sa.UniqueConstraint("job_id", "case_id", "target"),
        _one_of("status", CASE_STATUSES, "status"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    job_id: Mapped[str] = mapped_column(sa.ForeignKey("jobs.id", ondelete="CASCADE"))
    case_id: Mapped[int] = mapped_column(sa.ForeignKey("cases.id"))
    target: Mapped[str] = mapped_column(sa.String(100))
    status: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str | None] = mapped_column(sa.Text)
    max_abs_error: Mapped[float | None] = mapped_column(sa.Double)
    max_rel_error: Mapped[float | None] = mapped_column(sa.Double)
    device_id: Mapped[int | None] = mapped_column(sa.ForeignKey("devices.id"))
    paired_base_commit_id: Mapped[int | None] = mapped_column(sa.ForeignKey("commits.id"))
    """Set when the job ran this commit's base interleaved with it: the base's samples are in
    `paired_samples`, paired by index with this result's samples."""
    paired_samples: Mapped[bytes | None] = mapped_column(sa.LargeBinary, deferred=True)
    """The paired base's samples (contract: `paired_base.samples`), one float64 little-endian array
    (`contracts.arrays.to_blob`); None when the result is not paired."""
    binary_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """What was timed (`BundleEntry.binary_digest`); None where the agent did not say."""
    paired_binary_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """The paired base's binary digest: equal to `binary_digest`, the pair timed identical code."""
    code_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """What was timed, names aside (`BundleEntry.code_digest`); None where the agent did not say or
    no disassembler read the code."""
    paired_code_digest: Mapped[str | None] = mapped_column(sa.String(64))
    """The paired base's code digest: equal to `code_digest`, the pair timed the same code (a rename)."""
    environment: Mapped[dict[str, str] | None] = mapped_column(sa.JSON, deferred=True)
    """The result's `environment` as the agent sent it (input seed, copies, how the pair was timed...)."""


class Measurement(Base):
    """The statistics of one ok case result, filed under its series and commit."""

    __tablename__ = "measurements"
    __table_args__ = (sa.Index(None, "series_id", "commit_id"), sa.Index(None, "commit_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    case_result_id: Mapped[int] = mapped_column(
        sa.ForeignKey("case_results.id", ondelete="CASCADE"), unique=True
    )
    series_id: Mapped[int] = mapped_column(sa.ForeignKey("series.id"))
    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    n: Mapped[int]
    median: Mapped[float] = mapped_column(sa.Double)
    mean: Mapped[float] = mapped_column(sa.Double)
    stdev: Mapped[float] = mapped_column(sa.Double)
    min: Mapped[float] = mapped_column(sa.Double)
    max: Mapped[float] = mapped_column(sa.Double)
    round_sizes: Mapped[list[int] | None] = mapped_column(sa.JSON)
    """Samples per timing round, in order (the verdict's unit of replication); None: not reported."""
    samples: Mapped[bytes] = mapped_column(sa.LargeBinary, deferred=True)
    """Every repetition, kept: `n` float64 little-endian values in the order taken, one array per
    measurement (`contracts.arrays.to_blob` / `from_blob`) rather than one row per sample, so that a
    full suite's millions of samples are written and read as a few thousand values."""
    sample_clocks: Mapped[bytes | None] = mapped_column(sa.LargeBinary, deferred=True)
    """The SM clock (MHz) read with each sample, same form and order; None when not reported."""


class CounterValue(Base):
    """One hardware counter of one ok case result (`pipeline.contracts.counters`), filed under its own
    series (case x device class x counter) and commit: deterministic, so a series of single values, no
    samples. `base`: the paired base binary's counter, taken in the same job on the same inputs, filed
    under the base commit (`commit_id`)."""

    __tablename__ = "counter_values"
    __table_args__ = (sa.UniqueConstraint("case_result_id", "series_id", "base"),
                      sa.Index(None, "series_id", "commit_id"))

    id: Mapped[int] = mapped_column(BigId, primary_key=True)
    case_result_id: Mapped[int] = mapped_column(sa.ForeignKey("case_results.id", ondelete="CASCADE"))
    series_id: Mapped[int] = mapped_column(sa.ForeignKey("series.id"))
    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    base: Mapped[bool]
    value: Mapped[float] = mapped_column(sa.Double)
    profiler: Mapped[str] = mapped_column(sa.String(200))


class ChangePoint(Base):
    """A change of level in a series' default-branch history (`analysis`, `changepoints.detect_new`).

    The commit range is (before_commit, after_commit]: the culprit is after_commit or one of the
    unmeasured commits between the two. `committed_at` is after_commit's time, copied so that the
    regressions list and the dashboard sort and filter without a join. `history_index` is
    after_commit's position in the history when it was detected (informative: a late measurement
    of an older commit shifts positions). `magnitude` is after_level / before_level - 1 (signed);
    `direction` follows the series' direction at detection. `state` is the state of the latest
    triage event (kept here so that "open regressions" is one indexed filter); only `triage`
    writes it, always with its event. `lifecycle` (`LIFECYCLE`) is the analysis' own view, written
    by `analysis` after each commit with a triage event of `analysis.ANALYSIS_WHO` that keeps the
    state and says what changed; `reason` says why it was retracted. The levels, magnitude,
    p-value and commits are those of the latest analysis that reported it.
    """

    __tablename__ = "change_points"
    __table_args__ = (
        sa.UniqueConstraint("series_id", "after_commit_id"),
        _one_of("state", TRIAGE_STATES, "state"),
        _one_of("direction", DIRECTIONS, "direction"),
        _one_of("lifecycle", LIFECYCLE, "lifecycle"),
        sa.Index(None, "series_id", "committed_at"),
        sa.Index(None, "direction", "state", "committed_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    series_id: Mapped[int] = mapped_column(sa.ForeignKey("series.id", ondelete="CASCADE"))
    before_commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    after_commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    committed_at: Mapped[datetime]
    history_index: Mapped[int]
    before_level: Mapped[float] = mapped_column(sa.Double)
    after_level: Mapped[float] = mapped_column(sa.Double)
    magnitude: Mapped[float] = mapped_column(sa.Double)
    pvalue: Mapped[float] = mapped_column(sa.Double)
    direction: Mapped[str] = mapped_column(sa.String(16))
    state: Mapped[str] = mapped_column(sa.String(16), default="needs triage")
    detected_at: Mapped[datetime] = mapped_column(default=utcnow)
    lifecycle: Mapped[str] = mapped_column(sa.String(16), default="confirmed", server_default="confirmed")
    confirmed_at: Mapped[datetime | None]
    retracted_at: Mapped[datetime | None]
    reason: Mapped[str] = mapped_column(sa.Text, default="", server_default="")
    """Why the analysis retracted it (empty while it stands)."""
    alerted_at: Mapped[datetime | None]
    """When a confirmed regression was announced (`pipeline.service.alerts`); None: not (yet)."""
    emailed_at: Mapped[datetime | None]
    """When it was e-mailed (the alerts' SMTP channel); None: not (yet)."""
    alert_withdrawn_at: Mapped[datetime | None]
    """When the follow-up withdrawing the announcement was posted (the point stopped being confirmed);
    None, or earlier than `alerted_at` (announced again since): not withdrawn."""
    email_withdrawn_at: Mapped[datetime | None]
    """The same for the e-mail channel (against `emailed_at`)."""


class TriageEvent(Base):
    """One step of a change point's triage: who moved it to which state, when, and why."""

    __tablename__ = "triage_events"
    __table_args__ = (
        _one_of("state", TRIAGE_STATES, "state"),
        sa.Index(None, "change_point_id", "at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    change_point_id: Mapped[int] = mapped_column(sa.ForeignKey("change_points.id", ondelete="CASCADE"))
    state: Mapped[str] = mapped_column(sa.String(16))
    who: Mapped[str] = mapped_column(sa.String(200))
    at: Mapped[datetime] = mapped_column(default=utcnow)
    bug_link: Mapped[str | None] = mapped_column(sa.String(1000))
    assignee: Mapped[str | None] = mapped_column(sa.String(200))
    note: Mapped[str] = mapped_column(sa.Text, default="")


class ApiToken(Base):
    """A bearer token of the API: only the sha256 of the token is stored, never the token.

    `scopes` is a list out of `auth.SCOPES`; a revoked token keeps its row (and its name) so that
    `token list` shows when it was revoked.
    """

    __tablename__ = "api_tokens"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    token_hash: Mapped[str] = mapped_column(sa.String(64), unique=True)
    scopes: Mapped[list[str]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_used_at: Mapped[datetime | None]
    revoked_at: Mapped[datetime | None]


class User(Base):
    """A person who signs in to the web UI with a password (`pipeline.service.users`).

    `password_hash` is `scrypt$n$r$p$salt$hash` (hex salt and hash), never the password; `scopes`
    as a token's (`auth.SCOPES`, `user` or `admin`). A disabled user keeps the row and the name.
    """

    __tablename__ = "users"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(100), unique=True)
    password_hash: Mapped[str] = mapped_column(sa.String(300))
    scopes: Mapped[list[str]]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_login_at: Mapped[datetime | None]
    disabled_at: Mapped[datetime | None]


class Agent(Base):
    """A device agent known to the dispatcher: registered with an agent-scope token, heartbeating."""

    __tablename__ = "agents"
    __table_args__ = (_one_of("state", AGENT_STATES, "state"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(200), unique=True)
    token_name: Mapped[str] = mapped_column(sa.String(100), default="")
    host: Mapped[str] = mapped_column(sa.String(200), default="")
    version: Mapped[str] = mapped_column(sa.String(100), default="")
    state: Mapped[str] = mapped_column(sa.String(16), default="online")
    registered_at: Mapped[datetime] = mapped_column(default=utcnow)
    last_heartbeat: Mapped[datetime] = mapped_column(default=utcnow)


class BuildRequest(Base):
    """A run waiting for a bundle: the service's builder builds the commit for these targets, then
    the run's jobs get the bundle's digest and become claimable."""

    __tablename__ = "build_requests"
    __table_args__ = (_one_of("status", BUILD_STATUSES, "status"), sa.Index(None, "status", "created_at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    targets: Mapped[list[str]]
    status: Mapped[str] = mapped_column(sa.String(16), default="pending")
    error: Mapped[str | None] = mapped_column(sa.Text)
    bundle_digest: Mapped[str | None] = mapped_column(sa.String(64))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    heartbeat_at: Mapped[datetime | None]
    """While building: renewed by its builder; one older than the dispatch lease is a builder that died
    without putting the build back (SIGKILL, a reboot), and the reaper queues it again."""
    base_sha: Mapped[str | None] = mapped_column(sa.String(40))
    """Paired runs: the base commit, built too (or its bundle reused); its digest goes to the jobs'
    `base_bundle_digest`, and the jobs become claimable once both bundles exist."""


class WebhookDelivery(Base):
    """A GitHub webhook delivery, kept by its X-GitHub-Delivery id: a redelivery of the same id is
    answered and not processed again. The payload waits here until the service's webhook worker
    has processed it (fetch, record, queue), so GitHub gets its answer at once."""

    __tablename__ = "webhook_deliveries"
    __table_args__ = (_one_of("state", DELIVERY_STATES, "state"), sa.Index(None, "state", "received_at"))

    id: Mapped[str] = mapped_column(sa.String(100), primary_key=True)
    event: Mapped[str] = mapped_column(sa.String(50))
    action: Mapped[str | None] = mapped_column(sa.String(50))
    payload: Mapped[dict[str, Any]]
    state: Mapped[str] = mapped_column(sa.String(16), default="pending")
    outcome: Mapped[str | None] = mapped_column(sa.Text)
    run_id: Mapped[str | None] = mapped_column(sa.ForeignKey("runs.id", ondelete="SET NULL"))
    received_at: Mapped[datetime] = mapped_column(default=utcnow)
    processed_at: Mapped[datetime | None]


class RunReport(Base):
    """A report owed for a run: when the run ends, its verdict goes on the pull request (sticky
    comment and check or status), or on the pushed commit; kept in the outbox when GitHub fails."""

    __tablename__ = "run_reports"
    __table_args__ = (_one_of("state", REPORT_STATES, "state"), sa.Index(None, "state", "created_at"))

    id: Mapped[int] = mapped_column(primary_key=True)
    run_id: Mapped[str] = mapped_column(sa.ForeignKey("runs.id", ondelete="CASCADE"), unique=True)
    repository: Mapped[str] = mapped_column(sa.String(200))
    pull_request: Mapped[int | None]
    head_sha: Mapped[str] = mapped_column(sa.String(40))
    base_sha: Mapped[str | None] = mapped_column(sa.String(40))
    merge_base: Mapped[str | None] = mapped_column(sa.String(40))
    state: Mapped[str] = mapped_column(sa.String(16), default="waiting")
    error: Mapped[str | None] = mapped_column(sa.Text)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    reported_at: Mapped[datetime | None]


class Bisection(Base):
    """The search for the commit that made a change point, on its device class (`pipeline.orchestration.dispatch.bisect`).

    `commits` is the range's first-parent commits oldest first, base excluded, bad included (empty
    until the range is resolved); a step's `position` indexes it from 1 (0 is the base). At most one
    bisection per change point is active (queued or running): a partial unique index says so.
    `result` holds what the outcome rests on (the culprits with their share of the change, the
    commits skipped and why, the ranges left open); `summary` says it in one sentence.
    """

    __tablename__ = "bisections"
    __table_args__ = (
        _one_of("state", BISECTION_STATES, "state"),
        sa.Index("ix_bisections_one_active", "change_point_id", unique=True,
                 sqlite_where=sa.text("state IN ('queued', 'running')"),
                 postgresql_where=sa.text("state IN ('queued', 'running')")),
        sa.Index(None, "state", "created_at"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    change_point_id: Mapped[int] = mapped_column(sa.ForeignKey("change_points.id", ondelete="CASCADE"), index=True)
    repository_id: Mapped[int] = mapped_column(sa.ForeignKey("repositories.id"))
    device_class_id: Mapped[int] = mapped_column(sa.ForeignKey("device_classes.id"))
    cases: Mapped[list[str]]
    base_commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    bad_commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    commits: Mapped[list[str]]
    state: Mapped[str] = mapped_column(sa.String(16), default="queued")
    outcome: Mapped[str | None] = mapped_column(sa.String(32))
    culprit_commit_id: Mapped[int | None] = mapped_column(sa.ForeignKey("commits.id"))
    result: Mapped[dict[str, Any]]
    summary: Mapped[str] = mapped_column(sa.Text, default="")
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    """why it failed or was cancelled"""
    max_steps: Mapped[int]
    max_device_s: Mapped[float] = mapped_column(sa.Double)
    device_s: Mapped[float] = mapped_column(sa.Double, default=0.0)
    requested_by: Mapped[str] = mapped_column(sa.String(200))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]

    steps: Mapped[list[BisectionStep]] = relationship(order_by="BisectionStep.id", cascade="all, delete-orphan",
                                                      back_populates="bisection")


class BisectionStep(Base):
    """One commit of a bisection, run paired with the range's base on the affected cases: its job,
    the paired change with its 95 % interval, and the verdict (old level, new level, in between),
    or why it was skipped (unbuildable, unrunnable). A commit run again to confirm a finding has a
    step per reading (`reading` 1, 2)."""

    __tablename__ = "bisection_steps"
    __table_args__ = (
        sa.UniqueConstraint("bisection_id", "position", "reading"),
        _one_of("state", BISECTION_STEP_STATES, "state"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    bisection_id: Mapped[int] = mapped_column(sa.ForeignKey("bisections.id", ondelete="CASCADE"))
    position: Mapped[int]
    reading: Mapped[int] = mapped_column(default=1, server_default="1")
    commit_id: Mapped[int] = mapped_column(sa.ForeignKey("commits.id"))
    run_id: Mapped[str | None] = mapped_column(sa.ForeignKey("runs.id", ondelete="SET NULL"))
    job_id: Mapped[str | None] = mapped_column(sa.ForeignKey("jobs.id", ondelete="SET NULL"))
    state: Mapped[str] = mapped_column(sa.String(16), default="queued")
    verdict: Mapped[str | None] = mapped_column(sa.String(32))
    change: Mapped[float | None] = mapped_column(sa.Double)
    ci_low: Mapped[float | None] = mapped_column(sa.Double)
    ci_high: Mapped[float | None] = mapped_column(sa.Double)
    pvalue: Mapped[float | None] = mapped_column(sa.Double)
    paired: Mapped[bool] = mapped_column(default=False)
    reason: Mapped[str] = mapped_column(sa.Text, default="")
    device_s: Mapped[float | None] = mapped_column(sa.Double)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    finished_at: Mapped[datetime | None]

    bisection: Mapped[Bisection] = relationship(back_populates="steps")


ALL_TABLES = [table.name for table in Base.metadata.sorted_tables]
