"""The REST contract: every catalog query answers over REST exactly as the CLI does, in JSON, CSV
and Parquet, and schemathesis finds no 5xx anywhere in /openapi.json. The per-query comparison goes
through the app in-process (its lifecycle is not what it tests), on one representative run per
query; one comparison goes through a real uvicorn and a real `polytrace` process."""
from __future__ import annotations

import contextlib
import csv
import datetime as dt
import decimal
import io
import json
import math
import shutil
import subprocess
import sys

import httpx
import pyarrow.parquet as pq
import pytest
from starlette.testclient import TestClient

from polytrace import service, store
from polytrace.cli import main as cli_main
from polytrace.ingest import registry
from polytrace.ingest.load import ingest_paths
from polytrace.queries import overview
from polytrace.queries.catalog import load_catalog
from polytrace.server.app import create_app
from polytrace.settings import Settings
from tests.conftest import FIXTURES, SHARED_DATA, LiveServer, skip_for_data

# One run per kind of input, so that every query has a run it has rows for.
RUN_INPUTS = {
    "dapo": ["polytrace/verl/profile/packed_length_log/20260614_023133"],
    "rllm": ["polytrace/rllm/profile/packed_length_log/20260616_024512"],
    "search_r1": ["polytrace/search_r1/profile/multiturn_workload_log/0617_0223/multiturn_workload_step_0.jsonl"],
    "verl_log": ["verl-logs/qwen3-4b-agent-run-ry3hgbx5.output.log"],
    "verl_collapse": ["verl-logs/qwen3-4b-agent-run-i80f2v90.output.log"],
    "kineto": ["kineto/trace_filter/sampled_rank-0.json.gz"],
}
# Inputs for what the shared runs never show (a step-time spike, memory in annotated ranges), beside every format's
# own sample (ingest/formats/*.py), which covers the formats the shared data lacks.
FIXTURE_INPUTS = {"verl_spikes": FIXTURES / "verl" / "spikes.log",
                  "kineto_memory": FIXTURES / "kineto" / "cpu_memory_rank0.json.gz"}
# The async golden runs (tests/fixtures/golden/async, derived in its README) as the files verl writes:
# its file logger's metrics and, for r1, its rollout dump; each with the run facts it is given.
ASYNC_GOLDEN = FIXTURES / "golden" / "async"
ASYNC_RUNS = {"async_per_sample": ("r1", {"trainer_gpus": 4, "rollout_gpus": 4, "max_staleness": 2}),
              "async_logged": ("r2", {}), "async_past_bound": ("r3", {"max_staleness": 1}),
              "async_on_policy": ("r4", {}), "sync_slow_weight_sync": ("r5", {})}
# What r2 adds to r1's logged keys, so that a logged run has a queue and stale drops (running totals).
ASYNC_LOGGED_EXTRA = {2: {"fully_async/monitor/queue/mq_queue_size": 3.0, "fully_async/count/dropped_stale_samples": 1.0,
                          "fully_async/count/total_generated_samples": 4.0},
                      3: {"fully_async/monitor/queue/mq_queue_size": 5.0, "fully_async/count/dropped_stale_samples": 1.0,
                          "fully_async/count/total_generated_samples": 6.0}}
# Values for required parameters that are not run ids.
EXAMPLE_PARAMS = {"key": "timing_s/gen"}
QUERIES = sorted(load_catalog())
# Queries over tables that only `polytrace simulate --store` fills, never an ingest; the setup
# simulates the verl log (a per-step fit) so that whatif_async has rows, and these may have none.
NO_ROWS_FROM_INGEST = {"whatif", "whatif_savings", "finding_whatif"}


def _ingest_all(db) -> dict[str, str]:
    """Ingest the shared runs, the fixtures and every format's sample, one run each."""
    con = store.open(db)
    runs = {}
    try:
        for label, paths in RUN_INPUTS.items():
            runs[label] = ingest_paths(con, [SHARED_DATA / p for p in paths]).run_id
        for label, path in FIXTURE_INPUTS.items():
            runs[label] = ingest_paths(con, [path]).run_id
        for label, (golden, facts) in ASYNC_RUNS.items():
            paths = _async_files(db.parent / "async" / label, golden)
            runs[label] = ingest_paths(con, paths, run_overrides=facts).run_id
        for fmt in registry.FORMATS:
            folder = db.parent / "samples" / fmt.name
            sample = fmt.sample()
            for name, data in sample.files.items():
                (folder / name).parent.mkdir(parents=True, exist_ok=True)
                (folder / name).write_bytes(data)
            result = ingest_paths(con, [folder / a for a in sample.args], force=True)
            runs[f"sample:{fmt.name}"] = result.run_id
        # the async what-if is stored only by a simulation: one of the shared verl log, fitted to it
        service.simulate_run(con, runs["verl_log"], calibration="log")
        overview.refresh(con, overview.stale(con))  # as every writer does (the server at start)
    finally:
        con.close()
    return runs


def _async_files(folder, golden: str) -> list:
    """The golden async run `golden` written as verl's file logger and rollout dump would."""
    folder.mkdir(parents=True)
    steps: dict[int, dict] = {}
    with (ASYNC_GOLDEN / "step_metrics.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["run_id"] == golden:
                steps.setdefault(int(r["step"]), {})[r["key"]] = float(r["value"])
    if golden == "r2":
        for step, extra in ASYNC_LOGGED_EXTRA.items():
            steps[step].update(extra)
    metrics = folder / "metrics.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "data": d}) + "\n" for s, d in sorted(steps.items())))
    dumps: dict[str, list[str]] = {}
    with (ASYNC_GOLDEN / "trajectories.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["run_id"] == golden and r["status"] == "accepted":  # a dump holds what was trained on
                dumps.setdefault(r["step"], []).append(json.dumps(
                    {"input": r["trajectory_id"], "output": "x" * int(r["tokens"]), "score": 1.0,
                     "step": int(r["consume_version"]) + 1, "min_global_steps": int(r["start_version"]),
                     "max_global_steps": int(r["end_version"])}) + "\n")
    for step, lines in dumps.items():
        (folder / f"{step}.jsonl").write_text("".join(lines))
    return [metrics, *(folder / f"{step}.jsonl" for step in dumps)]


def params_for(name: str, run_id: str) -> dict[str, str]:
    params = {}
    for p in load_catalog()[name].params:
        if p.type == "VARCHAR" and "run" in p.name:
            params[p.name] = run_id
        elif p.required:
            if p.name not in EXAMPLE_PARAMS:
                pytest.fail(f"query {name!r} needs {p.name!r}: add an example to EXAMPLE_PARAMS")
            params[p.name] = EXAMPLE_PARAMS[p.name]
    return params


def cli_json(db, name: str, params: dict[str, str]) -> list[dict]:
    out = io.StringIO()
    argv = ["query", name, "--db", str(db), "--output", "json"]
    for k, v in params.items():
        argv += ["-p", f"{k}={v}"]
    with contextlib.redirect_stdout(out):
        assert cli_main(argv) == 0
    return json.loads(out.getvalue())


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The app in-process on a database of real runs, plus a copy of that database for the CLI."""
    if not SHARED_DATA.is_dir():
        skip_for_data()
    root = tmp_path_factory.mktemp("contract")
    runs = _ingest_all(root / "server.duckdb")
    for copy in ("cli", "live"):  # the server holds the file's lock
        shutil.copy(root / "server.duckdb", root / f"{copy}.duckdb")
    with TestClient(create_app(Settings(db=str(root / "server.duckdb"))), base_url="http://127.0.0.1") as app:
        yield app, runs, root / "cli.duckdb"


def assert_rest_equals_cli(client, base: str, name: str, params: dict[str, str], expected: list[dict]):
    """The query's answer in JSON, CSV and Parquet from `client` (an httpx or test client) is `expected`."""
    url = f"{base}/api/queries/{name}"
    body = client.get(url, params=params).json()
    assert body["ok"] is True and body["truncated"] is False, (params, body)
    got = [dict(zip(body["columns"], r)) for r in body["rows"]]
    assert same_rows(expected, got), (params, "json", expected[:3], got[:3])

    text = client.get(url, params={**params, "format": "csv"}).text
    header, *cells = list(csv.reader(io.StringIO(text)))
    assert header == body["columns"]
    got = [{c: from_csv_cell(v, e[c]) for c, v in zip(header, row)} for row, e in zip(cells, expected)]
    assert len(cells) == len(expected) and same_rows(expected, got), (params, "csv")

    blob = client.get(url, params=params, headers={"Accept": "application/vnd.apache.parquet"}).content
    table = pq.read_table(io.BytesIO(blob))
    assert table.column_names == body["columns"]
    got = [{k: from_parquet(v) for k, v in r.items()} for r in table.to_pylist()]
    assert same_rows(expected, got), (params, "parquet")


def same(a, b) -> bool:
    """Equal, with non-finite floats as null and float sums allowed their last bits."""
    a, b = (None if isinstance(x, float) and not math.isfinite(x) else x for x in (a, b))
    if isinstance(a, float) or isinstance(b, float):
        return a is not None and b is not None and math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    return a == b


def same_rows(expected: list[dict], got: list[dict]) -> bool:
    return len(expected) == len(got) and all(
        e.keys() == g.keys() and all(same(e[k], g[k]) for k in e) for e, g in zip(expected, got))


def from_csv_cell(cell: str, like):
    """A CSV cell read back as the type the CLI's JSON has at that place."""
    if cell == "":
        return None
    if isinstance(like, bool):
        return cell == "True"
    if isinstance(like, int):
        return int(cell)
    if isinstance(like, float):
        return float(cell)
    if isinstance(like, str) and "T" in like and cell == like.replace("T", " ", 1):
        return like  # a timestamp: CSV writes str(datetime), JSON its isoformat
    if isinstance(like, (list, dict)):
        return like if cell == str(like) or cell else cell
    return cell


def from_parquet(value):
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return float(value)
    return value


def test_there_are_runs_and_queries_to_compare(served):
    _, runs, cli_db = served
    assert {"dapo", "rllm", "search_r1"} <= set(runs)
    assert {"length_stats", "runs"} <= set(QUERIES)
    # the in-process CLI the comparisons below call prints what `python -m polytrace` prints
    out = subprocess.run([sys.executable, "-m", "polytrace", "query", "length_stats", "--db", str(cli_db),
                          "-p", f"run_id={runs['dapo']}", "--output", "json"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == cli_json(cli_db, "length_stats", {"run_id": runs["dapo"]})
    assert len(json.loads(out.stdout)) == 6  # the DAPO run's 6 steps
    # and a real uvicorn on the same runs answers what that process printed, in every format
    with LiveServer(Settings(db=str(cli_db.parent / "live.duckdb"))) as srv, httpx.Client(timeout=60) as client:
        assert_rest_equals_cli(client, srv.url, "length_stats", {"run_id": runs["dapo"]},
                               json.loads(out.stdout))


def representative(app, name: str, runs: dict[str, str]) -> str:
    """The run whose answer to `name` has the most rows (the first of equals): one run per query
    stands for all, so that the comparison is one CLI call and three requests."""
    counts = {run_id: len(app.get(f"/api/queries/{name}", params=params_for(name, run_id)).json()["rows"])
              for run_id in runs.values()}
    return max(counts, key=counts.get)


@pytest.mark.parametrize("name", QUERIES)
def test_catalog_query_over_rest_equals_the_cli(served, name):
    app, runs, cli_db = served
    takes_run = any("run" in p.name for p in load_catalog()[name].params)
    params = params_for(name, representative(app, name, runs) if takes_run else "")
    expected = cli_json(cli_db, name, params)
    assert_rest_equals_cli(app, "", name, params, expected)
    if name == "runs":
        assert len(expected) == len(runs)
    elif name not in NO_ROWS_FROM_INGEST:
        assert expected, f"no run gives {name} any rows: the comparison proves nothing"


DISPLAY_CASES = ({"_x_from": 0}, {"_x_to": 0}, {"_points": 10}, {"_x_from": -5, "_x_to": 10**9, "_points": 10},
                 {"_x_from": 3, "_x_to": 3}, {"_points": 1})


@pytest.mark.parametrize("name", QUERIES)
def test_every_display_parameter_of_every_query_answers_200_or_422(served, name):
    app, runs, _ = served
    takes_run = any("run" in p.name for p in load_catalog()[name].params)
    params = params_for(name, representative(app, name, runs) if takes_run else "")
    for shown in DISPLAY_CASES:
        answer = app.get(f"/api/queries/{name}", params={**params, **shown})
        body = answer.json()
        assert answer.status_code in (200, 422), (shown, body)
        if answer.status_code == 422:  # a window over an axis of labels, or too few points: said
            said = "must be between 10 and" if shown == {"_points": 1} else "holds labels, not steps"
            assert set(body) == {"ok", "error", "status"} and said in body["error"], body
        elif shown == {"_points": 1}:
            pytest.fail(f"_points=1 answered {answer.status_code}")
        else:
            assert body["ok"] is True and "x_bounds" in body, (shown, body)


def test_openapi_operations_are_named_and_documented(served):
    app, _, _ = served
    spec = app.get("/openapi.json").json()
    ids = {op["operationId"] for path in spec["paths"].values() for op in path.values()}
    assert {"health", "list_runs", "get_run", "upload_run", "delete_run", "list_queries",
            "run_query"} <= ids
    assert {f"query_{name}" for name in QUERIES} <= ids
    length_stats = spec["paths"]["/api/queries/length_stats"]["get"]
    run_id = next(p for p in length_stats["parameters"] if p["name"] == "run_id")
    assert run_id["required"] is True and run_id["schema"]["type"] == "string"
    docs = app.get("/docs")
    assert docs.status_code == 200 and "/openapi.json" in docs.text
    assert "http://" not in docs.text and "https://" not in docs.text  # air-gapped users: no CDN
    for asset in ("swagger-ui-bundle.js", "swagger-ui.css"):
        assert f"/docs-static/{asset}" in docs.text
        assert app.get(f"/docs-static/{asset}").status_code == 200


def test_schemathesis_finds_no_server_errors(make_server, shared_data):
    schemathesis = pytest.importorskip("schemathesis")
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    srv = make_server(token="t")
    step0 = shared_data / RUN_INPUTS["dapo"][0] / "packed_lengths_step_0.jsonl"
    assert httpx.post(f"{srv.url}/api/runs", files={"file": (step0.name, step0.read_bytes())},
                      headers={"Authorization": "Bearer t"}).status_code == 201
    schema = schemathesis.openapi.from_url(f"{srv.url}/openapi.json")
    failures, calls = [], 0
    for operation in schema.get_all_operations():
        op = operation.ok()
        for mode in schemathesis.GenerationMode:
            @settings(max_examples=12, deadline=None, database=None,
                      suppress_health_check=list(HealthCheck))
            @given(case=op.as_strategy(generation_mode=mode))
            def call(case):
                nonlocal calls
                response = case.call(headers={"Authorization": "Bearer t"}, timeout=30)
                calls += 1
                if response.status_code >= 500:
                    failures.append(f"{op.label} -> {response.status_code}: {case.as_curl_command()}")

            try:
                call()
            except Unsatisfiable:
                assert mode is schemathesis.GenerationMode.NEGATIVE  # nothing in it can be invalid
    assert calls > 100
    assert failures == []
