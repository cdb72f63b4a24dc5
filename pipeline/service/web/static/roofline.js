// The roofline of a device class: uPlot on log-log scales (FLOP/byte against FLOP/s), the roof as a
// series (bandwidth slope, then the compute ceiling), each case a point drawn over it; hover a point
// for its figures, click it for its series. The data, ranges and tick labels come from the page
// (pipeline/service/web/chart.py, `roofline_chart`).
(function () {
  "use strict";
  const el = document.getElementById("roofline");
  const src = document.getElementById("roofline-data");
  const tip = document.getElementById("roofline-tip");
  if (!el || !src) return;
  const d = JSON.parse(src.textContent);
  const { blue, red, muted, font, textWidth, labelled } = window.benchfarmCharts;
  const RADIUS = 5, HIT = 8, TICK = 6, GAP = 4;
  const widest = Math.max(...d.y_ticks.map((t) => textWidth(t[1])), 0);
  const axis = { font, stroke: muted, grid: { stroke: "#e1e4e8", width: 1 }, ticks: { size: TICK, stroke: "#d0d7de" },
                 gap: GAP, filter: (u, splits) => splits };

  // Each case's place in the plot (CSS pixels from its top left) and the ceilings' labels, as drawn:
  // kept on window.benchfarmRoofline for the browser test.
  const shown = { font, cases: [], labels: [] };
  function drawCases(u) {
    const ctx = u.ctx, dpr = devicePixelRatio, box = u.bbox;
    ctx.save();
    ctx.beginPath();
    ctx.rect(box.left, box.top, box.width, box.height);
    ctx.clip();
    ctx.fillStyle = blue;
    ctx.globalAlpha = 0.75;
    shown.cases = [];
    for (const c of d.cases) {
      const x = u.valToPos(c.x, "x", true), y = u.valToPos(c.y, "y", true);
      ctx.beginPath();
      ctx.arc(x, y, RADIUS * dpr, 0, 2 * Math.PI);
      ctx.fill();
      shown.cases.push({ series_id: c.series_id, x: (x - box.left) / dpr, y: (y - box.top) / dpr });
    }
    ctx.globalAlpha = 1;
    ctx.fillStyle = muted;
    ctx.font = 11 * dpr + "px system-ui, sans-serif";
    shown.labels = [];
    const label = (text, x, y, align) => {
      ctx.textAlign = align;
      ctx.fillText(text, x, y);
      const width = ctx.measureText(text).width;
      shown.labels.push({ text, x: (align === "right" ? x - width : x) / dpr, width: width / dpr });
    };
    const peak = d.ceilings.flops, bandwidth = d.ceilings.bytes;
    label(d.ceilings.flops_label, box.left + box.width - 4 * dpr, u.valToPos(peak, "y", true) - 6 * dpr, "right");
    // the slope's label where it enters the plot (its left end may lie under the y range)
    const enters = Math.max(d.x_range[0], d.y_range[0] / bandwidth);
    label(d.ceilings.bytes_label, u.valToPos(enters, "x", true) + 6 * dpr,
          u.valToPos(enters * bandwidth, "y", true) - 6 * dpr, "left");
    ctx.restore();
  }

  function nearest(u, left, top) {
    let best = null, distance = HIT;
    for (const [i, c] of d.cases.entries()) {
      const dx = u.valToPos(c.x, "x") - left, dy = u.valToPos(c.y, "y") - top, r = Math.hypot(dx, dy);
      if (r <= distance) { best = i; distance = r; }
    }
    return best;
  }

  const width = () => Math.max(Math.min(el.clientWidth || 760, 760), 320);
  const chart = new uPlot({
    width: width(), height: 420, legend: { show: false },
    cursor: { x: false, y: false, points: { show: false }, drag: { x: false, y: false } },
    scales: { x: { time: false, distr: 3, log: 10, range: () => d.x_range },
              y: { distr: 3, log: 10, range: () => d.y_range } },
    series: [{}, { label: "roof", stroke: red, width: 2, points: { show: false } }],
    axes: [{ ...axis, ...labelled(d.x_ticks), label: "arithmetic intensity (FLOP/byte)", labelFont: font, labelSize: 18 },
           { ...axis, ...labelled(d.y_ticks), size: Math.ceil(widest) + TICK + GAP + 6 }],
    hooks: { draw: [drawCases] },
  }, [d.roof.x, d.roof.y], el);
  shown.chart = chart;
  window.benchfarmRoofline = shown;

  let hovered = null;
  chart.over.addEventListener("mousemove", (e) => {
    hovered = nearest(chart, e.offsetX, e.offsetY);
    chart.over.style.cursor = hovered == null ? "default" : "pointer";
    if (!tip) return;
    if (hovered == null) { tip.hidden = true; return; }
    const c = d.cases[hovered];
    const wrap = el.parentElement.getBoundingClientRect(), over = chart.over.getBoundingClientRect();
    tip.textContent = c.tip;
    tip.hidden = false;
    const x = over.left - wrap.left + chart.valToPos(c.x, "x"), y = over.top - wrap.top + chart.valToPos(c.y, "y");
    tip.style.left = Math.min(x + 10, wrap.width - tip.offsetWidth) + "px";
    tip.style.top = Math.max(y - 30, 0) + "px";
  });
  chart.over.addEventListener("mouseleave", () => { hovered = null; if (tip) tip.hidden = true; });
  chart.over.addEventListener("click", () => {
    if (hovered != null) window.location.href = "/series/" + d.cases[hovered].series_id;
  });
  window.addEventListener("resize", () => chart.setSize({ width: width(), height: 420 }));
})();
