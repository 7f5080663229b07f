// What a chart's columns say about its axes: names as a reader reads them, units from the
// columns' descriptions, and each axis's fmt and (for durations) the unit it shows.
import {esc} from "./theme.js";
import {SECONDS, fmtNumber} from "./format.js";

export function column(data, name) {
  const i = data.columns.indexOf(name);
  return i < 0 ? [] : data.rows.map(r => r[i]);
}

// "Median response length (tokens)." -> unit "tokens"; the column name reads as the label.
function unitOf(info, col) {
  const d = (info.columns[col] || {}).description || "";
  const m = d.match(/\(([^()]*)\)\.?\s*$/) || d.match(/\((tokens|chars|s|seconds|ms|us|µs|%|GPU-hours)\)/);
  return m ? m[1] : "";
}
export const pretty = col => String(col).replace(/_/g, " ");
// A column as a reader names it: no duration or share suffix (the axis or the value carries
// the unit); a percentage keeps its "%" (gpu_time has idle_us and idle_pct).
const WORDS = {dur: "duration", pct: "%"};
export function label(col) {
  const base = String(col).replace(/_(us|ms|s|frac)$/, "");
  return base.split("_").map(w => WORDS[w] || w).join(" ");
}
export function axisTitle(info, col) {
  if (!col) return "";
  const unit = unitOf(info, col);
  return unit ? `${label(col)} (${unit})` : label(col);
}
// An axis label may name a column in braces ("GPU time, {gpu_scope}"): its value in the rows
// (one value: a fact of the run), or nothing where the rows hold none or several.
export function filled(text, data) {
  return String(text).replace(/\{(\w+)\}/g, (_, col) => {
    const values = new Set(column(data || {columns: [], rows: []}, col).filter(v => v !== null && v !== ""));
    return values.size === 1 ? String([...values][0]) : "";
  }).replace(/[,:;\s]+$/, "");
}

export function yTitle(info, data) {
  const spec = info.chart;
  if (spec.ylabel) return filled(spec.ylabel, data);
  const ys = spec.y || [];
  if (ys.length === 1) return axisTitle(info, ys[0]);
  const units = [...new Set(ys.map(y => unitOf(info, y)))];
  return units.length === 1 && units[0] ? units[0] : "";
}

// A duration axis picks one unit (µs to h) for its range: [unit, its seconds, from how many seconds].
const DURATION_UNITS = [["h", 3600, 3 * 3600], ["min", 60, 600], ["s", 1, 1], ["ms", 1e-3, 1e-3], ["µs", 1e-6, 0]];
export const fmtOf = (info, col) => ((info.columns || {})[col] || {}).fmt || null;

// The largest |value| of some columns, in seconds for a duration fmt.
function largest(data, cols, fmt) {
  let top = 0;
  for (const c of cols) {
    const i = data.columns.indexOf(c);
    if (i < 0) continue;
    for (const r of data.rows) if (typeof r[i] === "number" && Number.isFinite(r[i])) top = Math.max(top, Math.abs(r[i]));
  }
  return top * (SECONDS[fmt] || 1);
}

// Each axis (x, y, z) of a chart of this kind (kinds.js): the fmt its columns share, and for
// durations the unit it shows and the factor from the columns' unit to it. `datas` are all the
// rows drawn on it (two runs on an overlaid chart), so both use one unit.
export function axisScales(info, kind, datas) {
  const spec = info.chart, out = {};
  for (const [axis, names] of Object.entries(kind.axes(spec))) {
    const kinds = [...new Set(names.filter(Boolean).map(c => fmtOf(info, c)))];
    const kind = kinds.length === 1 ? kinds[0] : null;
    out[axis] = {kind, cols: names, factor: 1, unit: null};
    if (kind in SECONDS) {
      // bars that start at x and are z long (a timeline's) need a unit that holds x + z
      const top = axis === "x" && kind.spansX
        ? Math.max(...datas.map(d => largest(d, [names[0]], kind) + largest(d, [names[1]], kind)))
        : Math.max(...datas.map(d => largest(d, names, kind)));
      const [unit, size] = DURATION_UNITS.find(([, , from]) => top >= from);
      out[axis] = {...out[axis], unit, factor: SECONDS[kind] / size};
    }
  }
  return out;
}

// What a trace builder needs: plotted values scaled to their axis' unit, hover text by fmt.
export function numbers(info, scales) {
  const factor = new Map();
  for (const a of Object.values(scales)) for (const c of a.cols) if (c) factor.set(c, a.factor);
  return {
    scales,
    scaled: col => {
      const f = factor.get(col) || 1;
      return v => (f !== 1 && typeof v === "number") ? v * f : v;
    },
    text: col => v => esc(fmtNumber(v, fmtOf(info, col))),
  };
}

const DURATION_IN_TITLE = /\((?:us|µs|ms|s|sec|seconds)\)/;

// Plotly axis attributes for a scale: tick labels in the fmt's terms; a duration's unit goes
// into the title's "(unit)" when it has one, else after each tick.
export function axisFormat(scale, title) {
  switch (scale.kind) {
    case "pct": return {tickformat: ".3~%"};
    case "pct100": return {ticksuffix: "%"};
    case "x": return {ticksuffix: "×"};
    case "bytes": return {tickformat: "~s", ticksuffix: "B"};
    case "tokens": case "count": case "gpu_h": return {separatethousands: true, exponentformat: "none"};
    case "s": case "ms": case "us":
      return {separatethousands: true, exponentformat: "none",
              ...(DURATION_IN_TITLE.test(title || "") ? {} : {ticksuffix: ` ${scale.unit}`})};
    default: return {};
  }
}
export const retitle = (title, scale) => scale.unit ? String(title || "").replace(DURATION_IN_TITLE, `(${scale.unit})`) : title;
