"""The comparison of a head commit with its base: the pull-request verdict."""

from __future__ import annotations

from fastapi import APIRouter, HTTPException

from pipeline.service.api.deps import SessionDep, SettingsDep
from pipeline.service.api.schemas import ErrorBody
from pipeline.service.api.strict_route import StrictJsonRoute
from pipeline.results.store.commit_refs import FULL_SHA_LENGTH, CommitRefError, resolve_commit
from pipeline.results.store.compare import (
    CompareError,
    DecisionRuleOut,
    PRVerdictOut,
    combine,
    compare,
    compare_all,
    decision_rule,
)
from pipeline.results.store.compile_stats import compare_compile

router = APIRouter(route_class=StrictJsonRoute, tags=["compare"])


@router.get(
    "/compare", response_model=PRVerdictOut, summary="Compare a head commit with its base: per case and overall verdict",
    description="Base: `base` when given; else the base the head's job ran paired with; else the newest "
                "first-parent ancestor of the merge base (`merge_base`, or the first default-branch commit on the "
                "head's first-parent chain) with results on the device class. The unit of replication is the "
                "timing round (its level: the mean of its middle fifth, in logs): paired results are judged by a "
                "t-test over the rounds' log ratios, others by Welch's t-test over both sides' round levels; each change comes with its 95 % interval "
                "(ci_low, ci_high) and counts only when significant and at least the case's threshold. Identical "
                "binaries are `unchanged`. Without `device_class`, every device class the head has results on. "
                "`compile`: the compile statistics that differ from the base's (binary size, registers, spills, "
                "shared bytes), a section of its own: it never changes the verdict. Each row whose binaries differ "
                "carries `code`: what changed in its code against the base's (the instruction count and the opcodes "
                "that moved most, registers, spills, shared bytes; `same code` for a rename, which is `unchanged`; "
                "`not disassembled` with the reason for a target no disassembler reads). `head`, `base` and `merge_base` "
                "take a full sha or a prefix of 4 or more hex digits that names one recorded commit.",
    responses={404: {"model": ErrorBody}},
)
def compare_commits(
    session: SessionDep, settings: SettingsDep, repository: str, head: str, device_class: str | None = None,
    base: str | None = None, merge_base: str | None = None,
) -> PRVerdictOut:
    def full(ref: str) -> str:   # a whole sha goes as it is: compare says what it lacks
        return ref if len(ref) == FULL_SHA_LENGTH else resolve_commit(session, ref, repository=repository)[1]

    try:
        head, base, merge_base = full(head), base and full(base), merge_base and full(merge_base)
    except CommitRefError as exc:
        raise HTTPException(404, str(exc)) from None
    try:
        if device_class is None:
            result = compare_all(session, repository=repository, head_sha=head, settings=settings.compare,
                                 base_sha=base, merge_base=merge_base)
        else:
            one = compare(session, repository=repository, head_sha=head, device_class=device_class,
                          settings=settings.compare, base_sha=base, merge_base=merge_base)
            result = combine(repository, head, [one])
    except CompareError as exc:
        raise HTTPException(404, str(exc)) from None
    compiled = compare_compile(session, repository, head_sha=head, base_sha=base,
                               latency_bases=(c.base_sha for c in result.comparisons),
                               walk=settings.compare.ancestor_walk)
    return result.model_copy(update={"compile": compiled})


@router.get(
    "/compare/decision-rule", response_model=DecisionRuleOut,
    summary="The thresholds a paired job on a device class is judged by, for an agent to stop its rounds on",
    description="Each case is timed until its three-way verdict is decided (regressed or improved: significant, p <= "
                "max_pvalue, and at least its threshold; similar: the change's 95 % interval within +-threshold), up "
                "to a cap: an agent asks this before a paired job. `thresholds` lists the cases whose paired noise "
                "on the class is learned; the others take `default_threshold`.")
def compare_decision_rule(session: SessionDep, settings: SettingsDep, device_class: str) -> DecisionRuleOut:
    return decision_rule(session, device_class=device_class, settings=settings.compare)
