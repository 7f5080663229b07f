// The runs page: the runs overview (GET /api/queries/runs_overview, one line per run, the worst
// problems first) as a table sortable on every column and filterable by the text each row shows,
// the sort, filter, page and chart axes kept in the URL; one overview figure against
// another across runs, drawn by the page's renderer (charts.js); the list polled while runs are
// added; and the uploader.
import {PolyCharts} from "./charts.js";

(() => {
  const $ = id => document.getElementById(id);
  const tokenInput = $("token");
  if (tokenInput) {
    tokenInput.value = localStorage.getItem("polytrace-token") || "";
    tokenInput.addEventListener("change", () => localStorage.setItem("polytrace-token", tokenInput.value));
  }
  const authHeaders = () => PolyAuth.headers();

  // ---- the overview ----------------------------------------------------------------------------
  const OVERVIEW = JSON.parse($("overview-json").textContent);  // the query's columns: fmt, description
  const COLUMNS = OVERVIEW.columns;
  const POLL_MS = 4000;
  const PAGE_SIZE = 100;
  const SEARCHED = ["name", "run_id", "model", "task", "framework", "format"];
  const FINDINGS = ["findings_critical", "findings_warn"];
  // A figure's table header and its axis title (with the unit a tick label lacks).
  const NAMES = {
    findings_critical: ["Critical", "Critical findings"], findings_warn: ["Warnings", "Warnings"],
    steps: ["Steps", "Steps"], samples: ["Samples", "Responses"], gpus: ["GPUs", "GPUs"],
    max_response_len: ["Cap", "Response-length cap (tokens)"],
    step_s_mean: ["Step time", "Mean step time (s)"],
    rollout_idle_frac_mean: ["Rollout idle", "Rollout idle (mean share of a rollout)"],
    tail_ratio_max: ["Tail ratio", "Longest / median response (worst step)"],
    dp_imbalance_mean: ["DP imbalance", "DP imbalance (max / mean tokens per rank)"],
    filter_waste_share: ["Filter waste", "Filter waste (share of response tokens)"],
    gpu_idle_pct: ["GPU idle", "GPU idle (% of profiled time)"],
  };
  // Every column with a fmt tag is a figure: a numeric column of the table and a chart axis,
  // the findings counts first.
  const FIGURES = [...FINDINGS.filter(c => COLUMNS[c]),
                   ...OVERVIEW.order.filter(c => COLUMNS[c].fmt && !FINDINGS.includes(c))];
  const SORTABLE = new Set(["name", "created_at", ...FIGURES]);
  const header = c => (NAMES[c] || [])[0] || c.replace(/_/g, " ");
  const axisTitle = c => (NAMES[c] || [])[1] || header(c);

  const ESCAPES = {"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"};
  const html = v => String(v ?? "").replace(/[&<>"']/g, ch => ESCAPES[ch]);
  const fmt = (v, c) => PolyCharts.fmtNumber(v, COLUMNS[c].fmt);
  const when = t => String(t || "").replace("T", " ").slice(0, 16);

  // What the page shows, as the URL says it: q (filter), sort (a column, "-" first for
  // descending; none is the overview's worst-first order), page, x and y (the chart's figures).
  const DEFAULTS = {q: "", sort: "", page: 1, x: "max_response_len", y: "rollout_idle_frac_mean"};
  const state = {...DEFAULTS};
  // The chart's first figures when the URL names none: the first of these pairs that three runs
  // (or every run, when fewer) have both of, else the pair most runs have.
  const FIRST_AXES = [["max_response_len", "rollout_idle_frac_mean"], ["tail_ratio_max", "rollout_idle_frac_mean"],
                      ["dp_imbalance_mean", "tail_ratio_max"], ["steps", "step_s_mean"]];
  let axesGiven = false;

  function readUrl() {
    const p = new URLSearchParams(location.search);
    state.q = p.get("q") || "";
    const sort = p.get("sort") || "";
    state.sort = SORTABLE.has(sort.replace(/^-/, "")) ? sort : "";
    state.page = Math.max(1, parseInt(p.get("page"), 10) || 1);
    for (const axis of ["x", "y"]) state[axis] = FIGURES.includes(p.get(axis)) ? p.get(axis) : DEFAULTS[axis];
    axesGiven = FIGURES.includes(p.get("x")) || FIGURES.includes(p.get("y"));
  }

  function writeUrl() {
    const p = new URLSearchParams();
    for (const [k, v] of Object.entries(state)) if (v !== DEFAULTS[k]) p.set(k, v);
    const query = p.toString();
    history.replaceState(null, "", query ? `?${query}` : location.pathname);
  }

  let answer = null;        // the API's body: columns and rows
  let at = {};              // column name -> index in a row
  let haystacks = [];       // each row's text as the table shows it, lower case
  let known = null;         // run ids of the last answer; null before the first
  const fresh = new Set();  // runs that arrived while the page was open
  const selected = new Set();
  let etag = null, lastText = null;

  function accept(body) {
    answer = body;
    at = Object.fromEntries(body.columns.map((c, i) => [c, i]));
    haystacks = body.rows.map(r => [...SEARCHED.map(c => r[at[c]] ?? ""), when(r[at.created_at])]
      .join("\n").toLowerCase());
    const ids = body.rows.map(r => r[at.run_id]);
    if (known) for (const id of ids) if (!known.has(id)) fresh.add(id);
    known = new Set(ids);
    for (const id of selected) if (!known.has(id)) selected.delete(id);
  }

  // The overview's rows; false when they did not change. The first request is a plain one, so
  // that it takes the answer the page preloaded; after it, with the server's ETag, a
  // conditional one: 304 while nothing changed.
  async function fetchOverview() {
    const res = await (lastText === null ? fetch(OVERVIEW.rest.json)
      : fetch(OVERVIEW.rest.json, {cache: "no-store", headers: etag ? {"If-None-Match": etag} : {}}));
    if (res.status === 304) return false;
    const text = await res.text();
    if (text === lastText) return false;
    let body;
    try { body = JSON.parse(text); } catch { body = {ok: false, error: `${res.status} ${res.statusText}`}; }
    if (!body.ok) { showStatus(body.error, true); return false; }
    lastText = text;
    etag = res.headers.get("ETag");
    accept(body);
    return true;
  }

  // nulls last either way; numbers as numbers, text as a reader orders it
  function compare(a, b) {
    if (a === null || a === undefined) return b === null || b === undefined ? 0 : 1;
    if (b === null || b === undefined) return -1;
    return typeof a === "number" && typeof b === "number" ? a - b : String(a).localeCompare(String(b));
  }

  // Row indexes the filter keeps, in the chosen order (a stable sort: ties stay worst first).
  function shown() {
    const terms = state.q.toLowerCase().split(/\s+/).filter(Boolean);
    let idx = answer.rows.map((_, i) => i);
    if (terms.length) idx = idx.filter(i => terms.every(t => haystacks[i].includes(t)));
    if (state.sort) {
      const desc = state.sort.startsWith("-"), c = at[state.sort.replace(/^-/, "")], rows = answer.rows;
      idx.sort((a, b) => {
        const [x, y] = [rows[a][c], rows[b][c]];
        return x === null || y === null ? compare(x, y) : desc ? compare(y, x) : compare(x, y);
      });
    }
    return idx;
  }

  function buildHead() {
    const th = (c, text, n) => {
      const title = html(`${c}: ${COLUMNS[c]?.description || ""}`);
      return `<th class="sortable${n ? " n" : ""}" data-col="${c}" title="${title}">` +
             `<button type="button">${html(text)}</button></th>`;
    };
    $("runs").tHead.innerHTML = `<tr><th><span class="visually-hidden">compare</span></th>${th("name", "Run")}` +
      FIGURES.map(c => th(c, header(c), true)).join("") + `${th("created_at", "Created (UTC)")}<th></th></tr>`;
  }

  // A figure by its fmt; a findings count above 0 as a badge of its severity.
  function figureCell(c, v) {
    const text = html(fmt(v, c));
    if (!FINDINGS.includes(c)) return `<td class="n">${text}</td>`;
    if (!v) return `<td class="n zero">${text}</td>`;
    return `<td class="n"><span class="count-${c === "findings_critical" ? "critical" : "warn"}">${text}</span></td>`;
  }

  function rowHtml(r) {
    const id = r[at.run_id], name = r[at.name] || id;
    const facts = [r[at.model], r[at.task], r[at.framework], r[at.format]].filter(Boolean).join(" · ");
    const pick = `<input type="checkbox" value="${html(id)}" aria-label="select ${html(name)} for comparison"` +
                 `${selected.has(id) ? " checked" : ""}>`;
    return `<tr data-run-id="${html(id)}"${fresh.has(id) ? ' class="new"' : ""}><td>${pick}</td>` +
      `<td class="run"><a href="/runs/${encodeURIComponent(id)}">${html(name)}</a>` +
      `<span class="facts"><code>${html(id)}</code>${facts ? ` ${html(facts)}` : ""}</span></td>` +
      FIGURES.map(c => figureCell(c, r[at[c]])).join("") +
      `<td class="time">${html(when(r[at.created_at]))}</td>` +
      `<td><button type="button" class="link danger" data-delete="${html(id)}">Delete</button></td></tr>`;
  }

  // One page of the shown rows, built as one string: one DOM update, no listener per row.
  function renderTable(idx) {
    const total = answer.rows.length, pages = Math.max(1, Math.ceil(idx.length / PAGE_SIZE));
    state.page = Math.min(state.page, pages);
    const from = (state.page - 1) * PAGE_SIZE, page = idx.slice(from, from + PAGE_SIZE);
    const rows = answer.rows;
    document.querySelector("#runs tbody").innerHTML = page.map(i => rowHtml(rows[i])).join("");
    const sorted = state.sort.replace(/^-/, ""), order = state.sort.startsWith("-") ? "descending" : "ascending";
    for (const th of $("runs").tHead.querySelectorAll("th[data-col]")) {
      if (th.dataset.col === sorted) th.setAttribute("aria-sort", order);
      else th.removeAttribute("aria-sort");
    }
    $("worst-first").hidden = !state.sort;
    $("no-runs").hidden = total > 0;
    $("no-match").hidden = !total || idx.length > 0;
    $("pager").hidden = pages <= 1;
    const n = v => v.toLocaleString();
    $("page-label").textContent = `${n(from + 1)}–${n(from + page.length)} of ${n(idx.length)}`;
    $("page-prev").disabled = state.page <= 1;
    $("page-next").disabled = state.page >= pages;
    $("runs-count").textContent = idx.length === total ? `${n(total)} run${total === 1 ? "" : "s"}`
      : `${n(idx.length)} of ${n(total)} runs`;
    if (answer.truncated) $("runs-count").textContent += " (cut at the server's row cap)";
    updateCompare();
    $("runs").dataset.loaded = String(total);
  }

  // ---- across runs: one figure against another, drawn by charts.js -----------------------------
  let chart = null;
  const worst = r => r[at.findings_critical] > 0 ? "critical" : r[at.findings_warn] > 0 ? "warn" : "none";

  async function drawChart(idx) {
    const {x, y} = state, columns = ["run_id", "name", x, y, "worst"], rows = [];
    for (const i of idx) {
      const r = answer.rows[i];
      if (r[at[x]] === null || r[at[y]] === null) continue;
      rows.push([r[at.run_id], r[at.name] || r[at.run_id], r[at[x]], r[at[y]], worst(r)]);
    }
    const info = {...OVERVIEW, title: `${header(y)} against ${header(x)}`, linked: false, step_params: false,
                  empty: "No run shown has both figures.", columns: {...COLUMNS, worst: {name: "worst"}},
                  chart: {kind: "scatter", x, y: [y], color: "worst", severity: true, text: "name", id: "run_id",
                          xlabel: axisTitle(x), ylabel: axisTitle(y)}};
    const data = {ok: true, columns, rows};
    $("across-note").textContent =
      `${rows.length.toLocaleString()} of ${idx.length.toLocaleString()} runs shown have both figures.`;
    $("across-title").closest("section").hidden = !answer.rows.length;
    const el = $("chart-across");
    if (chart) {
      chart.info = info;
      chart.data = data;
      // a message stands in for the plot: charts.js would draw the plot beside it, not in its place
      if (!el.data) el.replaceChildren();
      await PolyCharts.draw(chart);
    } else {
      await PolyCharts.page([{...info, data, el_id: el.id}]);
      chart = PolyCharts.entries.find(e => e.el === el);
    }
    if (typeof el.on === "function") {  // a plot, not a message: a click on a marker opens its run
      el.removeAllListeners("plotly_click");
      el.on("plotly_click", ev => {
        const p = (ev.points || [])[0];
        const id = p && p.data.ids && p.data.ids[p.pointIndex];
        if (id) location.href = `/runs/${encodeURIComponent(id)}`;
      });
    }
    el.dataset.points = String(rows.length);
  }

  function pickAxes() {
    const rows = answer.rows, want = Math.min(3, rows.length);
    const both = ([x, y]) => rows.filter(r => r[at[x]] !== null && r[at[y]] !== null).length;
    const pairs = FIRST_AXES.filter(pair => pair.every(c => FIGURES.includes(c)));
    const pick = pairs.find(pair => both(pair) >= want) || [...pairs].sort((a, b) => both(b) - both(a))[0];
    if (pick) [state.x, state.y] = pick;
    figureOptions($("across-x"), state.x);
    figureOptions($("across-y"), state.y);
  }

  function figureOptions(select, chosen) {
    const option = c => `<option value="${c}"${c === chosen ? " selected" : ""}>${html(axisTitle(c))}</option>`;
    select.innerHTML = FIGURES.map(option).join("");
  }

  // ---- what changes the view ---------------------------------------------------------------------
  function show({table = true, plot = true} = {}) {
    if (!answer) return Promise.resolve();
    const idx = shown();
    if (table) renderTable(idx);
    return plot ? drawChart(idx) : Promise.resolve();
  }

  function changed(what) {
    writeUrl();
    return show(what);
  }

  async function loadRuns(highlight) {
    if (highlight) fresh.add(highlight);
    if (await fetchOverview() || highlight) await show();
  }

  async function poll() {
    try {
      if (!document.hidden && await fetchOverview()) await show();
    } catch {
      // the server is away (restarting): the list stays as it was until it answers again
    } finally {
      setTimeout(poll, POLL_MS);
    }
  }

  let typing = null;
  $("runs-filter").addEventListener("input", e => {
    clearTimeout(typing);
    typing = setTimeout(() => { state.q = e.target.value.trim(); state.page = 1; changed(); }, 120);
  });
  $("runs").tHead.addEventListener("click", e => {
    const th = e.target.closest("th[data-col]");
    if (!th) return;
    const col = th.dataset.col, current = state.sort.replace(/^-/, "");
    // a figure reads largest first, text from A; the same column again turns the order round
    const first = FIGURES.includes(col) ? `-${col}` : col;
    state.sort = col !== current ? first : state.sort.startsWith("-") ? col : `-${col}`;
    state.page = 1;
    changed({plot: false});
  });
  $("worst-first").addEventListener("click", () => { state.sort = ""; state.page = 1; changed({plot: false}); });
  $("page-prev").addEventListener("click", () => { state.page -= 1; changed({plot: false}); });
  $("page-next").addEventListener("click", () => { state.page += 1; changed({plot: false}); });
  for (const axis of ["x", "y"]) {
    $(`across-${axis}`).addEventListener("change", e => { state[axis] = e.target.value; changed({table: false}); });
  }

  function updateCompare() {
    $("compare-selected").disabled = selected.size !== 2;
    return [...selected];
  }
  const body = document.querySelector("#runs tbody");
  body.addEventListener("change", e => {
    if (e.target.type !== "checkbox") return;
    if (e.target.checked) selected.add(e.target.value); else selected.delete(e.target.value);
    updateCompare();
  });
  body.addEventListener("click", e => {
    const button = e.target.closest("button[data-delete]");
    if (!button) return;
    const id = button.dataset.delete;
    deleteRun(id, answer.rows.find(r => r[at.run_id] === id)?.[at.name] || id);
  });
  $("compare-selected").addEventListener("click", () => {
    const [a, b] = updateCompare();
    location.href = `/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
  });

  async function deleteRun(id, name) {
    if (!confirm(`Delete run ${name} and all its rows?`)) return;
    const res = await fetch(`/api/runs/${encodeURIComponent(id)}`, {method: "DELETE", headers: authHeaders()});
    const body = await res.json().catch(() => ({}));
    showStatus(res.ok ? `Deleted ${name}.` : body.error || res.statusText, !res.ok);
    loadRuns();
  }

  function showStatus(text, isError) {
    const status = $("upload-status");
    status.textContent = text;
    status.className = isError ? "status error-line" : "status";
    showWarnings([]);
  }

  function progress(fraction, label) {
    $("progress-row").hidden = fraction === null;
    const bar = $("upload-progress");
    if (fraction === undefined) bar.removeAttribute("value");
    else if (fraction !== null) bar.value = bar.dataset.uploaded = fraction;
    $("progress-label").textContent = label || "";
  }

  // The upload's form fields: the API's multipart names (POST /api/runs).
  function fields() {
    return {name: $("run-name").value.trim(), format: $("format").value,
            max_response_len: $("max-response-len").value.trim(), n_gpus: $("gpus").value.trim()};
  }

  // What the API answered: the run it made (a link to it), what it loaded, every warning.
  function showResult(status, body, count) {
    const rows = Object.entries(body.rows || {}).map(([t, n]) => `${n.toLocaleString()} ${t}`).join(", ");
    const box = $("upload-status");
    box.className = "status";
    const link = Object.assign(document.createElement("a"), {href: `/runs/${encodeURIComponent(body.run_id)}`,
                                                             textContent: `run ${body.run_id}`, id: "new-run"});
    box.replaceChildren(`${status === 201 ? "Ingested" : "Already ingested"} ${count} file(s) as `, link,
                        ` (${body.format}${rows ? `: ${rows}` : ""}).`);
    showWarnings(body.warnings || []);
  }

  function showWarnings(warnings) {
    const list = $("upload-warnings");
    list.replaceChildren(...warnings.map(w => Object.assign(document.createElement("li"), {textContent: w})));
    list.hidden = !warnings.length;
  }

  // files: [{file, path}], path relative to what was picked or dropped: the server names a
  // run after the folder every file came from.
  function upload(files) {
    if (!files.length) return;
    const form = new FormData();
    for (const {file, path} of files) form.append("file", file, path || file.name);
    for (const [k, v] of Object.entries(fields())) if (v) form.append(k, v);
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/runs");
    for (const [k, v] of Object.entries(authHeaders())) xhr.setRequestHeader(k, v);
    xhr.upload.addEventListener("progress", e => {
      if (e.lengthComputable) progress(e.loaded / e.total, `uploading ${Math.round(100 * e.loaded / e.total)}%`);
    });
    xhr.upload.addEventListener("load", () => progress(undefined, "ingesting…"));
    xhr.addEventListener("load", () => {
      progress(null);
      let body = {};
      try { body = JSON.parse(xhr.responseText); } catch { body = {error: `${xhr.status} ${xhr.statusText}`}; }
      if (xhr.status < 300 && body.ok) {
        showResult(xhr.status, body, files.length);
        loadRuns(body.run_id);
      } else {
        showStatus(body.error || `upload failed: ${xhr.status} ${xhr.statusText}`, true);
      }
    });
    xhr.addEventListener("error", () => { progress(null); showStatus("upload failed: the server did not answer", true); });
    progress(0, `uploading ${files.length} file(s)`);
    showStatus("", false);
    xhr.send(form);
  }

  // A dropped folder arrives as a directory entry: read it (recursively) into files, each with
  // its path inside the drop ("run/step_0.jsonl").
  async function entryFiles(entry) {
    if (entry.isFile) {
      const file = await new Promise((ok, fail) => entry.file(ok, fail));
      return [{file, path: entry.fullPath.replace(/^\/+/, "")}];
    }
    const reader = entry.createReader(), out = [];
    for (;;) {
      const batch = await new Promise((ok, fail) => reader.readEntries(ok, fail));
      if (!batch.length) return out;
      for (const e of batch) out.push(...await entryFiles(e));
    }
  }

  async function droppedFiles(dt) {
    const entries = [...(dt.items || [])].map(i => i.webkitGetAsEntry && i.webkitGetAsEntry()).filter(Boolean);
    if (!entries.length) return picked(dt.files);
    return (await Promise.all(entries.map(entryFiles))).flat();
  }

  const picked = list => [...list].map(file => ({file, path: file.webkitRelativePath || file.name}));

  const zone = $("dropzone");
  for (const ev of ["dragenter", "dragover"]) zone.addEventListener(ev, e => { e.preventDefault(); zone.classList.add("over"); });
  for (const ev of ["dragleave", "drop"]) zone.addEventListener(ev, () => zone.classList.remove("over"));
  zone.addEventListener("drop", async e => { e.preventDefault(); upload(await droppedFiles(e.dataTransfer)); });
  zone.addEventListener("keydown", e => {
    if (e.target === zone && (e.key === "Enter" || e.key === " ")) { e.preventDefault(); $("file-input").click(); }
  });
  for (const id of ["file-input", "folder-input"]) {
    $(id).addEventListener("change", e => { upload(picked(e.target.files)); e.target.value = ""; });
  }

  // ---- start -------------------------------------------------------------------------------------
  readUrl();
  $("runs-filter").value = state.q;
  buildHead();
  figureOptions($("across-x"), state.x);
  figureOptions($("across-y"), state.y);
  (async () => {
    try {
      if (await fetchOverview() && !axesGiven) pickAxes();
      await show();
      // when the table and the chart are first drawn, in ms from navigation (bench/team.py reads it)
      if (answer) $("runs").dataset.drawnMs = String(Math.round(performance.now()));
      writeUrl();  // the URL as the page reads it: a page past the last, an unknown sort, dropped
    } finally {
      setTimeout(poll, POLL_MS);
    }
  })();
})();
