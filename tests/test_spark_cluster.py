"""The cluster tier of the Spark differential tests: `--spark-remote` against a real Spark
standalone cluster on loopback (a master, two workers with one executor each, and a Spark
Connect server attached to the master; tests/spark_cluster.py starts it once per session).

Every catalog query gives the same rows on DuckDB native, DuckDB over the lake and Spark through
Spark Connect, over the edge-case runs of tests/edge_lake.py and over real shared traces; the real
CLI with --spark-remote answers like DuckDB. Marked `spark` and `spark_cluster`: the tests skip
only when Java or pyspark is absent, and POLYTRACE_REQUIRE_SPARK_CLUSTER=1 (set by .ci/run)
turns that skip into a failure.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.compare import row_differences
from polytrace import store
from polytrace.queries.catalog import get_query, load_catalog
from polytrace.queries.runner import Limits
from tests.edge_lake import build_database, build_lake, edge_engines, params_for
from tests.spark_cluster import APP_NAME, FOREIGN_ENV, ClusterUnavailable, SparkCluster, spark_home

pytestmark = [pytest.mark.spark, pytest.mark.spark_cluster]

REQUIRE = os.environ.get("POLYTRACE_REQUIRE_SPARK_CLUSTER") == "1"
# Every query is bounded: past this the runner interrupts it (the edge runs answer in seconds).
LIMITS = Limits(timeout_ms=120_000)
NAMES = sorted(load_catalog())
# Every query once over Connect, on the edge runs in turn: tests/test_spark.py runs each on every
# parameter set in a local session, with the same SQL; what this tier adds is the cluster and Connect.
CASES = [(name, options[i % len(options)]) for i, name in enumerate(NAMES)
         if (options := params_for(get_query(name)))]


@pytest.fixture(scope="session")
def spark_cluster(tmp_path_factory):
    """The cluster, started once and always stopped (every process group, killed if need be)."""
    try:
        home = spark_home()
    except ClusterUnavailable as e:
        if REQUIRE:
            pytest.fail(f"POLYTRACE_REQUIRE_SPARK_CLUSTER=1 but {e}")
        pytest.skip(f"no Spark cluster: {e}")
    # A failed start raises ClusterError with every log's tail: an error, never a skip.
    cluster = SparkCluster(tmp_path_factory.mktemp("spark-cluster"), home=home).start()
    try:
        yield cluster
    finally:
        cluster.stop()
        assert not cluster.left_running, f"still running after stop: {cluster.left_running}"


@pytest.fixture(scope="module")
def remote(spark_cluster):
    """A Spark Connect session opened the way the CLI opens it (polytrace.queries.spark.session)."""
    from polytrace.queries.spark import session

    # pyspark marks the process as a Spark Connect one; a local session in a later module
    # (tests/test_spark.py) must not inherit that
    saved = {k: os.environ.get(k) for k in ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE")}
    s = session(remote=spark_cluster.remote)
    try:
        yield s
    finally:
        s.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.fixture(scope="module")
def edge(remote, tmp_path_factory):
    """The edge-case runs: DuckDB native, its lake, DuckDB over the lake; the lake registered in
    the Spark Connect session."""
    with edge_engines(remote, tmp_path_factory.mktemp("spark-cluster-edge") / "lake") as engines:
        yield engines


def test_cluster_is_a_master_two_workers_and_a_connect_server(spark_cluster, remote):
    state = spark_cluster.status()
    assert state["status"] == "ALIVE" and state["aliveworkers"] == 2
    (app,) = state["activeapps"]
    assert app["name"] == APP_NAME and app["cores"] == 2
    # one executor on each worker: the session's work is spread over two JVMs, not run in the driver
    assert [w["coresused"] for w in state["workers"]] == [1, 1]
    assert remote.conf.get("spark.master") == spark_cluster.master_url
    assert remote.range(0, 1000, 1, 8).selectExpr("sum(id)").collect()[0][0] == 499_500


@pytest.mark.parametrize("name,params", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_catalog_query_is_equal_over_spark_connect(edge, remote, name, params):
    from polytrace.queries.runner import run_bound
    from polytrace.queries.spark import Spark

    native, _, over_lake = edge
    query = get_query(name)
    expected = run_bound(native, query, params, LIMITS)
    on_spark = run_bound(Spark(remote), query, params, LIMITS)
    assert on_spark.columns == expected.columns
    assert row_differences(expected.rows, run_bound(over_lake, query, params, LIMITS).rows) == []
    assert row_differences(expected.rows, on_spark.rows) == []
    # exact percentiles: equal up to the last bit of the interpolation (as in tests/test_spark.py)
    percentiles = [i for i, c in enumerate(expected.columns) if "_p50" in c or "_p9" in c]
    for want, got in zip(expected.rows, on_spark.rows):
        for i in percentiles:
            assert want[i] == got[i] or math.isclose(want[i], got[i], rel_tol=1e-14), expected.columns[i]


def own_session(spark_cluster, lake: Path):
    """A Connect session of its own (a new server-side session, the project's session conf) with
    this lake registered, so that the module's `remote` session keeps the edge lake's views."""
    from pyspark.sql import SparkSession

    from polytrace.queries.spark import SESSION_CONF, register_lake

    own = SparkSession.builder.remote(spark_cluster.remote).create()
    for key, value in SESSION_CONF.items():
        own.conf.set(key, value)
    register_lake(own, lake)
    return own


def assert_run_lists_equal(native, lake: Path, spark) -> list[tuple]:
    """The run-list queries (runs, runs_overview: no parameter) give the same rows on DuckDB
    native, DuckDB over the lake and Spark; returns runs_overview's rows."""
    from polytrace.queries.runner import run_bound
    from polytrace.queries.spark import Spark
    from polytrace.store.lake import open_lake

    over_lake = open_lake(lake)
    try:
        for name in ("runs", "runs_overview"):
            expected, on_lake, on_spark = (run_bound(engine, get_query(name), {}, LIMITS)
                                           for engine in (native, over_lake, Spark(spark)))
            assert on_spark.columns == expected.columns, name
            assert row_differences(expected.rows, on_lake.rows) == [], name
            assert row_differences(expected.rows, on_spark.rows) == [], name
    finally:
        over_lake.close()
    return expected.rows


def test_shared_traces_are_equal_over_spark_connect(spark_cluster, remote, shared_data, tmp_path):
    """A real run (a DAPO packed run with its filter; tests/test_spark.py takes a two-rank Kineto
    trace) gives Spark on the cluster the same rows as DuckDB for every catalog query, its overview
    line included, in a Connect session of their own."""
    from polytrace.ingest.load import ingest_paths
    from polytrace.queries import overview
    from polytrace.queries.catalog import bind
    from polytrace.queries.runner import run_bound
    from polytrace.queries.spark import Spark
    from polytrace.store.lake import export_runs

    native = store.open(tmp_path / "native.duckdb")
    run_ids = [ingest_paths(native, [shared_data / d]).run_id
               for d in ("polytrace/verl/profile/packed_length_log/20260614_023133",)]
    overview.refresh(native, run_ids)  # as `polytrace ingest` does
    export_runs(native, run_ids, tmp_path / "lake")
    own = own_session(spark_cluster, tmp_path / "lake")
    try:
        compared = 0
        for query in load_catalog().values():
            if {p.name for p in query.params if p.required} != {"run_id"}:
                continue
            for run_id in run_ids:
                bound = bind(query, {"run_id": run_id})
                expected = run_bound(native, query, bound, LIMITS).rows
                assert row_differences(expected, run_bound(Spark(own), query, bound, LIMITS).rows) == [], \
                    (query.name, run_id)
                compared += bool(expected)
        lines = assert_run_lists_equal(native, tmp_path / "lake", own)
    finally:
        own.stop()
        native.close()
    assert compared >= 10
    assert sorted(r[0] for r in lines) == sorted(run_ids)


def test_runs_overview_of_the_edge_runs_is_equal_over_spark_connect(spark_cluster, remote, tmp_path):
    """The catalog-wide test reads runs_overview over edge runs without overview lines (every
    figure NULL); here the lines are computed first, as every writer does, and the figures and
    findings counts read alike on DuckDB native, over the lake and on Spark."""
    from polytrace.queries import overview
    from tests.edge_lake import RUNS

    native = build_database()
    try:
        overview.refresh(native, list(RUNS))
        lake = build_lake(native, tmp_path / "lake")
        own = own_session(spark_cluster, lake)
        try:
            lines = assert_run_lists_equal(native, lake, own)
        finally:
            own.stop()
    finally:
        native.close()
    columns = get_query("runs_overview").columns
    figures = [i for i, c in enumerate(columns) if c.fmt]
    assert len(lines) == len(RUNS)
    assert all(any(r[i] is not None for i in figures) for r in lines)


def polytrace_cli() -> list[str]:
    """The installed `polytrace` script next to this interpreter, else `python -m polytrace`."""
    script = Path(sys.executable).with_name("polytrace")
    return [str(script)] if script.is_file() else [sys.executable, "-m", "polytrace"]


def test_cli_spark_remote_answers_like_duckdb(spark_cluster, edge):
    """`polytrace query length_stats --engine spark --lake LAKE --spark-remote sc://...` in a
    process of its own prints DuckDB's rows."""
    from polytrace.queries import render
    from polytrace.queries.runner import run

    native, root, _ = edge
    env = {k: v for k, v in os.environ.items() if k not in FOREIGN_ENV}
    out = subprocess.run([*polytrace_cli(), "query", "length_stats", "--engine", "spark", "--lake", str(root),
                          "--spark-remote", spark_cluster.remote, "-p", "run_id=0001", "--output", "json"],
                         capture_output=True, text=True, timeout=300, env=env, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    answer = run(native, get_query("length_stats"), {"run_id": "0001"})
    expected = json.loads(json.dumps(render.records(answer)))  # as the CLI prints it
    assert len(expected) == 20  # the edge run 0001's 20 steps
    assert [list(r) for r in got] == [list(r) for r in expected]  # the columns, in order
    assert row_differences([tuple(r.values()) for r in expected], [tuple(r.values()) for r in got]) == []
