"""The refresh after a write runs only the stored and finding queries that have something to say of
the run: a query none of whose data inputs (tables, and probed views) holds a row of the run is
kept as its empty answer, unplanned. What it keeps must be what running every query gives, on the
golden cases and on real runs of each kind (a verl log, a PolyTrace log, a Kineto trace, a memory
timeline, an Nsight Systems export)."""
from __future__ import annotations

import json

import pytest

from polytrace import service, store
from polytrace.queries import answers, overview
from polytrace.queries.catalog import (
    CatalogError,
    ParamError,
    get_query,
    load_catalog,
    load_query,
    load_views,
    parse_query,
    parse_view,
)
from polytrace.queries.findings import finding_queries
from polytrace.queries.runner import no_rows, run, run_each
from tests.goldens import case_names, load_case
from tests.test_live import same

NEEDED = {q.name: q for q in [get_query("run_summary"), *finding_queries(), *answers.stored_queries()]}
REAL = {
    "verl log": "verl-logs/qwen3-4b-agent-run-i80f2v90.output.log",
    "PolyTrace log": "polytrace/verl/profile/packed_length_log/20260614_023133",
    "Kineto trace": "kineto/negative_queue_length_values_check/rank0.json.gz",
    "memory timeline": "kineto/memory_analysis/memory_timeline.raw.gz",
}


def every_answer(con, run_id: str) -> dict:
    """Each needed query run on the run, none left out."""
    return {name: run(con, q, {"run_id": run_id}, overview.REFRESH_LIMITS) for name, q in NEEDED.items()}


def assert_same_answers(kept: dict, full: dict) -> None:
    """The same schema (metadata included) and rows; floats up to their last bits, as two runs of
    one query give them (a parallel sum rounds in its own order)."""
    assert kept.keys() == full.keys()
    for name, answer in full.items():
        assert kept[name].table.schema.equals(answer.table.schema, check_metadata=True), name
        assert same(kept[name].rows, answer.rows), name


def test_a_query_s_inputs_are_the_store_tables_it_reads_through_views():
    catalog = load_catalog()
    # through the catalog's views and the store's own (step_timings reads canonical_metrics)
    assert catalog["stage_breakdown"].inputs == {"canonical_metrics"}
    assert catalog["gpu_kernels"].inputs == {"gpu_events", "kernel_names"}
    assert {"runs", "step_metrics", "gpu_step_time"} <= catalog["run_summary"].inputs
    assert all(NEEDED[name].inputs - overview.DESCRIBING for name in NEEDED)


def test_a_probed_view_is_an_input_itself_and_is_asked_only_where_its_tables_hold_the_run():
    catalog = load_catalog()
    # async_logged and staleness_steps read async_metrics; async_pools is probed itself
    assert catalog["async_queue"].inputs == {"async_metrics"}
    assert catalog["finding_stale_waste"].inputs == {"async_metrics", "trajectories"}
    assert catalog["async_idle"].inputs == {"async_pools"}
    quiet, loud = load_case("findings"), load_case("async")
    queries = list(NEEDED.values())
    assert overview.holding(quiet, "r1", queries) == overview.holding(quiet, "r1", [])
    assert "canonical_metrics" in overview.holding(quiet, "r1", [])
    assert {"async_metrics", "async_pools"} <= overview.holding(loud, "r1", queries)
    assert not overview.holding(loud, "r1", [NEEDED["length_histogram"]]) & {"async_metrics", "async_pools"}


def test_probed_takes_yes_only():
    text = "-- view: v\n-- probed: {}\n-- @column x INTEGER fmt=count  X.\nSELECT 1 AS x"
    with pytest.raises(CatalogError, match="probed"):
        parse_view("v", text.format("no"))
    assert parse_view("v", text.format("yes")).probed
    with pytest.raises(CatalogError, match="for a view"):
        parse_query("q", "-- name: q\n-- probed: yes\n-- @column x INTEGER fmt=count  X.\nSELECT 1 AS x")


def test_a_site_s_own_query_is_taken_to_read_everything():
    text = ("-- name: mine\n-- stored: yes\n-- @param run_id VARCHAR  The run.\n"
            "-- @column n BIGINT  Rows.\nSELECT count(*) AS n FROM samples WHERE run_id = $run_id\n")
    mine = load_query("mine", text, load_views(), source="/site/mine.sql", strict=False)
    assert mine.inputs == frozenset()
    assert not overview.silent(mine, set())


def test_run_summary_is_never_silent_and_a_query_with_its_rows_is_not():
    assert not overview.silent(NEEDED["run_summary"], {"runs"})
    assert overview.silent(NEEDED["gpu_kernels"], {"runs", "step_metrics"})
    assert not overview.silent(NEEDED["gpu_kernels"], {"runs", "kernel_names"})


@pytest.fixture(scope="module")
def beside_a_bare_run():
    """Cases whose runs fill every query's tables, each with a run that has only its `runs` row."""
    cons = {case: load_case(case) for case in ("findings", "async", "kineto")}
    for con in cons.values():
        con.execute("INSERT INTO runs (run_id, name) VALUES ('bare', 'bare')")
    yield cons
    for con in cons.values():
        con.close()


@pytest.mark.parametrize("name", sorted(set(NEEDED) - {"run_summary"}))
def test_a_query_whose_tables_lack_the_run_answers_nothing(name, beside_a_bare_run):
    """The rule `silent` rests on."""
    for case, con in beside_a_bare_run.items():
        assert overview.holding(con, "bare", []) == {"runs"}
        assert run(con, NEEDED[name], {"run_id": "bare"}).table.num_rows == 0, case


def test_an_empty_answer_is_typed_as_duckdb_types_it(beside_a_bare_run):
    con = beside_a_bare_run["findings"]
    quiet = [q for q in NEEDED.values() if overview.silent(q, {"runs"})]
    made = no_rows(con, quiet)
    assert set(made) == {q.name for q in quiet} and len(made) == len(NEEDED) - 1
    for q in quiet:
        assert made[q.name].table.schema.equals(run(con, q, {"run_id": "bare"}).table.schema), q.name


@pytest.mark.parametrize("case", case_names())
def test_the_refresh_keeps_what_every_query_answers_on_the_golden_runs(case):
    con = load_case(case)
    for (run_id,) in con.execute("SELECT run_id FROM runs ORDER BY 1").fetchall():
        assert_same_answers(overview.computed(con, run_id), every_answer(con, run_id))


@pytest.mark.parametrize("label", sorted(REAL))
def test_the_refresh_keeps_what_every_query_answers_on_a_real_run(shared_data, tmp_path, label):
    con = store.open(tmp_path / "real.duckdb")
    try:
        run_id = service.ingest_run(con, [shared_data / REAL[label]]).run_ids[0]
        kept = {q: answers.read_kept(con, run_id, q) for q in NEEDED}
        assert_same_answers(kept, every_answer(con, run_id))
        assert overview.stale(con) == []
        printable = {q: answers.read_printable(con, run_id, q) for q in NEEDED}
        # JSON rows for every answer short enough to keep them (all JSON-exact); Arrow for the rest
        short = {q for q, a in kept.items() if a.table.num_rows <= answers.JSON_MAX_ROWS}
        assert {q for q, a in printable.items() if isinstance(a, answers.Rows)} == short
        # bit for bit, NaN included: json.dumps writes each float's repr
        assert [q for q in NEEDED if json.dumps([printable[q].columns, printable[q].rows])
                != json.dumps([kept[q].columns, kept[q].rows])] == []
    finally:
        con.close()


def test_an_nsys_export_refreshes_to_what_every_query_answers(shared_data, tmp_path):
    (export,) = sorted((shared_data / "nsys").rglob("*.sqlite"))[:1]
    con = store.open(tmp_path / "nsys.duckdb")
    try:
        run_id = service.ingest_run(con, [export]).run_ids[0]
        assert {"gpu_events", "kernel_names"} <= overview.holding(con, run_id, [])
        kept = {q: answers.read_kept(con, run_id, q) for q in NEEDED}
        assert_same_answers(kept, every_answer(con, run_id))
    finally:
        con.close()


def test_queries_run_together_answer_as_each_alone():
    con = load_case("findings")
    queries = [q for q in NEEDED.values() if q.name != "run_summary"][:12]
    (run_id,) = con.execute("SELECT min(run_id) FROM runs").fetchall()[0]
    together = run_each(con, queries, {"run_id": run_id})
    assert_same_answers(together, {q.name: run(con, q, {"run_id": run_id}) for q in queries})
    assert run_each(con, [], {"run_id": run_id}) == {}


def test_a_query_that_fails_among_others_fails_them_all():
    con = load_case("findings")
    with pytest.raises(ParamError):
        run_each(con, list(NEEDED.values())[:5], {})
