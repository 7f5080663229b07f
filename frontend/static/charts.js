"use strict";
// One renderer for every chart: it reads a query's @chart spec (kind, x, y, z, color,
// xlabel, ylabel, title) and the rows the REST API returns, and draws them with Plotly.
// Charts whose x is the training step share one step range on the page, and mark the steps
// the run's findings are about.
const PolyCharts = (() => {
  const PALETTES = {
    light: ["#2f6fb0", "#e4761b", "#3a9a4a", "#d2424c", "#8463b5", "#1b9e9e", "#b8961a",
            "#d45fa0", "#6f6f6f", "#8c564b"],
    dark: ["#6aa8e8", "#f5a04d", "#6cc56f", "#f07178", "#b594e6", "#4fd1c5", "#e6c84d",
           "#f08ac2", "#b0b0b0", "#c49c94"],
  };
  const MARK_AXIS = "y5";  // the hidden 0-1 axis finding markers sit on
  const entries = [];
  let range = null;        // [lo, hi] of the selected steps, or null for all
  let bounds = null;       // [first, last] step on the page
  let marks = {};          // run_id -> [{kind, severity, steps}]
  const listeners = [];

  const scheme = () => matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  const palette = () => PALETTES[scheme()];
  const cssVar = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim();
  const severityColor = s => cssVar({critical: "--danger", warn: "--warn"}[s] || "--muted");

  // Plotly reads a subset of HTML in every text it draws (names, tick labels, hover): whatever
  // comes from the data goes in escaped, so a kernel named <a href=...> reads as text.
  const esc = v => String(v ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

  function column(data, name) {
    const i = data.columns.indexOf(name);
    return i < 0 ? [] : data.rows.map(r => r[i]);
  }

  function rgba(color, alpha) {
    const hex = color.startsWith("#") ? color : "#888888";
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // "Median response length (tokens)." -> unit "tokens"; the column name reads as the label.
  function unitOf(info, col) {
    const d = (info.columns[col] || {}).description || "";
    const m = d.match(/\(([^()]*)\)\.?\s*$/) || d.match(/\((tokens|chars|s|seconds|ms|us|µs|%|GPU-hours)\)/);
    return m ? m[1] : "";
  }
  const pretty = col => String(col).replace(/_/g, " ");
  // A column as a reader names it: no duration or share suffix (the axis or the value carries
  // the unit); a percentage keeps its "%" (gpu_time has idle_us and idle_pct).
  const WORDS = {dur: "duration", pct: "%"};
  function label(col) {
    const base = String(col).replace(/_(us|ms|s|frac)$/, "");
    return base.split("_").map(w => WORDS[w] || w).join(" ");
  }
  function axisTitle(info, col) {
    if (!col) return "";
    const unit = unitOf(info, col);
    return unit ? `${label(col)} (${unit})` : label(col);
  }
  function yTitle(info) {
    const spec = info.chart;
    if (spec.ylabel) return spec.ylabel;
    const ys = spec.y || [];
    if (ys.length === 1) return axisTitle(info, ys[0]);
    const units = [...new Set(ys.map(y => unitOf(info, y)))];
    return units.length === 1 && units[0] ? units[0] : "";
  }

  // ---- numbers, by their column's fmt tag (queries/README.md) ----------------------------------
  // pct is a 0-1 share, pct100 already 0-100, x a ratio, s/ms/us durations, gpu_h GPU-hours,
  // tokens and count plain numbers with thousands separators. Hover text and tables show each
  // value in its own readable unit; a duration axis picks one unit (µs to h) for its range.
  const SECONDS = {s: 1, ms: 1e-3, us: 1e-6};
  const FONT = "system-ui, -apple-system, Segoe UI, sans-serif";
  const DURATION_UNITS = [["h", 3600, 3 * 3600], ["min", 60, 600], ["s", 1, 1], ["ms", 1e-3, 1e-3], ["µs", 1e-6, 0]];
  const kindOf = (info, col) => ((info.columns || {})[col] || {}).fmt || null;
  // v.toLocaleString("en-US", opts), with each NumberFormat made once: making one is most of its cost.
  const formats = new Map();
  const en = (v, opts) => {
    const key = opts ? JSON.stringify(opts) : "";
    if (!formats.has(key)) formats.set(key, new Intl.NumberFormat("en-US", opts));
    return formats.get(key).format(v);
  };
  const plain = v => Number.isInteger(v) ? en(v) :
    Math.abs(v) < 1000 ? en(v, {maximumSignificantDigits: 3}) : en(v, {maximumFractionDigits: 0});
  // 41%, 3.8%, and one significant digit below 0.1% (0.02%), never a 0.0% that is not 0
  const percent = p => `${Math.abs(p) >= 10 ? p.toFixed(0) : p !== 0 && Math.abs(p) < 0.1 ? en(p, {maximumSignificantDigits: 1}) : p.toFixed(1)}%`;

  function duration(sec) {
    const a = Math.abs(sec);
    if (a >= 3 * 3600) return `${en(sec / 3600, {maximumSignificantDigits: 3})} h`;
    if (a >= 600) return `${en(sec / 60, {maximumFractionDigits: 0})} min`;
    if (a >= 100) return `${en(sec, {maximumFractionDigits: 0})} s`;
    // below a second in ms, below a ms in µs, by the value as rounded (0.9996 s reads 1.0 s)
    if (a >= 1 || sec === 0 || Math.abs(Number((sec * 1e3).toPrecision(3))) >= 1000) return `${sec.toFixed(1)} s`;
    if (Math.abs(Number((sec * 1e6).toPrecision(3))) >= 1000) return `${en(sec * 1e3, {maximumSignificantDigits: 3})} ms`;
    return `${en(sec * 1e6, {maximumSignificantDigits: 3})} µs`;
  }

  function bytes(v) {
    const units = ["B", "kB", "MB", "GB", "TB", "PB"];
    let u = 0;
    while (Math.abs(v) >= 1000 && u < units.length - 1) { v /= 1000; u += 1; }
    return `${u ? en(v, {maximumSignificantDigits: 3}) : v.toFixed(0)} ${units[u]}`;
  }

  function fmtNumber(v, kind) {
    if (v === null || v === undefined) return "";
    if (typeof v !== "number" || !Number.isFinite(v)) return String(v);
    switch (kind) {
      case "pct": return percent(v * 100);
      case "pct100": return percent(v);
      case "x": return `${Math.abs(v) < 10 ? v.toFixed(2) : v.toFixed(1)}×`;
      case "s": case "ms": case "us": return duration(v * SECONDS[kind]);
      case "gpu_h": return `${Math.abs(v) >= 100 ? en(v, {maximumFractionDigits: 0}) : en(v, {maximumSignificantDigits: 3})} GPU-hours`;
      case "bytes": return bytes(v);
      case "tokens": case "count": return plain(v);
      default: return Number.isInteger(v) ? en(v) : en(v, {maximumSignificantDigits: 4});
    }
  }

  // The largest |value| of some columns, in seconds for a duration kind.
  function largest(data, cols, kind) {
    let top = 0;
    for (const c of cols) {
      const i = data.columns.indexOf(c);
      if (i < 0) continue;
      for (const r of data.rows) if (typeof r[i] === "number" && Number.isFinite(r[i])) top = Math.max(top, Math.abs(r[i]));
    }
    return top * (SECONDS[kind] || 1);
  }

  // Each axis (x, y, z) of a chart: the fmt its columns share, and for durations the unit it
  // shows and the factor from the columns' unit to it. `datas` are all the rows drawn on it
  // (two runs on an overlaid chart), so both use one unit.
  function axisScales(info, datas) {
    const spec = info.chart, out = {};
    const cols = {
      x: spec.kind === "timeline" ? [spec.x, spec.z] : [spec.x],
      y: ["heatmap", "timeline"].includes(spec.kind) ? [] : (spec.y || []),
      z: spec.kind === "heatmap" ? [spec.z] : [],
    };
    for (const [axis, names] of Object.entries(cols)) {
      const kinds = [...new Set(names.filter(Boolean).map(c => kindOf(info, c)))];
      const kind = kinds.length === 1 ? kinds[0] : null;
      out[axis] = {kind, cols: names, factor: 1, unit: null};
      if (kind in SECONDS) {
        // a timeline's bars end at x + z: the unit must hold start plus length
        const top = spec.kind === "timeline" && axis === "x"
          ? Math.max(...datas.map(d => largest(d, [spec.x], kind) + largest(d, [spec.z], kind)))
          : Math.max(...datas.map(d => largest(d, names, kind)));
        const [unit, size] = DURATION_UNITS.find(([, , from]) => top >= from);
        out[axis] = {...out[axis], unit, factor: SECONDS[kind] / size};
      }
    }
    return out;
  }

  // What a trace builder needs: plotted values scaled to their axis' unit, hover text by fmt.
  function numbers(info, scales) {
    const factor = new Map();
    for (const a of Object.values(scales)) for (const c of a.cols) if (c) factor.set(c, a.factor);
    return {
      scales,
      scaled: col => {
        const f = factor.get(col) || 1;
        return v => (f !== 1 && typeof v === "number") ? v * f : v;
      },
      text: col => v => esc(fmtNumber(v, kindOf(info, col))),
    };
  }

  const DURATION_IN_TITLE = /\((?:us|µs|ms|s|sec|seconds)\)/;

  // Plotly axis attributes for a scale: tick labels in the fmt's terms; a duration's unit goes
  // into the title's "(unit)" when it has one, else after each tick.
  function axisFormat(scale, title) {
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
  const retitle = (title, scale) => scale.unit ? String(title || "").replace(DURATION_IN_TITLE, `(${scale.unit})`) : title;

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
  function groupedBarTraces(spec, data, num) {
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
          base: spec.kind === "stacked" ? [...base] : undefined,
          marker: {color: light ? rgba(color, 0.16) : color,
                   line: {color, width: light ? 1 : 0},
                   pattern: light ? {shape: "/", fgcolor: rgba(color, 0.55), size: 6, solidity: 0.25} : undefined},
          hovertext: g.rows.map(r => [`<b>${name} · ${esc(label(y))}</b>`, ...rowText(data, num, r)].join("<br>")),
          hoverinfo: "text",
        });
        if (spec.kind === "stacked") vals.forEach((v, i) => { base[i] += v || 0; });
      });
    });
    return out;
  }

  // band: quantile lines, lowest first, the space between them shaded in one colour.
  function bandTraces(spec, data, num, base = palette()[0]) {
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
    const spec = info.chart, kind = kindOf(info, spec.z), zs = column(data, spec.z).filter(Number.isFinite);
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

  function heatmapTrace(spec, data, num, info) {
    const yCol = (spec.y || [])[0];
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
    return [{type: "heatmap", x: xs, y: ys.map(v => v === null ? "n/a" : esc(v)), z, text, ...colors,
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
  function histTraces(spec, data, num, opts = {}) {
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

  // timeline: one horizontal bar per row from x to x + z, in lane y, coloured by `color`;
  // hovering a bar lists every column of its row.
  function timelineTraces(spec, data, num) {
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
  function scatterTraces(spec, data, num) {
    const y = (spec.y || [])[0];
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

  function traces(info, data, num, opts = {}) {
    const spec = info.chart;
    switch (spec.kind) {
      case "scatter": return scatterTraces(spec, data, num);
      case "timeline": return timelineTraces(spec, data, num);
      case "band": return bandTraces(spec, data, num, opts.color);
      case "bar": case "stacked":
        return spec.group ? groupedBarTraces(spec, data, num) : xyTraces(spec, data, "bar", num);
      case "heatmap": return heatmapTrace(spec, data, num, info);
      case "hist": return histTraces(spec, data, num, opts);
      default: return xyTraces(spec, data, "scatter", num);
    }
  }

  // ---- one step: bars, not a one-point line or a one-column heatmap -------------------------
  function singleStep(entry) {
    const {info, data} = entry, spec = info.chart;
    if (entry.overlay || !info.linked || !["line", "band", "heatmap"].includes(spec.kind)) return null;
    const xs = new Set(column(data, spec.x).filter(v => v !== null));
    return xs.size === 1 ? [...xs][0] : null;
  }

  // line/band: one bar per series; heatmap: one bar per lane (y) with the z value.
  function singleStepChart(info, data, num, scales, step, l) {
    const spec = info.chart, pal = palette();
    let x, y, text, valueScale, xTitle, yTitleText;
    if (spec.kind === "heatmap") {
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
      yTitleText = retitle(yTitle(info), scales.y);
    }
    // lanes of one measure in one colour; different series in their own
    const colors = spec.kind === "heatmap" ? pal[0] : x.map((_, i) => pal[i % pal.length]);
    const trace = {type: "bar", x, y, customdata: text, marker: {color: colors},
                   hovertemplate: "%{x}: %{customdata}<extra></extra>"};
    l.title.text = `${esc(info.title)} · ${esc(spec.xlabel || label(spec.x))} ${esc(step)}`;
    l.xaxis = {...l.xaxis, type: "category", title: {text: esc(xTitle), standoff: 8}, dtick: undefined, tickformat: undefined};
    l.yaxis = {...l.yaxis, type: "linear", title: {text: esc(yTitleText), standoff: 8}, ...axisFormat(valueScale, yTitleText)};
    if (valueScale.kind === "pct" || valueScale.kind === "pct100") l.yaxis.range = [0, valueScale.kind === "pct" ? 1 : 100];
    l.showlegend = false;
    return [trace];
  }

  function layout(info, data, scales, entry) {
    const spec = info.chart, fg = cssVar("--fg"), grid = cssVar("--grid");
    const xTitle = retitle(spec.xlabel || axisTitle(info, spec.x), scales.x);
    const yTitleText = retitle(yTitle(info), scales.y);
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
      hovermode: ["line", "band"].includes(spec.kind) ? "x unified" : "closest",
      hoverlabel: {bgcolor: cssVar("--card"), bordercolor: grid, font: {color: fg}},
      // grouped bars stack by their own `base`, so Plotly only places the groups side by side
      barmode: spec.kind === "stacked" && !spec.group ? "stack" : "group",
      bargap: spec.kind === "hist" ? 0.04 : 0.15,
    };
    if (spec.x === "step") l.xaxis.tickformat = "d";
    // Few integer x values (steps, ranks): one tick each, never fractional in-between ticks.
    const xs = column(data, spec.x);
    if (spec.kind !== "timeline" && xs.length && xs.every(Number.isInteger)) {
      // a scatter's axis starts at 0 (rangemode tozero), so its span runs from there
      const lo = Math.min(...xs, ...(spec.kind === "scatter" ? [0] : [])), hi = Math.max(...xs);
      if (hi - lo <= 30) { l.xaxis.dtick = 1; l.xaxis.tickformat = "d"; }
    }
    if (spec.kind === "heatmap") l.yaxis.type = "category";
    // a share is never below 0%: all zeros would get Plotly's -100% to 100%, the bars lost in it
    const shares = ["pct", "pct100"].includes(scales.y.kind) && !["heatmap", "timeline"].includes(spec.kind);
    if (shares && !(spec.y || []).some(y => column(data, y).some(v => v < 0))) l.yaxis.rangemode = "nonnegative";
    // a scatter of figures starts its axes at 0, but for ratios (1× is even)
    if (spec.kind === "scatter") for (const a of ["x", "y"]) if (scales[a].kind !== "x") l[`${a}axis`].rangemode = "tozero";
    if (spec.kind === "hist" && !(spec.y || []).length) l.barmode = "overlay";
    if (spec.kind === "hist" && (spec.y || []).length) {
      l.xaxis.type = "category";
      l.yaxis2 = {...axis("cumulative share"), overlaying: "y", side: "right", range: [0, 1.02],
                  tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false};
      l.margin.r = 56;
      if (entry.overlay) {
        l.yaxis = {...l.yaxis, ...axis(`share of ${yTitleText}`), tickformat: ".0%", separatethousands: false};
        l.xaxis.categoryorder = "array";
        l.xaxis.categoryarray = binOrder([data, entry.overlay.data].map(d => column(d, spec.x).map(esc)));
      }
    }
    if (spec.kind === "timeline") {
      l.barmode = "overlay";
      l.yaxis.autorange = "reversed";
      l.hovermode = "closest";
    }
    if (entry.logY) l.yaxis.type = "log";
    if (range && info.linked) l.xaxis.range = [range[0] - 0.5, range[1] + 0.5];
    return l;
  }

  // Many series: a legend column on the right instead of rows that crowd the title; a few
  // long names: rows under the plot, where wrapping cannot cover the title.
  function placeLegend(l, names) {
    const count = names.length, chars = names.reduce((n, s) => n + String(s).length + 4, 0);
    if (count > 1 && count <= 5 && chars > 64) {
      l.legend = {orientation: "h", x: 0, xanchor: "left", yref: "container", y: 0, yanchor: "bottom",
                  font: {size: 11}};
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
  // Pixels beside a label's text: an axis's ticks and title (12 px labels), a legend's swatch
  // and padding (11 px names); measured on Plotly's own drawing.
  const AXIS_PX = 36, AXIS_BOTTOM = 48, LEGEND_PX = 82, LEGEND_ENTRY_PX = 46, LEGEND_ROW_PX = 19;
  const COLORBAR_R = 120, COLORBAR_B = 53;

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

  function sizeMargins(l, ts, legendNames, [width, height]) {
    const m = l.margin, y = yLabelWidth(l, ts, height - m.t - m.b);
    if (y !== null) m.l = Math.max(m.l, Math.ceil(y + AXIS_PX));
    if (l.yaxis2 && l.yaxis2.side === "right") m.r = Math.max(m.r, Math.ceil(textWidth("100%", 12) + AXIS_PX));
    const legend = l.showlegend !== false && legendNames.length ? l.legend : null;
    const nameWidth = widest(legendNames, 11);
    if (legend && legend.orientation === "v") m.r = Math.max(m.r, Math.ceil(nameWidth + LEGEND_PX));
    if (ts.some(t => t.type === "heatmap" && t.showscale !== false)) {
      m.r = Math.max(m.r, COLORBAR_R);
      m.b = Math.max(m.b, COLORBAR_B);
    }
    const plotWidth = width - m.l - m.r;
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

  // ---- findings on the step charts -----------------------------------------------------------
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

  // Shapes that draw an entry's findings and invisible-to-faint markers along the top that
  // name each one on hover. A span over every step of the chart says nothing: left out.
  function findingMarks(entry) {
    const out = {shapes: [], annotations: [], traces: []};
    if (!entry.info.linked) return out;
    const sources = [[entry.info, entry.data, entry.overlay ? `${entry.label}: ` : ""]];
    if (entry.overlay) sources.push([entry.overlay.info, entry.overlay.data, `${entry.overlay.label}: `]);
    const heat = entry.info.chart.kind === "heatmap";
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
                           fillcolor: rgba(color, heat ? 0.18 : 0.1), line: {width: heat ? 1 : 0, color, dash: "dot"},
                           layer: heat ? "above" : "below", name: f.kind});
          // one label per finding at its first span, stacked under the ones before it
          if (!i) out.annotations.push({x: lo - 0.5, xref: "x", y: 1, yref: "paper", xanchor: "left", yanchor: "top",
                                        yshift: -15 * out.annotations.length, text: name, showarrow: false,
                                        font: {size: 10, color}, bgcolor: rgba(cssVar("--card"), 0.75)});
          const every = Math.max(1, Math.ceil((hi - lo + 1) / 300));
          for (let s = lo; s <= hi; s += every) { px.push(s); opacity.push(0); }
        });
        for (const s of lines) {
          out.shapes.push({type: "line", xref: "x", yref: "paper", x0: s, x1: s, y0: 0, y1: 1, name: f.kind,
                           line: {color, width: 1.5, dash: "dot"}, layer: "above"});
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

  // ---- a long tail: a log-scale toggle -------------------------------------------------------
  function tailed(entry) {
    const spec = entry.info.chart;
    if (!["line", "band", "hist", "bar"].includes(spec.kind) || spec.group || !(spec.y || []).length) return false;
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

  // A table: values by fmt, "all" for the step of a whole-trace row, long text cut with the
  // whole of it on hover; it scrolls inside its card.
  function table(el, data, info, limit) {
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
        td.textContent = v === null && c === "step" ? "all" : fmtNumber(v, kindOf(info, c));
        if (typeof v === "number" || (v === null && c === "step")) td.className = "n";
        else if (typeof v === "string" && v.length > 48) { td.className = "clip"; td.title = v; }
      });
    }
    el.replaceChildren(t);
  }

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
    if (spec.kind === "band" || spec.kind === "hist") {
      const side = (d, label, i, dash) => traces(entry.info, d, num, {color: pal[i], share: true}).map(t => {
        const s = named(label, {...t, legendgroup: label});
        if (t.type === "bar") return {...s, marker: {color: rgba(pal[i], 0.75)}, offsetgroup: label};
        if (spec.kind === "hist") return {...s, line: {...t.line, color: pal[i], dash}};
        return dash ? {...s, line: {...t.line, dash}} : s;
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
    if (info.chart.kind === "table") { table(el, data, info); return Promise.resolve(); }
    const scales = axisScales(info, entry.overlay ? [data, entry.overlay.data] : [data]);
    const num = numbers(info, scales);
    entry.scales = scales;
    let l = layout(info, data, scales, entry);
    const step = singleStep(entry);
    let ts = step !== null ? singleStepChart(info, data, num, scales, step, l)
      : entry.overlay ? overlaid(entry, data, num) : traces(info, data, num);
    ts = ts.filter(hasData);
    if (!ts.length) return message(entry, "empty", none);
    entry.anchored = ts.some(t => t.type === "heatmap" && (t.zmin !== undefined || t.zmid !== undefined));
    const shown = ts.filter(t => t.showlegend !== false && t.type !== "heatmap").map(t => t.name);
    if (step === null) l = placeLegend(l, shown);
    const found = findingMarks(entry);
    if (found.traces.length) {
      l.shapes = found.shapes;
      l.annotations = found.annotations;
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

  async function refetch(entry, extra) {
    const gen = (entry.gen = (entry.gen || 0) + 1);
    const [data, other] = await Promise.all([
      getJson(dataUrl(entry.info, extra)),
      entry.overlay ? getJson(dataUrl(entry.overlay.info, extra)) : null]);
    if (gen !== entry.gen) return;  // a newer selection superseded this one
    entry.data = data;
    if (other) entry.overlay.data = other;
    // a chart not drawn yet draws the new rows when it comes into view
    if (entry.drawn) await draw(entry);
    else if (entry.shown) { await entry.shown; if (gen === entry.gen) await draw(entry); }
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
  const NEAR = "100px 0px";  // a chart this close to the screen counts as in view
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

  // Re-fetch every chart's rows in place (a live run's new steps) and mark `newMarks` (run_id ->
  // findings) on them. A step range the user chose stays; without one the charts show every step,
  // so they follow the newest.
  async function refreshAll(newMarks) {
    if (newMarks) marks = newMarks;
    const shown = e => !range ? {} : e.info.step_params ? {step_from: range[0], step_to: range[1]}
      : e.info.linked && e.windowed ? {_x_from: range[0], _x_to: range[1]} : {};
    await Promise.all(entries.map(e => refetch(e, shown(e))));
    bounds = stepBounds(entries);
    listeners.forEach(fn => fn(range, bounds));
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

  return {page, draw, setRange, refreshAll, matchAxes, onRange: fn => listeners.push(fn), entries, esc, fmtNumber};
})();
