"use strict";
// The runs page: the list of runs (from the REST catalog query `runs`) and the uploader.
(() => {
  const $ = id => document.getElementById(id);
  const tokenInput = $("token");
  if (tokenInput) {
    tokenInput.value = localStorage.getItem("polytrace-token") || "";
    tokenInput.addEventListener("change", () => localStorage.setItem("polytrace-token", tokenInput.value));
  }
  const authHeaders = () => PolyAuth.headers();

  function cell(tr, text, cls) {
    const td = tr.insertCell();
    td.textContent = text ?? "";
    if (cls) td.className = cls;
    return td;
  }

  async function loadRuns(highlight) {
    const data = await (await fetch("/api/queries/runs")).json();
    const body = document.querySelector("#runs tbody");
    body.replaceChildren();
    if (!data.ok) { $("upload-status").textContent = data.error; return; }
    const runs = data.rows.map(r => Object.fromEntries(data.columns.map((c, i) => [c, r[i]])));
    $("no-runs").hidden = runs.length > 0;
    for (const run of runs) {
      const tr = body.insertRow();
      tr.dataset.runId = run.run_id;
      if (run.run_id === highlight) tr.className = "new";
      const pick = Object.assign(document.createElement("input"), {type: "checkbox", value: run.run_id});
      pick.setAttribute("aria-label", `select ${run.name || run.run_id} for comparison`);
      tr.insertCell().appendChild(pick);
      const link = Object.assign(document.createElement("a"), {href: `/runs/${encodeURIComponent(run.run_id)}`,
                                                               textContent: run.name || run.run_id});
      const name = tr.insertCell();
      name.appendChild(link);
      name.appendChild(Object.assign(document.createElement("code"), {textContent: run.run_id, className: "id"}));
      cell(tr, run.format);
      cell(tr, [run.model, run.task].filter(Boolean).join(" / ") || "—");
      cell(tr, (run.steps ?? 0).toLocaleString(), "n");
      cell(tr, (run.samples ?? 0).toLocaleString(), "n");
      cell(tr, (run.created_at || "").replace("T", " ").slice(0, 19));
      const del = Object.assign(document.createElement("button"), {type: "button", textContent: "Delete", className: "link danger"});
      del.addEventListener("click", () => deleteRun(run));
      tr.insertCell().appendChild(del);
    }
    updateCompare();
    document.querySelector("#runs").dataset.loaded = String(runs.length);
  }

  function updateCompare() {
    const picked = [...document.querySelectorAll("#runs input:checked")].map(x => x.value);
    $("compare-selected").disabled = picked.length !== 2;
    return picked;
  }
  document.querySelector("#runs").addEventListener("change", updateCompare);
  $("compare-selected").addEventListener("click", () => {
    const [a, b] = updateCompare();
    location.href = `/compare?a=${encodeURIComponent(a)}&b=${encodeURIComponent(b)}`;
  });

  async function deleteRun(run) {
    if (!confirm(`Delete run ${run.name || run.run_id} and all its rows?`)) return;
    const res = await fetch(`/api/runs/${encodeURIComponent(run.run_id)}`, {method: "DELETE", headers: authHeaders()});
    const body = await res.json().catch(() => ({}));
    showStatus(res.ok ? `Deleted ${run.name || run.run_id}.` : body.error || res.statusText, !res.ok);
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

  loadRuns();
})();
