"""The comparison table as people read it in a terminal; the PR comment and the pages reuse the formatters.

Every word and count comes from `pipeline.store.compare` (one status vocabulary, one verdict):
the verdict is `overall_verdict`, the counts `verdict_counts`, a status is shown by `status_label`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence

from rich import box
from rich.console import Console, ConsoleOptions, RenderResult
from rich.table import Table
from rich.text import Text

from pipeline.store.compare import (
    STATUSES,
    ComparisonOut,
    ComparisonRowOut,
    overall_verdict,
    status_label,
    verdict_counts,
)
from pipeline.store.compile_stats import CompileComparisonOut

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


def row_status(row: ComparisonRowOut) -> str:
    """A row's status as shown: its label, and why it does not count when it does not; an inconclusive
    row with the threshold band its interval did not fit."""
    label = status_label(row.status)
    if row.status == "inconclusive" and row.threshold is not None:
        label = f"{label} ({format_threshold(row.threshold)})"
    if row.is_control:
        return f"{label} (control)"
    return f"{label} (device drift)" if row.drift else label


def counts_text(rows: Iterable[ComparisonRowOut]) -> str:
    """"2 regressed, 1 errored, 3 similar, 1 device drift; 2 controls": the rows the verdict stands
    on (`verdict_counts`), then the controls apart."""
    rows = list(rows)
    counts = verdict_counts(rows)
    parts = [f"{counts[s]} {status_label(s)}" for s in STATUSES if counts.get(s)]
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


def summary_line(comparison: ComparisonOut) -> str:
    base = comparison.base_sha[:10] if comparison.base_sha else "no stored ancestor"
    return f"{comparison.device_class}: {comparison.head_sha[:10]} vs {base} — {verdict_line([comparison])}"


NARROW_CASE_MIN = 28
"""The narrowest case column the narrow layout keeps: a family and a name fit on its first line."""
_WIDE_FRAME = 3
"""Per column of the wide table (the default box): its divider and one space each side; plus one edge."""
_NARROW_GAP = 3
"""Between two columns of the narrow table: one space each side of the (blank) divider, no edges."""


class ComparisonTable:
    """A comparison laid out for the width it is printed at (`terminal_table`). Wide enough, one line
    a case with every figure: base, now, change [95 % interval], p, verdict. Narrower (80 columns):
    still one row a case, the case id wrapped at its '/' (never cut, never shrunk away) beside base,
    now, the change and the verdict, which are never cut either; the interval goes first, then p,
    and a long verdict wraps at its parenthesis."""

    def __init__(self, comparison: ComparisonOut) -> None:
        self.comparison = comparison

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        yield self.table(options.max_width)

    def table(self, width: int) -> Table:
        """The table as it fits `width` columns."""
        rows = sorted(self.comparison.rows, key=lambda r: (STATUSES.index(r.status), str(r.case_id)))
        ids = [str(r.case_id) for r in rows]
        base = [format_seconds(r.base_median) for r in rows]
        now = [format_seconds(r.head_median) for r in rows]
        change = [format_change(r.change) for r in rows]
        interval = [row_change(r) for r in rows]
        verdict = [row_status(r) for r in rows]
        styles = [STATUS_STYLE.get(r.status, "") for r in rows]
        title = summary_line(self.comparison)

        wide = [("case", ids), ("base", base), ("now", now), ("change [95% CI]", interval),
                ("p", [format_pvalue(r.pvalue) for r in rows]), ("verdict", verdict)]
        if sum(_width(h, c) for h, c in wide) + _WIDE_FRAME * len(wide) + 1 <= width:
            table = Table(title=title, title_justify="left")
            for header, _ in wide:
                table.add_column(header, justify="left" if header in ("case", "verdict") else "right", no_wrap=True)
            for i in range(len(rows)):
                table.add_row(*(Text(cells[i], style=styles[i] if header == "verdict" else "")  # Text: no markup
                                for header, cells in wide))
            return table

        # Narrow: the first of these that leaves the case column room for a family and a name.
        wrapped_verdict = [v.replace(" (", "\n(") for v in verdict]
        layouts = [("change [95% CI]", interval, verdict, ""), ("change", change, verdict, "95 % intervals"),
                   ("change", change, wrapped_verdict, "95 % intervals")]
        for change_header, change_cells, verdict_cells, left_out in layouts:
            figures = [("base", base), ("now", now), (change_header, change_cells), ("verdict", verdict_cells)]
            case_width = width - sum(_width(h, c) for h, c in figures) - _NARROW_GAP * len(figures)
            if case_width >= min(NARROW_CASE_MIN, _width("case", ids)):
                break
        case_width = max(case_width, 1)
        left_out = ", ".join(x for x in (left_out, "p-values") if x)
        table = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False,
                      caption=f"{left_out} left out at this width: a wider terminal shows them",
                      caption_justify="left")
        table.add_column("case", width=case_width, no_wrap=True)
        for header, cells in figures:
            table.add_column(header, width=_width(header, cells), no_wrap=True,
                             justify="left" if header == "verdict" else "right")
        for i in range(len(rows)):
            table.add_row(Text(_fold_id(ids[i], case_width)),
                          *(Text(cells[i], style=styles[i] if header == "verdict" else "") for header, cells in figures))
        return table


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


def terminal_table(comparison: ComparisonOut) -> ComparisonTable:
    """The comparison for a terminal: rows by status (regressed first), laid out for its width."""
    return ComparisonTable(comparison)


def compile_table(compiled: CompileComparisonOut) -> Table:
    """The compile figures that changed between the two commits (beside the verdict, not in it)."""
    table = Table(title=f"compile statistics: {compiled.summary} (not part of the verdict)", title_justify="left")
    table.add_column("case", overflow="fold", ratio=1)
    table.add_column("target", no_wrap=True)
    table.add_column("metric", no_wrap=True)
    for column in ("base", "now", "change"):
        table.add_column(column, justify="right", no_wrap=True)
    for c in compiled.changes:
        table.add_row(Text(str(c.case_id)), Text(c.target), c.metric, "-" if c.base is None else f"{c.base:g}",
                      "-" if c.head is None else f"{c.head:g}", "-" if c.change is None else f"{c.change:+.1%}")
    return table
