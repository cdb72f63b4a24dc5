"""Read-side helpers for the web pages and the JSON API: small, typed, plain dataclasses out.

"Latest" and "history" follow commit time (committed_at), ties broken by storage order; when a
commit was measured more than once on a series, its newest measurement stands for it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
import sqlalchemy.orm
from sqlalchemy.orm import Session

from pipeline.contracts.ids import CaseIdAsText
from pipeline.store.models import (
    OPEN_STATES,
    Case,
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


@dataclass(frozen=True)
class RunSummary:
    id: str
    repository: str
    commit_sha: str
    kind: str
    status: str
    created_at: datetime
    finished_at: datetime | None
    job_count: int


@dataclass(frozen=True)
class JobSummary:
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


@dataclass(frozen=True)
class RunDetail:
    run: RunSummary
    error: str | None
    jobs: list[JobSummary]


@dataclass(frozen=True)
class SeriesSummary:
    id: int
    case_id: CaseIdAsText
    device_class: str
    metric: str
    points: int
    latest_median: float | None
    latest_commit: str | None


@dataclass(frozen=True)
class HistoryPoint:
    sha: str
    committed_at: datetime
    median: float
    min: float
    max: float
    n: int


def _run_query() -> sa.Select[tuple[Run, str, str, int]]:
    job_count = (
        sa.select(sa.func.count(Job.id)).where(Job.run_id == Run.id).correlate(Run).scalar_subquery()
    )
    return (
        sa.select(Run, Repository.name, Commit.sha, job_count)
        .join(Repository, Run.repository_id == Repository.id)
        .join(Commit, Run.commit_id == Commit.id)
    )


def _run_summary(run: Run, repository: str, sha: str, jobs: int) -> RunSummary:
    return RunSummary(run.id, repository, sha, run.kind, run.status, run.created_at, run.finished_at, jobs)


def list_runs(session: Session, *, limit: int = 50) -> list[RunSummary]:
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
        jobs=[JobSummary(j.id, dc, j.status, j.attempts, j.error, j.agent, j.bundle_digest, j.created_at,
                         j.started_at, j.finished_at) for j, dc in jobs],
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
    return _series_summaries(session, limit=limit, series_ids=wanted.scalar_subquery() if scoped else None)


def get_series(session: Session, series_id: int) -> SeriesSummary | None:
    """One series' summary; None when there is no such series."""
    found = _series_summaries(session, limit=1, series_ids=series_id)
    return found[0] if found else None


def _series_summaries(session: Session, *, limit: int,
                      series_ids: int | sa.ScalarSelect[int] | None = None) -> list[SeriesSummary]:
    """The summaries of every series, of one (an id) or of a subquery's ids. The filter goes inside
    the windowed and grouped subqueries, so a page about one series or one device class ranks only
    their measurements, not the store's."""

    def scoped(column: sa.orm.InstrumentedAttribute[int]) -> sa.ColumnElement[bool]:
        if series_ids is None:
            return sa.true()
        return column == series_ids if isinstance(series_ids, int) else column.in_(series_ids)

    ranked = (
        sa.select(
            Measurement.series_id, Measurement.median, Commit.sha,
            sa.func.row_number().over(
                partition_by=Measurement.series_id,
                order_by=(Commit.committed_at.desc(), Commit.id.desc(), Measurement.id.desc()),
            ).label("rank"),
        )
        .join(Commit, Measurement.commit_id == Commit.id)
        .where(scoped(Measurement.series_id))
        .subquery()
    )
    points = (
        sa.select(Measurement.series_id, sa.func.count(sa.distinct(Measurement.commit_id)).label("points"))
        .where(scoped(Measurement.series_id))
        .group_by(Measurement.series_id)
        .subquery()
    )
    rows = session.execute(
        sa.select(Series.id, Case.case_id, DeviceClassRow.name, Series.metric,
                  sa.func.coalesce(points.c.points, 0), ranked.c.median, ranked.c.sha)
        .join(Case, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .outerjoin(points, points.c.series_id == Series.id)
        .outerjoin(ranked, sa.and_(ranked.c.series_id == Series.id, ranked.c.rank == 1))
        .where(scoped(Series.id))
        .order_by(Case.case_id, DeviceClassRow.name, Series.metric)
        .limit(limit)
    )
    return [SeriesSummary(*row) for row in rows]


def series_history(session: Session, series_id: int) -> list[HistoryPoint]:
    """One point per measured commit, oldest commit first."""
    ranked = (
        sa.select(
            Measurement.commit_id, Measurement.median, Measurement.min, Measurement.max, Measurement.n,
            sa.func.row_number().over(partition_by=Measurement.commit_id, order_by=Measurement.id.desc()).label("rank"),
        )
        .where(Measurement.series_id == series_id)
        .subquery()
    )
    rows = session.execute(
        sa.select(Commit.sha, Commit.committed_at, ranked.c.median, ranked.c.min, ranked.c.max, ranked.c.n)
        .join(ranked, ranked.c.commit_id == Commit.id)
        .where(ranked.c.rank == 1)
        .order_by(Commit.committed_at, Commit.id)
    )
    return [HistoryPoint(*row) for row in rows]


# --- commits ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class CommitSummary:
    repository: str
    sha: str
    message: str
    author: str
    committed_at: datetime
    branch: str | None
    pull_request: int | None
    parents: list[str]


def _commit_summaries(session: Session, query: sa.Select[tuple[Commit, str]]) -> list[CommitSummary]:
    rows = session.execute(query).all()
    parents: dict[int, list[str]] = {c.id: [] for c, _ in rows}
    if parents:
        for commit_id, parent_sha in session.execute(
            sa.select(CommitParent.commit_id, CommitParent.parent_sha)
            .where(CommitParent.commit_id.in_(list(parents))).order_by(CommitParent.commit_id, CommitParent.position)
        ):
            parents[commit_id].append(parent_sha)
    return [CommitSummary(repo, c.sha, c.message, c.author, c.committed_at, c.branch, c.pull_request, parents[c.id])
            for c, repo in rows]


def list_commits(session: Session, *, repository: str | None = None, branch: str | None = None,
                 limit: int = 100) -> list[CommitSummary]:
    """Recorded commits, newest commit time first, optionally of one repository and one branch."""
    query = sa.select(Commit, Repository.name).join(Repository, Commit.repository_id == Repository.id)
    if repository is not None:
        query = query.where(Repository.name == repository)
    if branch is not None:
        query = query.where(Commit.branch == branch)
    return _commit_summaries(session, query.order_by(Commit.committed_at.desc(), Commit.id.desc()).limit(limit))


def find_commits(session: Session, sha: str, *, repository: str | None = None) -> list[CommitSummary]:
    """The commits with that sha (one per repository that recorded it)."""
    query = sa.select(Commit, Repository.name).join(Repository, Commit.repository_id == Repository.id).where(
        Commit.sha == sha)
    if repository is not None:
        query = query.where(Repository.name == repository)
    return _commit_summaries(session, query.order_by(Repository.name))


def commit_runs(session: Session, *, repository: str, sha: str) -> list[RunSummary]:
    """The runs of one commit, newest first."""
    rows = session.execute(_run_query().where(Repository.name == repository, Commit.sha == sha)
                           .order_by(Run.created_at.desc(), Run.id))
    return [_run_summary(*row) for row in rows]


# --- change points, regressions, dashboard ---------------------------------------------------


@dataclass(frozen=True)
class ChangePointSummary:
    id: int
    series_id: int
    case_id: CaseIdAsText
    family: str
    device_class: str
    metric: str
    direction: str
    state: str
    magnitude: float
    pvalue: float
    before_level: float
    after_level: float
    before_sha: str
    after_sha: str
    committed_at: datetime
    detected_at: datetime
    history_index: int
    open: bool
    """in an open state, not retracted, and after the series' newest intended change point (see `analysis`)"""
    lifecycle: str
    """suspected | confirmed | retracted (`models.LIFECYCLE`)"""
    reason: str
    """why it was retracted"""
    retracted_at: datetime | None


@dataclass(frozen=True)
class Baseline:
    """The series' reference level: its newest intended change point's new level."""

    change_point_id: int
    sha: str
    level: float


def _baselines() -> sa.Subquery:
    """series id -> commit time of its newest intended change point."""
    return (sa.select(ChangePoint.series_id, sa.func.max(ChangePoint.committed_at).label("since"))
            .where(ChangePoint.state == "intended", ChangePoint.lifecycle != "retracted")
            .group_by(ChangePoint.series_id).subquery("baselines"))


def _is_open(baselines: sa.Subquery) -> sa.ColumnElement[bool]:
    """Open: an open triage state, not retracted, after the series' newest intended change point."""
    return sa.and_(ChangePoint.state.in_(OPEN_STATES), ChangePoint.lifecycle != "retracted",
                   sa.or_(baselines.c.since.is_(None), ChangePoint.committed_at > baselines.c.since))


def _change_point_query() -> tuple[Any, sa.ColumnElement[bool]]:
    """The select of `ChangePointSummary`'s fields, and its "open" condition."""
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


def series_change_points(session: Session, series_id: int) -> list[ChangePointSummary]:
    """A series' change points, oldest first."""
    rows = session.execute(_change_point_query()[0].where(ChangePoint.series_id == series_id)
                           .order_by(ChangePoint.committed_at, ChangePoint.id))
    return [ChangePointSummary(*row) for row in rows]  # type: ignore[arg-type, call-arg]


def get_change_point(session: Session, change_point_id: int) -> ChangePointSummary | None:
    row = session.execute(_change_point_query()[0].where(ChangePoint.id == change_point_id)).one_or_none()
    return ChangePointSummary(*row) if row is not None else None  # type: ignore[arg-type, call-arg]


def series_baseline(session: Session, series_id: int) -> Baseline | None:
    """The newest intended change point of the series (None: the series was never rebased)."""
    row = session.execute(
        sa.select(ChangePoint.id, Commit.sha, ChangePoint.after_level)
        .join(Commit, ChangePoint.after_commit_id == Commit.id)
        .where(ChangePoint.series_id == series_id, ChangePoint.state == "intended", ChangePoint.lifecycle != "retracted")
        .order_by(ChangePoint.committed_at.desc(), ChangePoint.id.desc()).limit(1)).one_or_none()
    return Baseline(*row) if row is not None else None


def list_regressions(session: Session, *, device_class: str | None = None, family: str | None = None,
                     state: str | None = None, lifecycle: str | None = None,
                     limit: int = 100) -> list[ChangePointSummary]:
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
    rows = session.execute(query.order_by(ChangePoint.committed_at.desc(), ChangePoint.id.desc()).limit(limit))
    return [ChangePointSummary(*row) for row in rows]  # type: ignore[arg-type, call-arg]


SERIES_STATES = ("regressed", "suspected", "improved", "stable", "no data")
"""Also the order of a group's series on the dashboard: what needs attention first."""


@dataclass(frozen=True)
class DashboardSeries:
    id: int
    case_id: CaseIdAsText
    metric: str
    state: str
    open_change_points: int


@dataclass(frozen=True)
class DashboardGroup:
    family: str
    device_class: str
    counts: dict[str, int]
    """Every series of the group that passes the filters, by state (the state filter aside)."""
    series: list[DashboardSeries]
    """The group's series in the asked state, regressed first, then improved, stable, no data, each
    by case id; at most `per_group` of them when a limit was asked."""


@dataclass(frozen=True)
class Dashboard:
    counts: dict[str, int]
    groups: list[DashboardGroup]


def dashboard(
    session: Session, *, device_class: str | None = None, family: str | None = None, dtype: str | None = None,
    impl: str | None = None, text: str | None = None, state: str | None = None, per_group: int | None = None,
) -> Dashboard:
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
    members: dict[tuple[str, str], list[DashboardSeries]] = {}
    for fam, dc, series_id, case_id, metric, series_state_name, open_count in session.execute(rows):
        members.setdefault((fam, dc), []).append(
            DashboardSeries(series_id, case_id, metric, series_state_name, open_count))
    out = [DashboardGroup(fam, dc, counts, members.get((fam, dc), [])) for (fam, dc), counts in sorted(groups.items())]
    return Dashboard(total, out)
