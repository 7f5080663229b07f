"""The query catalog: every file loads through catalog.lint (the header contract and the SQL
habits, checked at load), the lint refuses what it should in one line, declared columns are
what DuckDB returns, and shared views are inlined as CTEs."""
from __future__ import annotations

import duckdb
import pytest

from polytrace.queries.catalog import (
    CHART_KINDS,
    SECTIONS,
    CatalogError,
    bind,
    compose,
    load_catalog,
    load_query,
    load_views,
    parse_view,
    table_references,
    uncast_sums,
    unguarded_divisions,
    views_needed,
)
from polytrace.queries.catalog import lint_view as lint_one_view
from polytrace.store.aggregates import aggregates
from polytrace.store.migrate import ensure as ensure_schema
from tests.goldens import case_names, load_case

SAMPLE_VALUES = {"VARCHAR": "x", "INTEGER": "0", "BIGINT": "0", "DOUBLE": "0", "BOOLEAN": "false"}
QUERIES = list(load_catalog().values())
IDS = [q.name for q in QUERIES]
VIEWS = load_views()


def sample_params(query) -> dict:
    """run_id r1 (the golden cases' run), a typed placeholder for any other required param."""
    values = {p.name: "r1" if p.name == "run_id" else SAMPLE_VALUES.get(p.type, "x")
              for p in query.params if p.required}
    return bind(query, values)


@pytest.fixture(scope="module")
def databases():
    empty = duckdb.connect()
    ensure_schema(empty)
    cons = {"empty": empty, **{case: load_case(case) for case in case_names()}}
    yield cons
    for con in cons.values():
        con.close()


def test_there_are_queries_and_every_view_is_read():
    assert {"length_stats", "length_histogram", "rollout_tail", "dp_imbalance", "reward_imbalance",
            "multiturn", "filter_waste", "run_summary", "runs"} <= set(IDS)
    assert set().union(*(q.views for q in QUERIES)) == set(VIEWS)


def test_sections_and_chart_kinds_are_declared_once():
    assert SECTIONS[0] == "Runs" and SECTIONS[-1] == "Other"
    assert {q.section for q in QUERIES} <= set(SECTIONS)
    assert {q.chart["kind"] for q in QUERIES} <= set(CHART_KINDS)


@pytest.mark.parametrize("query", QUERIES, ids=IDS)
def test_columns_match_what_the_query_returns(query, databases):
    declared = [(c.name, c.type) for c in query.columns]
    for db, con in databases.items():
        described = con.execute(query.sql, sample_params(query)).description
        assert [(d[0], str(d[1])) for d in described] == declared, db


@pytest.mark.parametrize("view", VIEWS.values(), ids=list(VIEWS))
def test_view_columns_match_what_the_view_returns(view, databases):
    sql, _ = compose(f"SELECT * FROM {view.name}", VIEWS)
    declared = [(c.name, c.type) for c in view.columns]
    for db, con in databases.items():
        described = con.execute(sql, {"run_id": "r1"}).description
        assert [(d[0], str(d[1])) for d in described] == declared, db


# ---- composition ------------------------------------------------------------------------------

def test_a_view_is_inlined_after_the_views_it_reads():
    tail = load_catalog()["rollout_tail"]
    assert tail.views == ("rollout_steps", "rollout_engines")
    assert tail.sql.startswith("WITH rollout_steps AS (\nSELECT")
    assert tail.sql.index("rollout_steps AS (") < tail.sql.index("rollout_engines AS (") < tail.sql.index(
        tail.text)
    # The file's own text is kept as written, for the query page.
    assert tail.text.startswith("SELECT") and "rollout_steps" not in tail.text
    assert load_catalog()["rollout_tail"] is tail  # composed once, when the catalog loads


def test_views_go_before_a_query_s_own_ctes():
    whatif = load_catalog()["whatif"]
    assert whatif.text.startswith("WITH job AS (")
    # whatif_job reads run_ranks, which therefore comes first
    assert whatif.sql.startswith("WITH run_ranks AS (")
    assert whatif.sql.index("run_ranks AS (") < whatif.sql.index("whatif_job AS (")
    assert whatif.sql.index("whatif_policies AS (") < whatif.sql.index("job AS (\n    -- the gpus")


def test_run_summary_reads_the_views_instead_of_reimplementing_them():
    summary = load_catalog()["run_summary"]
    assert {"rollout_steps", "dp_steps", "reward_steps", "verl_steps", "gpu_shares", "whatif_policies",
            "whatif_job"} <= set(summary.views)
    for raw in ("step_rank_lengths", "gpu_step_time", "run_ranks", "global_seqlen", "timing_s/agent_loop",
                "JOIN whatif ", "FROM whatif "):
        assert raw not in summary.text, raw


def test_table_references():
    sql = ("WITH a AS (SELECT 1) SELECT * FROM t1 x, t2 AS y, t3 JOIN t4 ON TRUE LEFT JOIN t5 USING (k) "
           "WHERE k IN (SELECT k FROM t6) -- FROM not_this\n AND 'FROM nor_this' <> ''")
    assert table_references(sql) == {"t1", "t2", "t3", "t4", "t5", "t6"}


def test_a_cycle_of_views_is_a_catalog_error():
    a = parse_view("va", "-- view: va\n-- @column x INTEGER fmt=count  X.\nSELECT x FROM vb")
    b = parse_view("vb", "-- view: vb\n-- @column x INTEGER fmt=count  X.\nSELECT x FROM va")
    with pytest.raises(CatalogError, match=r"^queries/views/va\.sql: views read each other in a cycle: "
                                           r"va -> vb -> va$"):
        views_needed("SELECT * FROM va", {"va": a, "vb": b})


# ---- the lint, one rule at a time ------------------------------------------------------------

GOOD = """-- name: probe
-- title: Lint probe
-- section: Rollout tail
-- Test fixture: the rollout steps of a run, broken one way at a time by the cases below.
-- @param run_id VARCHAR  Run to analyse.
-- @column step INTEGER fmt=count  Training step.
-- @column engines BIGINT fmt=count  Rollout engines.
-- @chart line x=step y=engines xlabel="step" ylabel="engines" title="Engines"
SELECT step, engines FROM rollout_steps ORDER BY step
"""


def probe(text: str, strict: bool = True):
    return load_query("probe", text, VIEWS, strict=strict)


def test_the_probe_itself_is_fine():
    query = probe(GOOD)
    assert query.views == ("rollout_steps",) and query.used_params == {"run_id"}


BROKEN = [
    (GOOD.replace("@param run_id VARCHAR  Run to analyse.", "@param run_id"),
     "`@param run_id`: expected `@param NAME TYPE [= DEFAULT] [>= N]  description`"),
    (GOOD.replace("@param run_id VARCHAR  Run", "@param run_id VARCHAR >= 1  Run"),
     "@param run_id: `>= N` needs an integer type and an integer N"),
    (GOOD.replace("@param run_id VARCHAR  Run", "@param run_id TEXT  Run"),
     "@param run_id: type TEXT is not one of VARCHAR, INTEGER, BIGINT, DOUBLE, BOOLEAN"),
    (GOOD.replace("@column step INTEGER fmt=count  Training step.", "@column step"),
     "`@column step`: expected `@column NAME TYPE [fmt=KIND]  description`"),
    (GOOD.replace("-- @chart", "-- @charts"),
     "unknown header line `@charts` (use @param, @column or @chart)"),
    (GOOD.replace("-- name: probe", "-- name: other"), "declares name 'other'"),
    (GOOD.replace("ORDER BY step", "WHERE step < $step_to ORDER BY step"),
     "$step_to is used but not declared with @param"),
    (GOOD.replace("-- @column step", "-- @param top INTEGER = 3  Unused.\n-- @column step"),
     "@param top is declared but the SQL never uses $top"),
    (GOOD.replace("step, engines FROM", "step, engines / slowest AS engines FROM"),
     "divide only by NULLIF(x, 0) or a non-zero literal: SELECT step, engines / slowest AS engines"),
    (GOOD.replace("step, engines FROM", "step, sum(engines) OVER () AS engines FROM"),
     "cast every sum(...) (::BIGINT or ::DOUBLE): sum(engines) OVER () AS engines FROM"),
    (GOOD.replace("SELECT step", "WITH rollout_steps AS (SELECT 1 AS step, 2 AS engines) SELECT step"),
     "its CTE 'rollout_steps' shadows the view queries/views/rollout_steps.sql; rename the CTE"),
    (GOOD.replace("section: Rollout tail", "section: Rollouts"), "section 'Rollouts' is not one of Runs, "),
    (GOOD.replace("@chart line", "@chart pie"), "@chart kind 'pie' is not one of line, band, "),
    (GOOD.replace("y=engines", "y=engine"), "@chart names 'engine', which is no @column"),
    (GOOD.replace("fmt=count  Rollout", "fmt=percent  Rollout"),
     "column engines: fmt=percent is not one of "),
    (GOOD.replace("BIGINT fmt=count  Rollout", "BIGINT  Rollout"),
     "@column engines BIGINT: tag it with fmt=KIND (pct, pct100, x, s, ms, us, tokens, bytes, count, gpu_h)"),
    (GOOD.replace("-- title: Lint probe\n", ""), "no `-- title:` line"),
    (GOOD.replace('-- @chart line x=step y=engines xlabel="step" ylabel="engines" title="Engines"\n', ""),
     "no @chart (use `@chart table` for a table)"),
]


@pytest.mark.parametrize("text,problem", BROKEN, ids=[p[:40] for _, p in BROKEN])
def test_lint_names_the_file_and_the_problem_in_one_line(text, problem):
    with pytest.raises(CatalogError) as e:
        probe(text)
    message = str(e.value)
    assert message.startswith(f"queries/probe.sql: {problem}"), message
    assert "\n" not in message


NOT_A_QUERY = ["SET threads = 1", "PRAGMA version", "COMMIT", "BEGIN TRANSACTION", "ATTACH 'x.db' AS x",
               "DETACH x", "COPY runs TO 'x.csv'", "INSTALL httpfs", "LOAD httpfs", "EXPORT DATABASE 'x'",
               "IMPORT DATABASE 'x'", "CALL pragma_version()", "CREATE TABLE t AS SELECT 1",
               "INSERT INTO runs (run_id) VALUES ('x')", "UPDATE runs SET name = 'x'", "DELETE FROM runs",
               "DROP TABLE runs", "ALTER TABLE runs ADD COLUMN x INTEGER", "FROM runs", "VALUES (1)"]
HEAD = "-- @column n BIGINT  Rows.\n"


@pytest.mark.parametrize("sql", NOT_A_QUERY, ids=[s.split()[0] for s in NOT_A_QUERY])
def test_an_extra_query_is_one_select_or_with(sql):
    keyword = sql.split()[0].upper()
    problem = rf"^x/extra\.sql: must be one SELECT or WITH query, not {keyword}$"
    with pytest.raises(CatalogError, match=problem):
        load_query("extra", HEAD + sql, VIEWS, source="x/extra.sql", strict=False)


@pytest.mark.parametrize("sql,problem", [
    ("SELECT 1 AS n; DROP TABLE runs", "holds 2 SQL statements; a query is exactly one SELECT"),
    ("WITH x AS (SELECT 1 AS n) DELETE FROM runs", "must be one SELECT or WITH query, not WITH ... DELETE"),
    ("", "holds no SQL statement"),
])
def test_an_extra_query_holds_exactly_one_statement(sql, problem):
    with pytest.raises(CatalogError, match=rf"^x/extra\.sql: {problem}$"):
        load_query("extra", HEAD + sql, VIEWS, source="x/extra.sql", strict=False)


def test_an_extra_query_may_leave_numbers_untagged_the_bundled_catalog_may_not():
    sql = HEAD + "SELECT count(*) AS n FROM runs WHERE name <> ';'"
    assert load_query("extra", sql, VIEWS, strict=False).columns[0].fmt is None
    with pytest.raises(CatalogError, match="tag it with fmt=KIND"):
        load_query("extra", sql, VIEWS)


def test_fmt_is_for_numbers():
    problem = r"@column name: fmt=count on a VARCHAR column \(fmt is for numbers\)"
    with pytest.raises(CatalogError, match=problem):
        load_query("extra", "-- @column name VARCHAR fmt=count  Run name.\nSELECT name FROM runs", VIEWS,
                   strict=False)


VIEW = """-- view: probe_view
-- Test fixture: the engines of each step of a run, broken one way at a time.
-- @column step INTEGER fmt=count  Training step.
SELECT step FROM step_rank_lengths WHERE run_id = $run_id
"""


@pytest.mark.parametrize("text,problem", [
    (VIEW.replace("$run_id", "$run_id AND step > $step_from"), "a view reads only $run_id, not $step_from"),
    (VIEW.replace("SELECT step FROM", "WITH s AS (SELECT 1) SELECT step FROM"),
     "a view is one SELECT (no WITH: it becomes a CTE itself; read other views instead)"),
    (VIEW.replace(" fmt=count", ""), "@column step INTEGER: tag it with fmt=KIND"),
    (VIEW.replace("SELECT step", "SELECT step / n AS step"), "divide only by NULLIF(x, 0)"),
])
def test_view_lint(text, problem):
    with pytest.raises(CatalogError) as e:
        lint_one_view(parse_view("probe_view", text), VIEWS)
    assert str(e.value).startswith(f"queries/views/probe_view.sql: {problem}"), str(e.value)


def test_a_view_may_not_shadow_a_canonical_table():
    view = parse_view("samples", VIEW.replace("probe_view", "samples"))
    with pytest.raises(CatalogError, match="would shadow the canonical table of that name"):
        lint_one_view(view, VIEWS, tables={"samples", "runs"})
    with pytest.raises(CatalogError, match=r"^queries/views/x\.sql: the header must say `-- view: x`$"):
        parse_view("x", VIEW)


def test_lints_catch_what_they_should():
    assert len(unguarded_divisions("SELECT a / b, c / NULLIF(d, 0), e / 2.0, 'x/y' -- p/q")) == 1
    assert unguarded_divisions("SELECT a / 0") != []
    assert unguarded_divisions("SELECT a // NULLIF(b, 0), c // 2") == []
    assert unguarded_divisions("SELECT a // b") != []
    assert uncast_sums("SELECT sum(a) FROM t") != []
    assert uncast_sums("SELECT sum(a) FILTER (WHERE b)::BIGINT, CAST(sum(c) AS DOUBLE),"
                       " sum(d) OVER (PARTITION BY e)::DOUBLE, count(*) FROM t") == []


@pytest.mark.parametrize("aggregate", aggregates(), ids=[a.name for a in aggregates()])
def test_aggregates_keep_the_same_sql_habits(aggregate):
    assert unguarded_divisions(aggregate.select) == []
    assert uncast_sums(aggregate.select) == []
