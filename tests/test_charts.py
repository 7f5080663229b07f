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
