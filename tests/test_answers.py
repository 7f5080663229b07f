"""Stored answers: every writer keeps the answer of each `stored: yes` query per run; a reader gets
what the query computes (up to the last bit of a float sum, whose order DuckDB's threads vary),
and never an answer from before the run's last change."""
from __future__ import annotations

import json
import math
from importlib import resources

import pyarrow as pa
import pytest

from polytrace import store
from polytrace.cli import main
from polytrace.ingest.live import Chunk
from polytrace.ingest.load import append_chunk
from polytrace.queries import answers, overview
from polytrace.queries.catalog import (
    CatalogError,
    bind,
    catalog_texts,
    digest,
    digest_of,
    get_query,
    lint,
    load_query,
    load_views,
    parse_query,
)
from polytrace.queries.findings import finding_queries
from polytrace.store.runs import changed
from polytrace.queries.runner import Answer, Limits, run
from polytrace.server.db import Database
from polytrace.store.runs import delete_run
from polytrace.workload.whatif import store as store_whatif
from tests.goldens import load_case
from tests.test_live import same

RUNS = ("r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8")


def kept(con, run_id: str, name: str, **params) -> Answer | None:
    q = get_query(name)
    return answers.read(con, q, bind(q, {"run_id": run_id, **params}))


def kept_count(con, run_id: str) -> int:
    return con.execute("SELECT count(*) FROM run_answers WHERE run_id = ?", [run_id]).fetchall()[0][0]


def test_the_heavy_dashboard_queries_and_every_finding_are_stored():
    names = {q.name for q in answers.stored_queries()}
    assert {"run_summary", "step_budget"} <= names
    assert {q.name for q in finding_queries()} <= names


def test_each_stored_answer_is_what_its_query_computes():
    con = load_case("findings")
    assert kept(con, "r4", "run_summary") is None  # nothing kept before a writer's refresh
    overview.refresh(con, list(RUNS))
    for run_id in RUNS:
        for q in answers.stored_queries():
            want = run(con, q, {"run_id": run_id})
            got = kept(con, run_id, q.name)
            assert got is not None, (run_id, q.name)
            assert got.table.schema == want.table.schema, (run_id, q.name)
            assert same(got.rows, want.rows), (run_id, q.name)
    # the golden r4 has findings to keep and r2 none: an empty answer is an answer too
    assert kept(con, "r4", "finding_dp_imbalance").table.num_rows == 1
    assert kept(con, "r2", "finding_dp_imbalance").table.num_rows == 0


def test_only_the_defaults_of_the_current_catalog_are_read_and_a_row_cap_still_holds():
    con = load_case("findings")
    overview.refresh(con, ["r4"])
    full = kept(con, "r4", "step_budget")
    assert full.table.num_rows == 2 and not full.truncated  # r4's two steps
    assert kept(con, "r4", "step_budget", include_total="true") is None  # not the defaults: computed
    q = get_query("step_budget")
    capped = answers.read(con, q, bind(q, {"run_id": "r4"}), row_cap=1)
    assert capped.table.num_rows == 1 and capped.truncated
    assert capped.rows == full.rows[:1]
    assert answers.read(con, get_query("runs_overview"), {}) is None  # not a stored query
    con.execute("UPDATE run_answers SET catalog = 'older' WHERE run_id = 'r4' AND query = 'run_summary'")
    assert kept(con, "r4", "run_summary") is None


def test_an_answer_is_kept_as_json_rows_when_json_gives_each_value_back():
    nan = float("nan")
    exact = Answer(pa.table({"step": pa.array([1, 2], pa.int32()), "x": [0.1, nan], "tag": ["a", None],
                             "ok": [True, False], "steps": pa.array([[1, 2], []], pa.list_(pa.int32()))}), False)
    assert answers.json_rows(exact) == ('{"columns": ["step", "x", "tag", "ok", "steps"], '
                                        '"rows": [[1, 0.1, "a", true, [1, 2]], [2, NaN, null, false, []]]}')
    assert math.isnan(json.loads(answers.json_rows(exact))["rows"][1][1])
    when = Answer(pa.table({"at": pa.array([0], pa.timestamp("us")), "x": [1.5]}), False)
    assert answers.json_rows(when) is None  # a timestamp would come back as text
    assert answers.json_rows(Answer(pa.table({"d": pa.array([1], pa.decimal128(5, 2))}), False)) is None
    long = Answer(pa.table({"x": list(range(answers.JSON_MAX_ROWS + 1))}), False)
    assert answers.json_rows(long) is None and answers.json_rows(Answer(long.table.slice(1), False))


def test_the_cli_reads_the_json_rows_and_arrow_where_there_are_none():
    con = load_case("findings")
    overview.refresh(con, ["r4"])
    full = answers.read_printable(con, "r4", "step_budget")
    assert isinstance(full, answers.Rows) and not full.truncated
    assert full.rows == kept(con, "r4", "step_budget").rows and full.columns == kept(con, "r4", "step_budget").columns
    capped = answers.read_printable(con, "r4", "step_budget", row_cap=1)
    assert capped.rows == full.rows[:1] and capped.truncated
    con.execute("UPDATE run_answers SET rows_json = NULL WHERE run_id = 'r4' AND query = 'step_budget'")
    arrow = answers.read_printable(con, "r4", "step_budget")
    assert isinstance(arrow, Answer) and arrow.rows == full.rows
    assert answers.read_printable(con, "r3", "step_budget") is None  # r3 not summed up


def test_a_stored_query_takes_a_run_and_defaults_for_the_rest():
    head = "-- name: q\n-- stored: yes\n"
    ok = parse_query("q", head + "-- @param run_id VARCHAR  Run.\nSELECT $run_id AS x")
    assert ok.stored and not parse_query("q", "-- name: q\nSELECT 1 AS x").stored
    with pytest.raises(CatalogError, match="takes yes"):
        parse_query("q", "-- name: q\n-- stored: maybe\nSELECT 1 AS x")

    for text, problem in [("SELECT 1 AS x", "takes run_id"),
                          ("-- @param run_id VARCHAR  Run.\n-- @param k INTEGER  K.\nSELECT $run_id AS x, $k AS k",
                           "k needs a default")]:
        with pytest.raises(CatalogError, match=problem):
            lint(parse_query("q", head + text), load_views(), strict=False)


def test_which_queries_are_stored_is_part_of_the_catalog_digest():
    """A run summed up before a query was stored lacks its answer: the new digest makes its line
    stale, so the next writer keeps the answer."""
    texts = catalog_texts(None)
    assert digest_of(texts) == digest()
    flipped = [(name, text.replace("-- stored: yes\n", "") if name == "metric_keys.sql" else text)
               for name, text in texts]
    assert flipped != texts
    assert digest_of(flipped) != digest()


def test_the_catalog_digest_follows_the_views_and_not_where_the_package_lies():
    texts = catalog_texts(None)
    assert {name for name, _ in texts} >= {"run_summary.sql", "views/rank_clocks.sql"}
    assert not any("/" in name.removeprefix("views/") for name, _ in texts)
    changed = [(name, text + "\n" if name == "views/rank_clocks.sql" else text) for name, text in texts]
    assert digest_of(changed) != digest()


def test_a_findings_query_is_stored():
    """The findings list is collected from the finding queries' kept answers: one without any
    would leave the list never whole."""
    text = resources.files("polytrace.queries").joinpath("finding_rollout_tail.sql").read_text()
    assert load_query("finding_rollout_tail", text, load_views()).stored
    with pytest.raises(CatalogError, match=r"a Findings query is stored \(-- stored: yes\)"):
        load_query("finding_rollout_tail", text.replace("-- stored: yes\n", ""), load_views())


LOG = b"step:0 - timing_s/step:10.0 - response_length/mean:100\nstep:1 - timing_s/step:12.0 - response_length/mean:120\n"


def test_a_write_that_changes_the_run_drops_its_answers_in_its_transaction():
    con = load_case("findings")
    append_chunk(con, "live", Chunk("output.log", 0, LOG, format="verl-console"), name="live")
    overview.refresh(con, ["live", "r4"])
    assert same(kept(con, "live", "run_summary").rows, run(con, get_query("run_summary"), {"run_id": "live"}).rows)
    before = kept_count(con, "live")
    assert before == len(answers.stored_queries())
    # an append with no whole line changes nothing, and keeps the answers
    append_chunk(con, "live", Chunk("output.log", len(LOG), b"step:2 - timing_s/st"))
    assert kept_count(con, "live") == before
    append_chunk(con, "live", Chunk("output.log", len(LOG), b"step:2 - timing_s/step:30.0\n"))
    assert kept_count(con, "live") == 0 and kept_count(con, "r4") == before
    overview.refresh(con, ["live"])
    summary = kept(con, "live", "run_summary")
    assert same(summary.rows, run(con, get_query("run_summary"), {"run_id": "live"}).rows)
    assert dict(zip(summary.columns, summary.rows[0]))["steps"] == 3
    # a simulation's stored what-if rows change the what-if finding and the budget
    store_whatif(con, "r4", [], "test")
    assert kept_count(con, "r4") == 0
    overview.refresh(con, ["r4"])
    assert delete_run(con, "r4") and kept_count(con, "r4") == 0


def test_the_server_answers_from_the_kept_answer_until_the_run_changes(tmp_path):
    path = tmp_path / "a.duckdb"
    load_case("findings", str(path)).close()
    db = Database(str(path))
    try:
        q = get_query("run_summary")
        bound = bind(q, {"run_id": "r4"})
        computed = db.query(q, bound, Limits())
        db.write(lambda con: overview.refresh(con, ["r4"]))
        assert same(db.query(q, bound, Limits()).rows, computed.rows)
        # what the server gives is what run_answers holds: a marked answer comes back as it is
        marked = Answer(pa.table({"marked": [1]}), False)
        db.write(lambda con: con.execute("UPDATE run_answers SET answer = ? WHERE run_id = 'r4' "
                                         "AND query = 'run_summary'", [answers.encode(marked)]))
        assert db.query(q, bound, Limits()).rows == [(1,)]
        assert db.query(q, bind(q, {"run_id": "r3"}), Limits()).rows != [(1,)]
        # the what-if rows of another calibration go: run_summary's what-if columns with them
        db.write(lambda con: store_whatif(con, "r4", [], "test"), ["r4"])
        now = db.read(lambda cur: run(cur, q, bound).rows, 10_000, "run_summary")
        assert not same(now, computed.rows) and same(db.query(q, bound, Limits()).rows, now)
    finally:
        db.close()


def test_a_run_without_answers_is_stale_and_the_next_writer_stores_them(tmp_path):
    """A database summed up before answers were stored, or a run whose last change was never
    summed up (a server killed between an append and its refresh), gets them from `migrate` or
    the server's start."""
    db = tmp_path / "s.duckdb"
    con = load_case("findings", str(db))
    overview.refresh(con, list(RUNS))
    assert overview.stale(con) == []
    changed(con, "r3")  # what a write that changes the run does in its transaction
    assert kept_count(con, "r3") == 0 and overview.stale(con) == ["r3"]
    con.close()
    assert main(["migrate", "--db", str(db)]) == 0
    con = store.open(db, "r")
    try:
        assert kept_count(con, "r3") == len(answers.stored_queries())
    finally:
        con.close()
