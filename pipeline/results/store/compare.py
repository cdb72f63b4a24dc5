"""Compare a commit with its base: the pull-request verdict, a row per case and target (regressed,
improved, similar, inconclusive, unchanged...) and the one overall verdict every report uses.

Why each rule (the base, paired and unpaired tests, thresholds, identical code, vendor controls, how
the verdict counts rows): docs/design.md, "Comparison"; the statistics: `pipeline.results.analysis.stats`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy.orm import Session

from pipeline.results.analysis.stats import (
    Verdict,
    paired_estimates,
    paired_verdicts,
    threshold,
    verdicts,
)
from pipeline.config import CompareSettings
from pipeline.contracts import METRICS
from pipeline.contracts.ids import CaseId, CaseIdAsText
from pipeline.contracts.metrics import LATENCY
from pipeline.contracts.rounds import DecisionRule
from pipeline.results.store.base_choice import (
    BaseChoice,
    CompareError,
    choose_base,
    device_class_id,
    find_base,
    lookup_commit,
    older_bases,
)
from pipeline.results.store.code import CodeChangeOut, code_changes
from pipeline.results.store.compile_stats import CompileComparisonOut
from pipeline.results.store.counters import CountersOut, row_counters
from pipeline.results.store.models import (
    Case,
    CaseResultRow,
    Commit,
    DeviceClassRow,
    Job,
    Measurement,
    Repository,
    Run,
    Series,
)

__all__ = [
    "DRIFT_RATIO", "STATUSES", "STATUS_LABELS", "VERDICTS", "BaseChoice", "CompareError", "ComparisonOut",
    "DecisionRuleOut", "decision_rule",
    "ComparisonRowOut", "PRVerdictOut", "choose_base", "combine", "compare", "compare_all", "counted_status", "find_base", "only_cases", "overall_verdict",
    "paired_changes",
    "result_device_classes", "results_version", "status_label", "verdict_counts",
]

METRIC = LATENCY
STATUSES = ("regressed", "errored", "improved", "inconclusive", "insufficient data", "no baseline", "similar",
            "unchanged")
"""A row's status, in the order rows and counts are shown (terminal, PR comment, pages): what needs a
look first."""
VERDICTS = ("regressed", "improved", "inconclusive", "insufficient data", "no baseline", "similar")
"""The verdict's words, by precedence: a change found, else what could not be decided or had nothing to be
compared with (never hidden behind similar), else similar."""
STATUS_LABELS = {"unchanged": "unchanged (same binary)"}
"""How a status is shown where it needs saying why (the others are shown as they are)."""
SAME_BINARY_SKIP = "not timed: same binary"
"""How the agent's reason for a result it did not time because its binary is the base's begins."""
SAME_CODE_SKIP = "not timed: same code"
"""... and because its code is the base's (another binary: a kernel renamed, nothing else)."""
SAME_CODE_LABEL = "unchanged (same code)"
CONTROL_IMPL = "vendor"
DRIFT_RATIO = 0.5
"""A control that moved at least this fraction of a case's change, same sign, significantly: drift."""


# The documents: what the API serves, the pages and the PR comment render, `benchfarm compare`
# prints. Their fields, descriptions, defaults and docstrings are the API's OpenAPI document, which
# gives a row no defaults (every field is required): `_row` sets those a new row leaves unset.


class ComparisonRowOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    case_id: CaseIdAsText
    target: str
    model: str
    base_median: float | None = Field(description="seconds; with paired samples, the median of the paired base samples")
    head_median: float | None
    change: float | None = Field(description="relative change from the timing rounds: paired, exp(mean over the rounds of each "
                                 "round's middle-fifth mean of log(head/base)) - 1; unpaired, exp(the same of the log "
                                 "samples, head - base) - 1")
    ci_low: float | None = Field(description="lower end of the change's 95 % interval (t over the rounds)")
    ci_high: float | None = Field(description="upper end of the change's 95 % interval")
    pvalue: float | None = Field(description="two-sided p-value of no change: a t-test over the rounds (paired) or "
                                 "Welch's over both sides' rounds")
    threshold: float | None = Field(description="smallest |change| counted for this case: the minimum change, or "
                                    "noise_factor x its measured noise on the device class when larger")
    status: str = Field(description="regressed | improved | similar (the interval within +-threshold) | inconclusive "
                                    "(neither a change nor the same) | unchanged (identical binaries: never a change) "
                                    "| insufficient data | errored | no baseline")
    paired: bool = Field(description="decided by the paired test (base and head interleaved in one job)")
    same_binary: bool = Field(description="head and base timed identical binaries (equal binary digests)")
    same_code: bool = Field(description="the head's code is the base's (another binary, the same instructions, "
                                        "launch and inputs: a rename): not timed, or timed as a drift sentinel; "
                                        "unchanged whatever its timing says")
    is_control: bool = Field(description="a vendor implementation, the control of suite cases of its shape")
    control_case: CaseIdAsText | None
    control_change: float | None
    control_pvalue: float | None
    drift: bool = Field(description="probable device drift: the vendor control moved as much; not in the verdict")
    counters: CountersOut | None = Field(description="hardware counters, base against head, and what moved "
                                         "(`pipeline.results.store.counters`); beside the verdict, never part of it; None "
                                         "for a row whose head was not run (unchanged, errored)")
    code: CodeChangeOut | None = Field(description="the case's code against the base's (`pipeline.results.store.code`), for "
                                       "a row whose binaries differ; None where the binaries are the same or the head's "
                                       "bundle said nothing of its code (a vendor control, an older builder)")


def _row(case: tuple[CaseId, str], target: str, status: str, *, base_median: float | None = None,
         head_median: float | None = None, change: float | None = None, pvalue: float | None = None,
         ci_low: float | None = None, ci_high: float | None = None, threshold: float | None = None,
         paired: bool = False, same_binary: bool = False, same_code: bool = False) -> ComparisonRowOut:
    """A row of (case id, model) on a target, not yet matched with a control (`_mark_controls`)."""
    return ComparisonRowOut(
        case_id=case[0], target=target, model=case[1], base_median=base_median, head_median=head_median,
        change=change, ci_low=ci_low, ci_high=ci_high, pvalue=pvalue, threshold=threshold, status=status,
        paired=paired, same_binary=same_binary, same_code=same_code, is_control=False, control_case=None, control_change=None,
        control_pvalue=None, drift=False, counters=None, code=None)


class ComparisonOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    repository: str
    head_sha: str
    base_sha: str | None
    device_class: str
    merge_base: str | None
    base_source: str = Field(description="explicit | paired | merge base | first parent | none")
    case_bases: dict[str, str] = Field(default_factory=dict, description=(
        "case id -> the older ancestor its base result comes from, for the cases base_sha has no result of "
        "(each case is compared with the nearest ancestor that ran it; none with an explicit base)"))
    verdict: str
    errored: int
    drift: int
    paired: bool  # at least one row was decided by the paired test
    counts: dict[str, int]
    rows: list[ComparisonRowOut]


# Every device class the head has results on, and one verdict over them all.
class PRVerdictOut(BaseModel):
    model_config = ConfigDict(frozen=True)

    repository: str
    head_sha: str
    verdict: str = Field(description="regressed | improved | inconclusive | insufficient data | no baseline | similar, over "
                                     "every device class; controls left out, drift-marked and unchanged rows "
                                     "counted as similar")
    errored: int = Field(description="rows whose head result was wrong or an error (counted apart from the verdict)")
    counts: dict[str, int]
    comparisons: list[ComparisonOut]
    compile: CompileComparisonOut | None = Field(
        default=None, description="compile statistics against the base (the given one, else the first "
                                  "comparison's, else the newest ancestor with a bundle); not part of `verdict`")


def results_version(session: Session, *, repository: str, sha: str, device_class: str | None = None) -> int | None:
    """The id of the newest case result stored for the commit (on that device class, or any): it
    grows whenever the commit gets a result, so a comparison made from the same versions of its
    head and base (and the same base choice) is still right. None: no results."""
    query = (sa.select(sa.func.max(CaseResultRow.id)).join(Job, CaseResultRow.job_id == Job.id)
             .join(Run, Job.run_id == Run.id).join(Commit, Run.commit_id == Commit.id)
             .join(Repository, Commit.repository_id == Repository.id)
             .where(Repository.name == repository, Commit.sha == sha))
    if device_class is not None:
        query = query.join(DeviceClassRow, Job.device_class_id == DeviceClassRow.id).where(
            DeviceClassRow.name == device_class)
    return session.scalar(query)


def store_version(session: Session) -> tuple[int | None, ...]:
    """Changes whenever results or commits are added: the newest case result, measurement and commit
    ids (each a primary key's maximum: an index lookup on both stores)."""
    return tuple(session.execute(sa.select(
        sa.select(sa.func.max(CaseResultRow.id)).scalar_subquery(),
        sa.select(sa.func.max(Measurement.id)).scalar_subquery(),
        sa.select(sa.func.max(Commit.id)).scalar_subquery())).one())


@dataclass(frozen=True)
class _Latest:
    result_id: int
    status: str
    reason: str | None
    measurement_id: int | None
    median: float | None
    paired_base_commit_id: int | None
    round_sizes: list[int] | None
    binary_digest: str | None
    paired_binary_digest: str | None
    noise_paired: float | None
    noise_unpaired: float | None
    code_digest: str | None
    paired_code_digest: str | None


def _latest_results(session: Session, commit_id: int, device_class_id: int,
                    run_id: str | None = None) -> dict[tuple[int, str], _Latest]:
    """(cases.id, target) -> the newest case result of that commit on that device class (of that run,
    when given), with its latency measurement (and its series' learned noise) when it is ok. Newest =
    the highest id."""
    query = (
        sa.select(CaseResultRow.case_id, CaseResultRow.target, CaseResultRow.id, CaseResultRow.status,
                  CaseResultRow.reason, Measurement.id, Measurement.median, CaseResultRow.paired_base_commit_id,
                  Measurement.round_sizes, CaseResultRow.binary_digest, CaseResultRow.paired_binary_digest,
                  Series.noise_paired, Series.noise_unpaired, CaseResultRow.code_digest,
                  CaseResultRow.paired_code_digest)
        .join(Job, CaseResultRow.job_id == Job.id)
        .join(Run, Job.run_id == Run.id)
        .outerjoin(Measurement, Measurement.case_result_id == CaseResultRow.id)
        .outerjoin(Series, Measurement.series_id == Series.id)
        .where(Run.commit_id == commit_id, Job.device_class_id == device_class_id)
        .order_by(CaseResultRow.id)
    )
    rows = session.execute(query if run_id is None else query.where(Run.id == run_id)).all()
    latest: dict[tuple[int, str], _Latest] = {}
    for case_pk, target, *fields in rows:
        latest[(case_pk, target)] = _Latest(*fields)
    return latest


def _samples(session: Session, measurement_ids: list[int], *, commit_ids: list[int] | None = None,
             device_class_id: int | None = None) -> dict[int, list[float]]:
    """The samples of those measurements (of those commits on that device class, when given), in order.

    Selected through their commits and device class, then kept by id: a comparison wants nearly
    every measurement of two commits, and an IN list of thousands of ids costs more to send and
    plan than the few unwanted rows (older results of the same commits) cost to skip. Without
    commits (a few measurements of many commits: calibrations), by id.
    """
    from pipeline.contracts.arrays import from_blob  # the store's sample codec

    out: dict[int, list[float]] = {m: [] for m in measurement_ids}
    if not measurement_ids:
        return out
    query = sa.select(Measurement.id, Measurement.samples)
    if commit_ids is None:
        query = query.where(Measurement.id.in_(measurement_ids))
    else:
        query = (query.join(Series, Measurement.series_id == Series.id)
                 .where(Measurement.commit_id.in_(commit_ids), Series.device_class_id == device_class_id,
                        Series.metric == METRIC))
    for m_id, blob in session.connection().execute(query):  # Core rows: no ORM bookkeeping
        if m_id in out:
            out[m_id] = from_blob(blob)
    return out


def _paired_samples(session: Session, result_ids: list[int]) -> dict[int, list[float]]:
    from pipeline.contracts.arrays import from_blob  # the store's sample codec

    out: dict[int, list[float]] = {r: [] for r in result_ids}
    if not result_ids:
        return out
    for r_id, blob in session.connection().execute(
        sa.select(CaseResultRow.id, CaseResultRow.paired_samples).where(CaseResultRow.id.in_(result_ids))
    ):
        out[r_id] = from_blob(blob)
    return out


def paired_changes(session: Session, results: Sequence[tuple[int, int, list[int] | None]]) -> dict[int, float | None]:
    """result id -> the paired change of that stored result (`stats.paired_estimates`), for
    (case result id, its measurement id, its round sizes); None where it has no paired samples."""
    samples = _samples(session, [m for _, m, _ in results])
    paired = _paired_samples(session, [r for r, _, _ in results])
    usable = [(r, m, rounds) for r, m, rounds in results if paired[r] and len(paired[r]) == len(samples[m])]
    estimates = paired_estimates([(paired[r], samples[m], rounds) for r, m, rounds in usable])
    out: dict[int, float | None] = dict.fromkeys((r for r, _, _ in results), None)
    out.update({r: e.change for (r, _, _), e in zip(usable, estimates, strict=True)})
    return out


def _median(values: Sequence[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _mark_controls(rows: list[ComparisonRowOut], max_pvalue: float) -> list[ComparisonRowOut]:
    """Attach each suite case's vendor control and mark probable device drift (docs/design.md,
    "Comparison": vendor controls)."""
    controls: dict[tuple[str, str, str, str], ComparisonRowOut] = {}
    named: dict[tuple[str, str, str, str, str], ComparisonRowOut] = {}
    for r in rows:
        c = r.case_id
        if c.impl == CONTROL_IMPL:   # the first of each kind, and of each name: no scan per suite case
            controls.setdefault((c.family, c.shape, c.dtype, r.target), r)
            named.setdefault((c.family, c.shape, c.dtype, r.target, c.name), r)
    out = []
    for r in rows:
        c = r.case_id
        if c.impl == CONTROL_IMPL:
            out.append(r.model_copy(update={"is_control": True}))
            continue
        first = controls.get((c.family, c.shape, c.dtype, r.target))
        if first is None:
            out.append(r)
            continue
        control = named.get((c.family, c.shape, c.dtype, r.target, c.name), first)
        drift = (
            r.status in ("regressed", "improved") and r.change is not None and control.change is not None
            and control.pvalue is not None and control.pvalue <= max_pvalue
            and control.change * r.change > 0 and abs(control.change) >= DRIFT_RATIO * abs(r.change)
        )
        out.append(r.model_copy(update={"control_case": control.case_id, "control_change": control.change,
                                        "control_pvalue": control.pvalue, "drift": drift}))
    return out


def status_label(status: str, *, same_code: bool = False) -> str:
    """A status as shown to people: "unchanged (same binary)", or "unchanged (same code)" for a row
    whose code is the base's (`ComparisonRowOut.same_code`), the others as they are."""
    return SAME_CODE_LABEL if same_code and status == "unchanged" else STATUS_LABELS.get(status, status)


def counted_status(row: ComparisonRowOut) -> str | None:
    """What a row counts as in the verdict (docs/design.md, "Comparison"): None for a control (it judges the device,
    not the code); similar for a row marked drift or unchanged; else its status."""
    if row.is_control:
        return None
    if row.drift or row.status == "unchanged":
        return "similar"
    return row.status


def overall_verdict(rows: Iterable[ComparisonRowOut]) -> str:
    """One word for a set of rows (docs/design.md, "Comparison"): the first of VERDICTS that a row counts as."""
    statuses = {counted_status(r) for r in rows}
    return next((v for v in VERDICTS if v in statuses), "no baseline")


def only_cases(comparison: ComparisonOut, case_ids: set[CaseId]) -> ComparisonOut:
    """The comparison narrowed to `case_ids` (what one run ran: `--cases`, or a run of part of a
    commit), its counts and verdict those of the rows kept."""
    rows = [r for r in comparison.rows if r.case_id in case_ids]
    counts = Counter(r.status for r in rows)
    return comparison.model_copy(update={
        "rows": rows, "counts": {s: counts.get(s, 0) for s in STATUSES}, "verdict": overall_verdict(rows),
        "errored": counts.get("errored", 0), "drift": sum(r.drift for r in rows), "paired": any(r.paired for r in rows)})


def verdict_counts(rows: Iterable[ComparisonRowOut]) -> dict[str, int]:
    """How many rows of each status the verdict stands on, controls left out, drift-marked rows
    counted as "drift" (not as their regressed or improved), in STATUSES order then "drift";
    statuses with no row left out."""
    counts = Counter("drift" if r.drift else r.status for r in rows if not r.is_control)
    return {s: counts[s] for s in (*STATUSES, "drift") if counts[s]}


def compare(
    session: Session,
    *,
    repository: str,
    head_sha: str,
    device_class: str,
    settings: CompareSettings,
    base_sha: str | None = None,
    merge_base: str | None = None,
    run_id: str | None = None,
) -> ComparisonOut:
    """Compare head with its base (docs/design.md, "Comparison") on one device class.

    One row per (case, target) that head has a result for, skipped cases left out (except those
    not timed because their binary is the base's: unchanged), sorted by case and target. `run_id`:
    the head's results of that run only (a run's page and API show its own results, never a later
    run's of the same commit). Raises CompareError for an unknown repository, commit or device class.
    """
    dc_id = device_class_id(session, device_class)
    head = lookup_commit(session, repository, head_sha)
    latest = _latest_results(session, head.id, dc_id, run_id)
    head_results = {k: v for k, v in latest.items() if v.status != "skipped"}
    skipped = {k: v for k, v in latest.items() if v.status == "skipped"}

    if base_sha is not None:
        choice = BaseChoice(base_sha, merge_base, "explicit")
    else:
        paired_bases = Counter(v.paired_base_commit_id for v in head_results.values() if v.paired_base_commit_id)
        if paired_bases:
            paired_sha = session.scalar(sa.select(Commit.sha).where(Commit.id == paired_bases.most_common(1)[0][0]))
            choice = BaseChoice(paired_sha, merge_base, "paired")
        else:
            choice = choose_base(session, repository=repository, sha=head_sha, device_class=device_class,
                                 walk=settings.ancestor_walk, merge_base=merge_base)
    base = lookup_commit(session, repository, choice.sha) if choice.sha is not None else None

    base_results = {
        k: v for k, v in (_latest_results(session, base.id, dc_id) if base else {}).items()
        if v.measurement_id is not None
    }
    # a base per case: what the base did not run comes from the nearest older ancestor that ran it
    base_ids = [base.id] if base else []
    case_bases: dict[tuple[int, str], str] = {}
    older_ids: dict[tuple[int, str], int] = {}
    missing = {k for k, v in latest.items() if k not in base_results and v.paired_base_commit_id is None}
    if base is not None and choice.source != "explicit" and missing:
        for older in older_bases(session, base, dc_id, settings.ancestor_walk):
            found = {k: v for k, v in _latest_results(session, older.id, dc_id).items()
                     if k in missing and v.measurement_id is not None}
            if found:
                base_results.update(found)
                base_ids.append(older.id)
                case_bases.update({k: older.sha for k in found})
                older_ids.update({k: older.id for k in found})
                missing -= found.keys()
            if not missing:
                break
    cases = {
        pk: (case_id, model) for pk, case_id, model in session.execute(
            sa.select(Case.id, Case.case_id, Case.model).where(Case.id.in_(
                sa.select(CaseResultRow.case_id).join(Job, CaseResultRow.job_id == Job.id)
                .join(Run, Job.run_id == Run.id).where(Run.commit_id == head.id, Job.device_class_id == dc_id)))
        )
    } if latest else {}
    paired_keys = {k for k, v in head_results.items()
                   if base is not None and v.paired_base_commit_id == base.id and v.measurement_id is not None}
    wanted: list[int | None] = [v.measurement_id for k, v in head_results.items()
                                if v.measurement_id is not None and (k in base_results or k in paired_keys)]
    wanted += [base_results[k].measurement_id for k, v in head_results.items()
               if v.measurement_id is not None and k in base_results and k not in paired_keys]
    samples = _samples(session, [m for m in wanted if m is not None],
                       commit_ids=[head.id, *base_ids], device_class_id=dc_id)
    paired = _paired_samples(session, [head_results[k].result_id for k in paired_keys])
    options: dict[str, Any] = {"lower_is_better": METRICS[METRIC].lower_is_better, "max_pvalue": settings.max_pvalue,
                               "min_samples": settings.min_samples, "min_rounds": settings.min_rounds}
    shortcut = settings.same_binary_shortcut

    def same(digest: str | None, other: str | None) -> bool:
        return digest is not None and digest == other

    def measured(result: _Latest) -> list[float]:   # to_pair and to_test hold measured results only
        assert result.measurement_id is not None, result
        return samples[result.measurement_id]

    rows: list[ComparisonRowOut] = []
    to_pair: list[tuple[int, str]] = []
    to_test: list[tuple[int, str]] = []
    for key, h in head_results.items():
        b = base_results.get(key)
        if h.status in ("wrong", "error"):
            rows.append(_row(cases[key[0]], key[1], "errored", base_median=b.median if b else None))
        elif key in paired_keys:
            to_pair.append(key)
        elif b is None or h.measurement_id is None:
            rows.append(_row(cases[key[0]], key[1], "no baseline", head_median=h.median))
        else:
            to_test.append(key)
    for key, h in skipped.items():  # not timed: only the agent's "same binary (or code) as the base" makes a row
        b = base_results.get(key)
        if shortcut and b is not None and same(h.binary_digest, b.binary_digest):
            rows.append(_row(cases[key[0]], key[1], "unchanged", base_median=b.median, same_binary=True))
        elif shortcut and b is not None and (h.reason or "").startswith(SAME_CODE_SKIP):
            rows.append(_row(cases[key[0]], key[1], "unchanged", base_median=b.median, same_code=True))

    # The tests run batched: thousands of cases on a page cost milliseconds, not seconds.
    pairs = [(paired[head_results[k].result_id], measured(head_results[k]), head_results[k].round_sizes)
             for k in to_pair]
    limits = [threshold(settings.paired_min_change, head_results[k].noise_paired, settings.noise_factor,
                        floor=settings.paired_floor) for k in to_pair]
    # identical binaries timed in the same job calibrate its paired noise (stats.paired_estimates)
    calibration = [same(head_results[k].binary_digest, head_results[k].paired_binary_digest) for k in to_pair]
    kinds = ["control" if cases[k[0]][0].impl == CONTROL_IMPL else "suite" for k in to_pair]
    learned = [head_results[k].noise_paired is not None for k in to_pair]
    for key, (base_samples, head_samples, _), v in zip(
            to_pair, pairs, paired_verdicts(pairs, min_change=limits, calibration=calibration, groups=kinds,
                                            learned=learned, noise_factor=settings.noise_factor, **options),
            strict=True):
        h = head_results[key]
        rows.append(_timed_row(cases[key[0]], key[1], _median(base_samples), _median(head_samples), v,
                               same(h.binary_digest, h.paired_binary_digest), shortcut, paired=True,
                               same_code=same(h.code_digest, h.paired_code_digest)))
    sides = [((measured(base_results[k]), base_results[k].round_sizes),
              (measured(head_results[k]), head_results[k].round_sizes)) for k in to_test]
    # one run's level noise enters the test as each side's run-level variance: the series' learned one
    # (Series.noise_unpaired), else pooled over this comparison's rows (stats.run_dispersion), else (too
    # few rows) the assumed default; the threshold is a change between two runs, sqrt(2) x the learned
    # noise or the default (a fresh series is held to the assumed noise: no history says it is quieter)
    learned_noise = [head_results[k].noise_unpaired or None for k in to_test]
    # vendor controls (torch graph replays) pool their run level apart from the suite's own kernels
    groups = ["control" if cases[k[0]][0].impl == CONTROL_IMPL else "suite" for k in to_test]
    # identical binaries in both runs show what the two runs share beyond that (a loaded host)
    unchanged = [same(head_results[k].binary_digest, base_results[k].binary_digest) for k in to_test]
    limits = [threshold(settings.min_change, (n or settings.default_run_noise) * SQRT2 or None, settings.noise_factor)
              for n in learned_noise]
    for key, ((base_samples, _), (head_samples, _)), v, same_binary in zip(
            to_test, sides, verdicts(sides, min_change=limits, run_noise=learned_noise,
                                     default_run_noise=settings.default_run_noise or None, groups=groups,
                                     calibration=unchanged, noise_factor=settings.noise_factor, **options), unchanged,
            strict=True):
        rows.append(_timed_row(cases[key[0]], key[1], _median(base_samples), _median(head_samples), v,
                               same_binary, shortcut,
                               same_code=same(head_results[key].code_digest, base_results[key].code_digest)))
    rows = _mark_controls(rows, settings.max_pvalue)
    rows = _with_counters(session, rows, {
        (str(cases[k[0]][0]), k[1]): (h.result_id, (h.result_id, True) if k in paired_keys
                                      else (base_results[k].result_id, False) if k in base_results else None)
        for k, h in head_results.items() if h.status == "ok"})
    # what changed in the code, for the rows whose binaries differ (`pipeline.results.store.code`)
    key_of = {(cases[k[0]][0], k[1]): k for k in latest if k[0] in cases}
    wanted_code = [key_of[(r.case_id, r.target)] for r in rows if not r.same_binary and not r.is_control]
    changes = code_changes(session, repository, {
        k: (head.id, older_ids.get(k, base.id if base is not None else None)) for k in wanted_code})
    rows = [r.model_copy(update={"code": changes[key_of[(r.case_id, r.target)]]})
            if not r.same_binary and not r.is_control and key_of[(r.case_id, r.target)] in changes else r
            for r in rows]
    rows.sort(key=lambda r: (str(r.case_id), r.target))  # the text's order, as the store's
    counts = Counter(r.status for r in rows)
    return ComparisonOut(
        repository=repository, head_sha=head_sha, base_sha=choice.sha, device_class=device_class,
        case_bases={str(cases[k[0]][0]): sha for k, sha in sorted(case_bases.items())},
        merge_base=choice.merge_base, base_source=choice.source, verdict=overall_verdict(rows),
        errored=counts.get("errored", 0), drift=sum(r.drift for r in rows), paired=any(r.paired for r in rows),
        counts={s: counts.get(s, 0) for s in STATUSES}, rows=rows,
    )


SQRT2 = math.sqrt(2)


def _with_counters(session: Session, rows: list[ComparisonRowOut],
                   sides: dict[tuple[str, str], tuple[int, tuple[int, bool] | None]]) -> list[ComparisonRowOut]:
    """The rows with their counters (`pipeline.results.store.counters`): (case id, target) -> the head's ok result
    and its base's counters (its paired base's, or the base result's)."""
    found = row_counters(session, {f"{case}\n{target}": side for (case, target), side in sides.items()})
    return [r.model_copy(update={"counters": found.get(f"{r.case_id}\n{r.target}")}) for r in rows]


def _timed_row(case: tuple[CaseId, str], target: str, base_median: float, head_median: float, v: Verdict,
               same_binary: bool, shortcut: bool, *, paired: bool = False, same_code: bool = False) -> ComparisonRowOut:
    """A row of a timed comparison; identical binaries, or the same code in other binaries (a drift
    sentinel of a rename), under the shortcut: unchanged, whatever the timing."""
    same_code = same_code and not same_binary
    status = "unchanged" if (same_binary or same_code) and shortcut else v.status
    return _row(case, target, status, base_median=base_median, head_median=head_median, change=v.change,
                pvalue=v.pvalue, ci_low=v.ci_low, ci_high=v.ci_high, threshold=v.threshold, paired=paired,
                same_binary=same_binary, same_code=same_code and shortcut)


class DecisionRuleOut(BaseModel):
    """What an agent decides a paired job's rounds against (`pipeline.contracts.rounds.DecisionRule`)."""

    model_config = ConfigDict(frozen=True)

    device_class: str
    max_pvalue: float = Field(description="largest p-value of a change called regressed or improved")
    default_threshold: float = Field(description="threshold of a case whose paired noise is not learned yet")
    thresholds: dict[str, float] = Field(description="case id -> its threshold, for the cases whose paired noise on "
                                                     "the device class is learned (stats.threshold)")
    noise_factor: float = Field(description="a case whose noise is not learned is called regressed or improved only "
                                            "at noise_factor x the spread of its own rounds or more")

    def rule(self) -> DecisionRule:
        return DecisionRule(max_pvalue=self.max_pvalue, default_threshold=self.default_threshold,
                            thresholds=dict(self.thresholds), noise_factor=self.noise_factor)


def decision_rule(session: Session, *, device_class: str, settings: CompareSettings) -> DecisionRuleOut:
    """The thresholds the comparison will judge a paired job on this device class with (docs/design.md, "Comparison"),
    for the agent to stop each case's rounds by: every latency series of the class whose paired noise
    is learned, and the minimum for the others. An unknown device class has no learned noise."""
    rows = session.execute(
        sa.select(Case.case_id, Series.noise_paired).join(Series, Series.case_id == Case.id)
        .join(DeviceClassRow, Series.device_class_id == DeviceClassRow.id)
        .where(DeviceClassRow.name == device_class, Series.metric == METRIC, Series.noise_paired.is_not(None)))
    return DecisionRuleOut(
        device_class=device_class, max_pvalue=settings.max_pvalue, default_threshold=settings.paired_min_change,
        noise_factor=settings.noise_factor, thresholds={str(case): threshold(settings.paired_min_change, noise, settings.noise_factor,
                                         floor=settings.paired_floor) for case, noise in rows})


def result_device_classes(session: Session, *, repository: str, head_sha: str) -> list[str]:
    """Names of the device classes the commit has case results on, sorted. Raises CompareError for
    an unknown commit."""
    head = lookup_commit(session, repository, head_sha)
    return list(session.scalars(
        sa.select(DeviceClassRow.name).distinct().join(Job, Job.device_class_id == DeviceClassRow.id)
        .join(Run, Job.run_id == Run.id).join(CaseResultRow, CaseResultRow.job_id == Job.id)
        .where(Run.commit_id == head.id).order_by(DeviceClassRow.name)))


def combine(repository: str, head_sha: str, comparisons: list[ComparisonOut]) -> PRVerdictOut:
    """One verdict over the comparisons of a head on several device classes (no compile section:
    `compile_stats.compare_compile` makes it, `model_copy(update={"compile": ...})` adds it)."""
    rows = [r for c in comparisons for r in c.rows]
    counts = Counter(r.status for r in rows)
    return PRVerdictOut(repository=repository, head_sha=head_sha, verdict=overall_verdict(rows),
                        errored=counts.get("errored", 0), counts={s: counts.get(s, 0) for s in STATUSES},
                        comparisons=comparisons)


def compare_all(
    session: Session,
    *,
    repository: str,
    head_sha: str,
    settings: CompareSettings,
    base_sha: str | None = None,
    merge_base: str | None = None,
) -> PRVerdictOut:
    """`compare` on every device class the head has results on (by name), and the verdict over all rows."""
    names = result_device_classes(session, repository=repository, head_sha=head_sha)
    return combine(repository, head_sha, [
        compare(session, repository=repository, head_sha=head_sha, device_class=name, settings=settings,
                base_sha=base_sha, merge_base=merge_base) for name in names])
