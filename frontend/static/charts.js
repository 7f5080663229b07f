// One renderer for every chart (an ES module; its parts in charts/): it reads a query's @chart
// spec (kind, x, y, z, color, xlabel, ylabel, title) and the rows the REST API returns, and draws
// them with Plotly by the kind's renderer (charts/kinds.js). Charts whose x is the training step
// share one step range on the page, and mark the steps the run's findings are about. The page's
// scripts import it; window.PolyCharts is the same for the console and the browser tests.
import {cssVar, esc, palette, rgba} from "./charts/theme.js";
import {axisScales, column, numbers} from "./charts/axes.js";
import {fmtNumber} from "./charts/format.js";
import {kindOf, stepBars} from "./charts/kinds.js";
import {UNDER_PLOT, layout, placeLegend, sizeMargins} from "./charts/layout.js";
import {LABEL_ROW_PX, MARK_AXIS, findingMarks, peakMark} from "./charts/marks.js";

export const entries = [];
const NEAR_PX = 100;  // a chart this close to the screen counts as in view
const NEAR = `${NEAR_PX}px 0px`;
let range = null;        // [lo, hi] of the selected steps, or null for all
let bounds = null;       // [first, last] step on the page
let marks = {};          // run_id -> [{kind, severity, steps}]
const listeners = [];
export const onRange = fn => listeners.push(fn);

const traces = (info, data, num, opts = {}) => kindOf(info.chart).traces(info, data, num, opts);

// The step a step chart shows when it shows one alone, or null: drawn as bars (stepBars).
function singleStep(entry) {
  const {info, data} = entry, spec = info.chart;
  if (entry.overlay || !info.linked || !kindOf(spec).oneStep) return null;
  const xs = new Set(column(data, spec.x).filter(v => v !== null));
  return xs.size === 1 ? [...xs][0] : null;
}

// ---- a long tail: a log-scale toggle -------------------------------------------------------
function tailed(entry) {
  const spec = entry.info.chart;
  if (!kindOf(spec).logScale(spec)) return false;
  const vals = [entry.data, entry.overlay?.data].filter(Boolean)
    .flatMap(d => (spec.y || []).flatMap(y => column(d, y))).filter(Number.isFinite);
  const pos = vals.filter(v => v > 0);
  return !vals.some(v => v < 0) && pos.length > 1 && Math.max(...pos) / Math.min(...pos) >= 20;
}

function tools(entry) {
  const box = entry.el.closest(".chart-card")?.querySelector(".tools");
  if (!box || box.querySelector(".log-toggle") || !tailed(entry)) return;
  const input = Object.assign(document.createElement("input"), {type: "checkbox"});
  const lab = Object.assign(document.createElement("label"), {className: "log-toggle",
                                                              title: "a long tail: read it on a log scale"});
  lab.append(input, " log scale");
  input.addEventListener("change", async () => {
    entry.logY = input.checked;
    if (entry.el.data) await relayoutSilently(entry, {"yaxis.type": entry.logY ? "log" : "linear", "yaxis.autorange": true});
    entry.el.dataset.logY = entry.logY ? "1" : "0";
  });
  box.appendChild(lab);
}

const config = info => ({
  responsive: true, displaylogo: false,
  // No cloud sharing: the dashboard never sends data off the machine.
  modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "sendChartToCloud"],
  toImageButtonOptions: {format: "png", filename: `polytrace-${info.name}`, scale: 2},
});

function note(entry) {
  const box = entry.el.closest(".chart-card")?.querySelector(".note");
  if (!box) return;
  const d = entry.data, parts = [];
  if (d.downsampled) parts.push(`Downsampled on the server: ${d.downsampled.steps.toLocaleString()} steps ` +
    `shown as ${d.downsampled.points} points, each the mean of ${d.downsampled.width} steps; zoom in for full detail.`);
  if (d.truncated) parts.push("Rows were cut at the server's row cap.");
  const caveat = d.columns.indexOf(entry.info.chart.caveat);
  if (caveat >= 0) parts.push(...new Set(d.rows.map(r => r[caveat]).filter(Boolean)));
  box.textContent = parts.join(" ");
}

// Replace a chart by a message; a purged plot keeps no stale data or listeners.
function message(entry, className, text) {
  if (entry.el.data) { Plotly.purge(entry.el); entry.listening = false; }
  entry.el.replaceChildren(Object.assign(document.createElement("p"), {className, textContent: text}));
  return Promise.resolve();
}

// A step chart's whole-run row (step NULL) is for tables, not for the step axis.
function stepRows(info, data) {
  const xi = data.columns.indexOf(info.chart.x);
  return info.linked && xi >= 0 ? {...data, rows: data.rows.filter(r => r[xi] !== null)} : data;
}

// A series with no value anywhere draws nothing and gets no legend entry.
const hasData = t => t.type === "heatmap" || (t.orientation === "h" ? t.x : (t.y || t.x) || []).some(v => v !== null && v !== undefined);

// The two runs of an overlaid chart: A's series, then B's in the colours after A's (a band or
// histogram in the second colour), dashed, so coinciding lines stay apart.
function overlaid(entry, data, num) {
  const pal = palette(), spec = entry.info.chart;
  const named = (label, t) => ({...t, name: `${label} · ${t.name}`});
  const other = stepRows(entry.overlay.info, entry.overlay.data);
  if (kindOf(spec).sharedOverlay) {
    // bars in the side's colour; lines keep their own colour (a band's) or take the side's
    const side = (d, label, i, dash) => traces(entry.info, d, num, {color: pal[i], share: true}).map(t => {
      const s = named(label, {...t, legendgroup: label});
      if (t.type === "bar") return {...s, marker: {color: rgba(pal[i], 0.75)}, offsetgroup: label};
      return {...s, line: {...t.line, color: t.line?.color ?? pal[i], ...(dash ? {dash} : {})}};
    });
    return [...side(data, entry.label, 0), ...side(other, entry.overlay.label, 1, "dash")];
  }
  const ts = traces(entry.info, data, num).filter(hasData);
  const styled = (label, dash, shift) => (t, i) => ({...named(label, t),
    line: {...t.line, color: pal[(i + shift) % pal.length], dash}, marker: {color: pal[(i + shift) % pal.length]}});
  return [...ts.map(styled(entry.label, "solid", 0)),
          ...traces(entry.info, other, num).map(styled(entry.overlay.label, "dash", ts.length))];
}

function draw(entry) {
  const {el, info} = entry;
  if (!entry.data.ok) return message(entry, "error-line", entry.data.error);
  note(entry);
  const data = stepRows(info, entry.data);
  const none = info.empty || "No data for this run in this range.";
  if (!data.rows.length) return message(entry, "empty", none);
  const kind = kindOf(info.chart);
  if (kind.draw) { kind.draw(el, data, info); return Promise.resolve(); }
  const scales = axisScales(info, kind, entry.overlay ? [data, entry.overlay.data] : [data]);
  const num = numbers(info, scales);
  entry.scales = scales;
  let l = layout(info, kind, data, scales, entry, range);
  const step = singleStep(entry);
  let ts = step !== null ? stepBars(info, data, num, scales, step, l)
    : entry.overlay ? overlaid(entry, data, num) : traces(info, data, num);
  ts = ts.filter(hasData);
  if (!ts.length) return message(entry, "empty", none);
  entry.anchored = ts.some(t => t.type === "heatmap" && (t.zmin !== undefined || t.zmid !== undefined));
  const shown = ts.filter(t => t.showlegend !== false && t.type !== "heatmap").map(t => t.name);
  if (step === null) l = placeLegend(l, shown);
  const uniform = ts.find(t => t.meta?.uniform);
  if (uniform) {
    l.annotations = [{xref: "paper", yref: "paper", x: 0.5, y: 0.5, showarrow: false, text: uniform.meta.uniform,
                      font: {size: 13}, bgcolor: rgba(cssVar("--card"), 0.85), name: "uniform"}];
  }
  const peak = info.chart.peak && step === null && !entry.overlay ? peakMark(info, data, num) : null;
  if (peak) l.annotations = [...(l.annotations || []), peak];
  const found = findingMarks(entry, marks);
  if (found.traces.length) {
    l.shapes = found.shapes;
    l.annotations = [...(l.annotations || []), ...found.annotations];
    if (found.annotations.length) {
      // the labels' rows between the title (held at the top) and the plot; a legend row there
      // goes under the plot
      l.title = {...l.title, yref: "container", y: 1, yanchor: "top", pad: {t: 12}};
      if (l.legend.orientation === "h" && l.legend.yref !== "container" && l.showlegend !== false) l.legend = {...UNDER_PLOT};
      l.margin.t = Math.max(l.margin.t, 44) + 12 + LABEL_ROW_PX * found.annotations.length;
    }
    l[`yaxis${MARK_AXIS.slice(1)}`] = {overlaying: "y", range: [0, 1.02], visible: false, fixedrange: true};
    ts = [...ts, ...found.traces];
  }
  return Plotly.react(el, ts, sizeMargins(l, ts, shown, [el.clientWidth || 600, el.clientHeight || 380]), config(info)).then(() => {
    if (!entry.listening) { el.on("plotly_relayout", ev => onZoom(entry, ev)); entry.listening = true; }
    tools(entry);
  });
}

// The REST rows of the chart's query, downsampled and windowed by its display parameters.
function dataUrl(info, extra) {
  const q = new URLSearchParams({...info.params, _points: info.points, ...extra});
  return `/api/queries/${encodeURIComponent(info.name)}?${q}`;
}

const getJson = url => fetch(url).then(res => res.json());

// Re-fetch a chart's rows and draw them with `paint` (draw, or redraw: once in view).
async function refetch(entry, extra, paint = draw) {
  const gen = (entry.gen = (entry.gen || 0) + 1);
  const [data, other] = await Promise.all([
    getJson(dataUrl(entry.info, extra)),
    entry.overlay ? getJson(dataUrl(entry.overlay.info, extra)) : null]);
  if (gen !== entry.gen) return;  // a newer selection superseded this one
  entry.data = data;
  if (other) entry.overlay.data = other;
  await repaint(entry, gen, paint);
}

// A chart's new rows drawn: at once if it was drawn, else (not drawn yet) when it comes into view.
async function repaint(entry, gen, paint) {
  if (entry.drawn) await paint(entry);
  else if (entry.shown) { await entry.shown; if (gen === entry.gen) await paint(entry); }
}

async function relayoutSilently(entry, update) {
  entry.silent = true;
  try { await Plotly.relayout(entry.el, update); } finally { entry.silent = false; }
}

async function applyRange(entry) {
  const {info, el} = entry;
  if (!entry.drawn) return;  // it applies the range when it is drawn
  if (info.step_params) {
    await refetch(entry, range ? {step_from: range[0], step_to: range[1]} : {});
  } else if (info.linked) {
    if (entry.data.downsampled || entry.overlay?.data.downsampled || entry.windowed) {
      entry.windowed = !!range;
      await refetch(entry, range ? {_x_from: range[0], _x_to: range[1]} : {});
    }
    if (el.data) await relayoutSilently(entry, range ? {"xaxis.range": [range[0] - 0.5, range[1] + 0.5]}
                                                     : {"xaxis.autorange": true});
  }
  el.dataset.range = range ? `${range[0]}-${range[1]}` : "all";
}

// [lo, hi] within the page's steps, or null for all of them.
function clamp(lo, hi) {
  if (lo !== null && bounds) {
    lo = Math.max(bounds[0], Math.min(lo, bounds[1]));
    hi = Math.max(lo, Math.min(hi, bounds[1]));
  }
  return lo === null ? null : [lo, hi];
}

async function setRange(lo, hi) {
  const next = clamp(lo, hi);
  if (JSON.stringify(next) === JSON.stringify(range)) return;
  range = next;
  listeners.forEach(fn => fn(range, bounds));
  await Promise.all(entries.filter(e => e.info.linked || e.info.step_params).map(applyRange));
}

function onZoom(entry, ev) {
  if (entry.silent || !entry.info.linked) return;
  if ("xaxis.range[0]" in ev) setRange(Math.ceil(ev["xaxis.range[0]"]), Math.floor(ev["xaxis.range[1]"]));
  else if (Array.isArray(ev["xaxis.range"])) setRange(Math.ceil(ev["xaxis.range"][0]), Math.floor(ev["xaxis.range"][1]));
  else if (ev["xaxis.autorange"]) setRange(null, null);
}

// ---- drawing what is in view first -----------------------------------------------------------
// A page's charts draw as they come into view (an IntersectionObserver), the first screen at
// once; the rest follow one by one in page order, the browser getting a turn (input, scrolling,
// painting) between two of them, so that every chart is drawn without scrolling too and one
// scrolled to goes first. Each is marked data-rendered when drawn; the body is marked
// data-charts-visible once the charts of the first screen are drawn and data-charts-ready
// once every chart is.
// A new task (not scheduler.yield(), whose continuations may go before rendering, and so before
// the IntersectionObserver's news of a scroll; nor setTimeout, clamped when nested).
const pause = () => new Promise(resolve => {
  const channel = new MessageChannel();
  channel.port1.onmessage = () => resolve();
  channel.port2.postMessage(null);
});

// Draw an entry once (later calls wait for that drawing), at the page's step range.
function show(entry) {
  entry.shown = entry.shown || (async () => {
    await draw(entry);
    entry.drawn = true;
    if (range && (entry.info.linked || entry.info.step_params)) await applyRange(entry);
    entry.el.dataset.rendered = "1";
  })();
  return entry.shown;
}

// An entry and the charts drawn beside it on one scale (options.together of page()).
function showWith(entry) {
  const group = entry.together;
  if (!group) return show(entry);
  group.matched = group.matched || Promise.all(group.map(show)).then(() => matchAxes(group.map(e => e.el)));
  return group.matched;
}

function drawLazily(list) {
  if (!list.length || !("IntersectionObserver" in window)) return Promise.all(list.map(showWith));
  const byEl = new Map(list.map(e => [e.el, e]));
  return new Promise(resolve => {
    let first = true;
    const observer = new IntersectionObserver(seen => {
      const now = seen.filter(s => s.isIntersecting).map(s => byEl.get(s.target));
      for (const e of now) observer.unobserve(e.el);
      const drawing = Promise.all(now.map(showWith));
      if (!first) return;
      first = false;
      drawing.then(async () => {
        document.body.dataset.chartsVisible = "1";
        for (const e of list) {
          if (e.shown) continue;
          await pause();
          observer.unobserve(e.el);
          await showWith(e);
        }
        await Promise.all(list.map(showWith));
        observer.disconnect();
        resolve();
      });
    }, {rootMargin: NEAR});
    for (const e of list) observer.observe(e.el);
  });
}

function stepBounds(list) {
  let lo = Infinity, hi = -Infinity;
  for (const e of list) {
    const b = e.data.x_bounds;
    if (e.info.linked && b) { lo = Math.min(lo, b[0]); hi = Math.max(hi, b[1]); }
  }
  return lo <= hi ? [lo, hi] : null;
}

// Draw every chart of a page: charts = [{...info, data, el_id?, overlay?, label?}];
// each draws into #<el_id>, by default #chart-<name>, when it comes into view (drawLazily).
// options.marks: run_id -> findings to mark on the step charts; options.range: the step
// range to open at; options.together: lists of chart elements drawn side by side, given one
// scale (matchAxes) once all of a list are drawn.
async function page(charts, options = {}) {
  marks = options.marks || {};
  const other = o => o && {info: o, data: o.data, label: o.label};
  const added = charts.map(c => ({el: document.getElementById(c.el_id || "chart-" + c.name), info: c,
                                  data: c.data, overlay: other(c.overlay), label: c.label}));
  entries.push(...added);
  for (const els of options.together || []) {
    const group = added.filter(e => els.includes(e.el));
    for (const e of group) e.together = group;
  }
  bounds = stepBounds(entries);
  if (options.range && bounds) range = clamp(...options.range);
  listeners.forEach(fn => fn(range, bounds));
  await drawLazily(added);
  document.body.dataset.chartsReady = "1";
}

// ---- a live run's new steps -------------------------------------------------------------------
// A step chart that shows every step fetches only its rows from its last point on (_since: the
// server computes those steps alone, bucketed as the chart's are with _width) and puts them in
// place of its own from there, so a run of 10,000 steps costs what its newest steps cost. It
// fetches whole when that would not give what a whole fetch gives: its buckets would widen, or
// the series outgrows the points it is drawn with; and so do a chart with a range, an error, no
// row or a cut at the row cap, a heatmap and an overlay.
function tail(entry) {
  const {info, data} = entry;
  if (range || entry.windowed || entry.overlay || !info.linked || info.chart.kind === "heatmap"
      || !data?.ok || data.truncated || !data.x_bounds) return null;
  const xs = column(data, info.chart.x);
  if (!xs.length || !xs.every(Number.isInteger)) return null;  // a whole-run row (step NULL) is all steps
  const since = Math.max(...xs), was = data.downsampled;
  return {since, params: was ? {_since: since, _width: was.width} : {_since: since},
          merge: got => merged(info, data, got, since)};
}

// `data` with its rows from `since` on replaced by `got`'s, or null where a whole fetch differs.
function merged(info, data, got, since) {
  const xi = data.columns.indexOf(info.chart.x), was = data.downsampled, points = info.points;
  if (!got.ok || got.truncated || !got.rows.length || String(got.columns) !== String(data.columns)
      || !was !== !got.downsampled) return null;
  const rows = [...data.rows.filter(r => r[xi] === null || r[xi] < since), ...got.rows];
  const [lo, hi] = [data.x_bounds[0], Math.max(data.x_bounds[1], got.x_bounds[1])];
  const xs = new Set(rows.map(r => r[xi]).filter(x => x !== null));
  if (!was) return xs.size > points ? null : {...data, rows, x_bounds: [lo, hi]};
  const steps = was.steps - was.last_bucket_steps + got.downsampled.steps;
  if (steps <= points || Math.ceil((hi - lo + 1) / points) !== was.width) return null;
  return {...data, rows, x_bounds: [lo, hi],
          downsampled: {...got.downsampled, steps, points: xs.size}};
}

async function refetchNew(entry) {
  const t = tail(entry);
  if (!t) return refetch(entry, {}, redraw);
  const gen = (entry.gen = (entry.gen || 0) + 1);
  const data = t.merge(await getJson(dataUrl(entry.info, t.params)));
  if (gen !== entry.gen) return;
  if (!data) return refetch(entry, {}, redraw);
  entry.data = data;
  await repaint(entry, gen, redraw);
}

// A live run's charts follow it: those in view fetch their new rows and redraw first; the others
// fetch theirs after them and redraw when they come into view (Plotly takes a second for a page
// of 12 charts of 600 points, and the server's queries for those in view go first).
const outOfView = "IntersectionObserver" in window && new IntersectionObserver(seen => {
  for (const s of seen.filter(s => s.isIntersecting)) {
    outOfView.unobserve(s.target);
    const entry = entries.find(e => e.el === s.target);
    if (entry?.stale) { entry.stale = false; draw(entry); }
  }
}, {rootMargin: NEAR});

function inView(el) {
  const box = el.getBoundingClientRect();
  return !outOfView || (box.bottom >= -NEAR_PX && box.top <= innerHeight + NEAR_PX);
}

// Draw a chart now if it is in view, else once it comes into view.
function redraw(entry) {
  if (inView(entry.el)) {
    entry.stale = false;
    return draw(entry);
  }
  if (!entry.stale) { entry.stale = true; outOfView.observe(entry.el); }
  return Promise.resolve();
}

// Re-fetch every chart's rows in place (a live run's new steps: refetchNew), those in view first
// (the others in the background), and mark `newMarks` (run_id -> findings) on them. A step range
// the user chose stays; without one the charts show every step, so they follow the newest.
async function refreshAll(newMarks) {
  if (newMarks) marks = newMarks;
  const near = entries.filter(e => inView(e.el)), far = entries.filter(e => !near.includes(e));
  await Promise.all(near.map(catchUp));
  followBounds();
  // a chart whose fetch failed keeps its rows until the run's next change
  Promise.allSettled(far.map(catchUp)).then(followBounds);
}

function followBounds() {
  bounds = stepBounds(entries);
  listeners.forEach(fn => fn(range, bounds));
}

// A chart's new rows at the step range the page shows.
function catchUp(entry) {
  if (!range) return refetchNew(entry);
  const {info} = entry;
  return refetch(entry, info.step_params ? {step_from: range[0], step_to: range[1]}
    : info.linked && entry.windowed ? {_x_from: range[0], _x_to: range[1]} : {}, redraw);
}

// Mark `newMarks` (run_id -> findings) on the charts drawn, with the rows they have.
function remark(newMarks) {
  if (JSON.stringify(newMarks) === JSON.stringify(marks)) return;
  marks = newMarks;
  entries.filter(e => e.drawn).forEach(redraw);
}

// Give side-by-side charts the same y (and colour) scale so that they compare by eye.
// Each side may show durations in its own unit: ranges are compared in the columns' unit.
// Heatmaps on an anchored scale already share it.
async function matchAxes(els) {
  const drawn = els.filter(el => el && el._fullLayout && el.data && el.data.length);
  if (drawn.length < 2) return;
  const entryOf = el => entries.find(e => e.el === el);
  const factor = (el, axis) => (entryOf(el)?.scales?.[axis] || {}).factor || 1;
  const heat = drawn.every(el => el.data[0].type === "heatmap");
  if (heat) {
    if (drawn.some(el => entryOf(el)?.anchored)) return;
    const zs = drawn.flatMap(el => el.data[0].z.flat().filter(v => v !== null).map(v => v / factor(el, "z")));
    const lo = Math.min(...zs), hi = Math.max(...zs);
    for (const el of drawn) await Plotly.restyle(el, {zmin: lo * factor(el, "z"), zmax: hi * factor(el, "z")}, [0]);
    return;
  }
  if (new Set(drawn.map(el => el._fullLayout.yaxis.type)).size > 1) return;
  const ranges = drawn.map(el => el._fullLayout.yaxis.range.map(v => v / factor(el, "y")));
  const r = [Math.min(...ranges.map(x => x[0])), Math.max(...ranges.map(x => x[1]))];
  for (const el of drawn) {
    const entry = entryOf(el);
    if (entry) await relayoutSilently(entry, {"yaxis.range": r.map(v => v * factor(el, "y"))});
  }
}

matchMedia("(prefers-color-scheme: dark)").addEventListener("change",
                                                           () => entries.filter(e => e.drawn).forEach(draw));

export {page, draw, setRange, refreshAll, remark, matchAxes, esc, fmtNumber};
export const PolyCharts = {page, draw, setRange, refreshAll, remark, matchAxes, onRange, entries, esc, fmtNumber};
window.PolyCharts = PolyCharts;
