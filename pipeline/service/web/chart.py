"""The charts' data: the roofline's (log-log: FLOP/byte against FLOP/s) for uPlot in the browser
(static/roofline.js, the chart library of the series graph too), and the step charts of deterministic
figures along commits (compile statistics, hardware counters) as server-side SVG.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from markupsafe import Markup, escape

from pipeline.service.web.data import RooflinePoint
from pipeline.service.web.render import format_amount, format_rate


def roofline_chart(points: Sequence[RooflinePoint], peak_flops: float | None, peak_bytes: float | None
                   ) -> dict[str, Any] | None:
    """What static/roofline.js draws: each placed case (intensity, FLOP/s, its tooltip and series), the
    roof (bandwidth slope to the ridge, then the compute ceiling), both axes' ranges (whole decades
    around the points and the ridge, 0.2 of a decade to spare) and their decade ticks, labelled as the
    pages write rates; None when no case can be placed or a ceiling is unknown."""
    placed = [p for p in points if p.intensity]
    if not placed or not peak_flops or not peak_bytes:
        return None
    ridge = peak_flops / peak_bytes
    xs = [p.intensity or 1.0 for p in placed] + [ridge]
    ys = [p.flop_rate for p in placed] + [peak_flops]
    x_lo, x_hi = math.floor(math.log10(min(xs))) - 0.2, math.ceil(math.log10(max(xs))) + 0.2
    y_lo, y_hi = math.floor(math.log10(max(min(ys), peak_flops * 1e-6))) - 0.2, math.log10(peak_flops) + 0.3
    lo, hi = 10**x_lo, 10**x_hi
    cases = []
    for p in placed:
        intensity = p.intensity or 1.0
        share = p.share_of_roof(peak_flops, peak_bytes) or 0.0
        cases.append({"series_id": p.series_id, "case_id": str(p.case_id), "x": intensity, "y": p.flop_rate,
                      "tip": f"{p.case_id}: {format_rate(p.flop_rate, 'FLOP/s')}, {format_rate(p.byte_rate, 'B/s')}, "
                             f"{intensity:.3g} FLOP/B, {share:.0%} of the roof"})
    return {
        "cases": cases,
        "roof": {"x": [lo, ridge, hi], "y": [lo * peak_bytes, peak_flops, peak_flops]},
        "x_range": [lo, hi], "y_range": [10**y_lo, 10**y_hi],
        "x_ticks": [[10.0**d, f"{10.0**d:g}"] for d in range(math.ceil(x_lo), math.floor(x_hi) + 1)],
        "y_ticks": [[10.0**d, format_rate(10.0**d, "FLOP/s")] for d in range(math.ceil(y_lo), math.floor(y_hi) + 1)],
        "ceilings": {"flops": peak_flops, "bytes": peak_bytes, "flops_label": format_rate(peak_flops, "FLOP/s"),
                     "bytes_label": format_rate(peak_bytes, "B/s")},
    }


STEP_W, STEP_H, STEP_PAD_L, STEP_PAD_B = 760, 160, 96, 42
STEP_TICKS = 8
"""At most this many commits are named under a step chart (its first and last among them)."""


def tick_indices(count: int, most: int = STEP_TICKS) -> list[int]:
    """Which of `count` points get a label under the axis: all when they fit, else `most` spread evenly,
    the first and the last among them."""
    if count <= most:
        return list(range(count))
    return sorted({round(i * (count - 1) / (most - 1)) for i in range(most)})


def step_svg(values: Sequence[float | None], labels: Sequence[str], metric: str, unit: str,
             steps: Sequence[int] = (), ticks: Sequence[str] | None = None, css_class: str = "compile-chart") -> Markup:
    """One deterministic figure (a compile metric, a hardware counter) along the commits as a step
    line (a value holds until the next commit changes it); a commit without the figure leaves a gap.
    Each point's tooltip: commit and value. `steps`: indices of the commits where the figure changed
    (`compile_stats.compile_steps`, `counters.counter_history`), marked by a vertical line. `ticks`:
    each commit's short name, shown under the axis for a few of them (`tick_indices`); the y axis'
    figures in their unit (`format_amount`). `css_class`: the chart's kind, for the pages' style."""
    known = [v for v in values if v is not None]
    if not known:
        return Markup(f'<p class="muted small">{escape(metric)}: not reported by the compiler.</p>')
    lo, hi = min(known), max(known)
    span = (hi - lo) or max(abs(hi), 1.0) * 0.1
    lo, hi = lo - span * 0.1, hi + span * 0.1
    step = (STEP_W - STEP_PAD_L - 40) / max(len(values) - 1, 1)
    axis = STEP_H - STEP_PAD_B

    def x(i: int) -> float:
        return STEP_PAD_L + i * step

    def y(v: float) -> float:
        return 8 + (hi - v) / (hi - lo) * (axis - 8)

    parts = [f'<svg class="{escape(css_class)}" viewBox="0 0 {STEP_W} {STEP_H}" role="img" aria-label="{escape(metric)}">',
             f'<line class="grid" x1="{STEP_PAD_L}" x2="{STEP_W - 20}" y1="{axis}" y2="{axis}"/>']
    for value in sorted({max(known), min(known)}):
        parts.append(f'<text class="y-label" x="{STEP_PAD_L - 6}" y="{y(value) + 4:.1f}" text-anchor="end">'
                     f'{escape(format_amount(value, unit))}</text>')
    for i in tick_indices(len(values)) if ticks is not None else []:
        parts.append(f'<text class="x-label" x="{x(i):.1f}" y="{axis + 14}" text-anchor="middle">'
                     f'{escape(ticks[i])}</text>')
    parts.append(f'<text x="{STEP_PAD_L}" y="{STEP_H - 6}">{escape(metric)} ({escape(unit)}), by commit</text>')
    for i in steps:
        parts.append(f'<line class="step" x1="{x(i):.1f}" x2="{x(i):.1f}" y1="4" y2="{axis}">'
                     f'<title>{escape(metric)} changed at {escape(labels[i])}</title></line>')
    path: list[str] = []
    previous: float | None = None
    for i, v in enumerate(values):
        if v is None:
            if len(path) > 1:
                parts.append(f'<polyline class="line" points="{" ".join(path)}"/>')
            path, previous = [], None
            continue
        if previous is not None:
            path.append(f"{x(i):.1f},{y(previous):.1f}")
        path.append(f"{x(i):.1f},{y(v):.1f}")
        previous = v
        parts.append(f'<circle class="point" cx="{x(i):.1f}" cy="{y(v):.1f}" r="3">'
                     f'<title>{escape(labels[i])}: {escape(format_amount(v, unit))}</title></circle>')
    if len(path) > 1:
        parts.append(f'<polyline class="line" points="{" ".join(path)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
