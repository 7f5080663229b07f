"""Per-step aggregates: filled inside the ingest transaction, exact, and removed with their run."""
from __future__ import annotations

import pytest

from polytrace.ingest.aggregates import FILLS, materialize
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import data_tables, delete_run, ingest_paths

PACKED = (
    '{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3], "n_sampling": 2}\n'
    '{"step": 0, "rank": 4, "dp_rank": 1, "tp_rank": 0, "input": 20, "output": [5, 7], "n_sampling": 2}\n'
    '{"step": 1, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 30, "output": [0, 100], "n_sampling": 2}\n'
)


def aggregate_rows(con) -> dict[str, int]:
    return {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in FILLS}


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
    assert set(FILLS) <= set(data_tables(con))
    run_id = ingest_paths(con, [packed]).run_id
    assert aggregate_rows(con) == {"step_lengths": 2, "step_rank_lengths": 3,
                                   "step_length_bins": 5, "step_turns": 0, "run_ranks": 1}
    # ranks 0 and 4: stride 4 (= tp), so the job spans ranks 0..7 -> 8 GPUs
    assert con.execute("SELECT ranks, gpus_from_ranks FROM run_ranks").fetchone() == (2, 8)
    assert delete_run(con, run_id)
    assert aggregate_rows(con) == dict.fromkeys(FILLS, 0)


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
    snapshot = {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in FILLS}
    materialize(con, run_id)
    assert {t: con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall() for t in FILLS} == snapshot


def test_opening_a_database_backfills_runs_without_aggregates(db_path, packed):
    from polytrace.ingest.load import open_db

    con = open_db(db_path)
    run_id = ingest_paths(con, [packed]).run_id
    for table in FILLS:  # as if ingested before the aggregate tables existed
        con.execute(f"DELETE FROM {table}")
    con.close()
    con = open_db(db_path)
    try:
        assert aggregate_rows(con)["step_lengths"] == 2
        assert con.execute("SELECT count(*) FROM step_rank_lengths WHERE run_id = ?",
                           [run_id]).fetchone()[0] == 3
    finally:
        con.close()
