// What the pages' uPlot charts share (roofline.js, steps.js): app.css's palette, the axes' font, the
// width of a text in it, and axis ticks at given values with given labels.
window.benchfarmCharts = (function () {
  "use strict";
  const css = getComputedStyle(document.documentElement);
  const color = (name, fallback) => css.getPropertyValue(name).trim() || fallback;
  const font = "11px system-ui, sans-serif";
  const ruler = document.createElement("canvas").getContext("2d");
  ruler.font = font;
  return {
    blue: color("--blue", "#0550ae"), red: color("--red", "#cf222e"), muted: color("--muted", "#57606a"), font,
    textWidth: (text) => ruler.measureText(text).width,
    // ticks: [[value, label], ...] -> an axis' splits and values
    labelled: (ticks) => {
      const names = new Map(ticks);
      return { splits: () => ticks.map((t) => t[0]), values: (u, splits) => splits.map((v) => names.get(v) ?? "") };
    },
  };
})();
