"""A small server-side SVG of a series' history: the median per commit with its min-max range."""

from __future__ import annotations

from collections.abc import Sequence

from markupsafe import Markup, escape

from pipeline.results.queries import HistoryPoint

WIDTH, HEIGHT, PAD = 720, 220, 30


def history_svg(points: Sequence[HistoryPoint]) -> Markup:
    if not points:
        return Markup("<p>No measurements yet.</p>")
    low = min(p.min for p in points)
    high = max(p.max for p in points)
    span = (high - low) or high or 1.0
    step = (WIDTH - 2 * PAD) / max(len(points) - 1, 1)

    def y(value: float) -> float:
        return HEIGHT - PAD - (value - low) / span * (HEIGHT - 2 * PAD)

    parts = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="history">',
             f'<text x="4" y="14">{escape(f"{high:.4g} s")}</text>',
             f'<text x="4" y="{HEIGHT - 6}">{escape(f"{low:.4g} s")}</text>']
    line = []
    for i, p in enumerate(points):
        x = PAD + i * step
        parts.append(f'<line class="range" x1="{x:.1f}" x2="{x:.1f}" y1="{y(p.min):.1f}" y2="{y(p.max):.1f}"/>')
        parts.append(f'<circle class="point" cx="{x:.1f}" cy="{y(p.median):.1f}" r="3">'
                     f'<title>{escape(p.sha[:10])}: median {p.median:.4g} s, n={p.n}</title></circle>')
        line.append(f"{x:.1f},{y(p.median):.1f}")
    parts.insert(3, f'<polyline class="median" points="{" ".join(line)}"/>')
    parts.append("</svg>")
    return Markup("".join(parts))
