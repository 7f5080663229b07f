"""The rule of the runner: SQL runs (`.execute(`, `.executemany(`, `.sql(`) only in the store, the
ingest writers and queries/runner.py, plus the places named below, each with why. A new read
elsewhere is a catalog query run through queries.runner (its time limit and row cap)."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRODUCT = ["polytrace", "store", "ingest", "queries", "server", "workload"]
SQL_CALL = re.compile(r"\.(?:execute|executemany|sql)\(")

DOORS = {
    "store/": "the store owns the database: schema, aggregates, runs, lake",
    "ingest/load.py": "ingest writer: a run in one transaction",
    "ingest/restore.py": "ingest writer: a lake restored",
    "ingest/staging.py": "ingest writer: a staged upload committed",
    "ingest/append.py": "ingest writer: a live append",
    "ingest/writes.py": "ingest writer: rows and the ingest log",
    "ingest/lake_ingest.py": "ingest writer: a run into a Parquet lake",
    "ingest/live.py": "ingest writer: a followed file's committed offset, in the append's transaction",
    "ingest/gpu_time.py": "ingest writer: gpu_step_time, derived at load",
    "ingest/formats/": "ingest writers: a format's after_load hook, in the load's transaction",
    "ingest/gpu_trace.py": "ingest writer: the GPU formats' after_load hook, in the load's transaction",
    "queries/runner.py": "the runner",
}
ALLOWED = {
    # Spark is an engine of the runner (queries/runner.py Engine): spark.sql runs the catalog's SQL
    "queries/spark.py": "the runner's Spark engine",
    # sqlglot's Expression.sql() renders SQL text; it runs nothing
    "queries/translate.py": "sqlglot renders text",
    # writes of derived rows (run_overview, run_answers) and their keyed lookups, by the writer
    # that refreshed them; each answer itself came from the runner
    "queries/overview.py": "the refresh's writes and its stale-run lookup",
    "queries/answers.py": "kept answers: written by the refresh, read by key",
    "queries/findings.py": "the kept findings list, read by key",
    # a Perfetto export reads one window of events with an explicit row limit
    "queries/perfetto.py": "an event window with its own LIMIT",
    # simulations read a run's inputs and write their results (workload/whatif.store)
    "workload/": "simulation inputs and results (the use-case layer will take these)",
    # restructured in parallel (issue 36): raw reads of run detail and live status, simulate's inputs
    "server/routers/": "raw server reads, until they become internal catalog queries",
}


def stray_sql() -> list[str]:
    found = []
    for folder in PRODUCT:
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if ".venv" in rel or any(rel.startswith(k) for k in (*DOORS, *ALLOWED)):
                continue
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if SQL_CALL.search(line):
                    found.append(f"{rel}:{n}: {line.strip()}")
    return found


def test_sql_runs_only_through_the_store_the_ingest_writers_and_the_runner():
    assert stray_sql() == []


def test_every_allowlisted_place_still_runs_sql():
    """An entry whose SQL is gone leaves the list."""
    for prefix in ALLOWED:
        paths = [ROOT / prefix] if prefix.endswith(".py") else sorted((ROOT / prefix).rglob("*.py"))
        assert any(SQL_CALL.search(p.read_text()) for p in paths), prefix
