"""Staged ingest (ingest/staging.py): a run parsed into its own database, then committed by
copying its rows; what the copy must keep, checked against a direct ingest of the same file."""
from __future__ import annotations

from polytrace import service, store
from polytrace.queries.catalog import get_query
from polytrace.queries.runner import run

PACKED = b'{"step": 0, "rank": 0, "input": 10, "output": [2, 2, 4, 8]}\n{"step": 1, "rank": 0, "input": 20, "output": [5]}\n'


def _answers(con, run_id: str) -> dict:
    return {name: run(con, get_query(name), {"run_id": run_id}).table.to_pylist()
            for name in ("length_stats", "run_summary", "finding_cap_hits")}


def test_a_committed_run_equals_the_direct_ingest_and_a_second_commit_is_that_run(tmp_path):
    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(PACKED)
    direct = store.open(tmp_path / "direct.duckdb")
    want = service.ingest_run(direct, [tmp_path / "packed_lengths_step_0.jsonl"])
    staged = service.stage_run(tmp_path / "staging.duckdb", [tmp_path / "packed_lengths_step_0.jsonl"])
    main = store.open(tmp_path / "main.duckdb")
    got = service.commit_staged(main, staging=tmp_path / "staging.duckdb", staged=staged)
    assert (got.run_id, got.rows, got.existing) == (want.run_id, want.rows, False)
    assert _answers(main, got.run_id) == _answers(direct, want.run_id)
    # the kept answers and overview line came over with the rows: nothing is stale
    assert service.refresh_stale(main) == []
    assert main.execute("SELECT count(*), count(DISTINCT ingest_id) FROM ingests").fetchall() == [(1, 1)]
    again = service.commit_staged(main, staging=tmp_path / "staging.duckdb", staged=staged)
    assert (again.run_id, again.existing) == (want.run_id, True)
    assert main.execute("SELECT count(*) FROM runs").fetchall() == [(1,)]
    direct.close()
    main.close()


def test_a_taken_run_id_gets_a_salted_one_and_is_summed_up_under_it(tmp_path):
    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(PACKED)
    staged = service.stage_run(tmp_path / "staging.duckdb", [tmp_path / "packed_lengths_step_0.jsonl"])
    main = store.open(tmp_path / "main.duckdb")
    main.execute("INSERT INTO runs (run_id, name, format, sha256) VALUES (?, 'other', 'hand', 'another digest')",
                 [staged.run_id])
    got = service.commit_staged(main, staging=tmp_path / "staging.duckdb", staged=staged)
    assert got.run_id != staged.run_id and not got.existing and got.rows == {"samples": 5}
    # summed up under its own id: its overview line and answers name it, not the staged id
    assert main.execute("SELECT run_id FROM run_overview").fetchall() == [(got.run_id,)]
    evidence = main.execute("SELECT list(DISTINCT run_id) FROM run_answers").fetchall()[0][0]
    assert evidence == [got.run_id]
    main.close()


def test_a_failed_stage_logs_its_failure_in_the_main_database(tmp_path):
    import pytest

    from polytrace.ingest.contract import IngestError

    (tmp_path / "packed_lengths_step_0.jsonl").write_bytes(b"{not json\n")
    with pytest.raises(IngestError):
        service.stage_run(tmp_path / "staging.duckdb", [tmp_path / "packed_lengths_step_0.jsonl"])
    main = store.open(tmp_path / "main.duckdb")
    service.commit_failure(main, staging=tmp_path / "staging.duckdb")
    assert main.execute("SELECT status, run_id FROM ingests").fetchall() == [("failed", None)]
    service.commit_failure(main, staging=tmp_path / "never-written.duckdb")  # nothing to copy: nothing said
    assert main.execute("SELECT count(*) FROM ingests").fetchall() == [(1,)]
    main.close()
