"""The charts' ES modules in a real browser: the number formatter against the vectors it shares
with the server's (tests/fixtures/fmt_vectors.json), the renderer table against the catalog's
chart kinds, and what each chart must show and must not cover."""
from __future__ import annotations

import json

from polytrace.queries.catalog import CHART_KINDS
from tests import test_browser
from tests.conftest import FIXTURES
from tests.test_browser import console_errors, open_page

# test_browser's fixtures: its Chromium, a page that records console errors and off-machine
# requests, and a server with three real runs
browser, page, three_runs = test_browser.browser, test_browser.page, test_browser.three_runs

VECTORS = json.loads((FIXTURES / "fmt_vectors.json").read_text())["vectors"]


def test_the_charts_write_each_number_as_the_server_does(page, make_server):
    srv = make_server()
    open_page(page, srv.url + "/queries")
    got = page.evaluate("""async vectors => {
        const {fmtNumber} = await import('/static/charts/format.js');
        return vectors.map(v => fmtNumber(v.value, v.fmt));
    }""", VECTORS)
    assert [(v["fmt"], v["value"], g) for v, g in zip(VECTORS, got)] == \
        [(v["fmt"], v["value"], v["text"]) for v in VECTORS]
    assert console_errors(page) == []


def test_every_chart_kind_of_the_catalog_has_one_renderer(page, make_server):
    srv = make_server()
    open_page(page, srv.url + "/queries")
    kinds = page.evaluate("""async () => {
        const {KINDS} = await import('/static/charts/kinds.js');
        return Object.fromEntries(Object.entries(KINDS).map(([k, r]) => [k, !!(r.traces || r.draw)]));
    }""")
    assert set(CHART_KINDS) <= set(kinds) and all(kinds.values()), kinds


def stall_log(path, steps: int = 60, every: int = 10):
    """A verl log whose every `every`-th step saves a checkpoint (18 s) and validates (6.5 s)."""
    lines = []
    for s in range(1, steps + 1):
        spike = s % every == 0
        extra = " - timing_s/save_checkpoint:18.0 - timing_s/testing:6.5" if spike else ""
        step = 10.0 + (24.5 if spike else 0.0) + (s % 3) * 0.1
        lines.append(f"step:{s} - timing_s/gen:{6 + (s % 3) * 0.1:.1f} - timing_s/old_log_prob:1.0"
                     f" - timing_s/update_actor:2.0 - timing_s/adv:1.0{extra} - timing_s/step:{step:.1f}"
                     f" - perf/throughput:{10000 / step:.1f} - response_length/mean:{500 + s}"
                     f" - response_length/max:{2000 + 3 * s} - actor/entropy:{0.5 - s / 1000:.3f}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_periodic_stall_is_drawn_across_its_own_chart_and_as_ticks_elsewhere(page, make_server, tmp_path):
    db = tmp_path / "stall.duckdb"
    (run_id,) = test_browser.ingest(db, stall_log(tmp_path / "stall.output.log"), name="stall")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    spikes = [f for f in page.request.get(f"{srv.url}/api/runs/{run_id}/findings").json()["findings"]
              if f["kind"] == "step_time_spike"]
    assert spikes and spikes[0]["evidence"].startswith("/api/queries/stage_breakdown?")
    steps = spikes[0]["steps"]
    lines = page.evaluate("""() => Object.fromEntries(PolyCharts.entries.filter(e => e.el.layout).map(e =>
        [e.info.name, (e.el.layout.shapes || []).filter(s => s.name === 'step_time_spike' && s.type === 'line')
                                                .map(s => [s.x0, s.y0, s.y1])]))""")
    # across the plot on the step-time chart, one line per stalled step
    assert lines.pop("stage_breakdown") == [[s, 0, 1] for s in steps]
    marked = {name: ls for name, ls in lines.items() if ls}
    assert marked, lines
    # elsewhere a tick in the band along the top, never across the data
    for name, ls in marked.items():
        assert [x for x, _, _ in ls] == steps and all(y0 >= 0.9 and y1 == 1 for _, y0, y1 in ls), name
    assert console_errors(page) == []


def test_a_heatmap_of_one_value_says_so(page, make_server):
    srv = make_server()
    open_page(page, srv.url + "/queries")
    page.evaluate("""() => {
        const el = Object.assign(document.createElement('div'), {id: 'chart-flat', className: 'chart'});
        document.querySelector('main').appendChild(el);
        return PolyCharts.page([{name: 'flat', title: 'flat', chart: {kind: 'heatmap', x: 'step', y: ['rank'], z: 'busy_s'},
            columns: {busy_s: {fmt: 's'}, step: {fmt: 'count'}, rank: {fmt: 'count'}}, params: {}, points: 600,
            data: {ok: true, columns: ['step', 'rank', 'busy_s'], rows: [[1, 0, 2.5], [2, 0, 3.5], [3, 0, 4.5]]}}]);
    }""")
    notes = page.evaluate("document.getElementById('chart-flat').layout.annotations.map(a => a.text)")
    # one rank: each cell is its step's mean, 1.0x, one flat colour that reads as an empty chart
    assert notes == ["Every cell is 1.00× the step's mean"]
    assert page.locator("#chart-flat .annotation-text").text_content() == "Every cell is 1.00× the step's mean"
    assert console_errors(page) == []


def test_the_api_docs_link_back_to_the_dashboard(page, make_server):
    srv = make_server()
    page.goto(srv.url + "/docs")
    page.wait_for_selector(".swagger-ui .info")
    page.click("#dashboard-link a[href='/']")
    page.wait_for_url(srv.url + "/")
    assert page.locator("header a.brand").count() == 1


def test_on_a_phone_the_length_stats_legend_leaves_its_title_clear(page, three_runs):
    srv, ids = three_runs
    page.set_viewport_size({"width": 390, "height": 844})
    open_page(page, f"{srv.url}/runs/{ids['dapo']}")
    boxes = page.evaluate("""() => { const el = document.getElementById('chart-length_stats');
        const box = sel => { const r = el.querySelector(sel).getBoundingClientRect();
                             return {top: r.top, bottom: r.bottom, left: r.left, right: r.right}; };
        return {title: box('.gtitle'), legend: box('.legend'), plot: box('.nsewdrag')}; }""")
    title, legend, plot = boxes["title"], boxes["legend"], boxes["plot"]
    apart = legend["top"] >= title["bottom"] or legend["bottom"] <= title["top"] \
        or legend["left"] >= title["right"] or legend["right"] <= title["left"]
    assert apart, boxes
    assert legend["top"] >= plot["bottom"], boxes  # under the plot, not over its data
    assert console_errors(page) == []


def test_finding_labels_on_an_overlaid_chart_clear_each_other_and_the_data(page, make_server):
    """Two runs' findings over the same steps (the compare page's overlay): each label in its own
    row above the plot, where it covers neither the other label nor a line."""
    srv = make_server()
    open_page(page, srv.url + "/queries")
    page.evaluate("""() => {
        const el = Object.assign(document.createElement('div'), {id: 'chart-ab-lens', className: 'chart'});
        el.style.height = '380px';
        document.querySelector('main').appendChild(el);
        const side = (run, top) => ({name: 'lens', title: 'lengths', linked: true, chart: {kind: 'line', x: 'step', y: ['len']},
            columns: {len: {fmt: 'tokens'}, step: {fmt: 'count'}}, params: {run_id: run}, points: 600,
            data: {ok: true, columns: ['step', 'len'], rows: [...Array(40).keys()].map(s => [s, top])}});
        const drift = {kind: 'length_drift', severity: 'warn', steps: [0, 1, 2, 3, 36, 37, 38, 39]};
        return PolyCharts.page([{...side('ra', 8000), el_id: 'chart-ab-lens', label: 'A',
                                 overlay: {...side('rb', 7900), label: 'B'}}], {marks: {ra: [drift], rb: [drift]}});
    }""")
    boxes = page.evaluate("""() => { const el = document.getElementById('chart-ab-lens');
        const box = n => { const r = n.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
        return {labels: [...el.querySelectorAll('.annotation')].map(box), plot: box(el.querySelector('.nsewdrag')),
                texts: [...el.querySelectorAll('.annotation-text')].map(t => t.textContent)}; }""")
    assert sorted(boxes["texts"]) == ["A: length drift", "B: length drift"]
    (a, b), plot = boxes["labels"], boxes["plot"]
    assert a[3] <= b[1] or b[3] <= a[1], boxes  # one above the other
    assert max(a[3], b[3]) <= plot[1], boxes  # both above the plot's data
    assert console_errors(page) == []


def test_the_budget_axis_says_per_gpu_when_the_gpu_count_is_unknown(page, make_server, tmp_path):
    db = tmp_path / "log.duckdb"
    (run_id,) = test_browser.ingest(db, stall_log(tmp_path / "stall.output.log"), name="log")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    card = page.locator(".chart-card[data-query='step_budget']")
    # a verl log does not say how many GPUs the job had: the figures, and the axis, are per GPU
    assert card.locator(".g-ytitle").text_content() == "GPU time, per GPU"
    assert card.locator(".note").inner_text().startswith("GPU count unknown: every figure is per GPU")
    assert console_errors(page) == []
