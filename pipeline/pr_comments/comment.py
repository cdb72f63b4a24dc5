"""The PR comment: a verdict (one Comparison per device class) rendered from Jinja2 templates.

Sections as in docs/design.md ("PR comment"): a summary with the commits compared, "Regressed" and
"Improved" tables (the rows that count as such in the verdict, `compare.counted_status`: never a
vendor control or a row marked device drift), the rest folded in `<details>`; the headline is the
verdict of `compare.overall_verdict` and its counts; each section shows at most `top_n` rows and
links to the full comparison when it has more. A section whose rows say what changed in their code
(`ComparisonRowOut.code`) has a code column; then each changed kernel's listing diff, folded and cut
to `CommentSettings.diff_lines` lines (`CodeDiff`, at most `max_diffs` of them); the compile changes above
the footer (`_compile.md.j2`, beside the verdict, never part of it). The hidden marker on
the first line finds the comment again; the body never passes GitHub's size limit (diffs are dropped,
then rows, then lines cut, with a link to the full comparison).

Laid out for GitHub's comment column (~880 px): figures never split across lines (`md_figures`),
the device class column only when there are several, "PR" only on a pull request ("head" on a
commit), the headline's counts not repeated in a bullet of one device class.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import quote

import jinja2

from pipeline.config import GitHubSettings
from pipeline.contracts.ids import CaseId
from pipeline.pr_comments.markdown import (
    Md,
    html_text,
    md_escape,
    md_figures,
    md_link,
    md_unbroken,
    md_url,
    truncate_lines,
)
from pipeline.pr_comments.table import (
    format_figure,
    format_pvalue,
    format_seconds,
    row_change,
    row_status,
    summary_line,
    undecided_hint,
    verdict_line,
)
from pipeline.results.store.compare import (
    STATUSES,
    ComparisonOut,
    ComparisonRowOut,
    counted_status,
)
from pipeline.results.store.compile_stats import CompileComparisonOut

__all__ = ["COMMENT_MAX_CHARS", "COMPILE_ROWS", "MARKER", "CodeDiff", "CommentSettings", "comment_marker",
           "compile_section", "render_comment"]

MARKER = "<!-- benchfarm:pr-comment -->"
COMMENT_MAX_CHARS = 65536
"""GitHub's limit on a comment's body (characters): a longer one is refused."""
SeriesIds = Mapping[tuple[CaseId, str], int]  # (case id, device class) -> series id

_SECTIONS = ("Regressed", "Improved", "Inconclusive", "Other cases")


@dataclass(frozen=True)
class CommentSettings:
    public_url: str
    top_n: int = GitHubSettings.model_fields["comment_top_n"].default
    max_chars: int = COMMENT_MAX_CHARS
    max_diffs: int = 10
    """changed kernels whose listing diff the comment shows"""
    diff_lines: int = 60
    """lines of each listing diff shown (the compare page shows them all)"""


@dataclass(frozen=True)
class CodeDiff:
    """A changed kernel's code, for the comment: the unified diff of the base's and the head's
    normalized listings (`pipeline.results.store.code.unified_diff`), and how many lines were cut from it."""

    case_id: CaseId | str
    target: str
    summary: str
    lines: list[str]
    left_out: int = 0


def comment_marker(repository: str, pr: int | None) -> str:
    """The hidden first line: the fixed marker, then which pull request it is about."""
    where = f"{quote(repository, safe='/')}#{pr}" if pr is not None else quote(repository, safe="/")
    return f"{MARKER[:-4]} {where} -->"


@dataclass
class _Section:
    title: str
    folded: bool
    total: int
    rows: list[dict[str, Any]] = field(default_factory=list)
    hidden: int = 0
    code: bool = False   # a row says what changed in its code: the section has a code column


def _compare_url(public_url: str, comparison: ComparisonOut, device_class: str | None) -> str:
    return md_url(public_url, "compare", {
        "repository": comparison.repository, "head": comparison.head_sha, "base": comparison.base_sha,
        "device_class": device_class})


def _row_view(row: ComparisonRowOut, comparison: ComparisonOut, settings: CommentSettings, series_ids: SeriesIds) -> dict[str, Any]:
    series_id = series_ids.get((row.case_id, comparison.device_class))
    if series_id is not None:
        link = md_link("history", md_url(settings.public_url, f"series/{series_id}"))
    else:
        link = md_link("compare", _compare_url(settings.public_url, comparison, comparison.device_class))
    notes = ["probable device drift"] if row.drift else []
    if row.is_control:
        notes.append("vendor control")
    if note := getattr(row, "note", None):  # a field the analysis may add to rows later
        notes.append(str(note))
    if row.status == "inconclusive" and not row.is_control:
        notes.append(undecided_hint(row))
    return {
        "case": row.case_id, "device_class": md_unbroken(comparison.device_class),
        "status": md_figures(row_status(row)),
        "base": md_figures(format_seconds(row.base_median)), "head": md_figures(format_seconds(row.head_median)),
        "change": md_figures(row_change(row)), "pvalue": md_figures(format_pvalue(row.pvalue)),
        "code": md_figures(row.code.summary) if row.code is not None else "",
        "note": "; ".join(notes), "link": link,
    }


def _sections(comparisons: Sequence[ComparisonOut], settings: CommentSettings, series_ids: SeriesIds,
              limit: int) -> list[_Section]:
    pairs = [(row, c) for c in comparisons for row in c.rows]
    section_of = {"regressed": "Regressed", "improved": "Improved", "inconclusive": "Inconclusive"}
    out = []
    for title in _SECTIONS:
        folded = title == "Other cases"
        chosen = [(r, c) for r, c in pairs if section_of.get(counted_status(r) or "", "Other cases") == title]
        if title == "Regressed":   # the worst first
            chosen.sort(key=lambda p: (-(p[0].change or 0.0), str(p[0].case_id), p[1].device_class))
        elif title == "Improved":  # the best first
            chosen.sort(key=lambda p: ((p[0].change or 0.0), str(p[0].case_id), p[1].device_class))
        else:
            chosen.sort(key=lambda p: (STATUSES.index(p[0].status), str(p[0].case_id), p[1].device_class))
        shown = chosen[:limit]
        out.append(_Section(title, folded, len(chosen),
                            [_row_view(r, c, settings, series_ids) for r, c in shown], len(chosen) - len(shown),
                            code=any(r.code is not None for r, _ in shown)))
    return out


@lru_cache(maxsize=1)
def _environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(Path(__file__).parent / "templates"),
        autoescape=False,                 # HTML escaping is wrong for Markdown; md_escape is right
        finalize=md_escape,               # every {{ }} is escaped unless it is an Md
        undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True,
    )


def render_comment(
    comparisons: Sequence[ComparisonOut],
    *,
    settings: CommentSettings,
    pr: int | None = None,
    series_ids: SeriesIds | None = None,
    code_diffs: Sequence[CodeDiff] = (),
    compiled: CompileComparisonOut | None = None,
) -> str:
    """The comment's Markdown for a verdict: one Comparison per device class, of one head commit, the
    listing diffs of its changed kernels, and the compile changes (`compiled`, when any) in a section
    above the footer that counts toward the size limit but never toward the verdict."""
    if not comparisons:
        raise ValueError("a report needs at least one comparison")
    first = comparisons[0]
    ids = series_ids or {}
    bases = sorted({c.base_sha[:10] for c in comparisons if c.base_sha})
    full_url = md_url(settings.public_url, "compare", {"repository": first.repository, "head": first.head_sha})
    full_link = md_link("full comparison", full_url)
    context: dict[str, Any] = {
        "marker": Md(comment_marker(first.repository, pr)),
        "headline": Md(verdict_line(comparisons)),  # our own words and numbers
        "summary": Md(
            f"{md_escape(first.repository)} {Md('`' + first.head_sha[:10] + '`')} compared with "
            + (", ".join(f"`{b}`" for b in bases) if bases else "no stored ancestor")
            + (f" on {len(comparisons)} device classes" if len(comparisons) > 1
               else f" on {md_escape(first.device_class)}")
            + f" ({full_link})"
        ),
        # one device class: the headline is its verdict, a bullet would say it again
        "device_lines": [summary_line(c) for c in comparisons] if len(comparisons) > 1 else [],
        "show_device_class": len(comparisons) > 1,
        "head_label": "PR" if pr is not None else "head",
        "full_link": full_link,
        "code_total": len(code_diffs),
        "compile": _compile_view(compiled, settings.public_url, first.repository)
        if compiled is not None and compiled.changes and compiled.base_sha is not None else None,
        "footer": Md("benchfarm · regressed / improved: significant over the timing rounds (p) and at least the "
                     "case's threshold (the minimum change, or a multiple of its measured noise once learned); "
                     "similar: the whole 95&nbsp;% interval within ±threshold; inconclusive: neither, so not known to be "
                     "the same; unchanged (same binary): identical code, never a change; unchanged (same code): the "
                     "base's instructions in another binary (a rename); controls and device drift do not count"),
    }
    tail = Md(f"\n\n**Truncated** to fit GitHub's comment size; see the {full_link}.\n")
    template = _environment().get_template("comment.md.j2")
    diffs = [_diff_view(d) for d in code_diffs]
    most_diffs = min(len(diffs), settings.max_diffs)

    def body_with(limit: int, shown_diffs: int) -> str:
        return template.render(**context, sections=_sections(comparisons, settings, ids, limit),
                               code_diffs=diffs[:shown_diffs], code_hidden=len(diffs) - shown_diffs,
                               truncated=Md(tail.strip()) if limit < settings.top_n or shown_diffs < most_diffs
                               else "")

    def most(high: int, fits: Callable[[int], bool]) -> int:
        """The largest n in [0, high] for which fits(n) (bisection; fits(0) is taken as given)."""
        low = 0
        while low < high:
            middle = (low + high + 1) // 2
            low, high = (middle, high) if fits(middle) else (low, middle - 1)
        return low

    def fits(body: str) -> bool:
        return len(body) <= settings.max_chars

    body = body_with(settings.top_n, most_diffs)
    if not fits(body):   # the diffs go first, then rows per section
        shown = most(most_diffs - 1, lambda n: fits(body_with(settings.top_n, n)))
        limit = settings.top_n if shown or fits(body_with(settings.top_n, 0)) else \
            most(settings.top_n - 1, lambda n: fits(body_with(n, 0)))
        body = body_with(limit, shown)
    return truncate_lines(body, settings.max_chars, tail)   # only when even the headers do not fit


COMPILE_ROWS = 10
"""Compile changes listed in a report before the link to the rest."""


def _compile_view(compiled: CompileComparisonOut, public_url: str, repository: str) -> dict[str, Any]:
    """The compile section as `_compile.md.j2` shows it: the first `COMPILE_ROWS` changes, a link to all
    (none without a base)."""
    changes = compiled.changes if compiled.base_sha is not None else []
    link = ""
    if len(changes) > COMPILE_ROWS and compiled.base_sha is not None:
        link = md_link("all compile changes", md_url(public_url, "api/v1/compile-series/compare", {
            "repository": repository, "head": compiled.head_sha, "base": compiled.base_sha}))
    return {
        "summary": Md(compiled.summary),   # our own words and numbers
        "base": (compiled.base_sha or "")[:10],
        "rows": [{"case_id": c.case_id, "target": c.target, "metric": c.metric, "base": format_figure(c.base),
                  "head": format_figure(c.head), "change": f"{c.change:+.1%}" if c.change is not None else "-"}
                 for c in changes[:COMPILE_ROWS]],
        "hidden": max(0, len(changes) - COMPILE_ROWS), "link": link,
    }


def compile_section(compiled: CompileComparisonOut, *, public_url: str, repository: str) -> str:
    """The compile section alone (`benchfarm compare --format markdown` of a build-only head): the
    changes folded under their summary line, or the summary line alone when nothing changed."""
    return _environment().get_template("_compile.md.j2").render(
        compile=_compile_view(compiled, public_url, repository))


def _diff_view(diff: CodeDiff) -> dict[str, Any]:
    """A diff as the template shows it: its title for a `<summary>`, its lines in a fence longer than
    any run of backticks they hold (a listing cannot close it)."""
    text = "\n".join(_CONTROL_CHARACTERS.sub("", line) for line in diff.lines)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    return {"title": html_text(f"{diff.case_id} on {diff.target}: {diff.summary}"),
            "fence": Md("`" * max(3, longest + 1)), "text": Md(text), "left_out": diff.left_out}


_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
