"""Read-side helpers for the web pages and the JSON API: small, typed documents out.

Each document is one frozen pydantic model, the very object the pages render and the API serves
as its `response_model` (no copy of its fields elsewhere). Those the API serves keep the names
its OpenAPI document gives them (`*Out`: component names are part of the published API), and
their docstrings and field descriptions are the API's too (a class docstring is its schema's
description): a note the API does not publish is a comment.

"Latest" and "history" follow ancestry (`history.HISTORY_ORDER`: first-parent generation, then commit
time, then storage order; a series' history is its default-branch history, `series_history`); when a
commit was measured by several runs on a series, its point combines them all (`history.commit_level`:
the median of the runs' levels, with their count): a rerun adds evidence, it replaces nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, Literal, TypeVar, get_args

import sqlalchemy as sa
import sqlalchemy.orm
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.contracts.counters import COUNTERS
from pipeline.contracts.ids import CaseIdAsText
from pipeline.results.store.analysis import series_direction
from pipeline.results.store.bisect_views import BisectionView, latest_by_change_point
from pipeline.results.store.counters import CounterHistoryOut, counter_history
from pipeline.results.store.history import HISTORY_ORDER, commit_level, default_branch_chain, history_order
from pipeline.results.store.models import (
    Case,
    CaseResultRow,
    ChangePoint,
    Commit,
    CommitParent,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
)
from pipeline.results.store.states import LIFECYCLE, OPEN_STATES
from pipeline.results.store.triage import TriageEventOut, events

_Document = TypeVar("_Document", bound=BaseModel)


def _from_row(model: type[_Document], row: Sequence[Any]) -> _Document:
    """The document from a select of its fields, in the model's field order."""
    return model(**dict(zip(model.model_fields, row, strict=True)))


class RunOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    repository: str
    commit_sha: str
    kind: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    job_count: int


class JobSummary(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    device_class: str
    status: str
    attempts: int
    error: str | None
    agent: str | None
    bundle_digest: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class RunDetail(BaseModel):
    model_config = ConfigDict(frozen=True)

    run: RunOut
    error: str | None
    jobs: list[JobSummary]


class SeriesSummary(BaseModel):
    """A series with its history's length and newest point (`series_history`: the default-branch
    history, its commits' runs combined)."""

    model_config = ConfigDict(frozen=True)

    id: int
    case_id: CaseIdAsText
    device_class: str
    metric: str
    points: int
    latest_median: float | None
    latest_commit: str | None


class HistoryPointOut(BaseModel):
    """A commit's point in a series: every run that measured it there, combined (`history.commit_level`)."""

    model_config = ConfigDict(frozen=True)

    sha: str
    committed_at: datetime
    median: float = Field(description="the median of the runs' levels (a run's level: its measurement's median)")
    min: float = Field(description="the smallest sample of any of its runs")
    max: float = Field(description="the largest sample of any of its runs")
    n: int = Field(description="samples, all runs together")
    runs: int = Field(description="runs that measured the commit on the series")


class CaseResultOut(BaseModel):
    """One case result of a job as stored: its outcome, its statistics when ok, what it was timed against
    (the paired base), and the environment the agent measured it in."""

    model_config = ConfigDict(frozen=True)

    case_id: CaseIdAsText
    target: str
    status: str
    reason: str | None
    max_abs_error: float | None
    max_rel_error: float | None
    median: float | None
    n: int | None
    round_sizes: list[int] | None
    binary_digest: str | None
    paired_base_sha: str | None
    paired_binary_digest: str | None
    environment: dict[str, str]


class JobResultsOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    job_id: str
    device_class: str
    environment: dict[str, str] = Field(description="the job's: host, runtime versions, checks, placement budget")
    results: list[CaseResultOut]


def job_results(session: Session, job_id: str) -> JobResultsOut | None:
    """A job's stored case results, by case and target; None when there is no such job."""
    job = session.execute(
        sa.select(Job.environment, DeviceClassRow.name).join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
        .where(Job.id == job_id)).one_or_none()
    if job is None:
        return None
    base = sa.orm.aliased(Commit)
    rows = session.execute(
        sa.select(Case.case_id, CaseResultRow.target, CaseResultRow.status, CaseResultRow.reason,
                  CaseResultRow.max_abs_error, CaseResultRow.max_rel_error, Measurement.median, Measurement.n,
                  Measurement.round_sizes, CaseResultRow.binary_digest, base.sha, CaseResultRow.paired_binary_digest,
                  CaseResultRow.environment)
        .join(Case, CaseResultRow.case_id == Case.id)
        .outerjoin(Measurement, Measurement.case_result_id == CaseResultRow.id)
        .outerjoin(base, CaseResultRow.paired_base_commit_id == base.id)
        .where(CaseResultRow.job_id == job_id).order_by(Case.case_id, CaseResultRow.target))
    return JobResultsOut(job_id=job_id, device_class=job[1], environment=job[0] or {},
                         results=[_from_row(CaseResultOut, (*row[:-1], row[-1] or {})) for row in rows])


def _run_query() -> sa.Select[Run, str, str, int]:
    job_count = (
        sa.select(sa.func.count(Job.id)).where(Job.run_id == Run.id).correlate(Run).scalar_subquery()
    )
    return (
        sa.select(Run, Repository.name, Commit.sha, job_count)
        .join(Repository, Run.repository_id == Repository.id)
        .join(Commit, Run.commit_id == Commit.id)
    )


def _run_summary(run: Run, repository: str, sha: str, jobs: int) -> RunOut:
    return RunOut(id=run.id, repository=repository, commit_sha=sha, kind=run.kind, status=run.status,
                  created_at=run.created_at, finished_at=run.finished_at, job_count=jobs)


def list_runs(session: Session, *, limit: int = 50) -> list[RunOut]:
    """The newest runs first."""
    rows = session.execute(_run_query().order_by(Run.created_at.desc(), Run.id).limit(limit))
    return [_run_summary(*row) for row in rows]


def get_run(session: Session, run_id: str) -> RunDetail | None:
    """One run with its jobs; None when there is no such run."""
    row = session.execute(_run_query().where(Run.id == run_id)).one_or_none()
    if row is None:
        return None
    run = row[0]
    jobs = session.execute(
        sa.select(Job, DeviceClassRow.name).join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id)
        .where(Job.run_id == run_id).order_by(DeviceClassRow.name)
    )
    return RunDetail(
        run=_run_summary(*row),
        error=run.error,
        jobs=[JobSummary(id=j.id, device_class=dc, status=j.status, attempts=j.attempts, error=j.error,
                         agent=j.agent, bundle_digest=j.bundle_digest, created_at=j.created_at,
                         started_at=j.started_at, finished_at=j.finished_at) for j, dc in jobs],
    )


def list_series(session: Session, *, limit: int = 500, device_class: str | None = None,
                metric: str | None = None) -> list[SeriesSummary]:
    """Every series (or those of one device class and/or metric), by case id then device class,
    with its number of measured commits and the median at the newest of them."""
    wanted = sa.select(Series.id)
    if device_class is not None:
        wanted = wanted.join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id) \
            .where(DeviceClassRow.name == device_class)
    if metric is not None:
        wanted = wanted.where(Series.metric == metric)
    scoped = device_class is not None or metric is not None
    # hardware counters' series (pipeline.contracts.counters) hold single values, not measurements: listed
    # when asked for by metric only
    return _series_summaries(session, limit=limit, series_ids=wanted.scalar_subquery() if scoped else None,
                             hide_counters=metric is None)


def get_series(session: Session, series_id: int) -> SeriesSummary | None:
    """One series' summary; None when there is no such series."""
    found = _series_summaries(session, limit=1, series_ids=series_id)
    return found[0] if found else None


def _in_history(session: Session) -> sa.ColumnElement[bool]:
    """Whether a commit is history, as `series_history` has it: on its repository's default-branch
    history, or of a repository that has none yet (then all its commits are)."""
    on_chain: list[int] = []
    chainless: list[int] = []
    for repository_id in session.scalars(sa.select(Repository.id)):
        chain = default_branch_chain(session, repository_id)
        if chain:
            on_chain += [c.id for c in chain]
        else:
            chainless.append(repository_id)
    return sa.or_(Commit.id.in_(on_chain), Commit.repository_id.in_(chainless))


def _series_summaries(session: Session, *, limit: int, series_ids: int | sa.ScalarSelect[int] | None = None,
                      hide_counters: bool = False) -> list[SeriesSummary]:
    """The summaries of every series, of one (an id) or of a subquery's ids. The filter goes inside
    the windowed and grouped subqueries, so a page about one series or one device class ranks only
    their measurements, not the store's."""

    def scoped(column: sa.orm.InstrumentedAttribute[int]) -> sa.ColumnElement[bool]:
        if series_ids is None:
            return sa.true()
        return column == series_ids if isinstance(series_ids, int) else column.in_(series_ids)

    history = _in_history(session)
    # every measurement of each series' newest commit (rank 1): its runs are combined below
    ranked = (
        sa.select(
            Measurement.series_id, Measurement.median, Commit.sha, CaseResultRow.job_id,
            sa.func.dense_rank().over(
                partition_by=Measurement.series_id,
                order_by=[column.desc() for column in HISTORY_ORDER],
            ).label("rank"),
        )
        .join(Commit, Measurement.commit_id == Commit.id)
        .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
        .where(scoped(Measurement.series_id), history)
        .subquery()
    )
    points = (
        sa.select(Measurement.series_id, sa.func.count(sa.distinct(Measurement.commit_id)).label("points"))
        .join(Commit, Measurement.commit_id == Commit.id)
        .where(scoped(Measurement.series_id), history)
        .group_by(Measurement.series_id)
        .subquery()
    )
    rows = session.execute(
        sa.select(Series.id, Case.case_id, DeviceClassRow.name, Series.metric,
                  sa.func.coalesce(points.c.points, 0))
        .join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .outerjoin(points, points.c.series_id == Series.id)
        .where(scoped(Series.id), Series.metric.not_in(list(COUNTERS)) if hide_counters else sa.true())
        .order_by(Case.case_id, DeviceClassRow.name, Series.metric)
        .limit(limit)
    ).all()
    newest: dict[int, list[tuple[str, str, float]]] = {}
    if rows:
        for series_id, median, sha, run_id in session.execute(
            sa.select(ranked.c.series_id, ranked.c.median, ranked.c.sha, Job.run_id)
            .join(Job, Job.id == ranked.c.job_id).where(ranked.c.rank == 1)
        ):
            newest.setdefault(series_id, []).append((sha, run_id, median))
    out = []
    for row in rows:
        measured = newest.get(row[0])
        latest = (commit_level((run_id, m) for _, run_id, m in measured)[0], measured[0][0]) if measured else (None, None)
        out.append(_from_row(SeriesSummary, (*row, *latest)))
    return out


def series_history(session: Session, series_id: int) -> list[HistoryPointOut]:
    """One point per measured commit, all its runs combined (`history.commit_level`), in the order of
    history, oldest first (`history.history_order`): along its repository's default-branch history,
    as the analysis reads it, the commits off it (pull requests, working trees, ad-hoc runs of other
    branches: comparable and browsable, not history) left out; where the repository has no
    default-branch history yet, every measured commit in `HISTORY_ORDER`. Never by commit time first."""
    rows = session.execute(
        sa.select(Commit.id, Commit.sha, Commit.committed_at, Job.run_id, Measurement.median,
                  Measurement.min, Measurement.max, Measurement.n)
        .join(Measurement, Measurement.commit_id == Commit.id)
        .join(CaseResultRow, Measurement.case_result_id == CaseResultRow.id)
        .join(Job, CaseResultRow.job_id == Job.id)
        .where(Measurement.series_id == series_id)
        .order_by(Measurement.id)
    ).all()
    by_commit: dict[int, list[Any]] = {}
    for row in rows:
        by_commit.setdefault(row.id, []).append(row)
    points = []
    for measured in (by_commit[c] for c in history_order(session, by_commit.keys())):
        level, runs = commit_level((m.run_id, m.median) for m in measured)
        points.append(HistoryPointOut(sha=measured[0].sha, committed_at=measured[0].committed_at, median=level,
                                      min=min(m.min for m in measured), max=max(m.max for m in measured),
                                      n=sum(m.n for m in measured), runs=runs))
    return points


# --- commits ---------------------------------------------------------------------------------


class CommitOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    repository: str
    sha: str
    message: str
    author: str
    committed_at: datetime
    branch: str | None
    pull_request: int | None
    parents: list[str] = Field(description="parent shas, first parent first")


class CommitDetailOut(CommitOut):
    on_default_branch: bool = Field(description="on the first-parent chain of the default-branch head")
    runs: list[RunOut]


def _commit_summaries(session: Session, query: sa.Select[Commit, str]) -> list[CommitOut]:
    rows = session.execute(query).all()
    parents: dict[int, list[str]] = {c.id: [] for c, _ in rows}
    if parents:
        for commit_id, parent_sha in session.execute(
            sa.select(CommitParent.commit_id, CommitParent.parent_sha)
            .where(CommitParent.commit_id.in_(list(parents))).order_by(CommitParent.commit_id, CommitParent.position)
        ):
            parents[commit_id].append(parent_sha)
    return [CommitOut(repository=repo, sha=c.sha, message=c.message, author=c.author, committed_at=c.committed_at,
                      branch=c.branch, pull_request=c.pull_request, parents=parents[c.id])
            for c, repo in rows]


def list_commits(session: Session, *, repository: str | None = None, branch: str | None = None,
                 limit: int = 100) -> list[CommitOut]:
    """Recorded commits, newest first (`history.HISTORY_ORDER`: by ancestry, then commit time),
    optionally of one repository and one branch."""
    query = sa.select(Commit, Repository.name).join(Repository, Commit.repository_id == Repository.id)
    if repository is not None:
        query = query.where(Repository.name == repository)
    if branch is not None:
        query = query.where(Commit.branch == branch)
    return _commit_summaries(session, query.order_by(*(column.desc() for column in HISTORY_ORDER)).limit(limit))


def find_commits(session: Session, sha: str, *, repository: str | None = None) -> list[CommitOut]:
    """The commits with that sha (one per repository that recorded it)."""
    query = sa.select(Commit, Repository.name).join(Repository, Commit.repository_id == Repository.id).where(
        Commit.sha == sha)
    if repository is not None:
        query = query.where(Repository.name == repository)
    return _commit_summaries(session, query.order_by(Repository.name))


def commit_runs(session: Session, *, repository: str, sha: str) -> list[RunOut]:
    """The runs of one commit, newest first."""
    rows = session.execute(_run_query().where(Repository.name == repository, Commit.sha == sha)
                           .order_by(Run.created_at.desc(), Run.id))
    return [_run_summary(*row) for row in rows]


def commit_detail(session: Session, commit: CommitOut) -> CommitDetailOut:
    """One commit (of `find_commits`) with its runs and whether it is on the default-branch history."""
    repository_id = session.scalar(sa.select(Repository.id).where(Repository.name == commit.repository))
    on_default = repository_id is not None and any(
        c.sha == commit.sha for c in default_branch_chain(session, repository_id))
    return CommitDetailOut(**dict(commit), on_default_branch=on_default,
                           runs=commit_runs(session, repository=commit.repository, sha=commit.sha))


# --- change points, regressions, dashboard ---------------------------------------------------


Lifecycle = Literal["suspected", "confirmed", "retracted"]
if set(get_args(Lifecycle)) != set(LIFECYCLE):
    raise RuntimeError("queries.Lifecycle differs from states.LIFECYCLE")


class ChangePointOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    series_id: int
    case_id: CaseIdAsText
    family: str
    device_class: str
    metric: str
    direction: str = Field(description="regression | improvement, in the series' direction")
    state: str
    magnitude: float = Field(description="after_level / before_level - 1")
    pvalue: float
    before_level: float
    after_level: float
    before_sha: str = Field(description="the commit range is (before_sha, after_sha]")
    after_sha: str
    committed_at: datetime
    detected_at: datetime
    history_index: int
    open: bool = Field(description="open triage state, not retracted, after the series' newest intended change point")
    lifecycle: Lifecycle = Field(description="suspected (the newest commits left their level, or the detector "
                                 "reports it and it is not confirmed yet) | confirmed (what alerts announce) | "
                                 "retracted (later data refute it)")
    reason: str = Field(description="why it was retracted; empty otherwise")
    retracted_at: datetime | None


class ChangePointDetailOut(ChangePointOut):
    events: list[TriageEventOut] = Field(description="triage history, oldest first; the last is the current state")
    bisection: BisectionView | None = Field(None, description="its newest bisection (the active one when there is "
                                            "one): the steps, and the culprit once found")


# The series' reference level: its newest intended change point's new level.
class BaselineOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    change_point_id: int
    sha: str
    level: float


class SeriesSettingsOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    min_magnitude: float | None = Field(description="None: the analysis settings' minimum magnitude")
    lower_is_better: bool = Field(description="the series' direction (its own setting or its metric's)")
    lower_is_better_override: bool | None


class SeriesDetailOut(SeriesSummary):
    settings: SeriesSettingsOut
    baseline: BaselineOut | None = Field(description="the newest intended change point: the series' reference level")
    history: list[HistoryPointOut]
    change_points: list[ChangePointOut]
    counters: CounterHistoryOut = Field(description="the hardware counters of the series' case on its device class, "
                                                    "commit by commit along the same history, and their steps "
                                                    "(`GET /counter-series`)")


def _after_commit_order() -> list[sa.ScalarSelect[Any]]:
    """A change point's place in history: its after commit's, in `HISTORY_ORDER` (not its commit time)."""
    return [sa.select(column).where(Commit.id == ChangePoint.after_commit_id).scalar_subquery()
            for column in HISTORY_ORDER]


def _baselines() -> sa.Subquery:
    """series id -> the first-parent generation of its newest intended change point's commit."""
    after = sa.orm.aliased(Commit)
    return (sa.select(ChangePoint.series_id, sa.func.max(after.generation).label("since"))
            .join(after, ChangePoint.after_commit_id == after.id)
            .where(ChangePoint.state == "intended", ChangePoint.lifecycle != "retracted")
            .group_by(ChangePoint.series_id).subquery("baselines"))


def _is_open(baselines: sa.Subquery) -> sa.ColumnElement[bool]:
    """Open: an open triage state, not retracted, after the series' newest intended change point (in
    ancestry: a later first-parent generation of the series' history, not a later commit time)."""
    return sa.and_(ChangePoint.state.in_(OPEN_STATES), ChangePoint.lifecycle != "retracted",
                   sa.or_(baselines.c.since.is_(None), _after_commit_order()[0] > baselines.c.since))


def _change_point_query() -> tuple[Any, sa.ColumnElement[bool]]:
    """The select of `ChangePointOut`'s fields (in its order), and its "open" condition."""
    before = sa.orm.aliased(Commit)
    after = sa.orm.aliased(Commit)
    baselines = _baselines()
    is_open = _is_open(baselines)
    return (
        sa.select(ChangePoint.id, ChangePoint.series_id, Case.case_id, Case.family, DeviceClassRow.name, Series.metric,
                  ChangePoint.direction, ChangePoint.state, ChangePoint.magnitude, ChangePoint.pvalue,
                  ChangePoint.before_level, ChangePoint.after_level, before.sha, after.sha, ChangePoint.committed_at,
                  ChangePoint.detected_at, ChangePoint.history_index, sa.case((is_open, True), else_=False),
                  ChangePoint.lifecycle, ChangePoint.reason, ChangePoint.retracted_at)
        .join(Series, ChangePoint.series_id == Series.id)
        .join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .join(before, ChangePoint.before_commit_id == before.id)
        .join(after, ChangePoint.after_commit_id == after.id)
        .outerjoin(baselines, baselines.c.series_id == ChangePoint.series_id)
    ), is_open


def series_change_points(session: Session, series_id: int) -> list[ChangePointOut]:
    """A series' change points, oldest first."""
    rows = session.execute(_change_point_query()[0].where(ChangePoint.series_id == series_id)
                           .order_by(*_after_commit_order(), ChangePoint.id))
    return [_from_row(ChangePointOut, row) for row in rows]


def get_change_point(session: Session, change_point_id: int) -> ChangePointOut | None:
    row = session.execute(_change_point_query()[0].where(ChangePoint.id == change_point_id)).one_or_none()
    return _from_row(ChangePointOut, row) if row is not None else None


def change_point_detail(session: Session, change_point_id: int) -> ChangePointDetailOut | None:
    """One change point with its triage history and its newest bisection; None when there is none."""
    found = get_change_point(session, change_point_id)
    if found is None:
        return None
    return ChangePointDetailOut(**dict(found), events=events(session, change_point_id),
                                bisection=latest_by_change_point(session, [change_point_id]).get(change_point_id))


def series_baseline(session: Session, series_id: int) -> BaselineOut | None:
    """The newest intended change point of the series (None: the series was never rebased)."""
    row = session.execute(
        sa.select(ChangePoint.id, Commit.sha, ChangePoint.after_level)
        .join(Commit, ChangePoint.after_commit_id == Commit.id)
        .where(ChangePoint.series_id == series_id, ChangePoint.state == "intended", ChangePoint.lifecycle != "retracted")
        .order_by(*(column.desc() for column in HISTORY_ORDER), ChangePoint.id.desc()).limit(1)).one_or_none()
    return _from_row(BaselineOut, row) if row is not None else None


def series_detail(session: Session, series_id: int) -> SeriesDetailOut | None:
    """One series: its summary, settings, baseline, history and change points; None when there is none."""
    summary = get_series(session, series_id)
    row = session.get(Series, series_id)
    counters = counter_history(session, case_id=summary.case_id, device_class=summary.device_class) if summary else None
    if summary is None or row is None or counters is None:
        return None
    settings = SeriesSettingsOut(min_magnitude=row.min_magnitude, lower_is_better=series_direction(row),
                                 lower_is_better_override=row.lower_is_better)
    return SeriesDetailOut(**dict(summary), settings=settings, baseline=series_baseline(session, series_id),
                           history=series_history(session, series_id),
                           change_points=series_change_points(session, series_id), counters=counters)


def list_regressions(session: Session, *, device_class: str | None = None, family: str | None = None,
                     state: str | None = None, lifecycle: str | None = None,
                     limit: int = 100) -> list[ChangePointOut]:
    """Regression change points, newest commit first: the open ones (open states, not retracted,
    not superseded by a later intended change point of their series), or, when `state` or
    `lifecycle` is given, all those in that triage state and that lifecycle (retracted included)."""
    query, is_open = _change_point_query()
    query = query.where(ChangePoint.direction == "regression")
    if state is None and lifecycle is None:
        query = query.where(is_open)
    if state is not None:
        query = query.where(ChangePoint.state == state)
    if lifecycle is not None:
        query = query.where(ChangePoint.lifecycle == lifecycle)
    if device_class is not None:
        query = query.where(DeviceClassRow.name == device_class)
    if family is not None:
        query = query.where(Case.family == family)
    rows = session.execute(query.order_by(*(column.desc() for column in _after_commit_order()),
                                          ChangePoint.id.desc()).limit(limit))
    return [_from_row(ChangePointOut, row) for row in rows]


SERIES_STATES = ("regressed", "suspected", "improved", "stable", "no data")
"""Also the order of a group's series on the dashboard: what needs attention first."""


class DashboardSeriesOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: int
    case_id: CaseIdAsText
    metric: str
    state: str = Field(description="regressed | suspected | improved | stable | no data")
    open_change_points: int


class DashboardGroupOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    family: str
    device_class: str
    counts: dict[str, int]
    """Every series of the group that passes the filters, by state (the state filter aside)."""
    series: list[DashboardSeriesOut]
    """The group's series in the asked state, regressed first, then improved, stable, no data, each
    by case id; at most `per_group` of them when a limit was asked."""


class DashboardOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    counts: dict[str, int]
    groups: list[DashboardGroupOut]


def dashboard(
    session: Session, *, device_class: str | None = None, family: str | None = None, dtype: str | None = None,
    impl: str | None = None, text: str | None = None, state: str | None = None, per_group: int | None = None,
) -> DashboardOut:
    """Every series' state, grouped by family and device class, with counts: two queries.

    A series is "no data" when its last analysis saw no default-branch commit with a measurement,
    "regressed" when it has an open confirmed regression (open state, after its newest intended
    change point), else "suspected" when its newest commits look like a regression not confirmed
    yet (an open suspected one), else "improved" when it has an open confirmed improvement, else
    "stable". Retracted change points never count. The open change
    points come from one aggregate over `change_points` (indexed by series and commit time), so
    the cost grows with series and change points, never with measurements or samples.

    Filters: exact family, device class, dtype and impl; `text` a case-insensitive part of the
    case id; `state` lists only the series in that state (the counts still give every state).
    The counts are a GROUP BY and the listed series are cut to `per_group` per group by a window
    in the database: a farm of 20,000 series sends the page the few it shows.
    """
    baselines = _baselines()
    confirmed = ChangePoint.lifecycle == "confirmed"
    is_regression = sa.case((sa.and_(ChangePoint.direction == "regression", confirmed), 1), else_=0)
    is_suspected = sa.case((sa.and_(ChangePoint.direction == "regression", ~confirmed), 1), else_=0)
    is_improvement = sa.case((sa.and_(ChangePoint.direction == "improvement", confirmed), 1), else_=0)
    open_points = (
        sa.select(ChangePoint.series_id, sa.func.max(is_regression).label("regressed"),
                  sa.func.max(is_suspected).label("suspected"),
                  sa.func.max(is_improvement).label("improved"), sa.func.count().label("open"))
        .outerjoin(baselines, baselines.c.series_id == ChangePoint.series_id)
        .where(_is_open(baselines))
        .group_by(ChangePoint.series_id).subquery("open_points")
    )
    series_state = sa.case(
        (Series.history_points == 0, "no data"),
        (open_points.c.regressed == 1, "regressed"),
        (open_points.c.suspected == 1, "suspected"),
        (open_points.c.improved == 1, "improved"),
        else_="stable",
    )
    query = (
        sa.select(Case.family, DeviceClassRow.name.label("device_class"), Series.id, Case.case_id, Series.metric,
                  series_state.label("state"), sa.func.coalesce(open_points.c.open, 0).label("open"))
        .join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .outerjoin(open_points, open_points.c.series_id == Series.id)
        .where(Series.metric.not_in(list(COUNTERS)))   # counters have no change points: shown in comparisons
    )
    for column, wanted in ((DeviceClassRow.name, device_class), (Case.family, family), (Case.dtype, dtype),
                           (Case.impl, impl)):
        if wanted is not None:
            query = query.where(column == wanted)
    if text:
        query = query.where(sa.func.lower(Case.case_id).contains(text.lower(), autoescape=True))
    board = query.subquery("board")

    groups: dict[tuple[str, str], dict[str, int]] = {}
    total = dict.fromkeys(SERIES_STATES, 0)
    for fam, dc, series_state_name, count in session.execute(
            sa.select(board.c.family, board.c.device_class, board.c.state, sa.func.count())
            .group_by(board.c.family, board.c.device_class, board.c.state)):
        groups.setdefault((fam, dc), dict.fromkeys(SERIES_STATES, 0))[series_state_name] = count
        total[series_state_name] += count

    rank = sa.case({name: i for i, name in enumerate(SERIES_STATES)}, value=board.c.state)
    columns = (board.c.family, board.c.device_class, board.c.id, board.c.case_id, board.c.metric, board.c.state,
               board.c.open)
    if per_group is None:  # every series: a plain sort, no window
        rows = sa.select(*columns).order_by(board.c.family, board.c.device_class, rank, board.c.case_id,
                                            board.c.metric)
        if state is not None:
            rows = rows.where(board.c.state == state)
    else:
        place = sa.func.row_number().over(partition_by=(board.c.family, board.c.device_class),
                                          order_by=(rank, board.c.case_id, board.c.metric)).label("place")
        listed = sa.select(*columns, place)
        if state is not None:
            listed = listed.where(board.c.state == state)
        ranked = listed.subquery("ranked")
        rows = (sa.select(*(ranked.c[c.name] for c in columns)).where(ranked.c.place <= per_group)
                .order_by(ranked.c.family, ranked.c.device_class, ranked.c.place))
    members: dict[tuple[str, str], list[DashboardSeriesOut]] = {}
    for fam, dc, series_id, case_id, metric, series_state_name, open_count in session.execute(rows):
        members.setdefault((fam, dc), []).append(
            DashboardSeriesOut(id=series_id, case_id=case_id, metric=metric, state=series_state_name,
                               open_change_points=open_count))
    out = [DashboardGroupOut(family=fam, device_class=dc, counts=counts, series=members.get((fam, dc), []))
           for (fam, dc), counts in sorted(groups.items())]
    return DashboardOut(counts=total, groups=out)
