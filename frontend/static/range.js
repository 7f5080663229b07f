// The step-range bar: two inputs that drive PolyCharts' shared step range and follow it. The
// range lives in the page's URL (step_from, step_to), so a reload or a shared link keeps it.
import {PolyCharts} from "./charts.js";

export const PolyRange = {
  bind(bar) {
    if (!bar) return;
    const from = bar.querySelector("#step-from"), to = bar.querySelector("#step-to");
    const apply = () => {
      const lo = PolyRange.step(from.value), hi = PolyRange.step(to.value);
      for (const [input, value] of [[from, lo], [to, hi]]) {
        input.setCustomValidity(value === null ? "Enter a step number" : "");
        if (value === null) { input.reportValidity(); return; }
      }
      PolyCharts.setRange(Math.min(lo, hi), Math.max(lo, hi));
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
    const lo = PolyRange.step(q.get("step_from")), hi = PolyRange.step(q.get("step_to"));
    return lo !== null && hi !== null ? [Math.min(lo, hi), Math.max(lo, hi)] : null;
  },

  // A step as typed or in the URL, or null: "1e9" is 1,000,000,000 (the charts clamp it to the
  // run's last step), not the 1 parseInt reads.
  step(text) {
    const value = text === null || text.trim() === "" ? NaN : Number(text);
    return Number.isFinite(value) ? Math.round(value) : null;
  },

  // Draw a page's charts with its findings marked, at the URL's step range.
  page(charts, marks) {
    return PolyCharts.page(charts, {marks, range: PolyRange.fromUrl()});
  },
};
