"""The charts' data for uPlot, drawn in the browser as the series graph is (static/series.js): the
roofline (log-log: FLOP/byte against FLOP/s, static/roofline.js) and the step charts of deterministic
figures along commits (compile statistics, hardware counters, static/steps.js).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from jinja2.utils import htmlsafe_json_dumps
from markupsafe import Markup, escape

from pipeline.results.store.roofline import RooflinePoint
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


def step_chart(values: Sequence[float | None], labels: Sequence[str], metric: str, unit: str,
               steps: Sequence[int] = (), ticks: Sequence[str] | None = None, css_class: str = "compile-chart") -> Markup:
    """One deterministic figure (a compile metric, a hardware counter) along the commits as a step
    line (a value holds until the next commit changes it), drawn by static/steps.js in uPlot; a commit
    without the figure leaves a gap. Each point's tooltip: commit and value. `steps`: indices of the
    commits where the figure changed (`compile_stats.compile_steps`, `counters.counter_history`), marked
    by a vertical line. `ticks`: each commit's short name, shown under the axis for as many as fit (the
    first and the last among them); the y axis' figures (the smallest and the largest) in their unit
    (`format_amount`).
    `css_class`: the chart's kind, for the pages' style."""
    known = [v for v in values if v is not None]
    if not known:
        return Markup(f'<p class="muted small">{escape(metric)}: not reported by the compiler.</p>')
    lo, hi = min(known), max(known)
    span = (hi - lo) or max(abs(hi), 1.0) * 0.1
    data = {
        "metric": metric, "title": f"{metric} ({unit}), by commit", "values": list(values),
        "tips": [None if v is None else f"{labels[i]}: {format_amount(v, unit)}" for i, v in enumerate(values)],
        "steps": [[i, f"{metric} changed at {labels[i]}"] for i in steps],
        "names": list(ticks) if ticks is not None else [],
        "y_ticks": [[v, format_amount(v, unit)] for v in sorted({lo, hi})],
        "y_range": [lo - span * 0.1, hi + span * 0.1],
    }
    return Markup(f'<figure class="step-chart {escape(css_class)}" role="img" aria-label="{escape(metric)}">'
                  f'<div class="step-plot"></div><div class="chart-tip" hidden></div>'
                  f'<script type="application/json">{htmlsafe_json_dumps(data)}</script></figure>')
