"use strict";
// The step-range bar: two inputs that drive PolyCharts' shared step range and follow it. The
// range lives in the page's URL (step_from, step_to), so a reload or a shared link keeps it.
const PolyRange = {
  bind(bar) {
    if (!bar) return;
    const from = bar.querySelector("#step-from"), to = bar.querySelector("#step-to");
    const apply = () => {
      const lo = parseInt(from.value, 10), hi = parseInt(to.value, 10);
      if (Number.isFinite(lo) && Number.isFinite(hi)) PolyCharts.setRange(Math.min(lo, hi), Math.max(lo, hi));
    };
    bar.querySelector("#range-apply").addEventListener("click", apply);
    bar.querySelector("#range-reset").addEventListener("click", () => PolyCharts.setRange(null, null));
    for (const input of [from, to]) input.addEventListener("keydown", e => { if (e.key === "Enter") apply(); });
    PolyCharts.onRange((range, bounds) => {
      if (bounds) for (const input of [from, to]) { input.min = bounds[0]; input.max = bounds[1]; }
      const shown = range || bounds;
      if (shown) { from.value = shown[0]; to.value = shown[1]; }
      bar.dataset.range = range ? `${range[0]}-${range[1]}` : "all";
      const url = new URL(location.href);
      if (range) { url.searchParams.set("step_from", range[0]); url.searchParams.set("step_to", range[1]); }
      else { url.searchParams.delete("step_from"); url.searchParams.delete("step_to"); }
      if (url.href !== location.href) history.replaceState(history.state, "", url);
    });
    // A finding's "steps a-b" shows those steps on every step chart.
    for (const button of document.querySelectorAll("button.zoom")) {
      button.addEventListener("click", () => {
        PolyCharts.setRange(Number(button.dataset.from), Number(button.dataset.to));
        bar.scrollIntoView({block: "start"});
      });
    }
  },

  // The step range the URL names, or null.
  fromUrl() {
    const q = new URLSearchParams(location.search);
    const lo = parseInt(q.get("step_from"), 10), hi = parseInt(q.get("step_to"), 10);
    return Number.isFinite(lo) && Number.isFinite(hi) ? [Math.min(lo, hi), Math.max(lo, hi)] : null;
  },

  // Draw a page's charts with its findings marked, at the URL's step range.
  page(charts, marks) {
    return PolyCharts.page(charts, {marks, range: PolyRange.fromUrl()});
  },
};
