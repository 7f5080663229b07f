// The steps a run's findings are about, marked on its step charts: a run of steps shaded, a
// single step a line, each named on hover by a marker along the top.
import {cssVar, esc, rgba, severityColor} from "./theme.js";
import {column} from "./axes.js";
import {kindOf} from "./kinds.js";

export const MARK_AXIS = "y5";
export const LABEL_ROW_PX = 15;  // a finding label's row above the plot  // the hidden 0-1 axis finding markers sit on

// A finding's steps as single steps (vertical lines) and runs of consecutive steps (shaded
// spans). One missing step inside a dense run is bridged: a log's cut-short lines leave such
// holes in a collapse.
function stepMarks(steps) {
  const s = [...new Set((steps || []).filter(Number.isFinite))].sort((a, b) => a - b);
  if (s.length <= 2) return {lines: s, spans: []};
  const runs = [];
  for (const v of s) {
    const last = runs[runs.length - 1];
    if (last && v - last[last.length - 1] <= 2) last.push(v); else runs.push([v]);
  }
  const lines = [], spans = [];
  for (const run of runs) {
    const [lo, hi] = [run[0], run[run.length - 1]];
    if (run.length >= 2 && run.length / (hi - lo + 1) >= 0.75) spans.push([lo, hi]);
    else lines.push(...run);
  }
  return {lines, spans};
}

// The catalog query whose rows prove a finding (its evidence, "/api/queries/<name>?..."): the
// mark's own, else the one the page's findings list links (the same query for every run).
function evidenceOf(f) {
  const api = f.evidence || document.querySelector(
    `li.finding[data-kind="${CSS.escape(f.kind)}"] a.evidence`)?.dataset.api || "";
  return (api.match(/\/api\/queries\/([^?]+)/) || [])[1] || null;
}

// A single step's mark: a line across the plot on the finding's own chart (its evidence), and
// elsewhere a tick in a band along the top, so that a periodic stall is drawn once, not as a
// dashed line per stall on every chart.
const TICK_BAND = 0.06;

// Shapes that draw an entry's findings (`marks`: run_id -> findings) and invisible-to-faint
// markers along the top that name each one on hover. A span over every step of the chart says
// nothing: left out.
export function findingMarks(entry, marks) {
  const out = {shapes: [], annotations: [], traces: []};
  if (!entry.info.linked) return out;
  const sources = [[entry.info, entry.data, entry.overlay ? `${entry.label}: ` : ""]];
  if (entry.overlay) sources.push([entry.overlay.info, entry.overlay.data, `${entry.overlay.label}: `]);
  const above = kindOf(entry.info.chart).marksAbove;
  for (const [info, data, prefix] of sources) {
    // the run's steps on this chart (before any zoom): a span over all of them localizes nothing
    const xs = column(data, info.chart.x).filter(Number.isFinite);
    if (!xs.length) continue;
    const [first, last] = data.x_bounds || [Math.min(...xs), Math.max(...xs)];
    for (const f of marks[info.params.run_id] || []) {
      const color = severityColor(f.severity), name = esc(prefix + f.kind.replace(/_/g, " "));
      let {lines, spans} = stepMarks(f.steps);
      spans = spans.filter(([lo, hi]) => !(lo <= first && hi >= last));
      lines = lines.filter(s => s >= first && s <= last);
      const px = [], opacity = [];
      spans.forEach(([lo, hi], i) => {
        out.shapes.push({type: "rect", xref: "x", yref: "paper", x0: lo - 0.5, x1: hi + 0.5, y0: 0, y1: 1,
                         fillcolor: rgba(color, above ? 0.18 : 0.1), line: {width: above ? 1 : 0, color, dash: "dot"},
                         layer: above ? "above" : "below", name: f.kind});
        // one label per finding at its first span, above the plot (never over its data), each
        // in a row of its own over the ones before it (charts.js makes room: LABEL_ROW_PX)
        if (!i) out.annotations.push({x: lo - 0.5, xref: "x", y: 1, yref: "paper", xanchor: "left", yanchor: "bottom",
                                      yshift: 12 + LABEL_ROW_PX * out.annotations.length, text: name, showarrow: false,
                                      font: {size: 10, color}, bgcolor: rgba(cssVar("--card"), 0.75)});
        const every = Math.max(1, Math.ceil((hi - lo + 1) / 300));
        for (let s = lo; s <= hi; s += every) { px.push(s); opacity.push(0); }
      });
      const home = evidenceOf(f) === entry.info.name;
      for (const s of lines) {
        out.shapes.push({type: "line", xref: "x", yref: "paper", x0: s, x1: s, y0: home ? 0 : 1 - TICK_BAND, y1: 1,
                         name: f.kind, line: {color, width: 1.5, dash: home ? "dot" : "solid"}, layer: "above"});
        px.push(s);
        opacity.push(1);
      }
      if (!px.length) continue;
      out.traces.push({type: "scatter", mode: "markers", x: px, y: px.map(() => 1), yaxis: MARK_AXIS,
                       name, showlegend: false, cliponaxis: false, meta: {finding: f.kind},
                       marker: {symbol: "triangle-down", size: 9, color, opacity},
                       hovertemplate: `<b>${name}</b> (${esc(f.severity)} finding)<extra></extra>`});
    }
  }
  return out;
}

// The row where the chart's `peak` column is highest (the first of equals), pointed at with its
// value: on a stacked chart whose y columns sum to that column, the top of its bar.
export function peakMark(info, data, num) {
  const col = info.chart.peak, vals = column(data, col);
  let at = -1;
  vals.forEach((v, i) => { if (Number.isFinite(v) && (at < 0 || v > vals[at])) at = i; });
  if (at < 0) return null;
  return {x: num.scaled(info.chart.x)(column(data, info.chart.x)[at]), y: num.scaled(col)(vals[at]),
          xref: "x", yref: "y", text: `peak ${num.text(col)(vals[at])}`, showarrow: true, arrowhead: 2,
          ax: 0, ay: -24, font: {size: 11, color: cssVar("--fg")}, bgcolor: rgba(cssVar("--card"), 0.8), name: "peak"};
}
