"""The comparison table as people read it in a terminal; the PR comment reuses the formatters."""

from __future__ import annotations

from rich.table import Table
from rich.text import Text

from pipeline.results.compare import Comparison

STATUS_STYLE = {
    "regressed": "bold red",
    "improved": "bold green",
    "similar": "dim",
    "insufficient data": "yellow",
    "errored": "bold magenta",
    "no baseline": "cyan",
}
STATUS_ORDER = ["regressed", "errored", "improved", "insufficient data", "no baseline", "similar"]


def format_seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def format_change(change: float | None) -> str:
    return "-" if change is None else f"{change * 100:+.1f}%"


def format_pvalue(pvalue: float | None) -> str:
    return "-" if pvalue is None else f"{pvalue:.2g}"


def summary_line(comparison: Comparison) -> str:
    base = comparison.base_sha[:10] if comparison.base_sha else "no stored ancestor"
    counts = ", ".join(f"{n} {status}" for status in STATUS_ORDER if (n := comparison.counts.get(status)))
    return (f"{comparison.device_class}: {comparison.head_sha[:10]} vs {base}"
            f" — {counts or 'no cases'}")


def terminal_table(comparison: Comparison) -> Table:
    table = Table(title=summary_line(comparison), title_justify="left")
    table.add_column("case", overflow="fold", ratio=1)  # a case id is never cut short
    for column in ("base", "now", "change", "p"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("verdict", no_wrap=True)
    rows = sorted(comparison.rows, key=lambda r: (STATUS_ORDER.index(r.status), r.case_id))
    for row in rows:
        table.add_row(
            Text(row.case_id),  # Text(): a case name is never read as console markup
            format_seconds(row.base_median),
            format_seconds(row.head_median),
            format_change(row.change),
            format_pvalue(row.pvalue),
            Text(row.status, style=STATUS_STYLE.get(row.status, "")),
        )
    return table
