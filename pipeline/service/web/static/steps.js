// Step charts of deterministic figures along commits (compile statistics, hardware counters): uPlot,
// one per `figure.step-chart`, its data in the figure's JSON script (pipeline/service/web/chart.py,
// `step_chart`). A value holds until the next commit changes it; a commit without the figure is a gap;
// a dashed vertical line marks each commit where the figure changed; hover a commit for its value.
(function () {
  "use strict";
  const { blue, muted, font, textWidth, labelled } = window.benchfarmCharts;
  const TICK = 4, GAP = 4, HEIGHT = 160, MAX_TICKS = 8, NAME_GAP = 12;
  // What each chart drew, kept on window.benchfarmStepCharts for the browser test.
  const drawn = (window.benchfarmStepCharts = []);

  for (const figure of document.querySelectorAll("figure.step-chart")) {
    const d = JSON.parse(figure.querySelector("script").textContent);
    const plot = figure.querySelector(".step-plot"), tip = figure.querySelector(".chart-tip");
    const n = d.values.length;
    const widest = Math.max(...d.y_ticks.map((t) => textWidth(t[1])), 0);
    const axis = { font, stroke: muted, grid: { show: false }, ticks: { size: TICK, stroke: "#d0d7de" }, gap: GAP,
                   filter: (u, splits) => splits };
    const shown = { metric: d.metric, figure, font, points: 0, steps: [], ticks: [] };
    // as many commits named under the axis as their names fit side by side (at most MAX_TICKS), spread
    // evenly, the first and the last among them
    const nameWidth = Math.max(...d.names.map(textWidth), 0) + NAME_GAP;
    const commits = {
      splits: (u) => {
        const most = Math.max(2, Math.min(MAX_TICKS, Math.floor(u.bbox.width / devicePixelRatio / nameWidth)));
        const picked = d.names.length <= most ? d.names.map((_, i) => i)
          : [...new Set(Array.from({ length: most }, (_, k) => Math.round(k * (n - 1) / (most - 1))))];
        shown.ticks = picked.map((i) => [i, d.names[i]]);
        return d.names.length ? picked : [];
      },
      values: (u, splits) => splits.map((i) => d.names[i] ?? ""),
    };

    function drawSteps(u) {
      const ctx = u.ctx, dpr = devicePixelRatio, box = u.bbox;
      ctx.save();
      ctx.strokeStyle = muted;
      ctx.lineWidth = dpr;
      ctx.setLineDash([3 * dpr, 3 * dpr]);
      shown.steps = [];
      for (const [i] of d.steps) {
        const x = Math.round(u.valToPos(i, "x", true));
        ctx.beginPath();
        ctx.moveTo(x, box.top);
        ctx.lineTo(x, box.top + box.height);
        ctx.stroke();
        shown.steps.push(i);
      }
      ctx.restore();
      shown.points = d.values.filter((v) => v != null).length;
    }

    const width = () => Math.max(Math.min(figure.clientWidth || 760, 760), 320);
    const chart = new uPlot({
      width: width(), height: HEIGHT, legend: { show: false },
      cursor: { y: false, drag: { x: false, y: false }, points: { size: 8 } },
      scales: { x: { time: false, range: () => [-0.5, n - 0.5] }, y: { range: () => d.y_range } },
      series: [{}, { stroke: blue, width: 1.5, spanGaps: false, paths: uPlot.paths.stepped({ align: 1 }),
                     points: { show: true, size: 6, fill: blue } }],
      axes: [{ ...axis, ...commits, label: d.title, labelFont: font, labelSize: 16, size: 34 },
             { ...axis, ...labelled(d.y_ticks), size: Math.ceil(widest) + TICK + GAP + 6 }],
      hooks: {
        draw: [drawSteps],
        setCursor: [(u) => {
          const i = u.cursor.idx, text = i == null ? null : d.tips[i];
          if (!tip) return;
          if (text == null) { tip.hidden = true; return; }
          tip.textContent = text;
          tip.hidden = false;
          const left = u.over.offsetLeft + u.valToPos(i, "x");
          tip.style.left = Math.min(left + 10, figure.clientWidth - tip.offsetWidth) + "px";
          tip.style.top = "0px";
        }],
      },
    }, [Array.from({ length: n }, (_, i) => i), d.values], plot);
    chart.over.addEventListener("mouseleave", () => { if (tip) tip.hidden = true; });
    shown.chart = chart;
    drawn.push(shown);
    window.addEventListener("resize", () => chart.setSize({ width: width(), height: HEIGHT }));
  }
})();
