"""The catalog with DuckDB over a Parquet lake (query --lake, serve --lake, ingest --lake) equals the database."""
from __future__ import annotations

import shutil
from pathlib import Path

import duckdb
import httpx
import pytest

from bench.compare import row_differences
from polytrace import store
from polytrace.cli import main
from polytrace.ingest.load import ingest_paths
from polytrace.queries import overview
from polytrace.queries.catalog import bind, get_query, load_catalog
from polytrace.queries.runner import run_bound
from polytrace.store import lake
from polytrace.store.lake import export_runs
from tests.edge_lake import (
    RUNS,
    build_database,
    build_lake,
    params_for,
)
from tests.goldens import case_names, load_case

DAPO = "polytrace/verl/profile/packed_length_log/20260614_023133"
KINETO = "kineto/trace_filter"
CASES = [(name, params) for name, query in load_catalog().items() for params in params_for(query)]


@pytest.fixture(scope="module")
def edge(tmp_path_factory):
    native = build_database()
    root = build_lake(native, tmp_path_factory.mktemp("edge") / "lake")
    over_lake = lake.open_lake(root)
    yield native, over_lake, root
    over_lake.close()
    native.close()


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_query_over_the_lake_equals_the_database(edge, name, params):
    native, over_lake, _ = edge
    query = get_query(name)
    expected, actual = run_bound(native, query, params), run_bound(over_lake, query, params)
    assert actual.columns == expected.columns
    assert row_differences(expected.rows, actual.rows) == []
    assert [type(v) for r in actual.rows for v in r] == [type(v) for r in expected.rows for v in r]


def test_every_query_is_compared_with_rows():
    """The edge runs give every catalog query some rows, so equality above means something."""
    native = build_database()
    with_rows = {n for n, p in CASES if run_bound(native, get_query(n), p).rows}
    assert set(load_catalog()) - with_rows == set()


@pytest.mark.parametrize("case", case_names())
def test_golden_cases_round_trip_through_the_lake(case, tmp_path):
    native = load_case(case)
    run_ids = [r[0] for r in native.execute("SELECT run_id FROM runs").fetchall()]
    over_lake = lake.open_lake(build_lake_of(native, run_ids, tmp_path / "lake"))
    for query in load_catalog().values():
        for run_id in run_ids:
            params = _params(query, run_id)
            assert row_differences(run_bound(native, query, params).rows,
                                   run_bound(over_lake, query, params).rows) == [], query.name


def build_lake_of(con, run_ids: list[str], root: Path) -> Path:
    export_runs(con, run_ids, root)
    return root


def _params(query, run_id: str) -> dict:
    fillers = {"INTEGER": 1, "BIGINT": 1, "DOUBLE": 0.5, "BOOLEAN": False, "VARCHAR": "x"}
    values = {p.name: fillers[p.type] for p in query.params if p.required}
    values.update({k: run_id for k in ("run_id", "bench_run", "formal_run") if k in values})
    return bind(query, values)


# A window over a partition-filtered scan: DuckDB 2.0.x's window_self_join optimizer drops
# the run_id filter on one side and counts the rows of every run.
WINDOW_OVER_PARTITION = ("SELECT count(*), sum(per_key) FROM (SELECT count(*) OVER (PARTITION BY key) "
                         "AS per_key FROM step_metrics WHERE run_id = $run_id)")


def test_window_self_join_regression(edge, monkeypatch):
    native, over_lake, root = edge
    # 0001 has 230 metric rows over 10 keys of 23 rows each, 56 over 7 health keys of 8 rows and
    # 22 over 2 agent-loop keys of 11 rows: the per-key counts sum to 230 * 23 + 56 * 8 + 22 * 11
    expected = [(308, 230 * 23 + 56 * 8 + 22 * 11)]
    assert native.execute(WINDOW_OVER_PARTITION, {"run_id": "0001"}).fetchall() == expected
    assert over_lake.execute(WINDOW_OVER_PARTITION, {"run_id": "0001"}).fetchall() == expected
    monkeypatch.setattr(lake, "LAKE_SETTINGS", ())
    unpatched = lake.open_lake(root).execute(WINDOW_OVER_PARTITION, {"run_id": "0001"}).fetchall()
    if unpatched == expected:
        pytest.skip("this DuckDB no longer has the window_self_join bug; the setting can go")
    assert unpatched != expected


def test_numeric_looking_run_id_stays_text(edge):
    _, over_lake, _ = edge
    assert over_lake.execute("SELECT DISTINCT run_id FROM samples ORDER BY 1").fetchall() == [
        ("0001",), ("run.b",)]
    assert over_lake.execute("SELECT count(*) FROM samples WHERE run_id = '1'").fetchall() == [(0,)]
    assert over_lake.execute("SELECT typeof(run_id) FROM runs LIMIT 1").fetchall() == [("VARCHAR",)]


def test_lake_connection_reads_only_the_lake(edge):
    _, over_lake, _ = edge
    with pytest.raises(duckdb.PermissionException):
        over_lake.execute("SELECT * FROM read_csv('/etc/hostname')").fetchall()
    with pytest.raises(duckdb.Error):
        over_lake.execute("SET enable_external_access = true")


def test_missing_tables_are_empty_and_not_a_lake_is_refused(tmp_path):
    native = build_database()
    root = tmp_path / "lake"
    export_runs(native, ["0001"], root)
    shutil.rmtree(root / "table=turns")
    con = lake.open_lake(root)
    assert con.execute("SELECT count(*) FROM turns").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM samples").fetchall() == [(480,)]
    with pytest.raises(store.StoreError, match="not a Parquet lake"):
        lake.open_lake(tmp_path)


def test_cli_query_over_the_lake(edge, capsys):
    _, _, root = edge
    assert main(["query", "length_stats", "--lake", str(root), "-p", "run_id=0001",
                 "--output", "csv"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 + 20
    assert lines[1].startswith("0,24,")
    assert main(["query", "length_stats", "--lake", str(root.parent), "-p", "run_id=0001"]) == 2
    assert "is not a Parquet lake" in capsys.readouterr().err
    assert main(["query", "length_stats", "--engine", "spark", "-p", "run_id=0001"]) == 2
    assert "--engine spark reads a Parquet lake" in capsys.readouterr().err


def test_serve_over_the_lake_reads_and_refuses_writes(edge, make_server):
    native, _, root = edge
    srv = make_server(lake=str(root))
    runs = httpx.get(f"{srv.url}/api/runs").json()["runs"]
    assert sorted(r["run_id"] for r in runs) == sorted(RUNS)
    answer = httpx.get(f"{srv.url}/api/queries/rollout_tail", params={"run_id": "run.b"}).json()
    query = get_query("rollout_tail")
    expected = run_bound(native, query, bind(query, {"run_id": "run.b"}))
    assert answer["columns"] == expected.columns
    assert row_differences(expected.rows, [tuple(r) for r in answer["rows"]]) == []
    upload = httpx.post(f"{srv.url}/api/runs", files={"file": ("x.jsonl", b"{}\n")})
    assert upload.status_code == 405
    assert upload.json() == {"ok": False, "status": 405, "error": (
        f"this server reads the Parquet lake {root} and cannot change it; add runs with "
        "`polytrace ingest --lake` or `polytrace export`")}
    assert httpx.delete(f"{srv.url}/api/runs/0001").status_code == 405
    assert httpx.get(f"{srv.url}/runs/0001").status_code == 200


def test_a_server_over_a_lake_sees_runs_another_writer_publishes(tmp_path, make_server):
    """With the result cache on, a run exported into the lake after the server started is in the
    next answer, and a poller's ETag changes with it (the runs page polls with If-None-Match)."""
    native = build_database()
    first, *others = sorted(RUNS)
    root = tmp_path / "lake"
    export_runs(native, [first], root)
    srv = make_server(lake=str(root), result_cache_rows=100_000)
    url = f"{srv.url}/api/queries/runs"
    before = httpx.get(url)
    assert [r[0] for r in before.json()["rows"]] == [first]
    assert httpx.get(url, headers={"If-None-Match": before.headers["etag"]}).status_code == 304
    export_runs(native, others, root)  # as `polytrace export` or `ingest --lake` would, elsewhere
    after = httpx.get(url, headers={"If-None-Match": before.headers["etag"]})
    assert after.status_code == 200 and after.headers["etag"] != before.headers["etag"]
    assert sorted(r[0] for r in after.json()["rows"]) == sorted(RUNS)
    assert httpx.get(url, headers={"If-None-Match": after.headers["etag"]}).status_code == 304
    native.close()


def test_shared_traces_query_the_same_over_the_lake(shared_data, tmp_path):
    native = store.open(tmp_path / "native.duckdb")
    run_ids = [ingest_paths(native, [shared_data / d]).run_id for d in (DAPO, KINETO)]
    over_lake = lake.open_lake(build_lake_of(native, run_ids, tmp_path / "lake"))
    compared = 0
    for query in load_catalog().values():
        for run_id in run_ids:
            params = _params(query, run_id)
            expected = run_bound(native, query, params).rows
            assert row_differences(expected, run_bound(over_lake, query, params).rows) == [], query.name
            compared += bool(expected)
    assert compared >= 10


def test_ingest_into_the_lake_equals_ingest_into_a_database(shared_data, tmp_path, capsys):
    """Two rank files parsed by two processes, published as one run: the same run id (the
    content hash), tables and query answers as a plain ingest."""
    native = store.open(tmp_path / "native.duckdb")
    run_id = ingest_paths(native, [shared_data / KINETO]).run_id
    overview.refresh(native, [run_id])  # as the CLI's writers do
    root = tmp_path / "lake"
    assert main(["ingest", str(shared_data / KINETO), "--lake", str(root), "--jobs", "2"]) == 0
    assert capsys.readouterr().out.strip() == run_id
    over_lake = lake.open_lake(root)
    assert over_lake.execute("SELECT max_response_len FROM runs").fetchall() == [(None,)]
    assert over_lake.execute("SELECT count(DISTINCT rank), count(*) FROM gpu_events").fetchall() == \
        native.execute("SELECT count(DISTINCT rank), count(*) FROM gpu_events").fetchall()
    for query in load_catalog().values():
        params = _params(query, run_id)
        expected, actual = run_bound(native, query, params), run_bound(over_lake, query, params)
        # two ingests, two created_at: compare the rest
        kept = [i for i, c in enumerate(expected.columns) if c != "created_at"]
        assert row_differences([[r[i] for i in kept] for r in expected.rows],
                               [[r[i] for i in kept] for r in actual.rows]) == [], query.name
    assert main(["ingest", str(shared_data / KINETO), "--lake", str(root)]) == 0
    assert "already in the lake" in capsys.readouterr().err
    # --force makes a second run of the same files, with a fresh id and a fact the traces lack
    assert main(["ingest", str(shared_data / KINETO), "--lake", str(root), "--force",
                 "--max-response-len", "512"]) == 0
    forced = capsys.readouterr().out.strip()
    assert forced != run_id
    assert lake.open_lake(root).execute(
        "SELECT run_id, max_response_len FROM runs ORDER BY 2 NULLS LAST").fetchall() == \
        [(forced, 512), (run_id, None)]
    assert sorted(p.name for p in root.iterdir()) == sorted(
        p.name for p in root.iterdir() if p.name.startswith("table="))


def test_bad_input_leaves_the_lake_untouched(edge, tmp_path, capsys):
    _, _, root = edge
    before = sorted(str(p.relative_to(root)) for p in root.rglob("*"))
    bad = tmp_path / "bad.json"
    bad.write_text('{"traceEvents": [')
    assert main(["ingest", str(bad), "--format", "kineto", "--lake", str(root)]) == 2
    assert capsys.readouterr().err.startswith("error: bad.json")
    assert sorted(str(p.relative_to(root)) for p in root.rglob("*")) == before


def test_a_database_server_still_takes_writes(make_server):
    """The lake check sits in front of the token check only on lake servers."""
    srv = make_server(token="s3cret")
    assert httpx.delete(f"{srv.url}/api/runs/nope").status_code == 401
    answer = httpx.delete(f"{srv.url}/api/runs/nope", headers={"Authorization": "Bearer s3cret"})
    assert answer.status_code == 404
