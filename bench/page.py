"""Run and compare page speed in headless Chromium: navigation to charts drawn, cold cache,
this tree side by side with a baseline.

Builds the demo database (polytrace.demo.build: the DAPO math run and the tool-use agent run),
serves one copy with this work tree and, unless --no-baseline, one with the baseline (this
tree with the files issue 19 changed as they are at --baseline, default HEAD: see
bench.api.baseline_tree), both with the result cache off so that every navigation runs every
query. Then, round after round with the two sides' order alternating, it opens each page in a
new browser context (an empty HTTP cache) and records, from navigation start:

- html: the page's HTML fully received (the server's rendering, its queries included);
- dcl: the HTML parsed and its scripts run (DOMContentLoaded done);
- visible: the first screen (1366x900, unscrolled) complete: parsed, and every chart on it drawn;
- all: every chart of the page drawn (body[data-charts-ready]), the page left alone;
- end: when the reader jumps to the end of the page as soon as the HTML is parsed (a second
  navigation), the charts then in view drawn (lazy drawing puts them first);
- scrolled: on that navigation, every chart drawn;
- js KB: bytes of script received over the wire (compressed when the server compresses);
- redraw: on the loaded page, every chart drawn again from its rows (Plotly.purge, then
  charts.js's draw, one after another), the median of REDRAWS: the browser's drawing alone,
  without the network, the server or the first run of the scripts.

A chart counts as drawn when charts.js marks it data-rendered, which it does after Plotly
(or the table builder) has drawn it. Prints the median and the spread (min-max) of each
figure, and the per-round ratio this tree / baseline. Timings are on a shared 2-core machine:
compare the two sides of one run, not figures of different runs.
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

from bench.api import baseline_tree, free_port, start_server  # noqa: E402
from polytrace.demo import build  # noqa: E402

CHROMIUM = "/usr/bin/chromium"
VIEWPORT = {"width": 1366, "height": 900}
TARGETS_S = {"run": 1.0, "compare": 1.5}
# Installed before any page script: the time each chart is marked drawn and the page ready.
RECORDER = """
(() => {
  const rec = window.__bench = {drawn: {}, ready: null};
  new MutationObserver(changes => {
    const now = performance.now();
    for (const c of changes) {
      const el = c.target;
      if (c.attributeName === "data-rendered" && el.id && !(el.id in rec.drawn)) rec.drawn[el.id] = now;
      if (c.attributeName === "data-charts-ready" && rec.ready === null) rec.ready = now;
    }
  }).observe(document, {attributes: true, subtree: true,
                        attributeFilter: ["data-rendered", "data-charts-ready"]});
})();
"""
REDRAWS = 3
# Every drawn chart drawn again on the loaded page: ms of drawing, a table's included.
REDRAW = """
async () => {
  const start = performance.now();
  for (const e of PolyCharts.entries) {
    if (!e.el || !e.drawn) continue;
    if (e.el.data) Plotly.purge(e.el);
    e.listening = false;
    await PolyCharts.draw(e);
  }
  return performance.now() - start;
}
"""
# Scrolled to the end: when the charts in view there were drawn.
IN_VIEW = """
() => Math.max(0, ...[...document.querySelectorAll(".chart")]
  .filter(el => { const r = el.getBoundingClientRect(); return r.bottom > 0 && r.top < innerHeight; })
  .map(el => window.__bench.drawn[el.id] ?? Infinity))
"""
# After the page is ready: what happened when, in ms since navigation start.
SUMMARY = """
() => {
  scrollTo(0, 0);
  const rec = window.__bench, nav = performance.getEntriesByType("navigation")[0];
  const charts = [...document.querySelectorAll(".chart")];
  const first = charts.filter(el => el.getBoundingClientRect().top < innerHeight);
  const at = els => Math.max(nav.domContentLoadedEventEnd, ...els.map(el => rec.drawn[el.id] ?? Infinity));
  const scripts = performance.getEntriesByType("resource").filter(r => r.initiatorType === "script");
  return {html: nav.responseEnd, dcl: nav.domContentLoadedEventEnd, charts: charts.length,
          drawn: charts.filter(el => el.id in rec.drawn).length, first: first.length,
          visible: at(first), all: Math.max(rec.ready ?? Infinity, at(charts)),
          js_kb: scripts.reduce((n, r) => n + r.transferSize, 0) / 1024,
          js_decoded_kb: scripts.reduce((n, r) => n + r.decodedBodySize, 0) / 1024};
}
"""


def measure(browser, url: str, scroll: bool) -> dict:
    """One cold navigation: a new context has an empty cache."""
    ctx = browser.new_context(viewport=VIEWPORT)
    try:
        pg = ctx.new_page()
        pg.add_init_script(RECORDER)
        errors = []
        pg.on("pageerror", lambda e: errors.append(str(e)))
        pg.goto(url, wait_until="domcontentloaded" if scroll else "load", timeout=60_000)
        if scroll:
            pg.evaluate("scrollTo(0, document.documentElement.scrollHeight)")
        pg.wait_for_selector("body[data-charts-ready]", state="attached", timeout=60_000)
        end = pg.evaluate(IN_VIEW) if scroll else None
        out = pg.evaluate(SUMMARY)
        out["end"] = end
        if not scroll:
            out["redraw"] = statistics.median(pg.evaluate(REDRAW) for _ in range(REDRAWS))
        if errors:
            raise SystemExit(f"{url}: page errors {errors}")
        if out["drawn"] != out["charts"]:
            raise SystemExit(f"{url}: {out['drawn']} of {out['charts']} charts drawn")
        return out
    finally:
        ctx.close()


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.0f} [{min(values):.0f}-{max(values):.0f}]"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--baseline", default="HEAD", help="git ref the baseline's serving code comes from")
    parser.add_argument("--no-baseline", action="store_true")
    parser.add_argument("--cache-rows", type=int, default=0,
                        help="the servers' result cache (default 0: every navigation runs every query)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with tempfile.TemporaryDirectory(prefix="polytrace-bench-page-") as tmp:
        tmp = Path(tmp)
        math_run, agent_run = build(tmp / "demo.duckdb")
        pages = {"run": f"/runs/{math_run}", "compare": f"/compare?a={math_run}&b={agent_run}"}
        sides = {"this tree": None}
        if not args.no_baseline:
            sides = {"baseline": baseline_tree(args.baseline, tmp / "baseline"), **sides}
        servers, urls = [], {}
        try:
            for name, site in sides.items():
                db = tmp / f"{name.replace(' ', '-')}.duckdb"
                shutil.copy(tmp / "demo.duckdb", db)
                port = free_port()
                servers.append(start_server(db, port, args.cache_rows, site, cwd=tmp))
                urls[name] = f"http://127.0.0.1:{port}"
            results = {(side, page, mode): [] for side in sides for page in pages
                       for mode in ("load", "scroll")}
            with sync_playwright() as p:
                browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
                    "--no-sandbox", "--disable-gpu", "--disable-background-networking"])
                for side in sides:  # a warm-up navigation each: the servers' first requests
                    for path in pages.values():
                        measure(browser, urls[side] + path, False)
                for r in range(args.rounds):
                    order = list(sides) if r % 2 == 0 else list(reversed(sides))
                    for page, path in pages.items():
                        for mode in ("load", "scroll"):
                            for side in order:
                                results[side, page, mode].append(measure(browser, urls[side] + path,
                                                                         mode == "scroll"))
                browser.close()
        finally:
            for s in servers:
                s.terminate()
                s.wait(timeout=30)
    report(results, sides, pages, args.rounds)


def report(results: dict, sides: dict, pages: dict, rounds: int) -> None:
    print(f"\nms from navigation start, median [min-max] of {rounds} cold navigations per figure")
    head = f"{'page':<8} {'side':<10} {'charts':>6} {'html':>16} {'dcl':>16} {'visible':>16} {'all':>16} " \
           f"{'end':>16} {'scrolled':>16} {'redraw':>16} {'js KB':>14}"
    print(head)
    for page in pages:
        for side in sides:
            load, scroll = results[side, page, "load"], results[side, page, "scroll"]
            print(f"{page:<8} {side:<10} {load[0]['charts']:>6} {spread([m['html'] for m in load]):>16} "
                  f"{spread([m['dcl'] for m in load]):>16} {spread([m['visible'] for m in load]):>16} {spread([m['all'] for m in load]):>16} "
                  f"{spread([m['end'] for m in scroll]):>16} {spread([m['all'] for m in scroll]):>16} "
                  f"{spread([m['redraw'] for m in load]):>16} "
                  f"{statistics.median(m['js_kb'] for m in load):6.0f} ({statistics.median(m['js_decoded_kb'] for m in load):.0f})")
        if "baseline" in sides:
            ratios = {k: [a[k] / b[k] for a, b in zip(results["this tree", page, "load"],
                                                       results["baseline", page, "load"])]
                      for k in ("html", "dcl", "visible", "all")}
            for key, name in (("end", "end"), ("all", "scrolled")):
                ratios[name] = [a[key] / b[key] for a, b in zip(results["this tree", page, "scroll"],
                                                                results["baseline", page, "scroll"])]
            ratios["redraw"] = [a["redraw"] / b["redraw"] for a, b in zip(results["this tree", page, "load"],
                                                                          results["baseline", page, "load"])]
            print(f"{page:<8} {'ratio':<10} {'':>6} " + " ".join(
                f"{statistics.median(v):>7.2f} [{min(v):.2f}-{max(v):.2f}]" for v in ratios.values()))
    print()
    for page, target in TARGETS_S.items():
        for side in sides:
            visible = statistics.median(m["visible"] for m in results[side, page, "load"]) / 1000
            every = statistics.median(m["all"] for m in results[side, page, "load"]) / 1000
            print(f"{page} page, {side}: visible charts {visible:.2f} s, every chart {every:.2f} s "
                  f"(target {target:g} s: {'met' if every <= target else 'visible only' if visible <= target else 'missed'})")


if __name__ == "__main__":
    main()
