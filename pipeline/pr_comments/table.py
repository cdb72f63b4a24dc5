"""The comparison table as people read it in a terminal; the PR comment and the pages reuse the formatters.

Every word and count comes from `pipeline.results.store.compare` (one status vocabulary, one verdict):
the verdict is `overall_verdict`, the counts `verdict_counts`, a status is shown by `status_label`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from pipeline.results.store.compare import (
    STATUSES,
    ComparisonOut,
    ComparisonRowOut,
    overall_verdict,
    status_label,
    verdict_counts,
)
from pipeline.results.store.compile_stats import CompileComparisonOut

STATUS_STYLE = {
    "regressed": "bold red",
    "improved": "bold green",
    "similar": "dim",
    "inconclusive": "bold yellow",
    "unchanged": "dim",
    "insufficient data": "yellow",
    "errored": "bold magenta",
    "no baseline": "cyan",
}


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def format_figure(value: float | None) -> str:
    """A compile figure as counted: "4096", not "4096.0" (the documents carry every figure as a float,
    the API's `number`; bytes, registers and spills are whole); "-" for none."""
    if value is None:
        return "-"
    return str(int(value)) if float(value).is_integer() else str(value)


def format_change(change: float | None, ci_low: float | None = None, ci_high: float | None = None) -> str:
    """"+3.1 %", and with its interval "+3.1 % [+2.4, +3.8]"; "-" for none."""
    if change is None:
        return "-"
    text = f"{change * 100:+.1f} %"
    if ci_low is not None and ci_high is not None:
        text += f" [{ci_low * 100:+.1f}, {ci_high * 100:+.1f}]"
    return text


def row_change(row: ComparisonRowOut) -> str:
    """A row's change with its 95 % interval."""
    return format_change(row.change, row.ci_low, row.ci_high)


def format_pvalue(pvalue: float | None) -> str:
    return "-" if pvalue is None else f"{pvalue:.2g}"


def format_threshold(threshold: float | None) -> str:
    """"+-0.5 %": the band a change must leave to count and a same must stay within."""
    return "-" if threshold is None else f"±{threshold * 100:.2g} %"


COUNTERS_SHOWN = ("regressed", "improved", "inconclusive")
"""Rows whose status is shown with what their hardware counters did (`pipeline.results.store.counters`)."""


def row_counters(row: ComparisonRowOut) -> str | None:
    """What the hardware counters of a regressed, improved or inconclusive row did ("DRAM bytes +18 %,
    instructions +0 %"), where both sides have counters; else None."""
    counters = row.counters
    if row.status not in COUNTERS_SHOWN or counters is None or counters.summary.startswith("no "):
        return None
    return counters.summary


def row_status(row: ComparisonRowOut) -> str:
    """A row's status as shown: its label, and why it does not count when it does not; an inconclusive
    row with the threshold band its interval did not fit; what its hardware counters did (`row_counters`)."""
    label = status_label(row.status, same_code=row.same_code)
    if row.status == "inconclusive" and row.threshold is not None:
        label = f"{label} ({format_threshold(row.threshold)})"
    moved = row_counters(row)
    if moved is not None:
        label = f"{label}; {moved}"
    if row.is_control:
        return f"{label} (control)"
    return f"{label} (device drift)" if row.drift else label


def counts_text(rows: Iterable[ComparisonRowOut]) -> str:
    """"2 regressed, 1 errored, 3 similar, 1 device drift; 2 controls": the rows the verdict stands
    on (`verdict_counts`), then the controls apart."""
    rows = list(rows)
    counts = verdict_counts(rows)
    # unchanged rows are told apart: the same binary, or the same code in another binary
    same_code = sum(r.same_code for r in rows if r.status == "unchanged" and not r.is_control and not r.drift)
    counts["unchanged"] = counts.get("unchanged", 0) - same_code
    parts = [f"{counts[s]} {status_label(s)}" for s in STATUSES if counts.get(s)]
    if same_code:   # unchanged is the last status
        parts.append(f"{same_code} {status_label('unchanged', same_code=True)}")
    if counts.get("drift"):
        parts.append(f"{counts['drift']} device drift")
    text = ", ".join(parts) or "no cases"
    controls = sum(r.is_control for r in rows)
    return text + (f"; {controls} control{'s' if controls != 1 else ''}" if controls else "")


def undecided_hint(row: ComparisonRowOut) -> str:
    """What would decide an inconclusive row: why its interval says neither, and what narrows it."""
    if row.ci_low is None or row.ci_high is None or row.threshold is None:
        return "not tested"
    width = (row.ci_high - row.ci_low) * 100
    band = format_threshold(row.threshold)
    if width > 2 * row.threshold * 100:
        return (f"interval {width:.2g} points wide, wider than the {band} band: more rounds (measurement.rounds, "
                "timing_budget_s) or a quieter device would decide it")
    return (f"interval reaches past {band} though the change is not significant or under it: more rounds "
            "would decide it")


def verdict_line(comparisons: Sequence[ComparisonOut]) -> str:
    """"regressed: 2 regressed, 5 similar" over the rows of every comparison."""
    rows = [r for c in comparisons for r in c.rows]
    return f"{overall_verdict(rows)}: {counts_text(rows)}" if rows else "no cases"


def change_note(paired: bool) -> str:
    """What the change is, said wherever the medians stand beside it: not now/base of those medians,
    which can differ from it, even in sign (issue 34: "base 60.7 ms, now 61.3 ms, -1.5 %")."""
    source = ("each timing round's head/base ratio, base and head timed interleaved (paired)" if paired
              else "the timing rounds' levels (each round's middle fifth), head against base")
    return (f"change: from {source}; base and now are medians of all samples, so now/base can differ from the "
            "change, even in sign")


def summary_line(comparison: ComparisonOut) -> str:
    base = comparison.base_sha[:10] if comparison.base_sha else "no stored ancestor"
    return f"{comparison.device_class}: {comparison.head_sha[:10]} vs {base} — {verdict_line([comparison])}"


NARROW_CASE_MIN = 28
"""The narrowest case column the narrow layout keeps: a family and a name fit on its first line."""
_WIDE_FRAME = 3
"""Per column of the wide table (the default box): its divider and one space each side; plus one edge."""
_NARROW_GAP = 3
"""Between two columns of the narrow table: one space each side of the (blank) divider, no edges."""

Column = tuple[str, list[str]]
"""A column as laid out: its header and its cells, one a row ("\n" between the lines of one)."""


class FittedTable:
    """A table laid out for the width it is printed at: `layout(width)` makes it."""

    def __init__(self, layout: Callable[[int], Table]) -> None:
        self.layout = layout

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.layout(options.max_width)


def _fits_wide(columns: Sequence[Column], width: int) -> bool:
    return sum(_width(h, c) for h, c in columns) + _WIDE_FRAME * len(columns) + 1 <= width


def _wide_table(title: str, columns: Sequence[Column], styles: Sequence[str], *, styled: str,
                left: Sequence[str], caption: str | None = None) -> Table:
    """One line a row, every column whole (the caller checked that it fits: `_fits_wide`)."""
    table = Table(title=title, title_justify="left", caption=caption, caption_justify="left")
    for header, _ in columns:
        table.add_column(header, justify="left" if header in left else "right", no_wrap=True)
    for i, style in enumerate(styles):
        table.add_row(*(Text(cells[i], style=style if header == styled else "")  # Text: no markup in a case id
                        for header, cells in columns))
    return table


def _narrow_table(title: str, ids: Sequence[str], figures: Sequence[Column], styles: Sequence[str], width: int, *,
                  styled: str, left: Sequence[str], caption: str | None = None) -> Table:
    """The case column takes what the figures leave of `width`, its ids wrapped (`_fold_id`); the
    figures are never cut. Blank dividers, no edges: the columns' room goes to their contents."""
    case_width = max(width - sum(_width(h, c) for h, c in figures) - _NARROW_GAP * len(figures), 1)
    table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                  caption=caption, caption_justify="left")
    table.add_column("case", width=case_width, no_wrap=True)
    for header, cells in figures:
        table.add_column(header, width=_width(header, cells), no_wrap=True,
                         justify="left" if header in left else "right")
    for i, style in enumerate(styles):
        table.add_row(Text(_fold_id(ids[i], case_width)),
                      *(Text(cells[i], style=style if header == styled else "") for header, cells in figures))
    return table


def _comparison_table(comparison: ComparisonOut, width: int) -> Table:
    """Wide enough, one line a case with every figure: base, now, change [95 % interval], p, verdict.
    Narrower (80 columns): still one row a case, its id wrapped (never cut, never shrunk away) beside
    base, now, the change and the verdict, never cut either; the interval goes first, then p, and a
    long verdict wraps at its parenthesis. Under either, what the change is (`change_note`)."""
    rows = sorted(comparison.rows, key=lambda r: (STATUSES.index(r.status), str(r.case_id)))
    ids = [str(r.case_id) for r in rows]
    base = [format_seconds(r.base_median) for r in rows]
    now = [format_seconds(r.head_median) for r in rows]
    interval = [row_change(r) for r in rows]
    verdict = [row_status(r) for r in rows]
    styles = [STATUS_STYLE.get(r.status, "") for r in rows]
    title = summary_line(comparison)
    wide = [("case", ids), ("base", base), ("now", now), ("change [95% CI]", interval),
            ("p", [format_pvalue(r.pvalue) for r in rows]), ("verdict", verdict)]
    note = change_note(comparison.paired) if any(r.change is not None for r in rows) else None
    if _fits_wide(wide, width):
        return _wide_table(title, wide, styles, styled="verdict", left=("case", "verdict"), caption=note)
    # Narrow: the first of these that leaves the case column room for a family and a name.
    change = [format_change(r.change) for r in rows]
    wrapped_verdict = [v.replace(" (", "\n(") for v in verdict]
    layouts = [("change [95% CI]", interval, verdict, ""), ("change", change, verdict, "95 % intervals"),
               ("change", change, wrapped_verdict, "95 % intervals")]
    for change_header, change_cells, verdict_cells, left_out in layouts:
        figures = [("base", base), ("now", now), (change_header, change_cells), ("verdict", verdict_cells)]
        if width - sum(_width(h, c) for h, c in figures) - _NARROW_GAP * len(figures) >= \
                min(NARROW_CASE_MIN, _width("case", ids)):
            break
    left_out = ", ".join(x for x in (left_out, "p-values") if x)
    said = f"{left_out} left out at this width: a wider terminal shows them"
    return _narrow_table(title, ids, figures, styles, width, styled="verdict", left=("verdict",),
                         caption=f"{note}\n{said}" if note else said)


def _width(header: str, cells: Sequence[str]) -> int:
    return max([len(header), *(len(line) for cell in cells for line in cell.split("\n"))])


def _fold_id(case_id: str, width: int) -> str:
    """`case_id` in lines of at most `width`, broken after a '/' (a part longer than a line after its
    '-', else anywhere), the lines after the first indented so that each case starts where nothing
    else does: every character kept, none replaced by an ellipsis."""
    indent = "  " if width > 8 else ""
    lines = [""]

    def put(piece: str) -> None:
        if lines[-1].strip() and len(lines[-1]) + len(piece) > width:
            lines.append(indent)
        lines[-1] += piece
        while len(lines[-1]) > width:
            lines[-1:] = [lines[-1][:width], indent + lines[-1][width:]]

    for part in re.findall(r"[^/]*/|[^/]+$", case_id):
        if len(indent) + len(part) <= width:
            put(part)
        else:   # longer than any line: a name's words
            for piece in re.findall(r"[^-]*-|[^-]+$", part):
                put(piece)
    return "\n".join(lines)


def terminal_table(comparison: ComparisonOut) -> FittedTable:
    """The comparison for a terminal: rows by status (regressed first), laid out for its width."""
    return FittedTable(lambda width: _comparison_table(comparison, width))


def compile_table(compiled: CompileComparisonOut) -> FittedTable:
    """The compile figures that changed between the two commits (beside the verdict, not in it), laid
    out for the terminal's width as the comparison is: narrower, the case ids wrap, no figure is cut."""

    def layout(width: int) -> Table:
        changes = compiled.changes
        ids = [str(c.case_id) for c in changes]
        figures = [("target", [c.target for c in changes]), ("metric", [c.metric for c in changes]),
                   ("base", ["-" if c.base is None else f"{c.base:g}" for c in changes]),
                   ("now", ["-" if c.head is None else f"{c.head:g}" for c in changes]),
                   ("change", ["-" if c.change is None else f"{c.change:+.1%}" for c in changes])]
        title = f"compile statistics: {compiled.summary} (not part of the verdict)"
        styles = [""] * len(changes)
        if _fits_wide([("case", ids), *figures], width):
            return _wide_table(title, [("case", ids), *figures], styles, styled="", left=("case", "target", "metric"))
        # narrower: the metric under its target, in one column, leaves the case ids room
        stacked = [("target, metric", [f"{c.target}\n{c.metric}" for c in changes]), *figures[2:]]
        return _narrow_table(title, ids, stacked, styles, width, styled="", left=("target, metric",))

    return FittedTable(layout)


def code_table(comparison: ComparisonOut) -> FittedTable | None:
    """What changed in the code of each row that says (`ComparisonRowOut.code`), under the comparison:
    its own table so the comparison keeps its columns at 80; the case ids wrap as there, the code
    summaries wrap between words. None when no row says anything of its code."""
    rows = sorted((r for r in comparison.rows if r.code is not None),
                  key=lambda r: (STATUSES.index(r.status), str(r.case_id)))
    if not rows:
        return None

    def layout(width: int) -> Table:
        ids = [str(r.case_id) for r in rows]
        case_width = max(min(_width("case", ids), max(NARROW_CASE_MIN, width // 2)), 1)
        table = Table(title=f"{comparison.device_class}: code against the base", title_justify="left",
                      box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        table.add_column("case", width=case_width, no_wrap=True)
        table.add_column("code", overflow="fold")
        for case_id, r in zip(ids, rows, strict=True):
            assert r.code is not None
            table.add_row(Text(_fold_id(case_id, case_width)), Text(r.code.summary))
        return table

    return FittedTable(layout)
