"use strict";
// A live run's page follows its training. It polls GET /api/runs/{id}/live every second with
// If-None-Match: the server answers 304 until a write changes the run (its ETag is the run's write
// generation), so a quiet run costs one header exchange a second. When the run changed, every chart
// re-fetches its rows in place (PolyCharts.refreshAll: a step range the user chose stays, else the
// charts follow the newest steps), the findings list is re-read, and a finding that was not there
// before is announced at the top of the page. A run that nobody follows is polled no more.
const PolyLive = (() => {
  const POLL_MS = 1000;
  const IDLE_POLL_MS = 5000;  // live once, quiet now: still looked at, less often
  const esc = v => String(v ?? "").replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");

  const clock = iso => iso ? new Date(iso).toLocaleTimeString([], {hour12: false}) : "";

  function steps(list) {
    const s = (list || []).filter(Number.isFinite);
    if (!s.length) return null;
    const lo = Math.min(...s), hi = Math.max(...s);
    return {lo, hi, text: lo === hi ? `step ${lo.toLocaleString()}` : `steps ${lo.toLocaleString()}–${hi.toLocaleString()}`};
  }

  // One finding as the page's list shows it (templates/_findings.html).
  function item(f, fresh) {
    const li = document.createElement("li");
    li.className = `finding sev-${f.severity}${fresh ? " finding-new" : ""}`;
    li.dataset.kind = f.kind;
    li.dataset.severity = f.severity;
    const span = steps(f.steps);
    const zoom = span ? ` · <button type="button" class="link zoom" data-from="${span.lo}" data-to="${span.hi}" ` +
      `title="show these steps on every step chart">${span.text}</button>` : "";
    const evidence = f.evidence ? ` · evidence: <a class="evidence" href="${esc(f.evidence)}">${esc(f.evidence)}</a>` : "";
    li.innerHTML = `<span class="badge sev-${esc(f.severity)}">${esc(f.severity)}</span>` +
      `<div class="finding-body"><p class="text">${esc(f.text)}</p><p class="finding-meta">` +
      `<span class="kind">${esc(f.kind.replace(/_/g, " "))}</span>${zoom}${evidence}</p></div>`;
    li.querySelector("button.zoom")?.addEventListener("click", e =>
      PolyCharts.setRange(Number(e.target.dataset.from), Number(e.target.dataset.to)));
    return li;
  }

  function showFindings(box, alerts, found, known) {
    const fresh = found.filter(f => !known.has(f.kind));
    const list = document.createElement("ol");
    list.className = "findings";
    list.append(...found.map(f => item(f, !known.has(f.kind))));
    if (found.length) box.replaceChildren(list);
    else box.replaceChildren(Object.assign(document.createElement("p"), {className: "empty nothing-unusual",
                                                                        textContent: "Nothing unusual in these numbers."}));
    for (const f of fresh) {
      known.add(f.kind);
      const a = document.createElement("p");
      a.className = `live-alert sev-${f.severity}`;
      a.dataset.kind = f.kind;
      a.innerHTML = `<strong>New ${esc(f.severity)} finding</strong> while the run trains: ${esc(f.text)}`;
      alerts.prepend(a);
    }
  }

  function badge(el, live) {
    el.hidden = !live.source;
    el.dataset.live = live.live ? "1" : "0";
    el.dataset.lastStep = live.last_step ?? "";
    const notes = Object.entries(live.files || {}).filter(([, f]) => f.note).map(([name, f]) => f.note);
    const last = live.last_step === null ? "no step yet" : `last step ${live.last_step.toLocaleString()} at ${clock(live.last_step_at)}`;
    el.textContent = `${live.live ? "● live" : "followed"} · ${last}` + (notes.length ? ` · ${notes.length} warning(s)` : "");
    el.title = [`following ${live.source}`, ...notes].join("\n");
  }

  // Follow run `runId`: `el` is the badge, `box` holds the findings list, `alerts` the announcements.
  function follow(runId, el, box, alerts) {
    if (!el) return;
    const known = new Set([...document.querySelectorAll("li.finding")].map(li => li.dataset.kind));
    const base = `/api/runs/${encodeURIComponent(runId)}`;
    let etag = null;

    async function refresh() {
      const res = await fetch(`${base}/findings`, {cache: "no-store"});
      const found = res.ok ? (await res.json()).findings : null;
      const marks = found && {[runId]: found.filter(f => f.steps && f.steps.length)
        .map(f => ({kind: f.kind, severity: f.severity, steps: f.steps}))};
      await PolyCharts.refreshAll(marks);
      if (found) showFindings(box, alerts, found, known);
    }

    async function poll() {
      let live = null;
      try {
        const res = await fetch(`${base}/live`, {cache: "no-store", headers: etag ? {"If-None-Match": etag} : {}});
        if (res.status === 200) {
          live = await res.json();
          badge(el, live);
          // a page drawn before the run's first step has no chart to refresh: draw it anew, once
          const key = `polytrace-live-drawn-${runId}`;
          if (live.source && !PolyCharts.entries.length && live.last_step !== null && !sessionStorage.getItem(key)) {
            sessionStorage.setItem(key, "1");
            location.reload();
            return;
          }
          // the page was drawn before this answer: its first one refreshes too
          if (live.source) {
            await refresh();
            el.dataset.refreshed = String(Number(el.dataset.refreshed || 0) + 1);
          }
          etag = res.headers.get("ETag");  // only once refreshed: a failed refresh is tried again
        } else if (res.status === 304) {
          live = {live: el.dataset.live === "1", source: true};
        }
      } catch (e) {
        live = {live: el.dataset.live === "1", source: true};  // a restarting server: ask again
      }
      if (live && live.source) setTimeout(poll, live.live ? POLL_MS : IDLE_POLL_MS);
    }
    poll();
  }

  return {follow};
})();
