"""The comparison table as people read it in a terminal; the PR comment and the pages reuse the formatters.

Every word and count comes from `pipeline.store.compare` (one status vocabulary, one verdict):
the verdict is `overall_verdict`, the counts `verdict_counts`, a status is shown by `status_label`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

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


def terminal_table(comparison: ComparisonOut) -> Table:
    table = Table(title=summary_line(comparison), title_justify="left")
    table.add_column("case", overflow="fold", ratio=1)  # a case id is never cut short
    for column in ("base", "now", "change [95% CI]", "p"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    rows = sorted(comparison.rows, key=lambda r: (STATUSES.index(r.status), str(r.case_id)))
    for row in rows:
        table.add_row(
            Text(str(row.case_id)),  # Text(): a case name is never read as console markup
            format_seconds(row.base_median),
            format_seconds(row.head_median),
            row_change(row),
            format_pvalue(row.pvalue),
            Text(row_status(row), style=STATUS_STYLE.get(row.status, "")),
        )
    return table


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
