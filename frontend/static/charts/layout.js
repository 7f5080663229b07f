// A chart's Plotly layout: titles, axes in their fmt's terms, the legend where it crowds nothing,
// and margins sized from the labels beforehand so that Plotly draws each chart once.
import {FONT, cssVar, esc, palette} from "./theme.js";
import {axisFormat, axisTitle, column, filled, retitle, yTitle} from "./axes.js";

// Pixels beside a label's text: an axis's ticks and title (12 px labels), a legend's swatch
// and padding (11 px names); measured on Plotly's own drawing.
const AXIS_PX = 36, AXIS_BOTTOM = 48, LEGEND_PX = 82, LEGEND_ENTRY_PX = 46, LEGEND_ROW_PX = 19;
const COLORBAR_R = 120, COLORBAR_B = 53;

// The layout of a chart of `kind` (kinds.js) over `data`, its axes scaled by `scales`; `range`
// is the page's step range, if any.
export function layout(info, kind, data, scales, entry, range) {
  const spec = info.chart, fg = cssVar("--fg"), grid = cssVar("--grid");
  const xTitle = retitle(spec.xlabel ? filled(spec.xlabel, data) : axisTitle(info, spec.x), scales.x);
  const yTitleText = retitle(yTitle(info, data), scales.y);
  const axis = title => ({title: {text: esc(title), standoff: 8}, gridcolor: grid, zerolinecolor: grid,
                          linecolor: grid, automargin: true, ticklabeloverflow: "allow"});
  const l = {
    title: {text: esc(info.title), x: 0.01, xanchor: "left", font: {size: 15}},
    paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
    font: {family: FONT, size: 12, color: fg},
    colorway: palette(), margin: {l: 56, r: 16, t: 64, b: AXIS_BOTTOM},
    xaxis: {...axis(xTitle), ...axisFormat(scales.x, xTitle)},
    yaxis: {...axis(yTitleText), ...axisFormat(scales.y, yTitleText)},
    legend: {orientation: "h", x: 0, y: 1.0, yanchor: "bottom", font: {size: 11}},
    hovermode: kind.hover,
    hoverlabel: {bgcolor: cssVar("--card"), bordercolor: grid, font: {color: fg}},
    barmode: "group",
    bargap: 0.15,
  };
  if (spec.x === "step") l.xaxis.tickformat = "d";
  // Few integer x values (steps, ranks): one tick each, never fractional in-between ticks; a
  // timeline's x is time.
  const xs = column(data, spec.x);
  if (!kind.spansX && xs.length && xs.every(Number.isInteger)) {
    // an axis that starts at 0 (rangemode tozero) spans from there
    const lo = Math.min(...xs, ...(kind.fromZero ? [0] : [])), hi = Math.max(...xs);
    if (hi - lo <= 30) { l.xaxis.dtick = 1; l.xaxis.tickformat = "d"; }
  }
  // a share is never below 0%: all zeros would get Plotly's -100% to 100%, the bars lost in it
  const shares = ["pct", "pct100"].includes(scales.y.kind) && !kind.lanes;
  if (shares && !(spec.y || []).some(y => column(data, y).some(v => v < 0))) l.yaxis.rangemode = "nonnegative";
  if (kind.fromZero) for (const a of ["x", "y"]) if (scales[a].kind !== "x") l[`${a}axis`].rangemode = "tozero";
  kind.layout(l, {info, data, scales, entry, axis, yTitle: yTitleText});
  if (entry.logY) l.yaxis.type = "log";
  if (range && info.linked) l.xaxis.range = [range[0] - 0.5, range[1] + 0.5];
  return l;
}

export const UNDER_PLOT = {orientation: "h", x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom", font: {size: 11}};

// Many series: a legend column on the right instead of rows that crowd the title; a few
// long names: rows under the plot, where wrapping cannot cover the title.
export function placeLegend(l, names) {
  const count = names.length, chars = names.reduce((n, s) => n + String(s).length + 4, 0);
  if (count > 1 && count <= 5 && chars > 64) {
    l.legend = {...UNDER_PLOT};
    l.margin.t = 44;
    l.margin.b = 56 + 20 * Math.ceil(chars / 64);
  } else if (count > 5) {
    l.legend = {orientation: "v", x: 1.02, xanchor: "left", y: 1, yanchor: "top", font: {size: 11}};
    l.margin.t = 44;
  } else if (count <= 1) {
    l.showlegend = false;
    l.margin.t = 44;
  }
  return l;
}

// ---- margins sized before drawing ------------------------------------------------------------
// Plotly's automargin draws a chart, measures its tick labels, legend and colour bar, and draws
// it all again when they need more room than the margins give: about half of a page's drawing.
// Here the margins are sized beforehand from the labels' text (measured on a canvas in the
// chart's font), generously, since automargin only ever widens them: a label this misses still
// gets its room, at the cost of that second drawing.
const textWidth = (() => {
  const ctx = document.createElement("canvas").getContext("2d");
  return (text, size) => { ctx.font = `${size}px ${FONT}`; return ctx.measureText(text).width; };
})();
// The widest of these labels' texts (each distinct text measured once).
function widest(labels, size) {
  let w = 0;
  for (const text of new Set([...labels].map(v => String(v ?? "")))) w = Math.max(w, textWidth(text, size));
  return w;
}

// Plotly's linear tick step: a 1, 2 or 5 times a power of ten about 40 px apart.
function tickStep(span, px) {
  const rough = span / (Math.min(Math.max(px / 40, 4), 9) + 1);
  const mag = 10 ** Math.floor(Math.log10(rough)), unit = rough / mag;
  return mag * (unit <= 1 ? 1 : unit <= 2 ? 2 : unit <= 5 ? 5 : 10);
}
// digits after the point a tick step needs (toLocaleString takes at most 100)
const decimals = step => Math.min(20, Math.max(0, -Math.floor(Math.log10(step) + 1e-9)));

// The text of a tick at v, as the axis's format (axisFormat) shows it (Plotly's minus is U+2212).
function tickText(v, step, ax) {
  const fixed = (x, d) => x.toLocaleString("en-US", {minimumFractionDigits: d, maximumFractionDigits: d,
                                                     useGrouping: !!ax.separatethousands}).replace("-", "\u2212");
  if (ax.tickformat === ".3~%") return `${fixed(v * 100, Math.min(3, decimals(step * 100)))}%`;
  const suffix = ax.ticksuffix || "";
  if (ax.exponentformat === "none" || Math.abs(v) < 1000) return fixed(v, decimals(step)) + suffix;
  const k = Math.min(5, Math.floor(Math.log10(Math.abs(v)) / 3));  // SI prefixes, as Plotly and "~s"
  return fixed(v / 1000 ** k, decimals(step / 1000 ** k)) + "kMGTP"[k - 1] + suffix;
}

// The widest tick label of the left y axis, or null when it cannot be told (a log axis).
function yLabelWidth(l, ts, plotPx) {
  const ax = l.yaxis, own = ts.filter(t => !t.yaxis || t.yaxis === "y");
  const categorical = ax.type === "category" || own.some(t => t.orientation === "h" || t.type === "heatmap");
  if (categorical) return widest(own.flatMap(t => t.y || []), 12);
  if (ax.type === "log") return null;
  // bars start at 0; stacked bars reach their stack's sum
  let lo = Infinity, hi = -Infinity, seen = false;
  const stacks = new Map(), reach = v => { lo = Math.min(lo, v); hi = Math.max(hi, v); };
  for (const t of own) {
    if (t.type === "bar") reach(0);
    (t.y || []).forEach((v, i) => {
      if (!Number.isFinite(v)) return;
      seen = true;
      reach(v);
      if (t.type === "bar" && l.barmode === "stack") {
        const key = `${v < 0 ? "-" : "+"}${t.x ? t.x[i] : i}`;
        reach(stacks.set(key, (stacks.get(key) || 0) + v).get(key));
      }
    });
  }
  if (!seen) return null;
  if (ax.range) [lo, hi] = ax.range;
  const span = hi - lo || Math.abs(hi) || 1;
  if (!ax.range) { lo -= span * 0.05; hi += span * 0.05; }
  const step = tickStep(hi - lo, plotPx);
  const ticks = [Math.floor(hi / step) * step, Math.ceil(lo / step) * step];
  return Math.max(...ticks.map(v => textWidth(tickText(v, step, ax), 12)));
}

export function sizeMargins(l, ts, legendNames, [width, height]) {
  const m = l.margin, y = yLabelWidth(l, ts, height - m.t - m.b);
  if (y !== null) m.l = Math.max(m.l, Math.ceil(y + AXIS_PX));
  if (l.yaxis2 && l.yaxis2.side === "right") m.r = Math.max(m.r, Math.ceil(textWidth("100%", 12) + AXIS_PX));
  let legend = l.showlegend !== false && legendNames.length ? l.legend : null;
  const nameWidth = widest(legendNames, 11);
  if (legend && legend.orientation === "v") m.r = Math.max(m.r, Math.ceil(nameWidth + LEGEND_PX));
  if (ts.some(t => t.type === "heatmap" && t.showscale !== false)) {
    m.r = Math.max(m.r, COLORBAR_R);
    m.b = Math.max(m.b, COLORBAR_B);
  }
  const plotWidth = width - m.l - m.r;
  // A legend row above the plot that does not fit in one row (a phone) would wrap upwards over
  // the title: it goes under the plot instead.
  if (legend && legend.orientation === "h" && legend.yref !== "container" &&
      legendNames.reduce((w, n) => w + textWidth(String(n), 11) + LEGEND_ENTRY_PX, 0) > plotWidth) {
    l.legend = legend = {...UNDER_PLOT};
    m.t = Math.min(m.t, 44);
  }
  // Category labels wider than their slot are turned 30°, and then reach below the axis.
  if (l.xaxis.type === "category") {
    const labels = new Set(ts.flatMap(t => t.x || [])), w = widest(labels, 12);
    if (labels.size && w + 8 > plotWidth / labels.size) m.b = Math.max(m.b, Math.ceil(AXIS_BOTTOM + w / 2));
  }
  // A legend under the plot: a grid of its widest entry, as many columns as fit.
  if (legend && legend.orientation === "h" && legend.yref === "container") {
    const columns = Math.max(1, Math.floor(plotWidth / (nameWidth + LEGEND_ENTRY_PX)));
    m.b = Math.max(m.b, Math.ceil(AXIS_BOTTOM + LEGEND_ROW_PX * Math.ceil(legendNames.length / columns) + 12));
  }
  return l;
}
