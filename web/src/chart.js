// A small live line chart in SVG: the last N samples of one or two
// series, the y axis scaled to the largest value seen in the window.
import { h, svg } from "./ui.js";

const W = 300, H = 90, PAD = 2;

export class LineChart {
  constructor(title, { series = ["value"], format = String, max = 0, points = 60 } = {}) {
    this.series = series;
    this.format = format;
    this.fixedMax = max;
    this.points = points;
    this.data = series.map(() => []);
    this.count = 0;
    this.lines = series.map((_, i) => svg("polyline", { class: "s" + i, fill: "none", points: "" }));
    this.value = h("span.chart-value", {}, "–");
    this.svg = svg("svg", { viewBox: `0 0 ${W} ${H}`, preserveAspectRatio: "none", role: "img", "aria-label": title },
      svg("line", { x1: 0, y1: H - PAD, x2: W, y2: H - PAD, class: "axis" }), ...this.lines);
    this.el = h("figure.chart", { "data-samples": "0", "data-chart": title },
      h("figcaption", {}, h("span", {}, title), this.value), this.svg,
      series.length > 1 ? h("div.legend", {}, series.map((s, i) => h("span.s" + i, {}, s))) : null);
  }

  push(...values) {
    values.forEach((v, i) => {
      const d = this.data[i];
      d.push(Number.isFinite(v) ? v : 0);
      if (d.length > this.points) d.shift();
    });
    this.count++;
    this.el.dataset.samples = String(this.count);
    this.value.textContent = values.map((v) => this.format(v)).join(" / ");
    const max = this.fixedMax || Math.max(1e-9, ...this.data.flat());
    this.data.forEach((d, i) => {
      const step = W / Math.max(1, this.points - 1);
      const x0 = W - (d.length - 1) * step;
      this.lines[i].setAttribute("points", d.map((v, j) =>
        `${(x0 + j * step).toFixed(1)},${(H - PAD - (Math.min(v, max) / max) * (H - 2 * PAD)).toFixed(1)}`).join(" "));
    });
  }
}
