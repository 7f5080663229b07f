"""The dashboard in a real browser: headless Debian Chromium (Playwright) against a real uvicorn server."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from polytrace import store
from polytrace.queries.perfetto import PATH_TID
from tests.conftest import FIXTURES, ROOT, free_port

pytestmark = pytest.mark.browser

CHROMIUM = Path("/usr/bin/chromium")
ARTIFACTS = ROOT / "test-artifacts"
DAPO = "polytrace/verl/profile/packed_length_log/20260614_023133"
DAPO_AGAIN = "polytrace/verl/profile/packed_length_log/20260610_092349"
RLLM = "polytrace/rllm/profile/packed_length_log/20260616_024512"
CPU_ONLY = "kineto/cpu_only/rank-34.Jul_15_10_52_41.1074.pt.trace.json.gz"
COLLAPSED = "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log"
# A kernel name a hostile trace could carry: it must read as text wherever it is shown.
HOSTILE = "<a href=//x>k</a>"
SECTIONS = ("Lengths", "Rollout tail", "Imbalance", "Stages", "Multi-turn", "Async", "GPU", "What if", "Other")
# Chromium itself reports every HTTP error response on the console. A rejected upload is
# meant to answer 4xx, so that one report is expected; anything else is a page defect.
REJECTED_UPLOAD = re.compile(r"^Failed to load resource: the server responded with a status of 4\d\d")


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM.exists():
        if os.environ.get("POLYTRACE_REQUIRE_BROWSER") == "1":
            pytest.fail("POLYTRACE_REQUIRE_BROWSER=1 but /usr/bin/chromium is absent")
        pytest.skip("/usr/bin/chromium is absent (apt-get install chromium)")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), headless=True,
                              args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"])
        yield b
        b.close()


@pytest.fixture(scope="module")
def three_runs(tmp_path_factory, browser):
    """One server for the read-only tests: the DAPO run, its second recording, and rLLM."""
    from polytrace.settings import Settings
    from tests.conftest import SHARED_DATA, LiveServer, skip_for_data

    if not SHARED_DATA.is_dir():
        skip_for_data()
    db = tmp_path_factory.mktemp("browser") / "three.duckdb"
    ids = ingest(db, SHARED_DATA / DAPO, SHARED_DATA / DAPO_AGAIN, SHARED_DATA / RLLM)
    srv = LiveServer(Settings(db=str(db))).__enter__()
    yield srv, dict(zip(("dapo", "dapo_again", "rllm"), ids))
    srv.__exit__(None, None, None)


@pytest.fixture
def page(browser):
    """A laptop-sized page that records console errors and uncaught exceptions."""
    ctx = browser.new_context(viewport={"width": 1366, "height": 900})
    pg = ctx.new_page()
    pg.problems = []
    pg.on("console", lambda m: m.type == "error" and pg.problems.append(
        (m.text, (m.location or {}).get("url", ""))))
    pg.on("pageerror", lambda e: pg.problems.append((f"uncaught: {e}", "")))
    # Air-gapped users: the pages must never reach beyond the server they came from.
    pg.on("request", lambda r: r.url.startswith(("http://127.0.0.1:", "data:", "blob:")) or
          pg.problems.append((f"off-machine request {r.url}", r.url)))
    pg.set_default_timeout(20_000)
    yield pg
    ctx.close()


def console_errors(pg, allow_rejected_upload: bool = False) -> list:
    return [(text, url) for text, url in pg.problems
            if not (allow_rejected_upload and url.endswith("/api/runs") and REJECTED_UPLOAD.match(text))]


def open_page(pg, url: str) -> None:
    """Open a page and wait until its scripts are done: the runs table filled, or every
    chart drawn."""
    pg.goto(url)
    if pg.locator("#runs").count():
        pg.wait_for_selector("#runs[data-loaded]")
    if pg.locator("#charts-json").count() or pg.locator(".chart").count():
        wait_charts(pg)


def wait_charts(pg) -> None:
    pg.wait_for_selector("body[data-charts-ready]")


def screenshot(pg, name: str) -> Path:
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    pg.screenshot(path=str(path), full_page=True)
    return path


def ingest(db: Path, *dirs: Path, name: str | None = None) -> list[str]:
    from polytrace.ingest.load import ingest_paths

    con = store.open(db)
    try:
        return [ingest_paths(con, [d], name=name or d.name).run_id for d in dirs]
    finally:
        con.close()


def rest(srv, name: str, **params) -> dict:
    body = httpx.get(f"{srv.url}/api/queries/{name}", params=params, timeout=30).json()
    assert body["ok"], body
    return body


def expected_charts(srv, run_id: str) -> dict[str, str]:
    """query name -> section, for every dashboard query whose REST rows for this run carry
    a value in a charted column: these, and only these, must be drawn."""
    catalog = httpx.get(f"{srv.url}/api/queries").json()["queries"]
    out = {}
    for q in catalog:
        params = {p["name"] for p in q["params"]}
        required = {p["name"] for p in q["params"] if p["required"]}
        if not q["chart"] or q["section"] not in SECTIONS or "run_id" not in params \
                or required != {"run_id"} or any(p.endswith("_run") for p in params):
            continue
        body = rest(srv, q["name"], run_id=run_id)
        charted = [c for c in [*q["chart"].get("y", []), q["chart"].get("z")] if c in body["columns"]] \
            or body["columns"]
        idx = [body["columns"].index(c) for c in charted]
        if any(r[i] is not None for r in body["rows"] for i in idx):
            out[q["name"]] = q["section"]
    return out


def drawn_traces(pg, name: str, prefix: str = "chart-") -> list[dict]:
    """Trace summaries of one chart (its data, not the findings marked on it): type and how
    many points it carries."""
    return pg.evaluate("""id => {
        const el = document.getElementById(id);
        if (!el) return null;
        if (!el.classList.contains('js-plotly-plot')) return el.querySelector('table') ?
            [{type: 'table', n: el.querySelectorAll('tbody tr').length}] : [];
        return el.data.filter(t => !(t.meta && t.meta.finding)).map(t => ({type: t.type, name: t.name || '',
            n: t.type === 'heatmap' ? t.z.flat().filter(v => v !== null).length
                                    : (t.y || []).filter(v => v !== null).length}));
    }""", prefix + name)


def packed_sample_count(folder: Path) -> int:
    """Responses in a packed-lengths directory, counted with plain JSON: one per output[j]."""
    n = 0
    for f in folder.glob("packed_lengths_step_*.jsonl"):
        n += sum(len(json.loads(line)["output"]) for line in f.read_text().splitlines() if line.strip())
    return n


def test_upload_run_then_overview_draws_every_chart(page, make_server, shared_data):
    srv = make_server()
    open_page(page, srv.url + "/")
    assert page.locator("#no-runs").is_visible()
    for folder, name, expected_rows in ((DAPO, "dapo", 1), (RLLM, "rllm", 2)):
        files = sorted(str(p) for p in (shared_data / folder).iterdir())
        page.fill("#run-name", name)
        page.set_input_files("#file-input", files)
        page.wait_for_selector(f"#runs tbody tr:nth-child({expected_rows})")
        page.wait_for_selector("#upload-status:not(.error-line):has-text('Ingested')")
        # The bar saw the upload through to its last byte before the ingest began.
        assert page.get_attribute("#upload-progress", "data-uploaded") == "1"
    runs = rest(srv, "runs")
    by_name = {r[1]: dict(zip(runs["columns"], r)) for r in runs["rows"]}
    dapo = by_name["dapo"]
    assert dapo["samples"] == packed_sample_count(shared_data / DAPO)
    shown = page.locator(f"#runs tr[data-run-id='{dapo['run_id']}'] td").all_inner_texts()
    assert shown[1].startswith("dapo") and shown[4] == "6"
    assert shown[5] == f"{dapo['samples']:,}"

    page.click(f"#runs tr[data-run-id='{dapo['run_id']}'] a")
    page.wait_for_url(f"**/runs/{dapo['run_id']}")
    wait_charts(page)
    expected = expected_charts(srv, dapo["run_id"])
    assert {"length_stats", "length_histogram", "rollout_tail"} <= set(expected)
    drawn = {el.get_attribute("data-query") for el in page.locator(".chart-card").all()}
    assert drawn == set(expected)
    for name in expected:
        traces = drawn_traces(page, name)
        assert traces and any(t["n"] > 0 for t in traces), (name, traces)
    # A section shows when one of its queries has data for this run, and only then; What if
    # has no stored simulation yet, so it offers one after them.
    sections = page.locator("section.section").evaluate_all("els => els.map(e => e.dataset.section)")
    assert sections == [s for s in SECTIONS if s in set(expected.values())] + ["What if"]
    assert page.locator("#sec-whatif #whatif-run").is_visible()
    assert "Multi-turn" not in sections  # packed lengths carry no turns
    # Every chart: title, axis titles, caption and the REST link feeding it.
    for card in page.locator(".chart-card").all():
        name = card.get_attribute("data-query")
        assert card.locator(".caption").inner_text().strip()
        href = card.locator("a.rest").get_attribute("href")
        assert href == f"/api/queries/{name}?run_id={dapo['run_id']}"
        if card.get_attribute("data-kind") != "table":
            for title in (".gtitle", ".g-xtitle", ".g-ytitle"):
                assert card.locator(title).first.text_content().strip(), (name, title)
            titles = card.locator(".modebar-btn").evaluate_all("bs => bs.map(b => b.dataset.title)")
            assert "Download plot as a PNG" in titles and "Zoom" in titles
            assert not any("Share" in t for t in titles)  # nothing leaves the machine
    screenshot(page, "run-overview.png")
    # Laptop widths: nothing spills sideways.
    for width in (1280, 1024):
        page.set_viewport_size({"width": width, "height": 800})
        page.wait_for_timeout(300)  # Plotly's responsive resize
        assert page.evaluate("document.documentElement.scrollWidth") <= width, width
    assert console_errors(page) == []


def test_findings_on_the_run_page_equal_the_api(page, three_runs):
    srv, ids = three_runs
    run_id = ids["dapo"]
    found = httpx.get(f"{srv.url}/api/runs/{run_id}/findings").json()["findings"]
    assert {f["kind"] for f in found} >= {"filter_waste", "rollout_tail"}
    open_page(page, f"{srv.url}/runs/{run_id}")
    items = page.locator("li.finding").all()
    # One item per finding, in the API's order (most severe first): its badge, its sentence
    # and the query that proves it.
    assert [i.get_attribute("data-kind") for i in items] == [f["kind"] for f in found]
    for item, f in zip(items, found):
        assert item.locator(".badge").inner_text().lower() == f["severity"]
        assert item.locator(".text").inner_text() == f["text"]
        evidence = item.locator("a.evidence")
        assert evidence.get_attribute("data-api") == f["evidence"]
        assert httpx.get(srv.url + evidence.get_attribute("href")).status_code == 200
    # The worst step of the rollout tail is marked on the step charts, named on hover.
    tail = next(f for f in found if f["kind"] == "rollout_tail")
    marks = page.evaluate("""() => document.getElementById('chart-length_stats').data
        .filter(t => t.meta && t.meta.finding).map(t => ({kind: t.meta.finding, x: t.x, text: t.hovertemplate}))""")
    assert {"kind": "rollout_tail", "x": tail["steps"], "text": "<b>rollout tail</b> (warn finding)<extra></extra>"} in marks
    # Dark mode: the page palette switches and the charts redraw in it.
    light_font = page.evaluate("document.getElementById('chart-length_stats').layout.font.color")
    page.emulate_media(color_scheme="dark")
    page.wait_for_function("""light => document.getElementById('chart-length_stats').layout.font.color !== light""",
                           arg=light_font)
    dark_font = page.evaluate("document.getElementById('chart-length_stats').layout.font.color")
    assert dark_font == page.evaluate("getComputedStyle(document.documentElement).getPropertyValue('--fg').trim()")
    screenshot(page, "run-overview-dark.png")
    assert console_errors(page) == []


def test_step_range_links_charts(page, three_runs):
    srv, ids = three_runs
    run_id = ids["dapo"]
    open_page(page, f"{srv.url}/runs/{run_id}")
    assert page.input_value("#step-from") == "0" and page.input_value("#step-to") == "5"
    linked = page.evaluate("PolyCharts.entries.filter(e => e.info.linked).map(e => e.el.id)")
    assert {"chart-length_stats", "chart-rollout_tail"} <= set(linked)
    page.fill("#step-from", "2")
    page.fill("#step-to", "3")
    page.click("#range-apply")
    page.wait_for_selector("#chart-length_histogram[data-range='2-3']")
    for el_id in linked:
        page.wait_for_selector(f"#{el_id}[data-range='2-3']")
        assert page.evaluate(f"document.getElementById('{el_id}').layout.xaxis.range") == [1.5, 3.5]
    # The histogram is re-queried for steps 2..3: its counts are REST's for that range.
    hist = rest(srv, "length_histogram", run_id=run_id, step_from=2, step_to=3)
    want = [r[hist["columns"].index("responses")] for r in hist["rows"]]
    got = page.evaluate("document.getElementById('chart-length_histogram').data[0].y")
    assert got == want and sum(got) == 2 * 768  # 96 prompts x 8 samples per step
    # Zooming one chart moves the others and the inputs.
    page.evaluate("Plotly.relayout(document.getElementById('chart-length_stats'), {'xaxis.range': [0.6, 4.2]})")
    page.wait_for_selector("#chart-rollout_tail[data-range='1-4']")
    assert page.input_value("#step-from") == "1" and page.input_value("#step-to") == "4"
    # The range lives in the URL: a reload (or the link, shared) opens at it.
    assert page.url.endswith(f"/runs/{run_id}?step_from=1&step_to=4")
    page.reload()
    wait_charts(page)
    page.wait_for_selector("#chart-length_histogram[data-range='1-4']")
    assert page.input_value("#step-from") == "1" and page.input_value("#step-to") == "4"
    assert page.evaluate("document.getElementById('chart-rollout_tail').layout.xaxis.range") == [0.5, 4.5]
    page.click("#range-reset")
    page.wait_for_selector("#chart-rollout_tail[data-range='all']")
    assert page.url.endswith(f"/runs/{run_id}")
    assert sum(page.evaluate("document.getElementById('chart-length_histogram').data[0].y")) == 6 * 768
    # A step typed as 1e9 is past the last step (parseInt read it as 1): the range ends there.
    page.fill("#step-from", "1")
    page.fill("#step-to", "1e9")
    page.click("#range-apply")
    page.wait_for_selector("#chart-rollout_tail[data-range='1-5']")
    assert page.input_value("#step-to") == "5"
    # A step that is no number changes nothing and says why.
    page.fill("#step-from", "")
    page.click("#range-apply")
    assert page.evaluate("document.getElementById('step-from').validationMessage") == "Enter a step number"
    assert page.locator("#chart-rollout_tail").get_attribute("data-range") == "1-5"
    # A long tail reads on a log scale at a click.
    card = page.locator(".chart-card[data-query='length_histogram']")
    card.locator(".log-toggle input").check()
    page.wait_for_selector("#chart-length_histogram[data-log-y='1']")
    assert page.evaluate("document.getElementById('chart-length_histogram').layout.yaxis.type") == "log"
    assert console_errors(page) == []


def test_broken_file_drop_shows_one_line_error(page, make_server):
    srv = make_server()
    open_page(page, srv.url + "/")
    broken = '{"step": 0, "input": 3, "output": [1, 2'
    page.evaluate("""text => {
        const dt = new DataTransfer();
        dt.items.add(new File([text], 'packed_lengths_step_0.jsonl'));
        document.getElementById('dropzone').dispatchEvent(
            new DragEvent('drop', {dataTransfer: dt, bubbles: true, cancelable: true}));
    }""", broken)
    status = page.wait_for_selector("#upload-status.error-line")
    text = status.inner_text()
    # The same bytes through the REST API give the same one-line reason.
    res = httpx.post(f"{srv.url}/api/runs",
                     files={"file": ("packed_lengths_step_0.jsonl", broken.encode())})
    assert 400 <= res.status_code < 500 and res.json()["error"] == text
    assert "\n" not in text and text.startswith("packed_lengths_step_0.jsonl")
    assert page.locator("#runs tbody tr").count() == 0
    assert rest(srv, "runs")["rows"] == []
    assert console_errors(page, allow_rejected_upload=True) == []


def test_gpu_run_draws_its_section_and_exports_perfetto(page, make_server, shared_data, tmp_path):
    db = tmp_path / "k.duckdb"
    (run_id,) = ingest(db, shared_data / "kineto/param-dlrm-8rank/dlrm_kineto.tar.gz")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    expected = expected_charts(srv, run_id)
    assert set(expected.values()) == {"GPU"}
    assert {el.get_attribute("data-query") for el in page.locator(".chart-card").all()} == set(expected)
    for name in expected:
        assert any(t["n"] > 0 for t in drawn_traces(page, name)), name
    timelines = page.locator(".chart-card[data-kind='timeline']").all()
    assert timelines, "no timeline chart"
    lanes = drawn_traces(page, timelines[0].get_attribute("data-query"))
    assert {t["type"] for t in lanes} == {"bar"}
    href = timelines[0].locator("a.perfetto").get_attribute("href")
    doc = httpx.get(srv.url + href).json()
    assert doc["otherData"]["run_id"] == run_id
    assert any(e["ph"] == "X" for e in doc["traceEvents"])
    assert console_errors(page) == []


def test_one_rank_and_profiled_step_chosen_on_the_gpu_section(page, make_server, shared_data, tmp_path):
    db = tmp_path / "k.duckdb"
    (run_id,) = ingest(db, shared_data / "kineto/param-dlrm-8rank/dlrm_kineto.tar.gz")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    steps = sorted({r[1] for r in rest(srv, "gpu_time", run_id=run_id, include_last_step="true")["rows"]
                    if r[1] is not None})
    assert page.locator(".gpu-window select[name=rank] option").all_inner_texts() == [str(r) for r in range(8)]
    assert page.locator(".gpu-window select[name=step] option").all_inner_texts() == [str(s) for s in steps]
    page.select_option(".gpu-window select[name=rank]", "3")
    page.select_option(".gpu-window select[name=step]", str(steps[-1]))
    page.click(".gpu-window button[type=submit]")
    page.wait_for_url(f"**/runs/{run_id}?rank=3&step={steps[-1]}#gpu")
    wait_charts(page)
    card = page.locator("article[data-query=gpu_timeline]")
    assert card.locator(".window").inner_text() == f"rank 3, step {steps[-1]}"
    # the chart draws the chosen window's rows, and Perfetto gets the same window
    drawn = sum(t["n"] for t in drawn_traces(page, "gpu_timeline"))
    assert drawn == len(rest(srv, "gpu_timeline", run_id=run_id, rank=3, step=steps[-1])["rows"]) > 0
    doc = httpx.get(srv.url + card.locator("a.perfetto").get_attribute("href")).json()
    assert (doc["otherData"]["rank"], doc["otherData"]["step"]) == (3, steps[-1])
    assert any(e.get("tid") == PATH_TID and e["ph"] == "X" for e in doc["traceEvents"])
    # the stages joined to the path are of that rank only
    ranks = page.locator("article[data-query=gpu_stage_critical_path] tbody tr td:first-child").all_inner_texts()
    assert ranks and set(ranks) == {"3"}
    assert console_errors(page) == []


def test_the_memory_timeline_points_at_its_peak(page, make_server, tmp_path):
    db = tmp_path / "m.duckdb"
    (run_id,) = ingest(db, FIXTURES / "kineto" / "cpu_memory_rank0.json.gz")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    peak = page.evaluate("""() => document.getElementById('chart-gpu_memory_timeline').layout.annotations
        .filter(a => a.name === 'peak').map(a => [a.text, a.y])""")
    # the fixture's highest Total Allocated (tests/test_gpu_memory.py), at the top of its bar
    assert peak == [["peak 9.45 MB", 9_447_440]]
    assert console_errors(page) == []


def test_token_guarded_upload_and_delete(page, make_server, shared_data):
    srv = make_server(token="s3cret")
    open_page(page, srv.url + "/")
    files = sorted(str(p) for p in (shared_data / RLLM).iterdir())
    page.set_input_files("#file-input", files)
    status = page.wait_for_selector("#upload-status.error-line")
    assert status.inner_text() == "this server needs 'Authorization: Bearer <POLYTRACE_TOKEN>' for writes"
    page.fill("#token", "s3cret")
    page.dispatch_event("#token", "change")
    page.set_input_files("#file-input", files)
    row = page.wait_for_selector("#runs tbody tr")
    run_id = row.get_attribute("data-run-id")
    assert [r[0] for r in rest(srv, "runs")["rows"]] == [run_id]
    page.on("dialog", lambda d: d.accept())
    page.click(f"#runs tr[data-run-id='{run_id}'] button.danger")
    page.wait_for_selector("#runs[data-loaded='0']")
    assert rest(srv, "runs")["rows"] == []
    assert page.inner_text("#upload-status").startswith("Deleted ")
    assert console_errors(page, allow_rejected_upload=True) == []


def test_compare_page(page, three_runs):
    srv, ids = three_runs
    a, b = ids["dapo"], ids["dapo_again"]
    open_page(page, f"{srv.url}/compare")
    assert page.locator("#pick-a option").count() == 4  # the placeholder and three runs
    page.select_option("#pick-a", a)
    page.select_option("#pick-b", b)
    page.click("form.pickers button")
    page.wait_for_url(f"**/compare?a={a}&b={b}")
    wait_charts(page)
    # Line charts overlay both runs; everything else sits side by side.
    overlays = page.locator("[id^='chart-ab-']").evaluate_all("els => els.map(e => e.id)")
    assert overlays, "no overlaid chart"
    for el_id in overlays:
        names = page.evaluate(f"document.getElementById('{el_id}').data.map(t => t.name)")
        assert any(n.startswith("A · ") for n in names) and any(n.startswith("B · ") for n in names)
    # Quantile bands overlay; histograms overlay as shares of each run's responses.
    bands = page.evaluate("document.getElementById('chart-ab-length_stats').data.map(t => t.name)")
    assert "A · response p50" in bands and "B · response p50" in bands
    shares = page.evaluate("""() => document.getElementById('chart-ab-length_histogram').data
        .filter(t => t.type === 'bar').map(t => t.y.reduce((a, b) => a + b, 0))""")
    assert shares == [pytest.approx(1), pytest.approx(1)]
    for side in ("a", "b"):
        traces = drawn_traces(page, f"{side}-rollout_tail")
        assert traces and any(t["n"] > 0 for t in traces), side
    # Side-by-side charts share one y scale.
    ya = page.evaluate("document.getElementById('chart-a-rollout_busy').layout.yaxis.range")
    yb = page.evaluate("document.getElementById('chart-b-rollout_busy').layout.yaxis.range")
    assert ya == yb
    summary = rest(srv, "run_summary", run_id=b)
    samples = summary["rows"][0][summary["columns"].index("samples")]
    cells = page.locator("#compare-summary tr[data-col='samples'] td").all_inner_texts()
    assert cells == ["Responses in the run", "4,608", f"{samples:,}", "same", "B equals A"]
    # Both runs' findings, side by side; the replay fidelity only on request.
    assert page.locator("#findings-a li.finding").count() and page.locator("#findings-b li.finding").count()
    assert page.locator("[data-query='fidelity']").count() == 0
    screenshot(page, "compare.png")
    assert console_errors(page) == []


def test_charts_are_drawn_once_in_margins_sized_beforehand(page, three_runs):
    """Plotly draws a chart again whenever its labels, legend or colour bar need more room than
    the layout's margins (automargin): charts.js sizes the margins from the labels first, so
    that on real runs every chart ends with the margins it asked for, drawn once."""
    srv, ids = three_runs
    urls = [f"{srv.url}/runs/{ids['dapo']}", f"{srv.url}/runs/{ids['rllm']}",
            f"{srv.url}/compare?a={ids['dapo']}&b={ids['rllm']}"]
    for url in urls:
        open_page(page, url)
        charts = page.evaluate("""() => PolyCharts.entries.filter(e => e.el && e.el._fullLayout).map(e => {
            const asked = e.el.layout.margin, got = e.el._fullLayout._size;
            return [e.el.id, ['l', 'r', 't', 'b'].map(k => [asked[k], Math.round(got[k])])];
        })""")
        assert len(charts) >= 5, url
        grown = [(name, sides) for name, sides in charts if any(abs(a - g) > 1 for a, g in sides)]
        assert grown == [], url
    assert console_errors(page) == []


def test_query_catalog_pages(page, three_runs):
    srv, ids = three_runs
    run_id = ids["dapo"]
    catalog = httpx.get(f"{srv.url}/api/queries").json()["queries"]
    open_page(page, f"{srv.url}/queries")
    listed = page.locator("tr[data-query]").evaluate_all("els => els.map(e => e.dataset.query)")
    assert sorted(listed) == sorted(q["name"] for q in catalog)
    page.click("tr[data-query='length_stats'] a")
    page.select_option("select[name='run_id']", run_id)
    page.click("form.param-form button")
    page.wait_for_url(f"**/queries/length_stats?run_id={run_id}")
    wait_charts(page)
    body = rest(srv, "length_stats", run_id=run_id)
    assert page.locator("#result-rows tbody tr").count() == len(body["rows"]) == 6
    assert drawn_traces(page, "length_stats")[0]["n"] == 6
    links = {a.inner_text(): a.get_attribute("href") for a in page.locator("p.source a").all()}
    assert links["CSV"] == f"/api/queries/length_stats?run_id={run_id}&format=csv"
    assert httpx.get(srv.url + links["JSON"]).json()["rows"] == body["rows"]
    assert httpx.get(srv.url + links["Parquet"]).content[:4] == b"PAR1"
    assert console_errors(page) == []


def test_long_run_is_downsampled_and_zoom_refetches(page, make_server, tmp_path):
    # 10,000 steps of a hand-made run: 2 DP ranks, one prompt each with two responses.
    # In step s rank 0 answers (s % 7) and 10, rank 1 answers 20 and 30, so each step's
    # response_max is 30 and the run page must still draw every series in <= 600 points.
    steps = 10_000
    folder = tmp_path / "long"
    folder.mkdir()
    lines = []
    for s in range(steps):
        lines.append(json.dumps({"step": s, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 5,
                                 "output": [s % 7, 10]}))
        lines.append(json.dumps({"step": s, "rank": 1, "dp_rank": 1, "tp_rank": 0, "input": 5,
                                 "output": [20, 30]}))
    (folder / "packed_lengths_step_0.jsonl").write_text("\n".join(lines) + "\n")
    db = tmp_path / "long.duckdb"
    (run_id,) = ingest(db, folder)
    srv = make_server(db=str(db))
    t0 = time.perf_counter()
    open_page(page, f"{srv.url}/runs/{run_id}")
    wait_charts(page)
    load_s = time.perf_counter() - t0
    stats = page.evaluate("document.getElementById('chart-length_stats').data.map(t => t.x.length)")
    assert stats and max(stats) <= 600
    note = page.locator(".chart-card[data-query='length_stats'] .note").inner_text()
    assert "10,000 steps shown as 589 points, each the mean of 17 steps" in note
    # ceil(10000 / 600) = 17 steps a bucket -> ceil(10000 / 17) = 589 buckets.
    maxes = page.evaluate("document.getElementById('chart-length_stats').data.find(t => t.name === 'response max').y")
    assert set(maxes) == {30}
    page.fill("#step-from", "100")
    page.fill("#step-to", "199")
    page.click("#range-apply")
    page.wait_for_selector("#chart-length_stats[data-range='100-199']")
    xs = page.evaluate("document.getElementById('chart-length_stats').data[0].x")
    assert xs == list(range(100, 200))  # full resolution inside the window
    assert page.locator(".chart-card[data-query='length_stats'] .note").inner_text() == ""
    assert console_errors(page) == []
    print(f"10,000-step run page ready in {load_s:.2f} s")


def test_pages_have_no_console_errors(page, three_runs):
    srv, ids = three_runs
    a, b = ids["dapo"], ids["rllm"]
    for path in ("/", f"/runs/{a}", f"/runs/{b}", "/compare", f"/compare?a={a}&b={b}",
                 f"/compare?a={a}&b={b}&fidelity=1&step_from=1&step_to=2", "/queries", "/queries/runs",
                 f"/queries/rollout_tail?run_id={b}", "/queries/length_stats", f"/runs/{a}?step_from=2&step_to=3"):
        open_page(page, srv.url + path)
        assert console_errors(page) == [], path
    open_page(page, srv.url + "/runs/nope")
    assert "There is no run 'nope'" in page.inner_text("main")


def test_rollout_bars_and_whatif_button(page, make_server, tmp_path):
    """The rollout tail's per-engine bars, then the What if section simulated on demand."""
    import numpy as np

    from polytrace.workload.traces import packed_lines, write_jsonl

    # Two steps, two engines (tp 1); step 0 engine 0 lengths [2, 10], engine 1 [4, 4]:
    # the longest response is 10, so engine 1 is busy 4 and idle 10 - 4 = 6 tokens.
    trace = tmp_path / "run"
    for step in (0, 1):
        write_jsonl(trace / f"packed_lengths_step_{step}.jsonl",
                    packed_lines(step, np.array([5, 5]), np.array([[2, 10], [4, 4]]), np.array([0, 1]), tp=1))
    db = tmp_path / "bars.duckdb"
    (run_id,) = ingest(db, trace)
    srv = make_server(db=str(db), token="s3cret")
    open_page(page, f"{srv.url}/runs/{run_id}")
    bars = page.evaluate("""() => document.getElementById('chart-rollout_busy').data.filter(t => !t.meta).map(t => ({
        name: t.name, group: t.offsetgroup, y: t.y, base: t.base, legend: t.showlegend !== false,
        hatched: !!(t.marker.pattern && t.marker.pattern.shape)}))""")
    assert bars == [
        {"name": "dp rank 0", "group": "0", "y": [10, 10], "base": [0, 0], "legend": True, "hatched": False},
        {"name": "dp rank 0", "group": "0", "y": [0, 0], "base": [10, 10], "legend": False, "hatched": True},
        {"name": "dp rank 1", "group": "1", "y": [4, 4], "base": [0, 0], "legend": True, "hatched": False},
        {"name": "dp rank 1", "group": "1", "y": [6, 6], "base": [4, 4], "legend": False, "hatched": True}]
    assert page.locator("section[data-section='What if'] .chart-card").count() == 0
    # Without the token the write is refused, and the page says so in one line.
    page.click("#whatif-run")
    page.wait_for_selector("#whatif-status.error-line")
    assert "Bearer" in page.inner_text("#whatif-status")
    page.evaluate("localStorage.setItem('polytrace-token', 's3cret')")
    page.click("#whatif-run")
    page.wait_for_selector("section[data-section='What if'] .chart-card[data-query='whatif']", timeout=60_000)
    wait_charts(page)
    assert page.locator("#whatif-run").count() == 0
    names = {t["name"] for t in drawn_traces(page, "whatif")}
    assert any(n.startswith("length-balanced (") for n in names) and "as-recorded" in names
    savings = drawn_traces(page, "whatif_savings")
    policies = rest(srv, "whatif_savings", run_id=run_id)["rows"]
    assert len(policies) >= 4 and savings == [{"type": "table", "n": len(policies)}]
    assert "run gpu hours saved" in page.inner_text("#chart-whatif_savings")
    # ...and the findings read the stored simulation as the API does.
    found = httpx.get(f"{srv.url}/api/runs/{run_id}/findings").json()["findings"]
    assert page.locator("li.finding").evaluate_all("els => els.map(e => e.dataset.kind)") == [f["kind"] for f in found]
    screenshot(page, "run-whatif.png")
    # The refused POST (401) is the only console error: Chromium reports every 4xx response.
    assert [t for t, url in page.problems if not url.endswith("/whatif")] == []


def test_upload_shows_every_warning_of_the_api(page, make_server, shared_data, tmp_path):
    srv = make_server()
    open_page(page, srv.url + "/")
    trace = shared_data / CPU_ONLY
    page.set_input_files("#file-input", str(trace))
    page.wait_for_selector("#upload-warnings li")
    run_id = page.get_attribute("#new-run", "href").rsplit("/", 1)[-1]
    shown = page.locator("#upload-warnings li").all_inner_texts()
    # The same upload through the API (to a fresh server) answers with exactly these warnings.
    other = make_server(db=str(tmp_path / "other.duckdb"))
    again = httpx.post(f"{other.url}/api/runs", files={"file": (trace.name, trace.read_bytes())}).json()
    assert again["run_id"] == run_id
    assert shown == again["warnings"] and any("no GPU kernels" in w for w in shown)
    assert console_errors(page) == []


def test_upload_form_fields_reach_the_run(page, make_server, shared_data):
    """A folder chosen with the form's response cap: the run keeps the folder's name, and the
    cap (not an inferred one) makes the cap_hits finding."""
    srv = make_server()
    open_page(page, srv.url + "/")
    page.fill("#max-response-len", "16000")
    page.fill("#gpus", "8")
    page.select_option("#format", "")
    page.set_input_files("#folder-input", str(shared_data / RLLM))
    link = page.wait_for_selector("#upload-status #new-run")
    run_id = link.get_attribute("href").rsplit("/", 1)[-1]
    run = httpx.get(f"{srv.url}/api/runs/{run_id}").json()["run"]
    assert (run["name"], run["max_response_len"], run["n_gpus"]) == (Path(RLLM).name, 16000, 8)
    link.click()
    page.wait_for_url(f"**/runs/{run_id}")
    wait_charts(page)
    cap = page.locator("li.finding[data-kind='cap_hits'] .text").inner_text()
    assert "16,000-token cap" in cap and "inferred" not in cap
    assert console_errors(page) == []


def test_collapse_is_found_and_marked_on_the_training_health_charts(page, make_server, shared_data, tmp_path):
    db = tmp_path / "collapse.duckdb"
    (run_id,) = ingest(db, shared_data / COLLAPSED)
    srv = make_server(db=str(db))
    (collapse,) = [f for f in httpx.get(f"{srv.url}/api/runs/{run_id}/findings").json()["findings"]
                   if f["kind"] == "collapse"]
    open_page(page, f"{srv.url}/runs/{run_id}")
    first = page.locator("li.finding").first
    assert first.get_attribute("data-kind") == "collapse"
    assert first.locator(".badge").inner_text().lower() == "critical"
    # Every Training health chart shades the collapsed steps as one span (a log's cut-short
    # lines leave single steps out of the list) and names it on hover.
    lo, hi = min(collapse["steps"]), max(collapse["steps"])
    charts = page.locator("section[data-section='Training health'] .chart").evaluate_all("els => els.map(e => e.id)")
    assert len(charts) >= 4
    for el_id in charts:
        spans = page.evaluate(f"""() => (document.getElementById('{el_id}').layout.shapes || [])
            .filter(s => s.name === 'collapse' && s.type === 'rect').map(s => [s.x0, s.x1])""")
        assert spans == [[lo - 0.5, hi + 0.5]], el_id
        named = page.evaluate(f"""() => document.getElementById('{el_id}').data
            .filter(t => t.meta && t.meta.finding === 'collapse').map(t => t.hovertemplate)""")
        assert named == ["<b>collapse</b> (critical finding)<extra></extra>"], el_id
    # A log does not say how many GPUs the job had: the budget chart says its figures are per GPU.
    budget = page.locator(".chart-card[data-query='step_budget']")
    assert budget.locator(".note").inner_text() == (
        "GPU count unknown: every figure is per GPU (give the job's GPU count at ingest).")
    # Its rollout is timed (timing_s/gen): the page offers a simulation fitted to the run's own log.
    assert "fits a cost model to the run's own log" in page.inner_text(".whatif-offer")
    assert page.inner_text("#whatif-run") == "Simulate from the run's log"
    # Its steps link: every step chart shows the collapse.
    first.locator("button.zoom").click()
    page.wait_for_selector(f"#range-bar[data-range='{lo}-{hi}']")
    screenshot(page, "run-collapse.png")
    assert console_errors(page) == []


def test_hostile_kernel_name_renders_as_text(page, make_server, tmp_path):
    from tests.test_kineto import trace_doc

    gpu = [(HOSTILE, "kernel", 7, 1000, 3000, 1, 500), ("gemm", "kernel", 7, 4000, 5000, 2, 600)]
    path = tmp_path / "hostile.json"
    path.write_text(json.dumps(trace_doc(0, [(1, 0, 10000)], gpu)))
    db = tmp_path / "hostile.duckdb"
    (run_id,) = ingest(db, path)
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    # No link anywhere on the page but the dashboard's own.
    assert page.locator("a[href='//x'], [*|href='//x']").count() == 0
    # The kernels table shows the name as it is.
    assert HOSTILE in page.locator("#chart-gpu_kernels").inner_text()
    # Hovering the timeline bar shows the name as text.
    el = "document.getElementById('chart-gpu_timeline')"
    where = page.evaluate(f"""() => {{ const d = {el}.data; for (let c = 0; c < d.length; c++)
        for (let p = 0; p < d[c].hovertext.length; p++) if (d[c].hovertext[p].includes('href')) return [c, p]; }}""")
    page.evaluate(f"([c, p]) => Plotly.Fx.hover({el}, [{{curveNumber: c, pointNumber: p}}])", where)
    hover = page.wait_for_selector("#chart-gpu_timeline .hoverlayer .hovertext")
    assert HOSTILE in hover.text_content()
    assert page.locator("#chart-gpu_timeline .hoverlayer a").count() == 0
    # A hostile category on an axis (a bar chart over names) is a tick label of text.
    page.evaluate("""name => {
        const el = Object.assign(document.createElement('div'), {id: 'chart-hostile', className: 'chart'});
        document.querySelector('main').appendChild(el);
        return PolyCharts.page([{name: 'hostile', title: name, chart: {kind: 'bar', x: 'kernel', y: ['calls']},
            columns: {calls: {fmt: 'count'}}, params: {}, points: 600,
            data: {ok: true, columns: ['kernel', 'calls'], rows: [[name, 3], ['gemm', 1]]}}]);
    }""", HOSTILE)
    ticks = page.locator("#chart-hostile .xtick text").all_text_contents()
    assert HOSTILE in ticks and page.locator("#chart-hostile a").count() == 0
    assert page.locator("#chart-hostile .gtitle").text_content() == HOSTILE
    assert console_errors(page) == []


def test_a_rank_profiled_in_two_cycles_draws_its_steps_apart(page, make_server, tmp_path):
    """Two profiler cycles of one rank, steps 1-2 and 11-12 (the last window of each has no
    events): the heatmap shows the steps between them as a break, not as its neighbours'
    cells stretched across it; the breakdown adds the two files up to 100%."""
    from tests.test_kineto import RANK0, shifted, trace_doc

    windows = [(1, 0, 10000), (2, 10000, 10000), (3, 20000, 10000)]
    for name, steps, by in (("cycle1", windows, 0), ("cycle2", [(s + 10, t + 1e6, d) for s, t, d in windows], 1e6)):
        (tmp_path / "job").mkdir(exist_ok=True)
        (tmp_path / "job" / f"{name}.json").write_text(json.dumps(trace_doc(0, steps, shifted(RANK0, by))))
    db = tmp_path / "cycles.duckdb"
    (run_id,) = ingest(db, tmp_path / "job")
    srv = make_server(db=str(db))
    open_page(page, f"{srv.url}/runs/{run_id}")
    heat = page.evaluate("""() => { const t = document.getElementById('chart-gpu_idle_heatmap').data[0];
                                    return {x: t.x, z: t.z}; }""")
    assert heat["x"] == [1, 2, 3, 10, 11, 12]
    assert [[v is None for v in row] for row in heat["z"]] == [[False, False, True, True, False, False]]
    bars = page.evaluate("() => document.getElementById('chart-gpu_breakdown').data.map(t => t.y[0])")
    assert sum(bars) == pytest.approx(100)
    assert page.evaluate("() => document.getElementById('chart-gpu_idle_gaps').layout.yaxis.rangemode") \
        == "nonnegative"
    assert console_errors(page) == []


def test_demo_serves_a_synthetic_run(tmp_path):
    port = free_port()
    db = tmp_path / "demo.duckdb"
    proc = subprocess.Popen([sys.executable, "-m", "polytrace", "demo", "--db", str(db),
                             "--port", str(port), "--seed", "3"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            assert proc.poll() is None, proc.communicate()[1]
            try:
                if httpx.get(url + "/api/health", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.time() < deadline, "demo did not start within 60 s"
            time.sleep(0.3)
        runs = httpx.get(url + "/api/queries/runs").json()
        by_name = {r[1]: dict(zip(runs["columns"], r)) for r in runs["rows"]}
        math_run = next(r for n, r in by_name.items() if n.startswith("demo: DAPO math"))
        assert math_run["samples"] > 0 and math_run["steps"] >= 10
        page = httpx.get(f"{url}/runs/{math_run['run_id']}")
        assert page.status_code == 200
        # The demo simulates dispatch policies, has 4 ranks, a filter file, verl stage
        # timings and a profiler trace per GPU.
        for section in ("Lengths", "Rollout tail", "Imbalance", "Stages", "GPU", "What if"):
            assert f'data-section="{section}"' in page.text, section
        agent = next(r for n, r in by_name.items() if n.startswith("demo: tool-use"))
        assert 'data-section="Multi-turn"' in httpx.get(f"{url}/runs/{agent['run_id']}").text
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=10)
    assert f"{url}/runs/{math_run['run_id']}" in out


def test_demo_refuses_a_real_database(tmp_path, shared_data):
    db = tmp_path / "real.duckdb"
    ingest(db, shared_data / RLLM)
    before = db.stat().st_size
    out = subprocess.run([sys.executable, "-m", "polytrace", "demo", "--db", str(db),
                          "--port", str(free_port())], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines()[-1].startswith(f"error: {db} exists and holds runs")
    assert db.stat().st_size == before


def test_phone_pages_fit_the_screen(page, three_runs):
    """At 390 px no page scrolls sideways: wide tables scroll in their own wrapper, selects and
    run names fit, and Plotly's mode bar sits above a chart's title, not on it."""
    srv, ids = three_runs
    a, b = ids["dapo"], ids["rllm"]
    page.set_viewport_size({"width": 390, "height": 844})
    for name, path in (("runs", "/"), ("queries", "/queries"), ("compare", f"/compare?a={a}&b={b}"),
                       ("query", f"/queries/length_stats?run_id={a}"), ("run", f"/runs/{a}"),
                       ("missing", "/runs/nope")):
        open_page(page, srv.url + path)
        assert page.evaluate("document.documentElement.scrollWidth") <= 390, name
        screenshot(page, f"phone-{name}.png")
        if name == "queries":
            assert page.locator(".table-wrap").evaluate_all("ws => ws.some(w => w.scrollWidth > w.clientWidth)")
        if name == "compare":  # both runs' figures beside the measure, not scrolled out of view
            assert page.locator("#compare-summary th:nth-child(3)").bounding_box()["x"] < 390
        if name == "run":
            boxes = page.evaluate("""() => [...document.querySelectorAll('.chart-card .js-plotly-plot')]
                .filter(p => p.querySelector('.gtitle')).map(p => {
                    const box = sel => p.querySelector(sel).getBoundingClientRect();
                    return {bar: box('.modebar').bottom, title: box('.gtitle').top}; })""")
            assert boxes and all(x["bar"] <= x["title"] for x in boxes), boxes
    # Chromium reports the missing page's 404 on the console: that one is meant
    assert [(text, url) for text, url in console_errors(page) if not url.endswith("/runs/nope")] == []


def test_the_overview_chart_drops_its_empty_message_when_runs_come_back(page, three_runs):
    srv, _ = three_runs
    open_page(page, srv.url + "/")
    points = page.get_attribute("#chart-across", "data-points")
    assert int(points) > 0
    page.fill("#runs-filter", "zzzz")
    page.wait_for_selector("#chart-across > p.empty")
    page.fill("#runs-filter", "")
    page.wait_for_function("n => document.getElementById('chart-across').dataset.points === n", arg=points)
    assert page.locator("#chart-across > p").count() == 0
    # the plot fills its box and leaves the caption under it readable
    plot = page.locator("#chart-across .plot-container").bounding_box()
    caption = page.locator(".across p.caption").first.bounding_box()
    assert plot["y"] + plot["height"] <= caption["y"]
    assert console_errors(page) == []


def test_the_overview_filter_reads_the_run_id_and_the_format(page, three_runs):
    srv, ids = three_runs
    body = rest(srv, "runs_overview")
    rows = [dict(zip(body["columns"], r)) for r in body["rows"]]
    open_page(page, srv.url + "/")
    for text in (ids["rllm"][:6], "reward-timings", "polytrace-filter"):
        expected = [r["run_id"] for r in rows if text in r["run_id"] or text in r["format"]]
        assert 0 < len(expected) < len(rows), text
        page.fill("#runs-filter", text)
        page.wait_for_function("""ids => JSON.stringify([...document.querySelectorAll('#runs tbody tr')]
            .map(t => t.dataset.runId)) === JSON.stringify(ids)""", arg=expected)
        assert page.inner_text("#runs-count") == f"{len(expected)} of {len(rows)} runs"
    assert console_errors(page) == []


def test_a_browser_gets_error_pages_and_the_api_keeps_json(page, three_runs):
    """A page the server cannot give answers a browser with the dashboard's error page, in its
    status; the API, and any client that does not ask for HTML, get the JSON error shape."""
    srv, ids = three_runs
    compare = f"/compare?a={ids['dapo']}&b={ids['rllm']}&fidelity=banana"
    for path, status, heading, says in (
            ("/nope", 404, "Not found", "There is no page '/nope'."),
            ("/runs/%3Cb%3Ehi%3C%2Fb%3E", 404, "Not found", "There is no page '/runs/<b>hi</b>'."),
            (compare, 422, "This page could not be finished", "parameter 'fidelity'")):
        res = page.goto(srv.url + path)
        assert res.status == status and res.headers["content-type"].startswith("text/html"), path
        assert page.inner_text("main h1") == heading
        assert page.inner_text("main .error-line").startswith(says)
        assert page.locator("main b").count() == 0  # a name in the URL is text, never markup
        assert page.locator("header nav a[href='/']").count() == 1
    res = page.goto(srv.url + "/api/nope")
    assert res.status == 404 and res.json() == {"ok": False, "error": "Not Found", "status": 404}
    assert httpx.get(srv.url + "/nope").json() == {"ok": False, "error": "Not Found", "status": 404}
    bad = httpx.get(srv.url + compare, headers={"Accept": "application/json"})
    assert bad.status_code == 422 and bad.json()["error"].startswith("parameter 'fidelity'")
