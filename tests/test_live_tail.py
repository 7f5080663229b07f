"""A live run page fetches only a step chart's new steps (GET /api/queries/{name}?_since=&_width=,
static/charts.js refreshAll) and puts them in place of its rows from there. That holds only when
what it gets is what a whole fetch gives from that step on, and when a run's earlier steps answer
as they did before the later ones landed: both are held here on real runs, for every step chart of
the run page."""
from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from polytrace import service, store
from polytrace.ingest.live import live_run_id
from polytrace.queries.display import steps_on_x
from polytrace.server.app import create_app
from polytrace.server.routers.pages import run_chart_queries
from polytrace.settings import Settings
from tests import test_browser
from tests.conftest import SHARED_DATA, free_port, skip_for_data
from tests.test_browser import console_errors, open_page
from tests.test_live import DAPO, LOG, caught_up, same, serve, stop, up

# Chromium and a page of it that records console errors, as the dashboard's browser tests have them
browser, page = test_browser.browser, test_browser.page

STEP_CHARTS = [q.name for q in run_chart_queries() if steps_on_x(q.chart)]


def ingest(db, paths, name: str) -> str:
    con = store.open(db)
    try:
        return service.ingest_run(con, paths, name=name).run_id
    finally:
        con.close()


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """A server over the verl log (its steps up to 60 as a run of their own too) and the DAPO run."""
    if not SHARED_DATA.is_dir():
        skip_for_data()
    tmp = tmp_path_factory.mktemp("tail")
    db = tmp / "tail.duckdb"
    log = (SHARED_DATA / LOG).read_bytes()
    cut = tmp / "cut" / "output.log"
    cut.parent.mkdir()
    cut.write_bytes(log[:log.index(b"\nstep:61 ") + 1])
    runs = {"log": ingest(db, [SHARED_DATA / LOG], "log"), "cut": ingest(db, [cut.parent], "cut"),
            "dapo": ingest(db, [SHARED_DATA / DAPO], "dapo")}
    with TestClient(create_app(Settings(db=str(db))), base_url="http://127.0.0.1") as client:
        yield client, runs


def body(client, name: str, run_id: str, **shape) -> dict:
    got = client.get(f"/api/queries/{name}", params={"run_id": run_id, **shape})
    assert got.status_code == 200, got.text
    return got.json()


def charted(client, run_id: str) -> list[tuple[str, dict, int]]:
    """The step charts with rows for the run: each with its whole answer and its number of steps."""
    out = []
    for name in STEP_CHARTS:
        raw = body(client, name, run_id)
        xi = raw["columns"].index("step")
        steps = len({r[xi] for r in raw["rows"] if r[xi] is not None})
        if steps:
            out.append((name, raw, steps))
    return out


@pytest.mark.parametrize("run", ["log", "dapo"])
def test_the_rows_from_a_step_on_are_the_whole_answers_from_there(served, run):
    client, runs = served
    drawn = charted(client, runs[run])
    assert len(drawn) >= (8 if run == "log" else 4)
    for name, raw, steps in drawn:
        xi = raw["columns"].index("step")
        since = sorted({r[xi] for r in raw["rows"] if r[xi] is not None})[-min(steps, 3)]
        rows = body(client, name, runs[run], _since=since)["rows"]
        assert rows and same(rows, [r for r in raw["rows"] if r[xi] is not None and r[xi] >= since]), name
        if steps < 30:  # too few steps to bucket (_points is 10 at least)
            continue
        # bucketed to a third of its steps, as a long run's charts are: the steps from the last
        # bucket on, bucketed from there, are the whole answer's last bucket
        whole = body(client, name, runs[run], _points=steps // 3)
        note = whole["downsampled"]
        last = max(r[xi] for r in whole["rows"])  # the last bucket's first step
        tail = body(client, name, runs[run], _since=last, _width=note["width"])
        assert same(tail["rows"], [r for r in whole["rows"] if r[xi] >= last]), name
        assert tail["downsampled"]["last_bucket_steps"] == note["last_bucket_steps"] == tail["downsampled"]["steps"]
        assert tail["x_bounds"][0] >= last and tail["x_bounds"][1] == whole["x_bounds"][1], name


def test_a_runs_earlier_steps_answer_as_before_its_later_steps_landed(served):
    """The log up to its step 60, ingested alone, answers every step chart as the whole log does
    over those steps: a live page keeps its rows before its last point."""
    client, runs = served
    for name, _, _ in charted(client, runs["log"]):
        whole, cut = body(client, name, runs["log"]), body(client, name, runs["cut"])
        xi = whole["columns"].index("step")
        early = [r for r in whole["rows"] if r[xi] is not None and r[xi] < 60]
        assert early and same([r for r in cut["rows"] if r[xi] is not None and r[xi] < 60], early), name


def test_since_and_width_are_refused_where_they_mean_nothing(served):
    client, runs = served
    no_since = client.get("/api/queries/health_kl", params={"run_id": runs["log"], "_width": 5})
    assert no_since.status_code == 422 and "'_width'" in no_since.json()["error"]
    histogram = client.get("/api/queries/length_histogram", params={"run_id": runs["dapo"], "_since": 3})
    assert histogram.status_code == 422 and histogram.json()["error"].startswith("length_histogram: its chart's x")
    zero = client.get("/api/queries/health_kl", params={"run_id": runs["log"], "_since": 1, "_width": 0})
    assert zero.status_code == 422


def renumbered_log(log: bytes, first: int, last: int) -> list[bytes]:
    """Step lines `first`..`last`: the log's training step lines in turn, renumbered."""
    lines = [line + b"\n" for line in log.split(b"\n") if line.startswith(b"step:") and b"timing_s/step" in line]
    return [re.sub(rb"^step:\d+", b"step:%d" % k, lines[k % len(lines)]) for k in range(first, last + 1)]


# Each step chart's rows as the page holds them, beside a whole fetch of them now.
HELD_AND_WHOLE_JS = """async () => Promise.all(PolyCharts.entries.filter(e => e.info.linked).map(async e => {
    const q = new URLSearchParams({...e.info.params, _points: e.info.points});
    const whole = await (await fetch(`/api/queries/${e.info.name}?${q}`)).json();
    return [e.info.name, e.data, whole]; }))"""


@pytest.mark.browser
def test_a_long_live_run_page_fetches_only_new_steps_and_holds_what_a_whole_fetch_gives(page, tmp_path):
    """A followed log of 650 steps: the page's step charts draw buckets of 2 steps. Each new step
    line is fetched from the last bucket on (_since, _width), and what the page then holds is what a
    whole fetch gives, bucket notes and step bounds included."""
    if not SHARED_DATA.is_dir():
        skip_for_data()
    log = (SHARED_DATA / LOG).read_bytes()
    root = tmp_path / "job"
    root.mkdir()
    (root / "output.log").write_bytes(b"".join(renumbered_log(log, 1, 650)))
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(tmp_path / "long.duckdb", root, port)
    try:
        up(url, server)
        run_id = live_run_id(root)
        caught_up(url, run_id, root)
        open_page(page, f"{url}/runs/{run_id}")
        page.wait_for_selector("#live-badge[data-live='1']")
        page.wait_for_selector("body[data-charts-ready='1']")
        for step, line in enumerate(renumbered_log(log, 651, 653), start=651):
            page.evaluate("performance.clearResourceTimings()")
            with open(root / "output.log", "ab") as f:
                f.write(line)
            page.wait_for_function(f"() => document.getElementById('live-badge').dataset.lastStep === '{step}'"
                                   " && PolyCharts.entries.every(e => !e.info.linked || e.data.x_bounds[1] === "
                                   f"{step} || !e.data.rows.length)", timeout=30_000)
            fetched = page.evaluate("performance.getEntriesByType('resource').map(r => r.name)")
            tails = [u for u in fetched if "_since=" in u]
            assert tails and all("_width=2" in u for u in tails), fetched
        held = page.evaluate(HELD_AND_WHOLE_JS)
        assert len(held) >= 8
        for name, data, whole in held:
            assert data["downsampled"]["width"] == 2, name
            for key in ("columns", "rows", "downsampled", "x_bounds"):
                assert same(data[key], whole[key]), (name, key)
        assert console_errors(page) == []
    finally:
        stop(server)
