"""The runs overview: each run's line equals what its own pages say, kept current by every writer."""
from __future__ import annotations

import math
import shutil

import duckdb
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.queries import answers, overview
from polytrace.queries.catalog import bind, get_query
from polytrace.queries.findings import compute, findings, stored
from polytrace.queries.runner import run
from polytrace.store.runs import changed, delete_run, row_counts
from tests.goldens import load_case
from tests.test_findings import REAL
from tests.test_live import same


def overview_rows(con) -> dict[str, dict]:
    answer = run(con, get_query("runs_overview"), {})
    return {r[0]: dict(zip(answer.columns, r)) for r in answer.rows}


def assert_line_matches_the_run(con, line: dict) -> None:
    """The line's figures are run_summary's and its counts the findings' (what the pages show)."""
    summary = run(con, get_query("run_summary"), {"run_id": line["run_id"]})
    row = dict(zip(summary.columns, summary.rows[0]))
    for column, source in overview.FROM_SUMMARY.items():
        want, got = row[source], line[column]
        assert want == got or (isinstance(want, float) and math.isclose(want, got, rel_tol=1e-12)), column
    severities = [f["severity"] for f in compute(con, line["run_id"])]
    assert (line["findings_critical"], line["findings_warn"]) == \
        (severities.count("critical"), severities.count("warn"))


def test_every_golden_run_has_its_line_after_a_refresh():
    con = load_case("findings")
    run_ids = [r[0] for r in con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall()]
    assert overview.stale(con) == run_ids
    overview.refresh(con, run_ids)
    assert overview.stale(con) == []
    lines = overview_rows(con)
    assert set(lines) == set(run_ids)
    for line in lines.values():
        assert_line_matches_the_run(con, line)
    # the worst problems first: a critical and two warnings (r4, r5), then a critical and one (r3)
    assert list(lines)[:3] == ["r4", "r5", "r3"]
    assert lines["r4"]["findings_critical"] == 1 and lines["r2"]["findings_warn"] == 0


def test_a_changed_catalog_makes_lines_stale_and_migrate_refreshes_them(tmp_path, capsys):
    db = tmp_path / "o.duckdb"
    load_case("findings", str(db)).close()
    assert main(["migrate", "--db", str(db)]) == 0
    con = store.open(db, "w")
    runs = con.execute("SELECT count(*) FROM runs").fetchall()[0][0]
    con.execute("UPDATE run_overview SET catalog = 'older', findings_warn = 99 WHERE run_id = 'r1'")
    assert overview.stale(con) == ["r1"]
    con.close()
    capsys.readouterr()
    assert main(["migrate", "--db", str(db)]) == 0
    assert f"1 of {runs} runs summed up again" in capsys.readouterr().err
    assert main(["migrate", "--db", str(db)]) == 0
    assert f"all {runs} runs summed up already" in capsys.readouterr().err
    con = store.open(db, "r")
    try:
        assert overview_rows(con)["r1"]["findings_warn"] == 4
    finally:
        con.close()


def test_the_findings_are_stored_as_computed_and_a_partial_list_is_not_read():
    con = load_case("findings")
    assert stored(con, "r4") is None  # no refresh yet: computed as read
    overview.refresh(con, overview.stale(con))
    for run_id in ("r1", "r2", "r3", "r4", "r5", "r6"):
        assert stored(con, run_id) == compute(con, run_id), run_id
    assert [f["kind"] for f in stored(con, "r4")] == ["cap_hits", "dp_imbalance", "rollout_tail",
                                                      "filter_waste", "reward_imbalance", "whatif"]
    assert stored(con, "r2") == []  # silent, and known to be: a whole empty list
    # a list that a write made stale is not read: computed as read, and the next writer keeps it again
    changed(con, "r4")
    assert stored(con, "r4") is None and overview.stale(con) == ["r4"]
    assert [f["kind"] for f in findings(con, "r4")][-1] == "whatif"
    overview.refresh(con, overview.stale(con))
    assert stored(con, "r4") == compute(con, "r4")
    # a list an older catalog kept is not read
    con.execute("UPDATE run_overview SET catalog = 'older' WHERE run_id = 'r3'")
    assert stored(con, "r3") is None and findings(con, "r3") == compute(con, "r3")
    assert "run_answers" not in row_counts(con, "r4")
    assert delete_run(con, "r4")
    assert con.execute("SELECT count(*) FROM run_answers WHERE run_id = 'r4'").fetchall() == [(0,)]


def _as_version(db, version: int, *statements: str) -> list[dict]:
    """A database of the findings goldens, summed up, then marked as schema `version` after
    `statements`; the findings of r4 it kept."""
    con = load_case("findings", str(db))
    overview.refresh(con, overview.stale(con))
    want = stored(con, "r4")
    for statement in statements:
        con.execute(statement)
    if version < 10:  # run_overview.findings came with schema 10
        con.execute("ALTER TABLE run_overview DROP COLUMN findings")
    con.execute("UPDATE store_meta SET value = ? WHERE key = 'schema_version'", [str(version)])
    con.close()
    return want


def _answer_compression(con) -> set[str]:
    con.execute("CHECKPOINT")
    return {r[0] for r in con.execute("SELECT compression FROM pragma_storage_info('run_answers') "
                                      "WHERE column_name = 'answer'").fetchall()}


def test_a_version_3_database_drops_run_findings_and_sums_its_runs_up_again(tmp_path):
    """Schema 3 kept the findings list in a table of its own; schema 4 reads it from the answers,
    which schema 5 keeps uncompressed: the answers go, and the next refresh gives them back."""
    db = tmp_path / "v3.duckdb"
    want = _as_version(db, 3, "CREATE TABLE run_findings (run_id VARCHAR, position INTEGER, kind VARCHAR)")
    con = store.open(db)
    try:
        assert not con.execute("SELECT 1 FROM duckdb_tables() WHERE table_name = 'run_findings'").fetchall()
        assert stored(con, "r4") is None and "r4" in overview.stale(con)
        overview.refresh(con, overview.stale(con))
        assert len(want) == 6 and stored(con, "r4") == want and overview.stale(con) == []
    finally:
        con.close()


def test_a_version_9_database_gains_the_findings_column_and_its_runs_are_summed_up_again(tmp_path, capsys):
    """Schema 10 keeps each run's findings list in its overview line: a line without one is stale."""
    db = tmp_path / "v9.duckdb"
    want = _as_version(db, 9)
    assert main(["migrate", "--db", str(db)]) == 0
    assert "8 of 8 runs summed up again" in capsys.readouterr().err
    with store.open(db, "r") as con:
        assert stored(con, "r4") == want and len(want) == 6
        assert con.execute("SELECT count(*) FROM run_overview WHERE findings IS NULL").fetchall() == [(0,)]


def test_a_version_10_database_keeps_its_answers_json_rows_once_summed_up_again(tmp_path, capsys):
    """Schema 11 keeps each answer's rows as JSON beside its Arrow stream, for the CLI."""
    db = tmp_path / "v10.duckdb"
    want = _as_version(db, 10, "CREATE TABLE answers_v10 AS SELECT run_id, query, catalog, answer FROM run_answers",
                       "DROP TABLE run_answers", "ALTER TABLE answers_v10 RENAME TO run_answers")
    assert main(["migrate", "--db", str(db)]) == 0
    assert "8 of 8 runs summed up again" in capsys.readouterr().err
    with store.open(db, "r") as con:
        assert stored(con, "r4") == want
        assert con.execute("SELECT count(*) = count(rows_json), count(*) > 0 FROM run_answers").fetchall() == \
            [(True, True)]


def test_a_version_4_database_keeps_its_answers_uncompressed_once_summed_up_again(tmp_path, capsys):
    """Read from a compressed column (ZSTD for answers of some size), one answer cost the
    decompression of all the answers stored beside it."""
    db = tmp_path / "v4.duckdb"
    want = _as_version(db, 4, "CREATE TABLE answers_v4 AS SELECT run_id, query, catalog, answer FROM run_answers",
                       "DROP TABLE run_answers", "ALTER TABLE answers_v4 RENAME TO run_answers")
    with duckdb.connect(str(db)) as con:
        assert "Uncompressed" not in _answer_compression(con)  # DuckDB chose (ZSTD, FSST) before
    assert main(["migrate", "--db", str(db)]) == 0
    assert "8 of 8 runs summed up again" in capsys.readouterr().err
    with store.open(db) as con:
        assert _answer_compression(con) == {"Uncompressed", "Constant"}  # Constant: the validity mask
        assert stored(con, "r4") == want


def test_the_line_is_no_ingested_row_and_goes_with_its_run(tmp_path):
    con = load_case("findings")
    overview.refresh(con, ["r4"])
    assert "run_overview" not in row_counts(con, "r4")
    assert delete_run(con, "r4")
    assert con.execute("SELECT count(*) FROM run_overview WHERE run_id = 'r4'").fetchall() == [(0,)]


@pytest.mark.shared_data
def test_every_shared_run_line_equals_its_pages(shared_data, tmp_path, capsys):
    db, lake = tmp_path / "real.duckdb", tmp_path / "lake"
    for path, facts, _ in REAL.values():
        args = ["ingest", str(shared_data / path), "--db", str(db)]
        if "max_response_len" in facts:
            args += ["--max-response-len", str(facts["max_response_len"])]
        assert main(args) == 0
    dapo = REAL["DAPO"][0]
    assert main(["ingest", str(shared_data / dapo), "--lake", str(lake)]) == 0
    capsys.readouterr()
    con = store.open(db, "r")
    try:
        lines = overview_rows(con)
        assert len(lines) == len(REAL)
        for line in lines.values():
            assert_line_matches_the_run(con, line)
            for q in answers.stored_queries():  # each kept answer is the query's own, up to the
                # last bit of a sum that DuckDB's threads add in another order each time
                kept = answers.read(con, q, bind(q, {"run_id": line["run_id"]}))
                assert same(kept.rows, run(con, q, {"run_id": line["run_id"]}).rows), (line["name"], q.name)
        by_name = {line["name"]: line for line in lines.values()}
        collapsing = by_name["qwen3-4b-agent-run-i80f2v90.output.log"]
        assert collapsing["findings_critical"] == 1 and list(lines)[0] == collapsing["run_id"]
    finally:
        con.close()
    # the lake carries the same line for the run it holds
    from polytrace.store.lake import open_lake

    over_lake = open_lake(lake)
    try:
        (line,) = overview_rows(over_lake).values()
        assert (line["samples"], line["findings_warn"]) == (4608, 2)
    finally:
        over_lake.close()
    shutil.rmtree(lake)


def test_migrate_refuses_a_path_without_a_database(tmp_path, capsys):
    missing = tmp_path / "typo.duckdb"
    assert main(["migrate", "--db", str(missing)]) != 0
    assert f"no database at {missing}" in capsys.readouterr().err
    assert not missing.exists()
