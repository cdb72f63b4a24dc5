// The history graph of one series: uPlot, median line over a min-max band, the vendor control on a
// second axis, change points as vertical lines, drag-to-zoom; the samples of the hovered commit.
(function () {
  "use strict";
  const el = document.getElementById("chart");
  const src = document.getElementById("series-data");
  if (!el || !src) return;
  const d = JSON.parse(src.textContent);
  const n = d.median.length;
  const xs = Array.from({ length: n }, (_, i) => i);
  const fmt = (v) => {
    if (v == null) return "-";
    if (d.unit !== "s") return v.toPrecision(4);
    for (const [u, s] of [["s", 1], ["ms", 1e-3], ["us", 1e-6]]) if (v >= s) return (v / s).toPrecision(3) + " " + u;
    return (v / 1e-9).toPrecision(3) + " ns";
  };
  const day = (i) => (d.time[i] || "").slice(0, 10);
  const colors = { regression: "#cf222e", improvement: "#1a7f37" };

  const series = [
    { label: "commit", value: (u, i) => (i == null ? "-" : d.sha[i].slice(0, 10) + " " + day(i)) },
    { label: "median", stroke: "#0550ae", width: 2, value: (u, v) => fmt(v), points: { show: n <= 200, size: 5 } },
    { label: "min", stroke: "rgba(140,149,159,0.6)", width: 1, value: (u, v) => fmt(v), points: { show: false } },
    { label: "max", stroke: "rgba(140,149,159,0.6)", width: 1, value: (u, v) => fmt(v), points: { show: false } },
  ];
  const data = [xs, d.median, d.min, d.max];
  const axes = [
    { values: (u, ticks) => ticks.map((i) => (Number.isInteger(i) && d.sha[i] ? d.sha[i].slice(0, 7) : "")) },
    { values: (u, ticks) => ticks.map(fmt), size: 70 },
  ];
  const scales = { x: { time: false } };
  if (d.control) {
    series.push({ label: "control", scale: "control", stroke: "#8250df", width: 1.5, dash: [6, 4],
                  value: (u, v) => fmt(v), spanGaps: true, points: { show: false } });
    data.push(d.control.median);
    axes.push({ scale: "control", side: 1, values: (u, ticks) => ticks.map(fmt), size: 70, grid: { show: false },
                stroke: "#8250df" });
  }

  // Change points as vertical lines, each labelled at the top; a label that would overlap one already
  // drawn goes down a row (and to the line's left where it would leave the plot). The labels' boxes
  // (CSS pixels) are kept on window.benchfarmChangePointLabels.
  function drawChangePoints(u) {
    const ctx = u.ctx, dpr = devicePixelRatio, right = u.bbox.left + u.bbox.width;
    const rows = [];   // per row, the [left, right] spans of its labels
    const placed = [];
    ctx.save();
    ctx.font = 11 * dpr + "px system-ui";
    for (const cp of [...d.change_points].sort((a, b) => a.index - b.index)) {
      const x = Math.round(u.valToPos(cp.index - 0.5, "x", true));
      if (x < u.bbox.left || x > right) continue;
      // retracted: grey and thin; suspected: dashed; triaged (not open): dotted
      const retracted = cp.lifecycle === "retracted";
      ctx.strokeStyle = retracted ? "#8c959f" : colors[cp.direction] || "#57606a";
      ctx.lineWidth = (retracted ? 1 : 2) * dpr;
      const dash = cp.lifecycle === "suspected" ? [8, 4] : cp.open ? [] : [3, 3];
      ctx.setLineDash(dash.map((v) => v * dpr));
      ctx.beginPath();
      ctx.moveTo(x, u.bbox.top);
      ctx.lineTo(x, u.bbox.top + u.bbox.height);
      ctx.stroke();
      ctx.fillStyle = ctx.strokeStyle;
      const text = (cp.lifecycle === "confirmed" ? cp.state : cp.lifecycle) + " " + (cp.magnitude * 100).toFixed(1) + "%";
      const width = ctx.measureText(text).width;
      let left = x + 4 * dpr;
      if (left + width > right) left = x - 4 * dpr - width;
      const gap = 6 * dpr;
      let row = rows.findIndex((spans) => spans.every(([a, b]) => left + width + gap <= a || left >= b + gap));
      if (row < 0) row = rows.push([]) - 1;
      rows[row].push([left, left + width]);
      const baseline = u.bbox.top + (12 + 14 * row) * dpr;
      ctx.fillText(text, left, baseline);
      placed.push({ text, x: left / dpr, y: (baseline - 10 * dpr) / dpr, width: width / dpr, height: 12 });
    }
    ctx.restore();
    window.benchfarmChangePointLabels = placed;
  }

  const panel = document.getElementById("samples");
  const cache = new Map();
  let shown = -1;
  function showSamples(i) {
    if (i == null || i === shown || !panel) return;
    shown = i;
    const sha = d.sha[i];
    const render = (samples) => {
      if (shown !== i) return;
      const lo = Math.min(...samples), hi = Math.max(...samples), span = hi - lo || hi || 1;
      const dots = samples.map((v, k) =>
        `<circle cx="${(4 + (k / Math.max(samples.length - 1, 1)) * 292).toFixed(1)}" cy="${(54 - ((v - lo) / span) * 48).toFixed(1)}" r="2.5" fill="#0550ae"/>`).join("");
      panel.replaceChildren();
      const h = document.createElement("p");
      const code = document.createElement("code");
      code.textContent = sha.slice(0, 10);
      h.append(code, " " + day(i));
      const msg = document.createElement("p");
      msg.className = "small";
      msg.textContent = d.message[i] || "";
      const stats = document.createElement("p");
      stats.className = "small";
      stats.textContent = `${samples.length} samples · median ${fmt(d.median[i])} · min ${fmt(lo)} · max ${fmt(hi)}`;
      const strip = document.createElement("div");
      strip.innerHTML = `<svg viewBox="0 0 300 60" preserveAspectRatio="none" class="samples-strip">${dots}</svg>`;
      const list = document.createElement("p");
      list.className = "small mono";
      list.textContent = samples.slice(0, 40).map(fmt).join(", ") + (samples.length > 40 ? ", …" : "");
      panel.append(h, msg, stats, strip, list);
    };
    if (cache.has(sha)) return render(cache.get(sha));
    fetch(`/series/${d.series_id}/samples?sha=${encodeURIComponent(sha)}`)
      .then((r) => (r.ok ? r.json() : Promise.reject(r.status)))
      .then((body) => { cache.set(sha, body.samples); render(body.samples); })
      .catch(() => {});
  }

  const opts = {
    width: Math.max(el.clientWidth, 320), height: 360, scales, series, axes,
    bands: [{ series: [3, 2], fill: "rgba(5,80,174,0.12)" }],
    cursor: { drag: { x: true, y: false }, points: { size: 7 } },
    hooks: { draw: [drawChangePoints], setCursor: [(u) => showSamples(u.cursor.idx)] },
  };
  const chart = new uPlot(opts, data, el);
  window.benchfarmChart = chart;
  el.addEventListener("dblclick", () => chart.setScale("x", { min: 0, max: n - 1 }));
  window.addEventListener("resize", () => chart.setSize({ width: Math.max(el.clientWidth, 320), height: 360 }));
})();
