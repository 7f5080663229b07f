"""Adding a query is one .sql file and its golden CSV: with POLYTRACE_EXTRA_QUERIES pointing at
them, the catalog lints it, the golden runner checks it, REST, OpenAPI and the run page serve it,
and it translates to Spark. A bad file stops `polytrace serve` with one line."""
from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys

import httpx
import pytest

from polytrace.queries.catalog import load_catalog
from polytrace.server.app import create_app
from polytrace.settings import Settings
from tests.goldens import golden_mismatches, load_case
from tests.test_pages import tiny_run

# A site's own query over a shared view (queries/views/rollout_steps.sql).
QUERY = """-- name: rollout_basis
-- title: Rollout engines per step
-- section: Rollout tail
-- Per step, how many rollout engines ran, what their busy time is measured in and the share of
-- the rollout they sat idle, in percent: a site's own query over the shared rollout_steps view.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column engines BIGINT fmt=count  Rollout engines (dp ranks) in the step.
-- @column basis VARCHAR  'seconds' (measured gen time) or 'tokens' (longest response).
-- @column idle_pct DOUBLE fmt=pct100  The step's rollout_idle_frac as a percentage (%).
-- @chart line x=step y=idle_pct xlabel="step" ylabel="idle share of the rollout (%)" title="Rollout idle share"
SELECT step, engines, basis, 100 * rollout_idle_frac AS idle_pct
FROM rollout_steps
ORDER BY step
"""
# tests/fixtures/golden/README.md, rollout_tail: step 0 (no gen time on dp 1) 1 - (16+4)/(2*16);
# step 1, timed on all three engines, 1 - (2+10+3)/(3*10).
GOLDEN = """step,engines,basis,idle_pct
0,2,tokens,37.5
1,3,seconds,50.0
"""
@pytest.fixture
def site(tmp_path, monkeypatch):
    """A site's folder with the query, and its golden CSV next to it."""
    queries = tmp_path / "queries"
    queries.mkdir()
    (queries / "rollout_basis.sql").write_text(QUERY)
    golden = tmp_path / "golden"
    golden.mkdir()
    (golden / "rollout_basis__packed.csv").write_text(GOLDEN)
    monkeypatch.setenv("POLYTRACE_EXTRA_QUERIES", str(queries))
    return tmp_path


def test_the_catalog_loads_and_lints_the_new_query(site):
    query = load_catalog()["rollout_basis"]
    assert query.source == str(site / "queries" / "rollout_basis.sql")
    assert query.views == ("rollout_steps",) and query.sql.startswith("WITH rollout_steps AS (")
    assert query.section == "Rollout tail"
    assert [c.fmt for c in query.columns] == ["count", "count", None, "pct100"]


def test_its_golden_passes_through_the_shared_runner(site):
    cases = {"packed": load_case("packed")}
    try:
        assert golden_mismatches(site / "golden" / "rollout_basis__packed.csv", cases) == []
        wrong = site / "golden" / "rollout_basis__packed__wrong.csv"
        wrong.write_text(GOLDEN.replace("37.5", "40.0"))
        assert golden_mismatches(wrong, cases) == ["row 0 column idle_pct: 37.5 != expected '40.0'"]
    finally:
        cases["packed"].close()


def test_it_translates_to_spark(site):
    translate = pytest.importorskip("polytrace.queries.translate")
    assert translate.unsupported(load_catalog()["rollout_basis"].sql) == []


async def _get_all(app, *paths: str) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        return [await client.get(p) for p in paths]


def test_rest_openapi_and_the_run_page_serve_it(site, tmp_path):
    # tests/test_pages.py's PACKED run: longest responses 3 and 7 on two engines in step 0, then
    # 2 and 8 (no gen times, so busy is in tokens)
    db, (run_id,) = tiny_run(tmp_path)
    app = create_app(Settings(db=str(db)))
    rows, catalog, openapi, page = asyncio.run(_get_all(
        app, f"/api/queries/rollout_basis?run_id={run_id}", "/api/queries", "/openapi.json",
        f"/runs/{run_id}"))
    assert rows.status_code == 200 and rows.json() == {
        "ok": True, "columns": ["step", "engines", "basis", "idle_pct"],
        "rows": [[0, 2, "tokens", pytest.approx(100 * (1 - 10 / 14))], [1, 2, "tokens", 37.5]],
        "truncated": False}
    (entry,) = [q for q in catalog.json()["queries"] if q["name"] == "rollout_basis"]
    assert entry["url"] == "/api/queries/rollout_basis" and entry["views"] == ["rollout_steps"]
    assert [c["fmt"] for c in entry["columns"]] == ["count", "count", None, "pct100"]
    operation = openapi.json()["paths"]["/api/queries/rollout_basis"]["get"]
    assert operation["summary"] == "Rollout engines per step"
    assert "run_id" in {p["name"] for p in operation["parameters"]}
    sections = dict(re.findall(r'data-section="([^"]+)">(.*?)</section>', page.text, re.DOTALL))
    assert 'data-query="rollout_basis"' in sections["Rollout tail"]


def test_serve_refuses_a_bad_extra_query_in_one_line(tmp_path):
    folder = tmp_path / "queries"
    folder.mkdir()
    bad = folder / "settings.sql"
    bad.write_text("-- name: settings\n-- @column name VARCHAR  Setting.\nPRAGMA show_tables\n")
    env = {**os.environ, "POLYTRACE_EXTRA_QUERIES": str(folder)}
    command = [sys.executable, "-m", "polytrace", "serve", "--db", str(tmp_path / "s.duckdb"), "--port", "0"]
    out = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2
    assert out.stderr == f"error: {bad}: must be one SELECT or WITH query, not PRAGMA\n"
