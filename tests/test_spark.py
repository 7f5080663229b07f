"""DuckDB -> Spark translation: one test per rewrite rule, the catalog lint, and differential
runs of every catalog query (views inlined, as it runs) on DuckDB native, DuckDB over the lake
and Spark. No Spark text is kept by hand: the rows are the contract.

Spark tests are marked `spark` and share one local[2] session; they skip only when pyspark or
a Java runtime is absent.
"""
from __future__ import annotations

import math
import re
import shutil

import pytest

sqlglot = pytest.importorskip("sqlglot")

from bench.compare import row_differences
from polytrace import store
from polytrace.queries import translate
from polytrace.queries.catalog import get_query, load_catalog
from tests.edge_lake import edge_engines, params_for

NAMES = sorted(load_catalog())


# --- catalog lint ---------------------------------------------------------------------------
# Unguarded division and uncast sums are linted by catalog.lint when the catalog loads.

@pytest.mark.parametrize("name", NAMES)
def test_catalog_uses_only_translatable_constructs(name):
    assert translate.unsupported(get_query(name).sql) == []


def test_canonical_views_use_only_translatable_constructs():
    """Spark builds step_timings and the other views from schema.sql's text too."""
    from polytrace.store.lake import canonical_schema

    views = canonical_schema()[1]
    assert views
    assert {name: translate.unsupported(translate.view_body(sql)) for name, sql in views.items()} == \
        {name: [] for name in views}


@pytest.mark.parametrize("sql,problem", [
    ("SELECT approx_quantile(x, 0.5) FROM t", "approx_quantile"),
    ("SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x DESC) FROM t", "WITHIN GROUP"),
    ("SELECT quantile_disc(x, [0.5, 0.9]) FROM t", "list of fractions"),
    ("SELECT string_agg(x, ',' ORDER BY y) FROM t", "ORDER BY inside"),
    ("SELECT epoch_ms(ts) FROM t", "epoch_ms"),
    # both engines have hash(), with other values: a name sqlglot passes through is not trusted
    ("SELECT hash(a) FROM t", "hash"),
    ("SELECT histogram(x) FROM t", "histogram"),
])
def test_lint_reports_what_no_rule_handles(sql, problem):
    problems = translate.unsupported(sql)
    assert len(problems) == 1 and problem in problems[0], problems


# --- one test per rewrite rule: the Spark text (no JVM) -----------------------------------------

def spark_of(sql: str) -> str:
    """to_spark on one line, without the pretty-printer's spaces inside parentheses."""
    one_line = " ".join(translate.to_spark(sql).split())
    return re.sub(r"\s+\)", ")", re.sub(r"\(\s+", "(", one_line))


def test_rule_exact_percentile():
    assert spark_of("SELECT quantile_cont(x, 0.9) FROM t") == "SELECT PERCENTILE(x, 0.9) FROM t"
    assert spark_of("SELECT median(x) FROM t") == "SELECT PERCENTILE(x, 0.5) FROM t"
    assert "APPROX" not in spark_of("SELECT quantile_cont(x, 0.5) FILTER (WHERE x > 0) FROM t")


def test_rule_within_group_percentile():
    assert spark_of("SELECT percentile_cont(0.25) WITHIN GROUP (ORDER BY x) FROM t") == \
        "SELECT PERCENTILE(x, 0.25) FROM t"
    assert spark_of("SELECT percentile_disc(0.25) WITHIN GROUP (ORDER BY x) FROM t") == \
        "SELECT PERCENTILE_DISC(0.25) WITHIN GROUP (ORDER BY x NULLS LAST) FROM t"


def test_rule_discrete_quantile():
    expected = "SELECT PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY x NULLS LAST) FROM t"
    assert spark_of("SELECT quantile(x, 0.5) FROM t") == expected
    assert spark_of("SELECT quantile_disc(x, 0.5) FROM t") == expected


def test_rule_ordered_list():
    out = spark_of("SELECT list(x ORDER BY y DESC) FROM t")
    assert out.startswith("SELECT TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT(y AS k0, x AS v)), (l, r) ->")
    assert "WHEN l.k0 < r.k0 THEN 1 WHEN l.k0 > r.k0 THEN -1" in out  # descending
    assert out.endswith("s -> s.v) FROM t")


def test_rule_ordered_first_keeps_its_filter_on_the_aggregate():
    out = spark_of("SELECT first(x ORDER BY y, z) FILTER (WHERE z > 0) FROM t")
    assert out.startswith("SELECT GET(TRANSFORM(ARRAY_SORT(COLLECT_LIST(STRUCT(y AS k0, z AS k1, x AS v)) "
                          "FILTER(WHERE z > 0),")
    assert out.endswith("s -> s.v), 0) FROM t")


def test_rule_epoch_us():
    assert spark_of("SELECT epoch_us(ts) FROM t") == "SELECT UNIX_MICROS(ts) FROM t"


def test_rule_hugeint():
    assert spark_of("SELECT x::HUGEINT FROM t") == "SELECT CAST(x AS DECIMAL(38, 0)) FROM t"


def test_rule_raise_error():
    assert spark_of("SELECT error('bad') FROM t") == "SELECT RAISE_ERROR('bad') FROM t"


def test_rule_ordered_row_number():
    assert spark_of("SELECT row_number() OVER () FROM t") == \
        "SELECT ROW_NUMBER() OVER (ORDER BY MONOTONICALLY_INCREASING_ID() NULLS LAST) FROM t"
    assert spark_of("SELECT row_number() OVER (ORDER BY x) FROM t") == \
        "SELECT ROW_NUMBER() OVER (ORDER BY x NULLS LAST) FROM t"


def test_rule_cast_inside_unnest():
    assert spark_of("SELECT unnest(range(0, 3))::INTEGER AS b") == \
        "SELECT EXPLODE(CAST(SEQUENCE(0, 2) AS ARRAY<INT>)) AS b"


def test_rule_nan_correlation():
    assert spark_of("SELECT corr(x, y) FILTER (WHERE g = 1) FROM t") == (
        "SELECT COALESCE(CORR(x, y) FILTER(WHERE g = 1), CASE WHEN COUNT(CASE WHEN NOT x IS NULL "
        "AND NOT y IS NULL THEN 1 END) FILTER(WHERE g = 1) > 0 THEN CAST('NaN' AS DOUBLE) END) FROM t")


def test_parameters_stay_bound():
    assert spark_of("SELECT * FROM t WHERE run_id = $run_id AND ($rank IS NULL OR rank = $rank)") == \
        "SELECT * FROM t WHERE run_id = :run_id AND (:rank IS NULL OR rank = :rank)"


# --- Spark: one shared local[2] session -------------------------------------------------------

@pytest.fixture(scope="module")
def spark():
    pytest.importorskip("pyspark")
    if not shutil.which("java"):
        pytest.skip("no Java runtime")
    from polytrace.queries.spark import session

    s = session(master="local[2]")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def engines(spark, tmp_path_factory):
    with edge_engines(spark, tmp_path_factory.mktemp("spark") / "lake") as (native, _, over_lake):
        yield native, over_lake, spark


# (DuckDB SQL over t(g, x, y, ts), expected rows) for every rule: the hand-derived answer
# must come out of DuckDB and of Spark running the translation.
RULE_TABLE = ("SELECT * FROM (VALUES (1, 1.0, 3, TIMESTAMP '1970-01-01 00:00:01'), "
              "(1, 2.0, 1, TIMESTAMP '1970-01-01 00:00:02'), (1, 4.0, 2, NULL), "
              "(1, 10.0, NULL, NULL), (2, 5.0, 1, NULL)) AS t(g, x, y, ts)")
RULE_CASES = [
    # group 1 sorted: 1, 2, 4, 10; position 0.9 * 3 = 2.7 -> 4 + 0.7 * 6 = 8.2
    ("exact_percentile", "SELECT g, quantile_cont(x, 0.9) FROM t GROUP BY g ORDER BY g",
     [(1, 8.2), (2, 5.0)]),
    # median of 1, 2, 4, 10 is (2 + 4) / 2
    ("exact_percentile", "SELECT median(x) FROM t WHERE g = 1", [(3.0,)]),
    ("within_group_percentile",
     "SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY x) FROM t WHERE g = 1", [(3.0,)]),
    # discrete: an element of the group, not an interpolation (0.5 of 4 values -> the 2nd, 2.0)
    ("discrete_quantile", ("SELECT quantile_disc(x, 0.5), quantile(x, 0.5), quantile_disc(x, 0.9) "
                           "FROM t WHERE g = 1"), [(2.0, 2.0, 10.0)]),
    # ordered by y with its NULL last: y = 1, 2, 3, NULL -> x = 2, 4, 1, 10
    ("ordered_list", "SELECT list(x ORDER BY y) FROM t WHERE g = 1", [([2.0, 4.0, 1.0, 10.0],)]),
    ("ordered_list", "SELECT list(x ORDER BY y DESC) FROM t WHERE g = 1", [([1.0, 4.0, 2.0, 10.0],)]),
    # x of the largest y per group; the FILTER keeps only x < 4 (g = 2 has none left)
    ("ordered_first", ("SELECT g, first(x ORDER BY y DESC) FILTER (WHERE x < 4) FROM t "
                       "GROUP BY g ORDER BY g"), [(1, 1.0), (2, None)]),
    ("epoch_us", "SELECT epoch_us(ts) FROM t WHERE ts IS NOT NULL ORDER BY 1",
     [(1_000_000,), (2_000_000,)]),
    ("hugeint", "SELECT sum(y)::HUGEINT * 2 FROM t", [(14,)]),
    ("raise_error", "SELECT CASE WHEN count(*) = 5 THEN 'five' ELSE error('not five') END FROM t",
     [("five",)]),
    ("ordered_row_number", "SELECT max(n) FROM (SELECT row_number() OVER () AS n FROM t)", [(5,)]),
    # g = 1 pairs (1, 3), (2, 1), (4, 2): deviations x (-4/3, -1/3, 5/3), y (1, -1, 0), so
    # corr = -1 / sqrt(42/9 * 2) = -0.3273268...; g = 2 has one pair, no variance: NaN;
    # the FILTER leaves no pair: NULL
    ("nan_correlation", ("SELECT g, corr(x, y), corr(x, y) FILTER (WHERE x > 100) FROM t "
                         "GROUP BY g ORDER BY g"), [(1, -1 / (42 / 9 * 2) ** 0.5, None), (2, float("nan"), None)]),
    ("cast_inside_unnest", "SELECT unnest(range(1, 4))::INTEGER AS b ORDER BY b", [(1,), (2,), (3,)]),
]


@pytest.mark.spark
@pytest.mark.parametrize("rule,sql,expected", RULE_CASES, ids=[f"{r}-{i}" for i, (r, _, _) in
                                                               enumerate(RULE_CASES)])
def test_rule_gives_duckdb_answer_on_spark(spark, rule, sql, expected):
    import duckdb

    assert getattr(translate, rule) in translate.RULES
    con = duckdb.connect()
    con.execute(f"CREATE VIEW t AS {RULE_TABLE}")
    assert row_differences(expected, con.execute(sql).fetchall()) == []
    spark.sql(translate.to_spark(RULE_TABLE)).createOrReplaceTempView("t")
    got = [tuple(r) for r in spark.sql(translate.to_spark(sql)).collect()]
    assert row_differences(expected, got) == []


CASES = [(name, params) for name in NAMES for params in params_for(get_query(name))]


@pytest.mark.spark
@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_catalog_query_is_equal_on_three_engines(engines, name, params):
    from polytrace.queries.catalog import get_query
    from polytrace.queries.runner import run_bound
    from polytrace.queries.spark import Spark

    native, over_lake, spark = engines
    query = get_query(name)
    expected = run_bound(native, query, params)
    on_spark = run_bound(Spark(spark), query, params)
    assert on_spark.columns == expected.columns
    assert row_differences(expected.rows, run_bound(over_lake, query, params).rows) == []
    assert row_differences(expected.rows, on_spark.rows) == []
    # Exact percentiles, not percentile_approx: equal up to the last bit of the interpolation
    # (DuckDB computes lo + (hi - lo) * f, Spark may round differently: 771.25 vs 771.2499999999999).
    percentiles = [i for i, c in enumerate(expected.columns) if "_p50" in c or "_p9" in c]
    for want, got in zip(expected.rows, on_spark.rows):
        for i in percentiles:
            assert want[i] == got[i] or math.isclose(want[i], got[i], rel_tol=1e-14), expected.columns[i]


@pytest.mark.spark
def test_shared_traces_are_equal_on_spark(spark, shared_data, tmp_path):
    """A real run (a two-rank Kineto trace; tests/test_spark_cluster.py takes a DAPO packed run with
    its filter) gives Spark the same rows as DuckDB for every catalog query, in a session of its own."""
    from polytrace.ingest.load import ingest_paths
    from polytrace.queries.catalog import bind
    from polytrace.queries.runner import run_bound
    from polytrace.queries.spark import SESSION_CONF, Spark, register_lake
    from polytrace.store.lake import export_runs

    native = store.open(tmp_path / "native.duckdb")
    run_ids = [ingest_paths(native, [shared_data / d]).run_id
               for d in ("kineto/trace_filter",)]
    export_runs(native, run_ids, tmp_path / "lake")
    own = spark.newSession()
    for key, value in SESSION_CONF.items():
        own.conf.set(key, value)
    register_lake(own, tmp_path / "lake")
    compared = 0
    for query in load_catalog().values():
        if {p.name for p in query.params if p.required} != {"run_id"}:
            continue
        for run_id in run_ids:
            bound = bind(query, {"run_id": run_id})
            expected = run_bound(native, query, bound).rows
            assert row_differences(expected, run_bound(Spark(own), query, bound).rows) == [], query.name
            compared += bool(expected)
    assert compared >= 10
