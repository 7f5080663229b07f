"use strict";
// One renderer for every chart: it reads a query's @chart spec (kind, x, y, z, color,
// xlabel, ylabel, title) and the rows the REST API returns, and draws them with Plotly.
// Charts whose x is the training step share one step range on the page.
const PolyCharts = (() => {
  const PALETTES = {
    light: ["#2f6fb0", "#e4761b", "#3a9a4a", "#d2424c", "#8463b5", "#1b9e9e", "#b8961a",
            "#d45fa0", "#6f6f6f", "#8c564b"],
    dark: ["#6aa8e8", "#f5a04d", "#6cc56f", "#f07178", "#b594e6", "#4fd1c5", "#e6c84d",
           "#f08ac2", "#b0b0b0", "#c49c94"],
  };
  const entries = [];
  let range = null;        // [lo, hi] of the selected steps, or null for all
  let bounds = null;       // [first, last] step on the page
  const listeners = [];

  const scheme = () => matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
  const palette = () => PALETTES[scheme()];
  const cssVar = name => getComputedStyle(document.documentElement).getPropertyValue(name).trim();

  function column(data, name) {
    const i = data.columns.indexOf(name);
    return i < 0 ? [] : data.rows.map(r => r[i]);
  }

  function rgba(hex, alpha) {
    const n = parseInt(hex.slice(1), 16);
    return `rgba(${n >> 16}, ${(n >> 8) & 255}, ${n & 255}, ${alpha})`;
  }

  // "Median response length (tokens)." -> unit "tokens"; the column name reads as the label.
  function unitOf(info, col) {
    const d = (info.columns[col] || {}).description || "";
    const m = d.match(/\(([^()]*)\)\.?\s*$/) || d.match(/\((tokens|s|seconds|ms|us|µs|%|GPU-hours)\)/);
    return m ? m[1] : "";
  }
  const pretty = col => String(col).replace(/_/g, " ");
  function axisTitle(info, col) {
    if (!col) return "";
    const unit = unitOf(info, col);
    return unit ? `${pretty(col)} (${unit})` : pretty(col);
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
  const DURATION_UNITS = [["h", 3600, 3 * 3600], ["min", 60, 600], ["s", 1, 1], ["ms", 1e-3, 1e-3], ["µs", 1e-6, 0]];
  const kindOf = (info, col) => ((info.columns || {})[col] || {}).fmt || null;
  const en = (v, opts) => v.toLocaleString("en-US", opts);
  const plain = v => Number.isInteger(v) ? en(v) :
    Math.abs(v) < 1000 ? en(v, {maximumSignificantDigits: 3}) : en(v, {maximumFractionDigits: 0});
  const percent = p => `${Math.abs(p) >= 10 ? p.toFixed(0) : p.toFixed(1)}%`;

  function duration(sec) {
    const a = Math.abs(sec);
    if (a >= 100) return `${en(sec, {maximumFractionDigits: 0})} s`;
    if (a >= 1 || sec === 0) return `${sec.toFixed(1)} s`;
    if (a >= 1e-3) return `${en(sec * 1e3, {maximumSignificantDigits: 3})} ms`;
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
      default: return Number.isInteger(v) ? String(v) : String(Number(v.toPrecision(4)));
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
      scaled: col => {
        const f = factor.get(col) || 1;
        return v => (f !== 1 && typeof v === "number") ? v * f : v;
      },
      text: col => v => fmtNumber(v, kindOf(info, col)),
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
    if ((spec.y || []).length > 1 || key === null) parts.push(pretty(y));
    return parts.join(" · ");
  }

  // Hover shows each value by its column's fmt; charts with one hover box per x (line, band)
  // name the series, others also the x value.
  function hoverTemplate(spec, unified) {
    return (unified ? "" : `${pretty(spec.x)} %{x}<br>`) + "%{fullData.name}: %{customdata}<extra></extra>";
  }

  function xyTraces(spec, data, type, num) {
    const xi = data.columns.indexOf(spec.x), sx = num.scaled(spec.x);
    const out = [];
    for (const g of groups(data, spec.color)) {
      for (const y of spec.y || []) {
        const yi = data.columns.indexOf(y);
        if (yi < 0) continue;
        const sy = num.scaled(y), ty = num.text(y);
        const t = {type, name: seriesName(spec, g.key, y), x: g.rows.map(r => sx(r[xi])),
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

  // bar/stacked with `group`: one bar per group value side by side at each x, its y columns
  // stacked inside it (stacked) or next to each other (bar); one colour per group value, and
  // the `shade` columns drawn light and hatched in that colour. Hover lists the whole row.
  function groupedBarTraces(spec, data, num) {
    const xi = data.columns.indexOf(spec.x), pal = palette(), shade = new Set(spec.shade || []);
    const ys = (spec.y || []).filter(y => data.columns.includes(y));
    const out = [];
    groups(data, spec.group).forEach((g, k) => {
      const color = pal[k % pal.length], name = `${pretty(spec.group)} ${g.key}`;
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
          hovertext: g.rows.map(r => [`<b>${name} · ${pretty(y)}</b>`,
            ...data.columns.map((c, i) => `${c}: ${num.text(c)(r[i])}`)].join("<br>")),
          hoverinfo: "text",
        });
        if (spec.kind === "stacked") vals.forEach((v, i) => { base[i] += v || 0; });
      });
    });
    return out;
  }

  function bandTraces(spec, data, num) {
    const base = palette()[0];
    const lift = scheme() === "dark" ? 0.14 : 0;  // fills read darker on a dark page
    const x = column(data, spec.x).map(num.scaled(spec.x));
    const ys = (spec.y || []).filter(y => data.columns.includes(y));
    return ys.map((y, i) => ({
      type: "scatter", mode: x.length <= 24 ? "lines+markers" : "lines", name: pretty(y), x,
      y: column(data, y).map(num.scaled(y)), customdata: column(data, y).map(num.text(y)),
      hovertemplate: hoverTemplate(spec, true),
      line: {color: i === 0 ? base : rgba(base, Math.max(0.35, 0.9 - 0.2 * i) + lift),
             width: i === 0 ? 2.5 : 1, dash: i === ys.length - 1 && ys.length > 2 ? "dot" : "solid"},
      marker: {size: 4},
      fill: i === 0 ? "none" : "tonexty",
      fillcolor: rgba(base, Math.max(0.06, 0.32 - 0.09 * i) + lift),
    }));
  }

  function heatmapTrace(spec, data, num) {
    const yCol = (spec.y || [])[0];
    const xs = [...new Set(column(data, spec.x))].sort((a, b) => a - b);
    const ys = [...new Set(column(data, yCol))].sort((a, b) => a - b);
    const xi = data.columns.indexOf(spec.x), yi = data.columns.indexOf(yCol);
    const zi = data.columns.indexOf(spec.z);
    const z = ys.map(() => xs.map(() => null)), text = ys.map(() => xs.map(() => ""));
    const xPos = new Map(xs.map((v, i) => [v, i])), yPos = new Map(ys.map((v, i) => [v, i]));
    const sz = num.scaled(spec.z), tz = num.text(spec.z);
    for (const r of data.rows) {
      z[yPos.get(r[yi])][xPos.get(r[xi])] = sz(r[zi]);
      text[yPos.get(r[yi])][xPos.get(r[xi])] = tz(r[zi]);
    }
    const scale = num.scales.z, unit = scale.unit ? ` (${scale.unit})` : "";
    return [{type: "heatmap", x: xs, y: ys.map(v => v === null ? "n/a" : String(v)), z, text, colorscale: "Viridis",
             colorbar: {title: {text: pretty(spec.z) + unit, side: "right"}, thickness: 12,
                        ...axisFormat(scale, unit)},
             hovertemplate: `${pretty(spec.x)} %{x}<br>${pretty(yCol)} %{y}<br>` +
                            `${pretty(spec.z)} %{text}<extra></extra>`}];
  }

  // hist: with y, rows are bins (x) and counts (y), drawn with their cumulative share;
  // without y, a histogram of the raw x values, one per color group.
  function histTraces(spec, data, num) {
    if (!(spec.y || []).length) {
      const xi = data.columns.indexOf(spec.x), sx = num.scaled(spec.x);
      return groups(data, spec.color).map(g => ({type: "histogram", x: g.rows.map(r => sx(r[xi])),
        name: g.key === null ? pretty(spec.x) : `${pretty(spec.color)} ${g.key}`, opacity: 0.75}));
    }
    const x = column(data, spec.x).map(String);
    const out = xyTraces(spec, data, "bar", num).map(t => ({...t, x}));
    const counts = out.length ? out[0].y.map(v => v || 0) : [];
    const total = counts.reduce((a, b) => a + b, 0);
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
      type: "bar", orientation: "h", name: g.key === null ? pretty(spec.z) : String(g.key),
      base: g.rows.map(r => sx(r[xi])), x: g.rows.map(r => sz(r[zi])), y: g.rows.map(r => `${pretty((spec.y || [])[0])} ${r[yi]}`),
      hovertext: g.rows.map(r => data.columns.map((c, i) => `${c}: ${num.text(c)(r[i])}`).join("<br>")),
      hoverinfo: "text", marker: {line: {width: 0}},
    }));
  }

  function traces(spec, data, num) {
    switch (spec.kind) {
      case "timeline": return timelineTraces(spec, data, num);
      case "band": return bandTraces(spec, data, num);
      case "bar": case "stacked":
        return spec.group ? groupedBarTraces(spec, data, num) : xyTraces(spec, data, "bar", num);
      case "heatmap": return heatmapTrace(spec, data, num);
      case "hist": return histTraces(spec, data, num);
      default: return xyTraces(spec, data, "scatter", num);
    }
  }

  function layout(info, data, scales) {
    const spec = info.chart, fg = cssVar("--fg"), grid = cssVar("--grid");
    const xTitle = retitle(spec.xlabel || axisTitle(info, spec.x), scales.x);
    const yTitleText = retitle(yTitle(info), scales.y);
    const axis = title => ({title: {text: title, standoff: 8}, gridcolor: grid, zerolinecolor: grid,
                            linecolor: grid, automargin: true});
    const l = {
      title: {text: info.title, x: 0.01, xanchor: "left", font: {size: 15}},
      paper_bgcolor: "rgba(0,0,0,0)", plot_bgcolor: "rgba(0,0,0,0)",
      font: {family: "system-ui, -apple-system, Segoe UI, sans-serif", size: 12, color: fg},
      colorway: palette(), margin: {l: 56, r: 16, t: 64, b: 44},
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
      const lo = Math.min(...xs), hi = Math.max(...xs);
      if (hi - lo <= 30) { l.xaxis.dtick = 1; l.xaxis.tickformat = "d"; }
    }
    if (spec.kind === "heatmap") l.yaxis.type = "category";
    if (spec.kind === "hist" && !(spec.y || []).length) l.barmode = "overlay";
    if (spec.kind === "hist" && (spec.y || []).length) {
      l.xaxis.type = "category";
      l.yaxis2 = {...axis("cumulative share"), overlaying: "y", side: "right", range: [0, 1.02],
                  tickvals: [0, 0.25, 0.5, 0.75, 1], tickformat: ".0%", showgrid: false};
      l.margin.r = 56;
    }
    if (spec.kind === "timeline") {
      l.barmode = "overlay";
      l.yaxis.autorange = "reversed";
      l.hovermode = "closest";
    }
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

  const config = info => ({
    responsive: true, displaylogo: false,
    // No cloud sharing: the dashboard never sends data off the machine.
    modeBarButtonsToRemove: ["lasso2d", "select2d", "autoScale2d", "sendChartToCloud"],
    toImageButtonOptions: {format: "png", filename: `polytrace-${info.name}`, scale: 2},
  });

  function table(el, data, info, limit) {
    const t = document.createElement("table");
    t.className = "rows";
    const head = t.createTHead().insertRow();
    for (const c of data.columns) head.appendChild(Object.assign(document.createElement("th"), {textContent: c}));
    const body = t.createTBody();
    for (const r of data.rows.slice(0, limit || 200)) {
      const tr = body.insertRow();
      r.forEach((v, i) => {
        const td = tr.insertCell();
        td.textContent = fmtNumber(v, kindOf(info, data.columns[i]));
        if (typeof v === "number") td.className = "n";
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
    box.textContent = parts.join(" ");
  }

  // Replace a chart by a message; a purged plot keeps no stale data or listeners.
  function message(entry, className, text) {
    if (entry.el.data) { Plotly.purge(entry.el); entry.listening = false; }
    entry.el.replaceChildren(Object.assign(document.createElement("p"), {className, textContent: text}));
    return Promise.resolve();
  }

  function draw(entry) {
    const {el, info, data} = entry;
    if (!data.ok) return message(entry, "error-line", data.error);
    note(entry);
    if (!data.rows.length) return message(entry, "empty", "No data for this run in this range.");
    if (info.chart.kind === "table") { table(el, data, info); return Promise.resolve(); }
    const scales = axisScales(info, entry.overlay ? [data, entry.overlay.data] : [data]);
    const num = {...numbers(info, scales), scales};
    entry.scales = scales;
    let ts = traces(info.chart, data, num);
    if (entry.overlay) {
      const pal = palette();
      // B's series take the colours after A's, and dashes, so coinciding lines stay apart.
      const styled = (label, dash, shift) => (t, i) => ({...t, name: `${label} · ${t.name}`,
        line: {...t.line, color: pal[(i + shift) % pal.length], dash},
        marker: {color: pal[(i + shift) % pal.length]}});
      ts = [...ts.map(styled(entry.label, "solid", 0)),
            ...traces(info.chart, entry.overlay.data, num).map(styled(entry.overlay.label, "dash", ts.length))];
    }
    const shown = ts.filter(t => t.showlegend !== false && t.type !== "heatmap").map(t => t.name);
    return Plotly.react(el, ts, placeLegend(layout(info, data, scales), shown), config(info)).then(() => {
      if (!entry.listening) { el.on("plotly_relayout", ev => onZoom(entry, ev)); entry.listening = true; }
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
    await draw(entry);
  }

  async function relayoutSilently(entry, update) {
    entry.silent = true;
    try { await Plotly.relayout(entry.el, update); } finally { entry.silent = false; }
  }

  async function applyRange(entry) {
    const {info, el} = entry;
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

  async function setRange(lo, hi) {
    if (lo !== null && bounds) {
      lo = Math.max(bounds[0], Math.min(lo, bounds[1]));
      hi = Math.max(lo, Math.min(hi, bounds[1]));
    }
    const next = lo === null ? null : [lo, hi];
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

  async function render(el, info, data, options = {}) {
    const entry = {el, info, data, ...options};
    entries.push(entry);
    await draw(entry);
    el.dataset.rendered = "1";
    return entry;
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
  // each draws into #<el_id>, by default #chart-<name>.
  async function page(charts) {
    await Promise.all(charts.map(c => render(document.getElementById(c.el_id || "chart-" + c.name), c, c.data,
                                             {overlay: c.overlay, label: c.label})));
    bounds = stepBounds(entries);
    listeners.forEach(fn => fn(range, bounds));
    document.body.dataset.chartsReady = "1";
  }

  // Give side-by-side charts the same y (and colour) scale so that they compare by eye.
  // Each side may show durations in its own unit: ranges are compared in the columns' unit.
  async function matchAxes(els) {
    const drawn = els.filter(el => el && el._fullLayout && el.data && el.data.length);
    if (drawn.length < 2) return;
    const factor = (el, axis) => (entries.find(e => e.el === el)?.scales?.[axis] || {}).factor || 1;
    const heat = drawn.every(el => el.data[0].type === "heatmap");
    if (heat) {
      const zs = drawn.flatMap(el => el.data[0].z.flat().filter(v => v !== null).map(v => v / factor(el, "z")));
      const lo = Math.min(...zs), hi = Math.max(...zs);
      for (const el of drawn) await Plotly.restyle(el, {zmin: lo * factor(el, "z"), zmax: hi * factor(el, "z")}, [0]);
      return;
    }
    const ranges = drawn.map(el => el._fullLayout.yaxis.range.map(v => v / factor(el, "y")));
    const r = [Math.min(...ranges.map(x => x[0])), Math.max(...ranges.map(x => x[1]))];
    for (const el of drawn) {
      const entry = entries.find(e => e.el === el);
      if (entry) await relayoutSilently(entry, {"yaxis.range": r.map(v => v * factor(el, "y"))});
    }
  }

  matchMedia("(prefers-color-scheme: dark)").addEventListener("change", () => entries.forEach(draw));

  return {page, setRange, matchAxes, onRange: fn => listeners.push(fn), entries};
})();
