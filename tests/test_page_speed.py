"""What the page-speed work must keep true, never how fast (bench/page.py and bench/api.py
measure that): static files answered compressed and never stale, the vendored plotly bundle
drawing every trace type the renderer uses, charts drawn lazily that all draw, scrolled to
or not, a capped query answering exactly the rows it always did, and the REST bench's client
reading each answer whole."""
from __future__ import annotations

import asyncio
import gzip
import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from starlette.applications import Starlette
from starlette.testclient import TestClient

from bench import api as api_bench
from polytrace.server.responses import CompressedStaticFiles, accepted_encodings
from tests import test_browser
from tests.test_browser import console_errors

# test_browser's fixtures: its Chromium, and a page that records console errors and off-machine requests
browser, page = test_browser.browser, test_browser.page

STATIC = Path(__file__).resolve().parent.parent / "frontend" / "static"


# ---- static files ----------------------------------------------------------------------------

def test_accept_encoding_is_read_by_its_q_values():
    assert accepted_encodings("gzip, deflate, br, zstd") == {"gzip", "deflate", "br", "zstd"}
    assert accepted_encodings("br;q=0, gzip;q=0.5") == {"gzip"}
    assert accepted_encodings("*") == {"gzip", "br"}
    assert accepted_encodings("identity") == {"identity"}
    assert accepted_encodings(None) == set()


def test_plotly_bundle_is_vendored_with_its_licence_and_precompressed():
    # Only its compressed copies are kept: the plain bundle (1.2 MB) would pass the 1 MiB limit.
    assert not (STATIC / "plotly.min.js").exists()
    bundle = gzip.decompress((STATIC / "plotly.min.js.gz").read_bytes())
    assert bundle.startswith(b"/**\n* plotly.js v4.1.1, partial bundle")
    licence = (STATIC / "plotly.LICENSE.txt").read_text()
    assert "plotly.js@4.1.1" in licence and "MIT License" in licence
    assert len(bundle) > (STATIC / "plotly.min.js.gz").stat().st_size * 2
    assert (STATIC / "plotly.min.js.br").stat().st_size < len(bundle) // 2


def test_static_files_are_served_compressed(make_server):
    srv = make_server()
    bundle = gzip.decompress((STATIC / "plotly.min.js.gz").read_bytes())
    with httpx.Client(base_url=srv.url) as client:
        plain = client.get("/static/plotly.min.js", headers={"accept-encoding": "identity"})
        assert plain.headers.get("content-encoding") is None and plain.content == bundle
        assert plain.headers["content-type"].startswith("application/javascript")
        assert plain.headers["vary"] == "Accept-Encoding"
        assert plain.headers["cache-control"] == "public, max-age=86400"
        gz = client.get("/static/plotly.min.js", headers={"accept-encoding": "gzip, deflate"})
        assert gz.headers["content-encoding"] == "gzip" and gz.content == bundle  # httpx inflates it
        assert int(gz.headers["content-length"]) == (STATIC / "plotly.min.js.gz").stat().st_size
        br = client.get("/static/plotly.min.js", headers={"accept-encoding": "gzip, br"})
        assert br.headers["content-encoding"] == "br"
        assert int(br.headers["content-length"]) == (STATIC / "plotly.min.js.br").stat().st_size
        assert len({plain.headers["etag"], gz.headers["etag"], br.headers["etag"]}) == 3
        again = client.get("/static/plotly.min.js", headers={"accept-encoding": "gzip",
                                                             "if-none-match": gz.headers["etag"]})
        assert again.status_code == 304 and again.headers["vary"] == "Accept-Encoding"
        # The dashboard's own files, the charts' modules too: gzipped by the server, revalidated
        # on every use, as JavaScript (a module's media type must be one).
        for module in (*(STATIC / "charts").glob("*.js"), STATIC / "charts.js"):
            served = client.get(f"/static/{module.relative_to(STATIC)}", headers={"accept-encoding": "gzip"})
            assert served.headers["content-type"].startswith("application/javascript"), module
            assert served.content == module.read_bytes() and served.headers["cache-control"] == "no-cache"
        charts = client.get("/static/charts.js", headers={"accept-encoding": "gzip"})
        assert charts.headers["content-encoding"] == "gzip" and charts.headers["cache-control"] == "no-cache"
        assert charts.content == (STATIC / "charts.js").read_bytes()
        assert int(charts.headers["content-length"]) < len(charts.content) // 2
        head = client.head("/static/charts.js", headers={"accept-encoding": "gzip"})
        assert head.status_code == 200 and head.headers["content-length"] == charts.headers["content-length"]
        # Swagger UI's files too.
        docs = client.get("/docs-static/swagger-ui-bundle.js", headers={"accept-encoding": "gzip"})
        assert docs.status_code == 200 and docs.headers["content-encoding"] == "gzip"


def test_a_changed_static_file_is_never_served_stale(tmp_path):
    (tmp_path / "app.js").write_text("let a = 1;\n" * 100)
    # a sibling made for other bytes: never sent, for any encoding
    (tmp_path / "old.js").write_text("let b = 2;\n" * 100)
    (tmp_path / "old.js.gz").write_bytes(gzip.compress(b"let b = 3;\n" * 100))
    (tmp_path / "old.js.br").write_bytes(b"not these bytes")
    app = Starlette()
    app.mount("/s", CompressedStaticFiles(directory=str(tmp_path)))
    client = TestClient(app)
    first = client.get("/s/app.js", headers={"accept-encoding": "gzip"})
    assert first.headers["content-encoding"] == "gzip" and first.text == "let a = 1;\n" * 100
    (tmp_path / "app.js").write_text("let a = 22;\n" * 100)
    os.utime(tmp_path / "app.js", ns=(1, 1))  # a new version, whatever the clock says
    second = client.get("/s/app.js", headers={"accept-encoding": "gzip"})
    assert second.text == "let a = 22;\n" * 100 and second.headers["etag"] != first.headers["etag"]
    for coding in ("br", "gzip"):
        old = client.get("/s/old.js", headers={"accept-encoding": coding})
        assert old.text == "let b = 2;\n" * 100
        assert old.headers.get("content-encoding") in (None, "gzip")


# ---- the runner: a capped query is planned once, answers the same rows --------------------------

def same_rows(a: list[tuple], b: list[tuple]) -> bool:
    """Equal rows; floats to 1e-9, as DuckDB's parallel sums may differ in their last bits."""
    def same(x, y) -> bool:
        if isinstance(x, float) and isinstance(y, float):
            return math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) or (x != x and y != y)
        return x == y
    return len(a) == len(b) and all(len(r) == len(s) and all(map(same, r, s)) for r, s in zip(a, b))


def test_capped_answers_equal_the_streamed_ones(tmp_path):
    from polytrace import store
    from polytrace.demo import build
    from polytrace.queries.catalog import bind, load_catalog
    from polytrace.queries.runner import Limits, run_bound

    db = tmp_path / "demo.duckdb"
    runs = build(db)
    con = store.open(db, "r")
    compared = 0
    for q in load_catalog().values():
        if [p.name for p in q.params if p.required] != ["run_id"]:
            continue
        for run_id in runs:
            bound = bind(q, {"run_id": run_id})
            every = run_bound(con, q, bound)
            assert not every.truncated
            for cap in (100_000, 2):
                capped = run_bound(con, q, bound, Limits(row_cap=cap))
                assert capped.table.schema == every.table.schema, q.name
                assert capped.truncated == (every.table.num_rows > cap), q.name
                assert same_rows(capped.rows, every.rows[:cap]), q.name
                compared += 1
    con.close()
    assert compared > 40


# ---- the pages: the head goes out first ---------------------------------------------------------

async def asgi_get(app, path: str, query: str = "") -> list[dict]:
    """Every message the app sends for GET path?query: the response start, then each body part."""
    sent, asked = [], False

    async def receive():
        nonlocal asked
        if asked:  # the client stays: nothing more to read
            await asyncio.Event().wait()
        asked = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        sent.append(message)

    await app({"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
               "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query.encode(),
               "root_path": "", "headers": [(b"host", b"127.0.0.1")], "client": ("127.0.0.1", 50000),
               "server": ("127.0.0.1", 80)}, receive, send)
    return sent


def test_run_and_compare_pages_send_their_scripts_before_their_queries_run(tmp_path):
    """The preamble (styles and scripts) is a body part of its own, sent before the page's queries
    run, so that the browser loads plotly meanwhile; the page as a whole is one document."""
    from polytrace.server.app import create_app
    from polytrace.settings import Settings
    from tests.goldens import load_case

    db = tmp_path / "case.duckdb"
    load_case("findings", str(db)).close()
    app = create_app(Settings(db=str(db)))
    try:
        for path, query, marker in (("/runs/r4", "", 'id="charts-json"'),
                                    ("/compare", "a=r4&b=r3", 'id="findings-b"')):
            start, *parts = asyncio.run(asgi_get(app, path, query))
            assert start["status"] == 200, path
            first = parts[0]["body"].decode()
            assert first.startswith("<!doctype html>") and parts[0]["more_body"], path
            assert first.rstrip().endswith('<script src="/static/auth.js"></script>') and "<title>" not in first
            page = b"".join(p["body"] for p in parts).decode()
            assert page.count("<!doctype html>") == 1 and page.count("<head>") == 1, path
            assert page.index("<title>") < page.index("</head>") < page.index(marker) < page.index("</html>")
        # an unknown run: a whole 404 page, at once
        start, *parts = asyncio.run(asgi_get(app, "/runs/nope"))
        assert start["status"] == 404 and [bool(p.get("more_body")) for p in parts] == [False]
    finally:
        app.state.overview_lines.stop()
        app.state.db.close()


def test_a_page_whose_queries_fail_after_its_head_went_out_says_so(tmp_path, monkeypatch):
    from polytrace.queries.runner import QueryTimeout
    from polytrace.server.app import create_app
    from polytrace.server.routers import pages
    from polytrace.settings import Settings
    from tests.goldens import load_case

    async def too_slow(*args):
        raise QueryTimeout("query 'step_budget' ran past 10000 ms")

    async def nothing_found(*args):  # no query left running on the connection this test closes
        return {"items": [], "error": None}

    db = tmp_path / "case.duckdb"
    load_case("findings", str(db)).close()
    app = create_app(Settings(db=str(db)))
    monkeypatch.setattr(pages, "sections_for", too_slow)
    monkeypatch.setattr(pages, "_findings", nothing_found)
    try:
        start, *parts = asyncio.run(asgi_get(app, "/runs/r4"))
        page = b"".join(p["body"] for p in parts).decode()
        assert start["status"] == 200 and page.count("<!doctype html>") == 1 and page.rstrip().endswith("</html>")
        assert "<title>Error · PolyTrace</title>" in page
        assert "query &#39;step_budget&#39; ran past 10000 ms. <a href=\"/\">Back to the runs</a>" in page
    finally:
        app.state.overview_lines.stop()
        app.state.db.close()


# ---- the browser: lazy drawing ------------------------------------------------------------------

@pytest.fixture(scope="module")
def demo_server(tmp_path_factory, browser):
    from polytrace import store
    from polytrace.demo import build, math_facts, write_traces
    from polytrace.ingest.load import ingest_paths
    from polytrace.settings import Settings
    from tests.conftest import LiveServer

    tmp = tmp_path_factory.mktemp("speed")
    db = tmp / "demo.duckdb"
    math_run, _ = build(db)
    # the math run again with other numbers: a compare page with every chart on both sides
    con = store.open(db)
    other = ingest_paths(con, [write_traces(tmp / "other", seed=1)["math"]], name="other",
                         run_overrides=math_facts()).run_id
    con.close()
    srv = LiveServer(Settings(db=str(db))).__enter__()
    yield srv, math_run, other
    srv.__exit__(None, None, None)


def opened(page, url: str, ready: str = "charts-ready") -> None:
    """A tall window (charts on the first screen, under the findings), at url, until body[data-<ready>]."""
    page.set_viewport_size({"width": 1200, "height": 1400})
    page.goto(url, wait_until="domcontentloaded")
    page.wait_for_selector(f"body[data-{ready}]", state="attached")


def drawn(pg) -> dict[str, bool]:
    return pg.evaluate("""() => Object.fromEntries([...document.querySelectorAll('.chart')]
        .map(el => [el.id, el.dataset.rendered === '1']))""")


@pytest.mark.browser
def test_charts_in_view_draw_first_and_every_chart_draws(page, demo_server):
    srv, math_run, _ = demo_server
    opened(page, f"{srv.url}/runs/{math_run}", "charts-visible")
    charts = drawn(page)
    assert len(charts) > 15
    first = page.evaluate("""() => [...document.querySelectorAll('.chart')]
        .filter(el => el.getBoundingClientRect().top < innerHeight).map(el => el.id)""")
    assert first and all(charts[c] for c in first)
    # Scrolled to the end, the last chart draws (and, left alone, so does every other one).
    page.evaluate("scrollTo(0, document.documentElement.scrollHeight)")
    last = page.evaluate("[...document.querySelectorAll('.chart')].pop().id")
    page.wait_for_selector(f"#{last}[data-rendered]", state="attached")
    page.wait_for_selector("body[data-charts-ready]", state="attached")
    assert all(drawn(page).values())
    for el_id in drawn(page):
        traces = page.evaluate(f"""() => {{ const el = document.getElementById('{el_id}');
            return el.data ? el.data.length : el.querySelectorAll('table, p').length; }}""")
        assert traces > 0, el_id
    assert console_errors(page) == []


@pytest.mark.browser
def test_bundle_draws_every_trace_type_with_hover(page, demo_server):
    """scatter, bar (grouped, stacked, horizontal), heatmap and histogram: what charts.js draws."""
    srv, math_run, _ = demo_server
    opened(page, f"{srv.url}/runs/{math_run}")
    types = set(page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
        .flatMap(el => el._fullData.map(t => t.type))"""))
    assert {"scatter", "bar", "heatmap"} <= types
    heat = page.evaluate("""() => [...document.querySelectorAll('.js-plotly-plot')]
        .find(el => el._fullData.some(t => t.type === 'heatmap')).id""")
    page.locator(f"#{heat} .nsewdrag").first.hover()  # the mouse over the middle of the plot
    assert page.wait_for_selector(f"#{heat} .hoverlayer .hovertext").text_content()
    # A histogram of raw values (a hist chart without y) draws through the same bundle.
    page.evaluate("""() => {
        const el = Object.assign(document.createElement('div'), {id: 'chart-raw-hist', className: 'chart'});
        document.querySelector('main').appendChild(el);
        return PolyCharts.page([{name: 'raw-hist', title: 'raw', chart: {kind: 'hist', x: 'len'},
            columns: {len: {fmt: 'tokens'}}, params: {}, points: 600,
            data: {ok: true, columns: ['len'], rows: [[1], [2], [2], [5]]}}]);
    }""")
    assert page.evaluate("document.getElementById('chart-raw-hist')._fullData[0].type") == "histogram"
    assert page.locator("#chart-raw-hist .bars path").count() > 0
    assert console_errors(page) == []


@pytest.mark.browser
def test_compare_pairs_share_a_scale_when_drawn_lazily(page, demo_server):
    srv, math_run, other = demo_server
    opened(page, f"{srv.url}/compare?a={math_run}&b={other}")
    pairs = page.evaluate("""() => [...document.querySelectorAll('.pair:not(.overlay)')]
        .map(p => [...p.querySelectorAll('.js-plotly-plot')].map(el => el.id)).filter(ids => ids.length === 2)""")
    matched = 0
    for a, b in pairs:
        ya, yb = (page.evaluate(f"document.getElementById('{i}')._fullLayout.yaxis.range") for i in (a, b))
        types = {page.evaluate(f"document.getElementById('{i}').data[0].type") for i in (a, b)}
        if types != {"heatmap"}:
            assert ya == pytest.approx(yb), (a, b)
            matched += 1
    assert matched > 0
    assert console_errors(page) == []


# ---- the REST bench's client -----------------------------------------------------------------

def test_the_rest_bench_client_reads_what_httpx_reads(make_server):
    """bench/api.py times REST through its own minimal client: on one keep-alive connection it
    must read each answer whole (one longer than a socket read, errors too), and count errors."""
    srv = make_server()
    asks = [("/api/queries", {}), ("/api/queries/nope", {}), ("/api/queries/length_stats", {}),
            ("/api/health", {}), ("/api/queries", {})]

    async def read_all():
        connection = await api_bench.connect(srv.url)
        try:
            return [await connection.get(api_bench.get_request(srv.url + path, params)) for path, params in asks]
        finally:
            connection.transport.close()

    got = _on_a_thread(read_all())
    expected = [httpx.get(srv.url + path, params=params) for path, params in asks]
    assert [status for status, _ in got] == [200, 404, 422, 200, 200]
    assert got == [(r.status_code, r.content) for r in expected]
    assert len(got[0][1]) > 65536  # more than one read of the socket
    latencies, errors, _ = _on_a_thread(api_bench.hammer(srv.url + "/api/queries/nope", {}, 2, 0.2))
    assert len(latencies) >= 2 and errors == len(latencies)
    latencies, errors, _ = _on_a_thread(api_bench.hammer(srv.url + "/api/health", {}, 2, 0.2))
    assert len(latencies) >= 2 and errors == 0


def _on_a_thread(coroutine):
    """asyncio.run on a thread of its own: Playwright's sync API, whose browser this module's
    other tests keep open, holds an event loop on this one."""
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()
