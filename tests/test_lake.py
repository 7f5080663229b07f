"""Parquet lake round trip: `polytrace export` then `polytrace ingest DIR` gives the same database."""
from __future__ import annotations

import math
import shutil
import zipfile
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from polytrace.queries.catalog import bind, load_catalog
from polytrace.store.lake import export_runs
from polytrace.store.runs import data_tables

DAPO = "polytrace/verl/profile/packed_length_log/20260614_023133"
RLLM = "polytrace/rllm/profile/packed_length_log/20260616_024512"
SEARCH_R1 = "polytrace/search_r1/profile/multiturn_workload_log/0617_0223"
KINETO = "kineto/trace_filter"
VERL_LOG = "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log"
# Values for required parameters other than run_id; both databases get the same ones.
FILLERS = {"INTEGER": 1, "BIGINT": 1, "DOUBLE": 0.5, "BOOLEAN": False, "VARCHAR": "x"}


def _table_rows(con, table: str, drop: tuple[str, ...] = ()) -> list[tuple]:
    cols = [r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE table_name = ? "
        "AND database_name = current_database() ORDER BY column_index", [table]).fetchall()]
    keep = ", ".join(f'"{c}"' for c in cols if c not in drop)
    return con.execute(f'SELECT {keep} FROM "{table}" ORDER BY ALL').fetchall()


def _same(a: list[tuple], b: list[tuple]) -> bool:
    if len(a) != len(b):
        return False
    for ra, rb in zip(a, b):
        for va, vb in zip(ra, rb):
            if isinstance(va, float) and isinstance(vb, float):
                if not (math.isclose(va, vb, rel_tol=1e-12, abs_tol=1e-12)
                        or (math.isnan(va) and math.isnan(vb))):
                    return False
            elif va != vb:
                return False
    return True


def _catalog_rows(con, query, run_id: str) -> list[tuple]:
    values = {p.name: FILLERS[p.type] for p in query.params if p.required and p.name != "run_id"}
    return con.execute(query.sql, bind(query, {**values, "run_id": run_id})).fetchall()


def _ingest_all(shared_data: Path, db: Path, inputs: list[str]):
    con = store.open(db)
    return con, [ingest_paths(con, [shared_data / d]).run_id for d in inputs]


@pytest.fixture
def two_runs(shared_data, tmp_path):
    """A database with the DAPO run (packed + filter) and the rllm run (packed + reward timings)."""
    con, ids = _ingest_all(shared_data, tmp_path / "native.duckdb", [DAPO, RLLM])
    yield con, ids
    con.close()


def assert_round_trip(native, ids: list[str], tmp_path: Path) -> list[str]:
    """Export each run into one lake, ingest the lake into a fresh database, compare everything.
    Returns the catalog queries compared."""
    lake = tmp_path / "lake"
    for run_id in ids:  # one export per run: each adds its run to the lake
        export_runs(native, [run_id], lake)
    assert sorted(p.name for p in (lake / "table=runs").iterdir()) == sorted(f"run_id={i}" for i in ids)
    assert not [p for p in lake.iterdir() if p.name.startswith(".")], "staging directory left behind"

    restored = store.open(tmp_path / "restored.duckdb")
    result = ingest_paths(restored, [lake])
    assert result.format == "parquet-lake"
    assert sorted(result.run_ids) == sorted(ids)

    compared = []
    for query in load_catalog().values():
        if not any(p.name == "run_id" for p in query.params):
            continue
        for run_id in ids:
            want, got = _catalog_rows(native, query, run_id), _catalog_rows(restored, query, run_id)
            assert _same(want, got), f"{query.name} differs for run {run_id}"
        compared.append(query.name)

    assert native.execute("SELECT * FROM runs ORDER BY run_id").fetchall() == \
        restored.execute("SELECT * FROM runs ORDER BY run_id").fetchall()
    for table in data_tables(native):
        assert _same(_table_rows(native, table), _table_rows(restored, table)), table
    # the original ingest history comes along; the restore adds one row per run
    history = ("ingest_id", "started_at", "finished_at")
    old = _table_rows(native, "ingests", history)
    new = _table_rows(restored, "ingests", history)
    assert set(old) <= set(new) and len(new) == len(old) + len(ids)
    restored.close()
    return compared


def test_round_trip_gives_identical_catalog_results(two_runs, tmp_path):
    native, ids = two_runs
    compared = assert_round_trip(native, ids, tmp_path)
    assert "length_stats" in compared
    print(f"compared {len(compared)} catalog queries x {len(ids)} runs: {', '.join(compared)}")


def test_round_trip_of_multiturn_gpu_and_verl_runs(shared_data, tmp_path):
    """The tables the packed runs leave empty: turns, tool_calls, GPU events, step metrics."""
    native, ids = _ingest_all(shared_data, tmp_path / "native.duckdb", [SEARCH_R1, KINETO, VERL_LOG])
    try:
        for table in ("turns", "tool_calls", "gpu_events", "profiler_steps", "step_metrics"):
            assert native.execute(f"SELECT count(*) FROM {table}").fetchone()[0] > 0, table
        compared = assert_round_trip(native, ids, tmp_path)
    finally:
        native.close()
    print(f"compared {len(compared)} catalog queries x {len(ids)} runs")


def test_ingesting_the_same_lake_twice_adds_nothing(two_runs, tmp_path):
    native, ids = two_runs
    export_runs(native, ids, tmp_path / "lake")
    con = store.open(tmp_path / "restored.duckdb")
    ingest_paths(con, [tmp_path / "lake"])
    before = con.execute("SELECT count(*) FROM samples").fetchone()[0]
    again = ingest_paths(con, [tmp_path / "lake"])
    assert again.existing
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == before == 4608 + 384
    con.close()


def _tiny_db(path: Path, run_id: str = "0001") -> duckdb.DuckDBPyConnection:
    """One hand-made run: 2 steps x 2 samples, and a numeric-looking id that must stay text."""
    con = store.open(path)
    con.execute("INSERT INTO runs (run_id, name, format, sha256, created_at, config) "
                "VALUES (?, 'tiny', 'hand', 'abc', TIMESTAMP '2026-01-02 03:04:05', '{\"k\": 1}')",
                [run_id])
    con.execute("INSERT INTO samples (run_id, step, prompt_id, sample_id, prompt_len, response_len) "
                "VALUES (?, 0, 0, 0, 10, 100), (?, 0, 0, 1, 10, 300), (?, 1, 0, 0, 20, 50), "
                "(?, 1, 0, 1, 20, NULL)", [run_id] * 4)
    return con


def test_lake_layout_reads_run_id_as_text(tmp_path):
    con = _tiny_db(tmp_path / "a.duckdb")
    rows = export_runs(con, ["0001"], tmp_path / "lake")
    assert rows["samples"] == 4 and rows["runs"] == 1 and rows["turns"] == 0
    part = tmp_path / "lake" / "table=samples" / "run_id=0001" / "part-0.parquet"
    assert "run_id" not in pq.read_schema(part).names  # the partition key lives in the path
    # an empty table still gets a file, so the lake always carries every table's schema
    assert pq.read_metadata(tmp_path / "lake/table=turns/run_id=0001/part-0.parquet").num_rows == 0

    lake = duckdb.connect()
    lake.execute("SET disabled_optimizers='window_self_join'")
    got = lake.execute(
        "SELECT run_id, typeof(run_id), sum(response_len)::BIGINT FROM read_parquet(?, "
        "hive_partitioning=true, hive_types={'run_id': VARCHAR}) GROUP BY ALL",
        [str(tmp_path / "lake/table=samples/*/*.parquet")]).fetchall()
    assert got == [("0001", "VARCHAR", 100 + 300 + 50)]

    back = store.open(tmp_path / "b.duckdb")
    assert ingest_paths(back, [tmp_path / "lake"]).run_ids == ["0001"]
    assert back.execute("SELECT run_id, name, config::VARCHAR, created_at::VARCHAR FROM runs").fetchall() == \
        [("0001", "tiny", '{"k": 1}', "2026-01-02 03:04:05")]
    assert back.execute("SELECT count(*), count(response_len) FROM samples").fetchone() == (4, 3)


def test_export_again_replaces_only_that_runs_partition(tmp_path):
    con = _tiny_db(tmp_path / "a.duckdb")
    other = _tiny_db(tmp_path / "b.duckdb", run_id="r2")
    lake = tmp_path / "lake"
    export_runs(other, ["r2"], lake)
    other_part = lake / "table=samples/run_id=r2/part-0.parquet"
    other_stat = other_part.stat()
    export_runs(con, ["0001"], lake)
    con.execute("DELETE FROM samples WHERE step = 1")
    export_runs(con, ["0001"], lake)
    assert pq.read_metadata(lake / "table=samples/run_id=0001/part-0.parquet").num_rows == 2
    assert other_part.stat().st_mtime_ns == other_stat.st_mtime_ns
    assert pq.read_metadata(other_part).num_rows == 4


def test_restoring_a_run_id_held_by_other_content_is_refused(tmp_path):
    export_runs(_tiny_db(tmp_path / "a.duckdb"), ["0001"], tmp_path / "lake")
    con = _tiny_db(tmp_path / "b.duckdb")
    con.execute("UPDATE runs SET sha256 = 'other'")
    with pytest.raises(IngestError, match="run 0001 already exists here with different content"):
        ingest_paths(con, [tmp_path / "lake"])
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 4


def test_cli_export_and_ingest(tmp_path, capsys):
    _tiny_db(tmp_path / "a.duckdb").close()
    lake = tmp_path / "lake"
    assert main(["export", "0001", "--out", str(lake), "--db", str(tmp_path / "a.duckdb")]) == 0
    assert main(["ingest", str(lake), "--db", str(tmp_path / "b.duckdb")]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "0001"
    assert main(["export", "nope", "--out", str(lake), "--db", str(tmp_path / "a.duckdb")]) == 2
    assert capsys.readouterr().err == \
        "error: no run 'nope' in this database (see `polytrace query runs`)\n"
    assert main(["export", "../x", "--out", str(lake), "--db", str(tmp_path / "a.duckdb")]) == 2
    assert "cannot name a lake partition" in capsys.readouterr().err
    (tmp_path / "afile").write_text("x")
    assert main(["export", "0001", "--out", str(tmp_path / "afile"), "--db", str(tmp_path / "a.duckdb")]) == 2
    assert capsys.readouterr().err == f"error: cannot write a lake at {tmp_path / 'afile'}: File exists\n"


@pytest.mark.parametrize("damage, reason", [
    (lambda lake: (lake / "table=samples/run_id=0001/part-0.parquet").write_bytes(b"PAR1 broken"),
     "table=samples/run_id=0001/part-0.parquet: not a readable Parquet file"),
    (lambda lake: (lake / "table=samples/run_id=ghost").mkdir(),
     "table=samples holds run_id=ghost that has no row in table=runs"),
    (lambda lake: shutil.rmtree(lake / "table=runs"),
     "Parquet lake without a table=runs directory"),
])
def test_damaged_lake_is_one_line_and_stores_nothing(tmp_path, capsys, damage, reason):
    export_runs(_tiny_db(tmp_path / "a.duckdb"), ["0001"], tmp_path / "lake")
    damage(tmp_path / "lake")
    assert main(["ingest", str(tmp_path / "lake"), "--db", str(tmp_path / "b.duckdb")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and reason in err
    con = store.open(tmp_path / "b.duckdb")
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 0
    assert con.execute("SELECT status FROM ingests").fetchall() == [("failed",)]


def test_an_untrusted_lake_is_restored_as_its_bytes_are(tmp_path):
    """An upload's lake: its digests are computed from its files, its claimed history stays behind."""
    from polytrace.ingest.load import RunConflict
    from polytrace.ingest.restore import lake_digests

    origin = _tiny_db(tmp_path / "a.duckdb")
    origin.execute("INSERT INTO ingests (run_id, file_name, sha256, status) VALUES ('0001', 'x.jsonl', 'abc', 'ok')")
    export_runs(origin, ["0001"], tmp_path / "lake")
    origin.close()
    con = store.open(tmp_path / "b.duckdb")
    result = ingest_paths(con, [tmp_path / "lake"], trusted=False)
    assert (result.run_ids, result.existing) == (["0001"], False)
    digest = lake_digests(tmp_path / "lake")["0001"]
    assert con.execute("SELECT sha256 FROM runs").fetchall() == [(digest,)] != [("abc",)]
    assert con.execute("SELECT file_name, status FROM ingests").fetchall() == [(str(tmp_path / "lake"), "ok")]
    assert ingest_paths(con, [tmp_path / "lake"], trusted=False).existing  # the same bytes again
    # the trusted lake (the user's own, from the CLI) claims digest 'abc': a different run here
    with pytest.raises(RunConflict, match="run 0001 already exists here with different content"):
        ingest_paths(con, [tmp_path / "lake"])
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 4
    con.close()


def test_a_lake_run_id_must_be_a_run_id(tmp_path):
    export_runs(_tiny_db(tmp_path / "a.duckdb"), ["0001"], tmp_path / "lake")
    for table in (tmp_path / "lake").iterdir():
        (table / "run_id=0001").rename(table / "run_id=-bad")
    con = store.open(tmp_path / "b.duckdb")
    with pytest.raises(IngestError, match="run id '-bad' is not a valid run id"):
        ingest_paths(con, [tmp_path / "lake"])
    assert con.execute("SELECT count(*) FROM runs").fetchone()[0] == 0
    con.close()


def test_a_lake_from_schema_3_restores_without_its_run_findings(tmp_path):
    """Schema 3 exported the findings list as table=run_findings; it is derived, and schema 4 keeps
    it among the stored answers: a restore leaves it out without a warning."""
    lake = tmp_path / "lake"
    export_runs(_tiny_db(tmp_path / "a.duckdb"), ["0001"], lake)
    old = lake / "table=run_findings" / "run_id=0001"
    old.mkdir(parents=True)
    pq.write_table(pa.table({"position": [0], "kind": ["rollout_tail"], "text": ["as schema 3 kept it"]}),
                   old / "part-0.parquet")
    back = store.open(tmp_path / "b.duckdb")
    result = ingest_paths(back, [lake])
    assert result.run_ids == ["0001"] and result.warnings == []
    assert back.execute("SELECT count(*) FROM samples").fetchall() == [(4,)]


def test_a_trusted_lake_whose_rows_changed_under_the_same_digest_is_refused(tmp_path):
    from polytrace.ingest.load import RunConflict

    origin = _tiny_db(tmp_path / "a.duckdb")
    export_runs(origin, ["0001"], tmp_path / "lake")
    con = store.open(tmp_path / "b.duckdb")
    assert not ingest_paths(con, [tmp_path / "lake"]).existing
    assert ingest_paths(con, [tmp_path / "lake"]).existing  # the same lake again: nothing to say
    # a sample more in the origin, exported again over the same partition: its runs row keeps 'abc'
    origin.execute("INSERT INTO samples (run_id, step, prompt_id, sample_id, prompt_len, response_len) "
                   "VALUES ('0001', 2, 0, 0, 5, 5)")
    export_runs(origin, ["0001"], tmp_path / "lake")
    origin.close()
    with pytest.raises(RunConflict, match=r"run 0001 is here under the digest the lake's runs row gives, but "
                                          r"the lake holds other rows \(samples: 5 in the lake, 4 here\)"):
        ingest_paths(con, [tmp_path / "lake"])
    assert con.execute("SELECT count(*) FROM samples").fetchone()[0] == 4
    con.close()


def test_a_zipped_lake_restores_as_the_lake_and_uploads(tmp_path, make_server):
    import httpx

    origin = _tiny_db(tmp_path / "a.duckdb")
    export_runs(origin, ["0001"], tmp_path / "lake")
    origin.close()
    zipped = tmp_path / "lake.zip"
    with zipfile.ZipFile(zipped, "w") as zf:  # as `cd lake && zip -r ../lake.zip .` leaves it, plus a folder level
        for path in sorted((tmp_path / "lake").rglob("*.parquet")):
            zf.write(path, "export/" + path.relative_to(tmp_path / "lake").as_posix())
        zf.writestr("export/.DS_Store", b"\0")
    con = store.open(tmp_path / "b.duckdb")
    result = ingest_paths(con, [zipped])
    assert (result.run_ids, result.format, result.rows) == (["0001"], "parquet-lake", {"samples": 4})
    assert ingest_paths(con, [zipped]).existing
    con.close()
    srv = make_server(db=str(tmp_path / "served.duckdb"))
    answer = httpx.post(f"{srv.url}/api/runs", files=[("file", ("lake.zip", zipped.read_bytes()))], timeout=60)
    assert answer.status_code == 201 and answer.json()["run_ids"] == ["0001"], answer.text
    again = httpx.post(f"{srv.url}/api/runs", files=[("file", ("lake.zip", zipped.read_bytes()))], timeout=60)
    assert again.status_code == 200 and again.json()["existing"] is True
