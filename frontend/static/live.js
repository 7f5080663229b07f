// A live run's page follows its training. It polls GET /api/runs/{id}/live with If-None-Match and
// ?wait=: the server holds the poll until a write changes the run (its ETag is the run's write
// generation) or WAIT_S pass, then answers 304, so a new step shows as it lands and a quiet run
// costs one header exchange every WAIT_S. When the run changed, every chart fetches its new rows in
// place (PolyCharts.refreshAll: a step chart only its steps from its last point on; a step range
// the user chose stays, else the charts follow the newest steps), then the parts of the page that
// follow the run come as the server renders them (GET /runs/{id}/live-parts): the header's
// facts, the findings list and the charts' marks. A finding that was not there before is announced
// at the top of the page, in its current words for as long as it is found; charts that got data
// since the page was drawn are added to it in place. A run that nobody follows is polled no more.
import {PolyCharts} from "./charts.js";

export const PolyLive = (() => {
  const WAIT_S = 5;
  const POLL_MS = 1000;  // at least this between polls the server did not hold (one that cannot wait)
  const IDLE_POLL_MS = 5000;  // live once, quiet now: still looked at, less often

  const clock = iso => iso ? new Date(iso).toLocaleTimeString([], {hour12: false}) : "";

  // range.js binds the step buttons of the findings the page came with; these replaced them.
  function bindZoom(box) {
    for (const button of box.querySelectorAll("button.zoom")) {
      button.addEventListener("click", () => {
        PolyCharts.setRange(Number(button.dataset.from), Number(button.dataset.to));
        document.getElementById("range-bar")?.scrollIntoView({block: "start"});
      });
    }
  }

  // The alerts are a live region: a screen reader reads out whatever changes, so what did not stays.
  function say(alert, li) {
    const severity = li.dataset.severity;
    const head = `New ${severity} finding`;
    const words = ` while the run trains: ${li.querySelector(".text").textContent}`;
    alert.className = `live-alert sev-${severity}`;
    if (alert.textContent !== head + words) {
      alert.replaceChildren(Object.assign(document.createElement("strong"), {textContent: head}), words);
    }
  }

  // Announce the findings of the list in `box` that were not `known` (on the list as last shown),
  // and make them stand out; an announcement already made follows its finding's words, and goes
  // when the finding does. A finding that comes back (a drift falls silent while the lengths pass
  // through their start's band, then speaks of the fall) is new again.
  function announce(box, alerts, known) {
    const found = new Map([...box.querySelectorAll("li.finding")].map(li => [li.dataset.kind, li]));
    for (const alert of alerts.querySelectorAll(".live-alert[data-kind]")) {
      const li = found.get(alert.dataset.kind);
      if (li) say(alert, li);
      else alert.remove();
    }
    for (const kind of [...known].filter(kind => !found.has(kind))) known.delete(kind);
    for (const [kind, li] of found) {
      if (known.has(kind)) continue;
      known.add(kind);
      li.classList.add("finding-new");
      const alert = document.createElement("p");
      alert.dataset.kind = kind;
      say(alert, li);
      alerts.prepend(alert);
    }
  }

  // Charts that have data now but are not on the page: their cards come from the page as the
  // server renders it now (its own templates), each into its section (a new section in the
  // page's order), and are drawn in place at the page's step range.
  async function addCharts(charts, marks) {
    const drawn = new Set(PolyCharts.entries.map(e => e.info.name));
    const added = charts.filter(c => !drawn.has(c.name) && !document.getElementById(`chart-${c.name}`));
    if (!added.length) return;
    const res = await fetch(location.href, {cache: "no-store"});
    if (!res.ok) return;
    const doc = new DOMParser().parseFromString(await res.text(), "text/html");
    const infos = JSON.parse(doc.getElementById("charts-json")?.textContent || "[]");
    const names = new Set(added.map(c => c.name));
    for (const fresh of doc.querySelectorAll("section.section[data-section]")) {
      const cards = [...fresh.querySelectorAll(".chart-card")].filter(c => names.has(c.dataset.query));
      const here = document.querySelector(`section.section[data-section="${CSS.escape(fresh.dataset.section)}"]`);
      if (here) {
        for (const card of cards) {
          // after the card that comes before it in the server's order, else first
          const before = card.previousElementSibling?.dataset.query;
          const anchor = before && here.querySelector(`.chart-card[data-query="${CSS.escape(before)}"]`);
          if (anchor) anchor.after(document.adoptNode(card));
          else here.querySelector(".grid").prepend(document.adoptNode(card));
        }
      } else if (cards.length) {
        const prev = fresh.previousElementSibling?.closest("section.section");
        const after = prev && document.querySelector(`section.section[data-section="${CSS.escape(prev.dataset.section)}"]`);
        const node = document.adoptNode(fresh);
        if (after) after.after(node);
        else (document.querySelector("section.section") || document.querySelector("main").lastElementChild).before(node);
      }
    }
    // section ids and the contents bar as the server numbers them now
    for (const fresh of doc.querySelectorAll("section.section[data-section]")) {
      const here = document.querySelector(`section.section[data-section="${CSS.escape(fresh.dataset.section)}"]`);
      if (here) here.id = fresh.id;
    }
    const toc = doc.querySelector("nav.toc"), ours = document.querySelector("nav.toc");
    if (toc && ours) ours.innerHTML = toc.innerHTML;
    await PolyCharts.page(infos.filter(c => names.has(c.name)), {marks});
  }

  function show(page, parts, known) {
    page.facts.innerHTML = parts.facts;
    page.findings.innerHTML = parts.findings;
    bindZoom(page.findings);
    announce(page.findings, page.alerts, known);
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

  // Follow run `runId` on its page: `page.badge` is the live badge, `page.facts` the header's facts,
  // `page.findings` holds the findings list and `page.alerts` the announcements.
  function follow(runId, page) {
    const el = page.badge;
    if (!el) return;
    const known = new Set([...page.findings.querySelectorAll("li.finding")].map(li => li.dataset.kind));
    const base = `/api/runs/${encodeURIComponent(runId)}`;
    let etag = null;

    // The parts, fetched after the charts and off the poll's path (they read every step of the
    // run): one fetch at a time, and one more after it when the run changed while it ran; a fetch
    // that failed is made again at the run's next change.
    let parts = null, stale = false;
    function followParts() {
      if (parts) { stale = true; return; }
      parts = (async () => {
        const drawn = encodeURIComponent(PolyCharts.entries.map(e => e.info.name).join(","));
        const url = `/runs/${encodeURIComponent(runId)}/live-parts?drawn=${drawn}`;
        const res = await fetch(url, {cache: "no-store"});
        const got = res.ok ? await res.json() : null;
        if (got) {
          PolyCharts.remark(got.marks);
          show(page, got, known);
          await addCharts(got.charts, got.marks);
        }
        el.dataset.refreshed = String(Number(el.dataset.refreshed || 0) + 1);
      })().catch(() => {}).finally(() => {
        parts = null;
        if (stale) { stale = false; followParts(); }
      });
    }

    // The charts' new rows (a few small queries; data-charts-refreshed counts them), then the
    // parts: the charts do not wait for the findings, and are marked again should the findings
    // have changed (data-refreshed counts the parts shown).
    async function refresh() {
      await PolyCharts.refreshAll();
      el.dataset.chartsRefreshed = String(Number(el.dataset.chartsRefreshed || 0) + 1);
      followParts();
    }

    async function poll() {
      let live = null;
      const sent = Date.now();
      try {
        const res = await fetch(`${base}/live?wait=${etag ? WAIT_S : 0}`,
                                {cache: "no-store", headers: etag ? {"If-None-Match": etag} : {}});
        if (res.status === 200) {
          live = {...await res.json(), changed: true};
          badge(el, live);
          // a page drawn before the run's first step has no chart to refresh: draw it anew, once
          const key = `polytrace-live-drawn-${runId}`;
          if (live.source && !PolyCharts.entries.length && live.last_step !== null && !sessionStorage.getItem(key)) {
            sessionStorage.setItem(key, "1");
            location.reload();
            return;
          }
          // the page was drawn before this answer: its first one refreshes too
          if (live.source) await refresh();
          etag = res.headers.get("ETag");  // only once refreshed: a failed refresh is tried again
        } else if (res.status === 304) {
          live = {live: el.dataset.live === "1", source: true};
        }
      } catch (e) {
        live = {live: el.dataset.live === "1", source: true};  // a restarting server: ask again
      }
      if (live && live.source) {
        const held = live.changed || Date.now() - sent >= POLL_MS;
        setTimeout(poll, !live.live ? IDLE_POLL_MS : held ? 0 : POLL_MS);
      }
    }
    poll();
  }

  return {follow};
})();
