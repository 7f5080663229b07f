"""Per-step aggregates: filled inside the ingest transaction, exact, and removed with their run."""
from __future__ import annotations

import pytest

from polytrace import store
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from polytrace.store.aggregates import materialize
from polytrace.store.aggregates import names as aggregate_names
from polytrace.store.migrate import SCHEMA_VERSION
from polytrace.store.runs import data_tables, delete_run

PACKED = (
    '{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3], "n_sampling": 2}\n'
    '{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [5, 7], "n_sampling": 2}\n'
    '{"step": 1, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 30, "output": [0, 100], "n_sampling": 2}\n'
)


def aggregate_rows(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in aggregate_names()}


@pytest.fixture
def packed(tmp_path):
    path = tmp_path / "packed_lengths_step_0.jsonl"
    path.write_text(PACKED)
    return path


def test_ingest_fills_the_aggregates(con, packed):
    run_id = ingest_paths(con, [packed]).run_id
    rows = con.execute(
        "SELECT step, dp_rank, n, prompt_tokens, response_tokens, max_len FROM step_rank_lengths "
        "WHERE run_id = ? ORDER BY step, dp_rank", [run_id]).fetchall()
    # step 0: dp0 prompts 10+10, responses 1+3; dp1 20+20, 5+7; step 1: dp0 30+30, 0+100
    assert rows == [(0, 0, 2, 20, 4, 3), (0, 1, 2, 40, 12, 7), (1, 0, 2, 60, 100, 100)]
    bins = con.execute("SELECT step, bin, responses FROM step_length_bins WHERE run_id = ? "
                       "ORDER BY step, bin", [run_id]).fetchall()
    # 1 -> bin 1; 3 -> bin 2 [2,4); 5, 7 -> bin 3 [4,8); 0 -> bin 0; 100 -> bin 7 [64,128)
    assert bins == [(0, 1, 1), (0, 2, 1), (0, 3, 2), (1, 0, 1), (1, 7, 1)]
    (p50, filtered), = con.execute("SELECT response_p50, filtered FROM step_lengths "
                                   "WHERE run_id = ? AND step = 0", [run_id]).fetchall()
    assert p50 == 4.0 and filtered is False


def test_result_rows_count_input_tables_only(con, packed):
    result = ingest_paths(con, [packed])
    assert result.rows == {"samples": 6}


def test_aggregate_tables_belong_to_the_run(con, packed):
    assert set(aggregate_names()) <= set(data_tables(con))
    run_id = ingest_paths(con, [packed]).run_id
    assert aggregate_rows(con) == {"step_lengths": 2, "step_rank_lengths": 3, "step_length_bins": 5,
                                   "step_turns": 0, "step_ranks": 3, "canonical_metrics": 0}
    # ranks 0 and 4: stride 4 (= tp), so the job spans ranks 0..7 -> 8 GPUs
    assert con.execute("SELECT count(DISTINCT rank), max(rank) FROM step_ranks").fetchone() == (2, 4)
    assert delete_run(con, run_id)
    assert aggregate_rows(con) == dict.fromkeys(aggregate_names(), 0)


def test_failed_ingest_leaves_no_aggregates(con, packed, tmp_path):
    ingest_paths(con, [packed])
    before = aggregate_rows(con)
    bad = tmp_path / "bad" / "packed_lengths_step_5.jsonl"
    bad.parent.mkdir()
    bad.write_text('{"step": 5, "input": 1, "output": [2]}\n{"step": 5, "input": 1, "output": [-1]}\n')
    with pytest.raises(IngestError):
        ingest_paths(con, [bad])
    assert aggregate_rows(con) == before


def test_materialize_again_is_idempotent(con, packed):
    run_id = ingest_paths(con, [packed]).run_id
    snapshot = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in aggregate_names()}
    materialize(con, run_id)
    assert {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in aggregate_names()} == snapshot


def test_a_writer_upgrades_a_database_written_before_the_schema_version(db_path, packed):
    con = store.open(db_path)
    run_id = ingest_paths(con, [packed]).run_id
    for table in aggregate_names():  # as an older PolyTrace left it: no version, stale aggregates
        con.execute(f"DELETE FROM {table}")
    con.execute("DROP TABLE store_meta")
    con.close()
    with pytest.raises(store.StoreError, match=rf"older PolyTrace \(schema 1, this one reads {SCHEMA_VERSION}\); "
                                               r"upgrade it with `polytrace migrate --db .*test.duckdb`"):
        store.open(db_path, "r")
    con = store.open(db_path, "w")
    try:
        assert aggregate_rows(con)["step_lengths"] == 2
        assert con.execute("SELECT count(*) FROM step_rank_lengths WHERE run_id = ?",
                           [run_id]).fetchone()[0] == 3
        assert dict(con.execute("SELECT * FROM store_meta").fetchall())["schema_version"] == str(SCHEMA_VERSION)
    finally:
        con.close()
    store.open(db_path, "r").close()  # current now: readers open it


def test_a_changed_aggregate_definition_recomputes_every_run(db_path, packed):
    con = store.open(db_path)
    ingest_paths(con, [packed])
    con.execute("UPDATE step_lengths SET n = -1")  # what an older definition computed
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'aggregates'")
    con.close()
    con = store.open(db_path)
    try:
        assert con.execute("SELECT list(n ORDER BY step) FROM step_lengths").fetchone()[0] == [4, 2]
    finally:
        con.close()


def test_readers_refuse_what_is_not_a_current_polytrace_database(tmp_path):
    with pytest.raises(store.StoreError, match="no database at .*missing.duckdb"):
        store.open(tmp_path / "missing.duckdb", "r")
    assert not (tmp_path / "missing.duckdb").exists()  # a reader never creates one
    import duckdb

    duckdb.connect(str(tmp_path / "other.duckdb")).close()
    with pytest.raises(store.StoreError, match=r"not a PolyTrace database \(no runs table\)"):
        store.open(tmp_path / "other.duckdb", "r")
    con = store.open(tmp_path / "newer.duckdb")
    con.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    con.close()
    with pytest.raises(store.StoreError, match="newer PolyTrace"):
        store.open(tmp_path / "newer.duckdb", "w")


def test_a_new_table_in_the_schema_reaches_older_databases(db_path):
    con = store.open(db_path)
    con.execute("DROP TABLE whatif")  # as a database written before the table existed
    con.execute("UPDATE store_meta SET value = 'older' WHERE key = 'schema'")
    con.close()
    with pytest.raises(store.StoreError, match="polytrace migrate"):
        store.open(db_path, "r")
    store.open(db_path, "w").close()
    con = store.open(db_path, "r")
    try:
        assert con.execute("SELECT count(*) FROM whatif").fetchall() == [(0,)]
    finally:
        con.close()


def test_materializing_only_new_steps_equals_the_whole_run(db_path, packed, tmp_path):
    """A live append recomputes the steps it brought; the result equals a full recompute."""
    con = store.open(db_path)
    try:
        run_id = ingest_paths(con, [packed]).run_id
        con.execute("INSERT INTO samples (run_id, step, prompt_id, sample_id, rank, dp_rank, prompt_len, "
                    "response_len) VALUES (?, 2, 0, 0, 0, 0, 5, 9), (?, 2, 0, 1, 4, 1, 5, 1)",
                    [run_id, run_id])
        materialize(con, run_id, steps=[2])
        partial = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in aggregate_names()}
        materialize(con, run_id)
        whole = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in aggregate_names()}
        assert partial == whole
        assert con.execute("SELECT n, response_max FROM step_lengths WHERE step = 2").fetchall() == [(2, 9)]
    finally:
        con.close()
