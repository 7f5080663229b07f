// One renderer per chart kind (the @chart spec's first word, queries/README.md): the table
// KINDS maps each kind to how its rows become Plotly traces and what else about it differs from
// a line chart. A new kind is one entry here (and its name in catalog.CHART_KINDS).
//
// An entry: traces(info, data, num, opts) -> Plotly traces; or draw(el, data, info) for a kind
// that is no Plotly chart (a table). Then, all optional:
//   axes(spec)   the columns on each axis {x, y, z}, whose fmt the axis takes (default x and y)
//   spansX       bars start at x and are z long (time, not steps): the x axis's unit must hold x + z
//   lanes        y is a set of categories (lanes), not a number
//   hover        Plotly's hovermode (default "closest")
//   oneStep      one step of a step chart draws as bars (stepBars), not a lone point or column
//   logScale(spec)  a long tail may be read on a log axis: the chart offers the toggle
//   sharedOverlay  two runs overlay as one drawing each in one colour (band, hist), not series by series
//   marksAbove   finding spans drawn over the plot (a heatmap would hide them), not under it
//   fromZero     axes start at 0 (a scatter of figures), but for ratios (1× is even)
//   layout(l, ctx)  changes to the common layout; ctx = {info, data, scales, entry, axis, yTitle}
import {esc, palette, rgba, scheme, severityColor} from "./theme.js";
import {axisFormat, axisTitle, column, fmtOf, label, pretty, retitle, yTitle} from "./axes.js";
import {SECONDS, fmtNumber, percent, plain} from "./format.js";

// Rows split by the spec's color column, in a stable (numeric when possible) order.
function groups(data, colorCol) {
  if (!colorCol || data.columns.indexOf(colorCol) < 0) return [{key: null, rows: data.rows}];
  const i = data.columns.indexOf(colorCol);
  const byKey = new Map();
  for (const r of data.rows) {
    if (!byKey.has(r[i])) byKey.set(r[i], []);
    byKey.get(r[i]).push(r);
  }
  const keys = [...byKey.keys()].sort((a, b) => (a ?? "") < (b ?? "") ? -1 : (a ?? "") > (b ?? "") ? 1 : 0);
  return keys.map(k => ({key: k, rows: byKey.get(k)}));
}

function seriesName(spec, key, y) {
  const parts = [];
  // A number needs its column's name ("dp rank 3"); a text value names itself.
  if (key !== null && key !== undefined) parts.push(typeof key === "number" ? `${pretty(spec.color)} ${key}` : String(key));
  if ((spec.y || []).length > 1 || key === null) parts.push(label(y));
  return esc(parts.join(" · "));
}

// Hover shows each value by its column's fmt; charts with one hover box per x (line, band)
// name the series, others also the x value.
function hoverTemplate(spec, unified) {
  return (unified ? "" : `${esc(label(spec.x))} %{x}<br>`) + "%{fullData.name}: %{customdata}<extra></extra>";
}

function xyTraces(spec, data, type, num) {
  const xi = data.columns.indexOf(spec.x), sx = num.scaled(spec.x);
  const xval = v => typeof v === "string" ? esc(v) : sx(v);
  const out = [];
  for (const g of groups(data, spec.color)) {
    for (const y of spec.y || []) {
      const yi = data.columns.indexOf(y);
      if (yi < 0) continue;
      const sy = num.scaled(y), ty = num.text(y);
      const t = {type, name: seriesName(spec, g.key, y), x: g.rows.map(r => xval(r[xi])),
                 y: g.rows.map(r => sy(r[yi])), customdata: g.rows.map(r => ty(r[yi])),
                 hovertemplate: hoverTemplate(spec, type === "scatter")};
      if (type === "scatter") {
        t.mode = t.x.length <= 24 ? "lines+markers" : "lines";
        t.line = {width: 2};
      }
      out.push(t);
    }
  }
  return out;
}

// A row's every column, by fmt, as hover text.
const rowText = (data, num, r) => data.columns.map((c, i) => `${esc(label(c))}: ${num.text(c)(r[i])}`);

// bar/stacked with `group`: one bar per group value side by side at each x, its y columns
// stacked inside it (stacked) or next to each other (bar); one colour per group value, and
// the `shade` columns drawn light and hatched in that colour. Hover lists the whole row.
function groupedBarTraces(spec, data, num, stacked) {
  const xi = data.columns.indexOf(spec.x), pal = palette(), shade = new Set(spec.shade || []);
  const ys = (spec.y || []).filter(y => data.columns.includes(y));
  const out = [];
  groups(data, spec.group).forEach((g, k) => {
    const color = pal[k % pal.length], name = esc(`${pretty(spec.group)} ${g.key}`);
    const base = g.rows.map(() => 0);
    ys.forEach((y, j) => {
      const yi = data.columns.indexOf(y), sy = num.scaled(y), vals = g.rows.map(r => sy(r[yi]));
      const light = shade.has(y);
      out.push({
        type: "bar", name, legendgroup: name, showlegend: j === 0, offsetgroup: String(g.key),
        x: g.rows.map(r => r[xi]), y: vals,
        base: stacked ? [...base] : undefined,
        marker: {color: light ? rgba(color, 0.16) : color,
                 line: {color, width: light ? 1 : 0},
                 pattern: light ? {shape: "/", fgcolor: rgba(color, 0.55), size: 6, solidity: 0.25} : undefined},
        hovertext: g.rows.map(r => [`<b>${name} · ${esc(label(y))}</b>`, ...rowText(data, num, r)].join("<br>")),
        hoverinfo: "text",
      });
      if (stacked) vals.forEach((v, i) => { base[i] += v || 0; });
    });
  });
  return out;
}

const barTraces = stacked => (info, data, num) => info.chart.group
  ? groupedBarTraces(info.chart, data, num, stacked) : xyTraces(info.chart, data, "bar", num);

// band: quantile lines, lowest first, the space between them shaded in one colour.
function bandTraces(info, data, num, opts = {}) {
  const spec = info.chart, base = opts.color || palette()[0];
  const lift = scheme() === "dark" ? 0.14 : 0;  // fills read darker on a dark page
  const x = column(data, spec.x).map(num.scaled(spec.x));
  const ys = (spec.y || []).filter(y => data.columns.includes(y));
  return ys.map((y, i) => ({
    type: "scatter", mode: x.length <= 24 ? "lines+markers" : "lines", name: esc(label(y)), x,
    y: column(data, y).map(num.scaled(y)), customdata: column(data, y).map(num.text(y)),
    hovertemplate: hoverTemplate(spec, true),
    line: {color: i === 0 ? base : rgba(base, Math.max(0.35, 0.9 - 0.2 * i) + lift),
           width: i === 0 ? 2.5 : 1, dash: i === ys.length - 1 && ys.length > 2 ? "dot" : "solid"},
    marker: {size: 4, color: base},
    fill: i === 0 ? "none" : "tonexty",
    fillcolor: rgba(base, Math.max(0.06, 0.32 - 0.09 * i) + lift),
  }));
}

// Heatmap colours anchored to what the value means: a share on 0-100%, a signed percentage
// (an error) on ±100% around 0, a duration per step as a multiple of that step's mean.
const DIVERGING = () => scheme() === "dark"
  ? [[0, "#6aa8e8"], [0.5, "#2a303b"], [1, "#f07178"]] : [[0, "#2f6fb0"], [0.5, "#f4f4f4"], [1, "#d2424c"]];
function heatScale(info, data) {
  const spec = info.chart, kind = fmtOf(info, spec.z), zs = column(data, spec.z).filter(Number.isFinite);
  if (kind === "pct" || kind === "pct100") {
    const full = kind === "pct" ? 1 : 100;
    return zs.some(v => v < 0)
      ? {zmin: -full, zmax: full, zmid: 0, colorscale: DIVERGING(), anchored: true}
      : {zmin: 0, zmax: full, colorscale: "Viridis", anchored: true};
  }
  // ±20% of the step's mean: a rank that far off is a straggler; closer reads pale
  if (kind in SECONDS && spec.x === "step") return {relative: true, zmin: 0.8, zmax: 1.2, colorscale: DIVERGING(), anchored: true};
  return {colorscale: "Viridis"};
}

// A break in the x values' rhythm (steps 50-60 profiled, then 3000-3010) drawn as a break: an
// empty column on either side keeps each cell one spacing wide, where Plotly would stretch
// the cells beside the gap across it, as if those steps had their values.
function withBreaks(xs) {
  if (xs.length < 3 || !xs.every(Number.isFinite)) return xs;
  const spacings = xs.slice(1).map((v, i) => v - xs[i]).sort((a, b) => a - b);
  const spacing = spacings[Math.floor(spacings.length / 2)];
  const out = [xs[0]];
  for (let i = 1; i < xs.length; i++) {
    if (xs[i] - xs[i - 1] > 2 * spacing) out.push(xs[i - 1] + spacing, xs[i] - spacing);
    out.push(xs[i]);
  }
  return out;
}

function heatmapTraces(info, data, num) {
  const spec = info.chart, yCol = (spec.y || [])[0];
  const xs = withBreaks([...new Set(column(data, spec.x))].sort((a, b) => a - b));
  const ys = [...new Set(column(data, yCol))].sort((a, b) => a - b);
  const xi = data.columns.indexOf(spec.x), yi = data.columns.indexOf(yCol);
  const zi = data.columns.indexOf(spec.z);
  const z = ys.map(() => xs.map(() => null)), text = ys.map(() => xs.map(() => ""));
  const xPos = new Map(xs.map((v, i) => [v, i])), yPos = new Map(ys.map((v, i) => [v, i]));
  const sz = num.scaled(spec.z), tz = num.text(spec.z), anchor = heatScale(info, data);
  const mean = new Map();
  if (anchor.relative) {
    for (const x of xs) {
      const vals = data.rows.filter(r => r[xi] === x && Number.isFinite(r[zi])).map(r => r[zi]);
      mean.set(x, vals.reduce((a, b) => a + b, 0) / (vals.length || 1));
    }
  }
  for (const r of data.rows) {
    const [row, col] = [yPos.get(r[yi]), xPos.get(r[xi])];
    if (anchor.relative) {
      const rel = Number.isFinite(r[zi]) && mean.get(r[xi]) ? r[zi] / mean.get(r[xi]) : null;
      z[row][col] = rel;
      text[row][col] = rel === null ? "" : `${tz(r[zi])} (${rel.toFixed(2)}× the step's mean)`;
    } else {
      z[row][col] = sz(r[zi]);
      text[row][col] = tz(r[zi]);
    }
  }
  const scale = num.scales.z, unit = scale.unit ? ` (${scale.unit})` : "";
  const title = anchor.relative ? `${esc(label(spec.z))} / the step's mean` : esc(label(spec.z)) + unit;
  const {anchored, relative, ...colors} = anchor;
  // every cell one value (one rank, each its step's own mean: 1.0×) reads as one flat colour:
  // the chart says so in words (charts.js draws meta.uniform over the plot)
  const values = new Set(z.flat().filter(v => v !== null));
  const first = data.rows.find(r => Number.isFinite(r[zi]));
  const uniform = values.size === 1 && data.rows.length > 1
    ? `Every cell is ${relative ? `${[...values][0].toFixed(2)}× the step's mean` : tz(first[zi])}` : null;
  return [{type: "heatmap", meta: uniform ? {uniform} : undefined, x: xs, y: ys.map(v => v === null ? "n/a" : esc(v)), z, text, ...colors,
           hoverongaps: false,
           colorbar: {title: {text: title, side: "right"}, thickness: 12,
                      ...(relative ? {ticksuffix: "×"} : axisFormat(scale, unit))},
           hovertemplate: `${esc(label(spec.x))} %{x}<br>${esc(label(yCol))} %{y}<br>` +
                          `${esc(label(spec.z))} %{text}<extra></extra>`}];
}

// Bins in order over two runs' histograms: by each label's leading number when they all have one.
function binOrder(lists) {
  const all = [...new Set(lists.flat())], lead = s => parseFloat(String(s));
  return all.every(v => Number.isFinite(lead(v))) ? all.sort((a, b) => lead(a) - lead(b)) : all;
}

// hist: with y, rows are bins (x) and counts (y), drawn with their cumulative share; as
// shares of the run's total when two runs of different sizes share the chart. Without y, a
// histogram of the raw x values, one per color group.
function histTraces(info, data, num, opts = {}) {
  const spec = info.chart;
  if (!(spec.y || []).length) {
    const xi = data.columns.indexOf(spec.x), sx = num.scaled(spec.x);
    return groups(data, spec.color).map(g => ({type: "histogram", x: g.rows.map(r => sx(r[xi])),
      name: esc(g.key === null ? label(spec.x) : `${pretty(spec.color)} ${g.key}`), opacity: 0.75}));
  }
  const x = column(data, spec.x).map(esc);
  const out = xyTraces(spec, data, "bar", num).map(t => ({...t, x}));
  const counts = out.length ? out[0].y.map(v => v || 0) : [];
  const total = counts.reduce((a, b) => a + b, 0);
  if (opts.share && total > 0) {
    for (const t of out) {
      t.customdata = t.y.map(v => `${percent(100 * (v || 0) / total)} (${plain(v || 0)} of ${plain(total)})`);
      t.y = t.y.map(v => (v || 0) / total);
    }
  }
  if (total > 0) {
    let run = 0;
    out.push({type: "scatter", mode: "lines", name: "cumulative share", x, yaxis: "y2",
              y: counts.map(c => (run += c) / total), line: {shape: "hv", width: 1.5},
              hovertemplate: "%{y:.1%}<extra>cumulative</extra>"});
  }
  return out;
}

function histLayout(l, {info, data, entry, axis, yTitle: yText}) {
  const spec = info.chart;
  if (!(spec.y || []).length) { l.barmode = "overlay"; return; }
  l.xaxis.type = "category";
  l.yaxis2 = {...axis("cumulative share"), overlaying: "y", side: "right", range: [0, 1.02],
              tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false};
  l.margin.r = 56;
  if (entry.overlay) {
    l.yaxis = {...l.yaxis, ...axis(`share of ${yText}`), tickformat: ".0%", separatethousands: false};
    l.xaxis.categoryorder = "array";
    l.xaxis.categoryarray = binOrder([data, entry.overlay.data].map(d => column(d, spec.x).map(esc)));
  }
}

// timeline: one horizontal bar per row from x to x + z, in lane y, coloured by `color`;
// hovering a bar lists every column of its row.
function timelineTraces(info, data, num) {
  const spec = info.chart;
  const [xi, yi, zi] = [spec.x, (spec.y || [])[0], spec.z].map(c => data.columns.indexOf(c));
  const sx = num.scaled(spec.x), sz = num.scaled(spec.z);
  return groups(data, spec.color).map(g => ({
    type: "bar", orientation: "h", name: esc(g.key === null ? label(spec.z) : g.key),
    base: g.rows.map(r => sx(r[xi])), x: g.rows.map(r => sz(r[zi])),
    y: g.rows.map(r => esc(`${pretty((spec.y || [])[0])} ${r[yi]}`)),
    hovertext: g.rows.map(r => rowText(data, num, r).join("<br>")),
    hoverinfo: "text", marker: {line: {width: 0}},
  }));
}

// scatter: one marker per row (one run of many), in groups by `color`; hover names the row by
// its `text` column and gives x and y by fmt; `id` names the row to a click (plotly_click's
// point.id). With `severity`, the color column holds a severity (or "none"): each group in that
// severity's colour, the worst drawn on top.
const SEVERITIES = {none: "no warnings", info: "info only", warn: "warnings", critical: "critical findings"};
function scatterTraces(info, data, num) {
  const spec = info.chart, y = (spec.y || [])[0];
  const [xi, yi, ti, ii] = [spec.x, y, spec.text, spec.id].map(c => data.columns.indexOf(c));
  const [sx, sy, tx, ty] = [num.scaled(spec.x), num.scaled(y), num.text(spec.x), num.text(y)];
  const hover = `<b>%{text}</b><br>${esc(spec.xlabel || label(spec.x))}: %{customdata[0]}<br>` +
                `${esc(spec.ylabel || label(y))}: %{customdata[1]}<extra></extra>`;
  const rank = Object.keys(SEVERITIES);
  const gs = groups(data, spec.color);
  if (spec.severity) gs.sort((a, b) => rank.indexOf(a.key) - rank.indexOf(b.key));
  return gs.map(g => ({
    type: "scatter", mode: "markers",
    name: spec.severity ? esc(SEVERITIES[g.key] || g.key) : seriesName(spec, g.key, y),
    x: g.rows.map(r => sx(r[xi])), y: g.rows.map(r => sy(r[yi])),
    text: g.rows.map(r => esc(ti < 0 ? "" : r[ti])), ids: ii < 0 ? undefined : g.rows.map(r => String(r[ii])),
    customdata: g.rows.map(r => [tx(r[xi]), ty(r[yi])]), hovertemplate: hover,
    marker: {size: 8, opacity: 0.75, line: {width: 0}, color: spec.severity ? severityColor(g.key) : undefined},
  }));
}

// A table: values by fmt, "all" for the step of a whole-trace row, long text cut with the
// whole of it on hover; it scrolls inside its card.
export function table(el, data, info, limit) {
  const t = document.createElement("table");
  t.className = "rows";
  const head = t.createTHead().insertRow();
  for (const c of data.columns) {
    head.appendChild(Object.assign(document.createElement("th"), {
      textContent: label(c), title: `${c}: ${(info.columns[c] || {}).description || ""}`}));
  }
  const body = t.createTBody();
  for (const r of data.rows.slice(0, limit || 200)) {
    const tr = body.insertRow();
    r.forEach((v, i) => {
      const td = tr.insertCell(), c = data.columns[i];
      td.textContent = v === null && c === "step" ? "all" : fmtNumber(v, fmtOf(info, c));
      if (typeof v === "number" || (v === null && c === "step")) td.className = "n";
      else if (typeof v === "string" && v.length > 48) { td.className = "clip"; td.title = v; }
    });
  }
  el.replaceChildren(t);
}

const xy = spec => ({x: [spec.x], y: spec.y || []});
const plainY = spec => !spec.group && (spec.y || []).length > 0;

export const KINDS = {
  line: {traces: (info, data, num) => xyTraces(info.chart, data, "scatter", num),
         hover: "x unified", oneStep: true, logScale: plainY},
  band: {traces: bandTraces, hover: "x unified", oneStep: true, logScale: plainY, sharedOverlay: true},
  bar: {traces: barTraces(false), logScale: plainY},
  stacked: {traces: barTraces(true),
            // grouped bars stack by their own `base`, so Plotly only places the groups side by side
            layout: (l, {info}) => { if (!info.chart.group) l.barmode = "stack"; }},
  heatmap: {traces: heatmapTraces, axes: spec => ({x: [spec.x], y: [], z: [spec.z]}), lanes: true,
            oneStep: true, marksAbove: true, layout: l => { l.yaxis.type = "category"; }},
  hist: {traces: histTraces, logScale: plainY, sharedOverlay: true,
         layout: (l, ctx) => { l.bargap = 0.04; histLayout(l, ctx); }},
  timeline: {traces: timelineTraces, axes: spec => ({x: [spec.x, spec.z], y: []}), spansX: true, lanes: true,
             layout: l => { l.barmode = "overlay"; l.yaxis.autorange = "reversed"; }},
  scatter: {traces: scatterTraces, fromZero: true},
  table: {draw: table},
};
const DEFAULTS = {axes: xy, hover: "closest", logScale: () => false, layout: () => {}};
for (const [name, kind] of Object.entries(KINDS)) KINDS[name] = {name, ...DEFAULTS, ...kind};

// The renderer of a chart spec; a kind this page does not know draws as lines.
export const kindOf = spec => KINDS[spec.kind] || KINDS.line;

// ---- one step: bars, not a one-point line or a one-column heatmap -------------------------
// line/band: one bar per series; heatmap (lanes): one bar per lane (y) with the z value.
export function stepBars(info, data, num, scales, step, l) {
  const spec = info.chart, pal = palette(), lanes = kindOf(spec).lanes;
  let x, y, text, valueScale, xTitle, yTitleText;
  if (lanes) {
    const yCol = (spec.y || [])[0], [yi, zi] = [yCol, spec.z].map(c => data.columns.indexOf(c));
    const rows = [...data.rows].sort((a, b) => (a[yi] ?? 0) - (b[yi] ?? 0));
    x = rows.map(r => esc(`${pretty(yCol)} ${r[yi]}`));
    y = rows.map(r => num.scaled(spec.z)(r[zi]));
    text = rows.map(r => num.text(spec.z)(r[zi]));
    valueScale = scales.z;
    xTitle = spec.ylabel || label(yCol);
    yTitleText = retitle(axisTitle(info, spec.z), scales.z);
  } else {
    const ts = xyTraces({...spec, kind: "bar"}, data, "bar", num);
    x = ts.map(t => t.name);
    y = ts.map(t => t.y[0]);
    text = ts.map(t => t.customdata[0]);
    valueScale = scales.y;
    xTitle = "";
    yTitleText = retitle(yTitle(info, data), scales.y);
  }
  // lanes of one measure in one colour; different series in their own
  const colors = lanes ? pal[0] : x.map((_, i) => pal[i % pal.length]);
  const trace = {type: "bar", x, y, customdata: text, marker: {color: colors},
                 hovertemplate: "%{x}: %{customdata}<extra></extra>"};
  l.title.text = `${esc(info.title)} · ${esc(spec.xlabel || label(spec.x))} ${esc(step)}`;
  l.xaxis = {...l.xaxis, type: "category", title: {text: esc(xTitle), standoff: 8}, dtick: undefined, tickformat: undefined};
  l.yaxis = {...l.yaxis, type: "linear", title: {text: esc(yTitleText), standoff: 8}, ...axisFormat(valueScale, yTitleText)};
  if (valueScale.kind === "pct" || valueScale.kind === "pct100") l.yaxis.range = [0, valueScale.kind === "pct" ? 1 : 100];
  l.showlegend = false;
  return [trace];
}
