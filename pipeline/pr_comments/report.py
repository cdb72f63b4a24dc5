"""A report: what gets posted for one head commit (and pull request), as plain data.

Rendered once from the verdict (one Comparison per device class), so that posting, keeping it in
the outbox and posting it later need neither the store nor the templates.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from pipeline.config import Settings
from pipeline.contracts.ids import CaseId
from pipeline.pr_comments.comment import (
    CodeDiff,
    CommentSettings,
    SeriesIds,
    comment_marker,
    render_comment,
)
from pipeline.pr_comments.markdown import md_url, truncate_lines
from pipeline.pr_comments.table import verdict_line
from pipeline.results.store import code, compile_stats
from pipeline.results.store.code import CodeChangeOut
from pipeline.results.store.compare import STATUSES, ComparisonOut, combine, compare
from pipeline.results.store.compile_stats import CompileComparisonOut
from pipeline.results.store.db import Session
from pipeline.results.store.runs import commit_device_classes
from pipeline.results.store.series import latency_series_ids

__all__ = ["CHECK_SUMMARY_MAX", "Report", "code_diffs_for", "conclusion_for", "make_report", "report_for_commit",
           "series_ids_for"]

CHECK_SUMMARY_MAX = 65535  # GitHub's limit on a check run's output.summary
REPORT_VERSION = 1


def conclusion_for(verdict: str, errored: int, policy: str) -> str:
    """A check run's conclusion for a verdict (`compare.overall_verdict`, the store's) and the
    number of errored rows: a regression or an error fails the check under the "fail" policy and
    is reported as neutral under "neutral"; improved or similar succeed; nothing compared (no
    baseline, insufficient data) is neutral."""
    if verdict == "regressed" or errored:
        return "failure" if policy == "fail" else "neutral"
    if verdict in ("improved", "similar"):
        return "success"
    return "neutral"


@dataclass(frozen=True)
class Report:
    repository: str          # owner/name
    head_sha: str
    pr: int | None           # None: a push; the verdict goes on the commit only
    body: str                # the comment's Markdown
    title: str               # one line: the counts
    conclusion: str          # success | failure | neutral
    details_url: str         # the full comparison page
    version: int = REPORT_VERSION

    @property
    def marker(self) -> str:
        return comment_marker(self.repository, self.pr)

    @property
    def key(self) -> str:
        """What a newer report replaces: the pull request's comment, or the commit's check."""
        return f"{self.repository}#{self.pr}" if self.pr is not None else f"{self.repository}@{self.head_sha}"

    def check_summary(self) -> str:
        return truncate_lines(self.body, CHECK_SUMMARY_MAX, "\n\n(truncated)")

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Report:
        data: dict[str, Any] = json.loads(text)
        if data.get("version") != REPORT_VERSION:
            raise ValueError(f"report version {data.get('version')!r}; this benchfarm reads {REPORT_VERSION}")
        return cls(**data)


def make_report(comparisons: Sequence[ComparisonOut], *, settings: Settings, pr: int | None = None,
                series_ids: SeriesIds | None = None, compiled: CompileComparisonOut | None = None,
                code_diffs: Sequence[CodeDiff] = ()) -> Report:
    """Render the verdict into a Report (comment body, title, conclusion by the configured policy);
    compile changes, when given, in the comment (`render_comment`), never in the conclusion or the
    title; the changed kernels' listing diffs folded in the comment."""
    gh = settings.github
    body = render_comment(comparisons, settings=CommentSettings(settings.public_url, gh.comment_top_n),
                          pr=pr, series_ids=series_ids, code_diffs=code_diffs, compiled=compiled)
    first = comparisons[0]
    verdict = combine(first.repository, first.head_sha, list(comparisons))  # the one verdict, as the store's
    return Report(
        repository=first.repository, head_sha=first.head_sha, pr=pr, body=body,
        title=f"{verdict_line(comparisons)} on {len(comparisons)} device class{'es' if len(comparisons) != 1 else ''}",
        conclusion=conclusion_for(verdict.verdict, verdict.errored, gh.verdict_policy),
        details_url=md_url(settings.public_url, "compare", {"repository": first.repository, "head": first.head_sha}),
    )


def series_ids_for(session: Session, comparisons: Sequence[ComparisonOut]) -> dict[tuple[CaseId, str], int]:
    """(case id, device class) -> the latency series' id, for the cases in `comparisons`."""
    return latency_series_ids(session, sorted({c.device_class for c in comparisons}),
                              case_ids={r.case_id for c in comparisons for r in c.rows})


def code_diffs_for(session: Session, comparisons: Sequence[ComparisonOut], *,
                   max_lines: int = CommentSettings.diff_lines) -> list[CodeDiff]:
    """The listing diff of each kernel whose code changed (`ComparisonRowOut.code`, both listings
    stored), once per case and target, those of the rows that need a look first (`STATUSES` order),
    then by case; each cut to `max_lines` lines."""
    rows = sorted((r for c in comparisons for r in c.rows), key=lambda r: (STATUSES.index(r.status), str(r.case_id)))
    changed: dict[tuple[str, str], CodeChangeOut | None] = {}
    for r in rows:
        if r.code is not None and r.code.state == "changed" and r.code.diff:
            changed.setdefault((str(r.case_id), r.target), r.code)
    texts = code.listings(session, [d for change in changed.values() if change is not None
                                    for d in (change.base_digest, change.head_digest) if d is not None])
    diffs = []
    for (case_id, target), change in changed.items():
        assert change is not None and change.base_digest is not None and change.head_digest is not None
        if change.base_digest in texts and change.head_digest in texts:
            lines, left_out = code.unified_diff(texts[change.base_digest], texts[change.head_digest],
                                                max_lines=max_lines)
            diffs.append(CodeDiff(case_id, target, change.summary, lines, left_out))
    return diffs


def report_for_commit(session: Session, *, settings: Settings, repository: str, sha: str, pr: int | None = None,
                      base_sha: str | None = None, device_classes: Sequence[str] | None = None) -> Report:
    """Compare the commit on each device class (all that ran it, by default) and render the report."""
    classes = list(device_classes or commit_device_classes(session, repository=repository, sha=sha))
    if not classes:
        raise LookupError(f"no results for {repository}@{sha[:10]} on any device class")
    comparisons = [compare(session, repository=repository, head_sha=sha, device_class=dc,
                           settings=settings.compare, base_sha=base_sha) for dc in classes]
    compiled = compile_stats.compare_compile(session, repository, head_sha=sha, base_sha=base_sha,
                                             latency_bases=(c.base_sha for c in comparisons),
                                             walk=settings.compare.ancestor_walk)
    return make_report(comparisons, settings=settings, pr=pr, series_ids=series_ids_for(session, comparisons),
                       compiled=compiled, code_diffs=code_diffs_for(session, comparisons))
