"use strict";
// The step-range bar: two inputs that drive PolyCharts' shared step range and follow it.
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
    });
  },
};
