"""Ingest inserts parsed data in bounded flushes inside one transaction: memory stays small, the run stays all or nothing."""
from __future__ import annotations

import os

import pytest

from polytrace import store
from polytrace.ingest import load, registry, workers
from polytrace.ingest.contract import IngestError
from polytrace.ingest.load import ingest_paths
from polytrace.store.runs import data_tables
from tests.ingest_settings import set_ingest_env

LINE = '{{"step": {step}, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3]}}\n'


def counts(con) -> dict:
    return {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchall()[0][0] for t in data_tables(con)}


@pytest.fixture
def flush_every_file(monkeypatch):
    """Flush after every file, so that a late failure has earlier files' rows to roll back."""
    monkeypatch.setattr(load, "FLUSH_BYTES", 0)


def steps(tmp_path, n: int) -> list:
    paths = []
    for step in range(n):
        p = tmp_path / f"packed_lengths_step_{step}.jsonl"
        p.write_text(LINE.format(step=step))
        paths.append(p)
    return paths


def test_flushed_files_make_one_run(con, tmp_path, flush_every_file):
    # 3 files x 1 prompt x 2 outputs = 6 samples, flushed in 3 inserts
    result = ingest_paths(con, steps(tmp_path, 3))
    assert result.rows == {"samples": 6}
    assert con.execute("SELECT count(DISTINCT step) FROM step_lengths WHERE run_id = ?",
                       [result.run_id]).fetchall() == [(3,)]


def assert_late_failure_changes_nothing(con, tmp_path) -> None:
    before = counts(con)
    bad = tmp_path / "packed_lengths_step_9.jsonl"
    bad.write_text('{"step": 9, "input": -1, "output": [1]}\n')
    with pytest.raises(IngestError, match="packed_lengths_step_9.jsonl"):
        ingest_paths(con, [*steps(tmp_path, 3), bad])
    assert counts(con) == before
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]
    assert con.execute("SELECT count(*) FROM ingests WHERE status = 'failed'").fetchall() == [(4,)]


def test_a_late_parse_failure_rolls_back_flushed_files(con, tmp_path, flush_every_file):
    assert_late_failure_changes_nothing(con, tmp_path)


def test_a_late_filter_failure_rolls_back_flushed_files(con, tmp_path, flush_every_file):
    # the filter names step 5, which no packed file has: refused after every sample was inserted
    flt = tmp_path / "dapo_filter_indices.jsonl"
    flt.write_text('{"workload_step": 5, "prompt_count": 1, "kept_prompt_indices": [0], '
                   '"used_prompt_indices": [0]}\n')
    with pytest.raises(IngestError, match="no packed lengths"):
        ingest_paths(con, [*steps(tmp_path, 2), flt])
    assert counts(con) == {t: 0 for t in counts(con)}
    assert con.execute("SELECT count(*) FROM runs").fetchall() == [(0,)]


@pytest.fixture
def parse_in_workers(monkeypatch):
    """Fork two parse workers even for tiny inputs."""
    monkeypatch.setattr(load, "PARALLEL_MIN_BYTES", 0)
    set_ingest_env(monkeypatch, "POLYTRACE_PARSE_JOBS", "2")


def table_rows(con, run_id: str) -> dict:
    return {t: con.execute(f'SELECT * EXCLUDE (run_id) FROM "{t}" WHERE run_id = ? ORDER BY ALL',
                           [run_id]).fetchall() for t in data_tables(con)}


def test_worker_processes_parse_what_one_process_parses(tmp_path, parse_in_workers, monkeypatch):
    paths = steps(tmp_path, 5)
    with load.collected(paths) as inputs:
        assert load.parse_jobs(inputs) == 2
    parallel = store.open(tmp_path / "parallel.duckdb")
    in_workers = ingest_paths(parallel, paths)
    set_ingest_env(monkeypatch, "POLYTRACE_PARSE_JOBS", "1")
    with load.collected(paths) as inputs:
        assert load.parse_jobs(inputs) == 1
    serial = store.open(tmp_path / "serial.duckdb")
    in_process = ingest_paths(serial, paths)
    assert in_workers.rows == in_process.rows == {"samples": 10}
    assert table_rows(parallel, in_workers.run_id) == table_rows(serial, in_process.run_id)
    assert parallel.execute("SELECT count(*) FROM ingests WHERE status = 'ok'").fetchall() == [(5,)]


def test_a_parse_failure_in_a_worker_leaves_the_tables_unchanged(con, tmp_path, parse_in_workers):
    assert_late_failure_changes_nothing(con, tmp_path)


def test_parse_jobs_must_be_a_number(monkeypatch):
    """Checked where the settings are read (a front end), before any ingest starts."""
    monkeypatch.setenv("POLYTRACE_PARSE_JOBS", "many")
    from polytrace.ingest.options import IngestOptions
    from polytrace.settings import Settings, SettingsError

    with pytest.raises(SettingsError, match="setting POLYTRACE_PARSE_JOBS: not an integer: 'many'"):
        IngestOptions.of(Settings())


def test_a_parse_worker_imports_every_format_but_not_duckdb():
    """What the forkserver preloads (workers.PRELOAD) is every worker's start-up; neither DuckDB nor
    pydantic (0.15 s) is needed."""
    import subprocess
    import sys

    from polytrace.ingest import registry, workers

    code = (f"import sys; import {', '.join(workers.PRELOAD)}; "
            f"print(*(m in sys.modules for m in {[f.parse.__module__ for f in registry.FORMATS]!r}), "
            "'duckdb' in sys.modules, 'pydantic' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True"] * len(registry.FORMATS) + ["False", "False"]


def test_parse_workers_that_cannot_start_are_said_and_the_caller_parses_alone(tmp_path):
    """multiprocessing puts the forkserver's socket under TMPDIR; past the socket path limit the
    workers cannot start. The calls still all run, in the caller, and the log says why. In a fresh
    process: multiprocessing keeps the temp dir it first chose for the life of a process. The calls
    sleep a second each so that the feeder, which fails at once, reports before the caller is done."""
    import os
    import subprocess
    import sys

    deep = tmp_path / ("t" * 100)
    deep.mkdir()
    script = ("import logging, time\n"
              "logging.basicConfig()\n"
              "from polytrace.ingest import options, workers\n"
              "calls = [(name, (1,)) for name in 'abc']\n"
              "with options.applied(options.IngestOptions(parse_jobs=2)):\n"
              "    print(list(workers.in_order(time.sleep, calls, 2)))\n")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(deep)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[None, None, None]"
    assert "parse workers did not start (AF_UNIX path too long): parsing in one process" in out.stderr


def test_the_executor_weighs_each_input_by_its_format_s_parse_cost(tmp_path, monkeypatch):
    """A Kineto byte costs 2.5 NDJSON bytes (its critical paths): that is what in_order hears."""
    heard = []

    def listening(fn, calls, n, cost=None):
        heard.append(cost)
        return real(fn, calls, n, cost)

    real = workers.in_order
    monkeypatch.setattr(workers, "in_order", listening)
    jsonl = steps(tmp_path, 2)
    trace = tmp_path / "rank0.json"
    trace.write_bytes(registry.get("kineto").sample().files["rank0.json"])
    ingest_paths(store.open(tmp_path / "w.duckdb"), [*jsonl, trace])
    ndjson = sum(p.stat().st_size for p in jsonl)
    assert heard == [ndjson + 2.5 * trace.stat().st_size]


def test_below_the_cost_threshold_the_caller_parses_every_input_itself():
    calls = [(str(i), ()) for i in range(4)]
    assert set(workers.in_order(os.getpid, calls, 2, cost=workers.WORKERS_MIN_BYTES - 1)) == {os.getpid()}
