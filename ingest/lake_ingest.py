"""`polytrace ingest --lake`: each input parsed by the parse executor straight to Parquet, then
published into the lake as one run.

Parsing is the slow part (JSON traces, one file per rank), so it runs in worker processes
(ingest.workers); each writes its Arrow tables to Parquet files in a staging directory inside
the lake. The parent then assembles the run exactly as `ingest` into a database would (run
row, after-load hooks, ingest log, per-step aggregates), in an in-memory DuckDB reading those
files, and publishes its partitions with `export_runs`, so a reader never sees half a run.
"""
from __future__ import annotations

import shutil
from contextlib import closing
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow.parquet as pq

from polytrace import store
from polytrace.ingest import load, workers
from polytrace.ingest.contract import IngestError, Parsed
from polytrace.ingest.parsing import parse_to_parquet
from polytrace.store.lake import export_runs, lake_dataset, lake_tables, staging_dir


def ingest_to_lake(paths: list[Path], lake: Path, *, name: str | None = None,
                   format: str | None = None, force: bool = False, jobs: int | None = None,
                   run_overrides: dict | None = None,
                   before_export: Callable[[duckdb.DuckDBPyConnection, str], None] | None = None,
                   known: list[tuple[str, str | None]] = (), names: dict[Path, str] | None = None,
                   ) -> load.IngestResult:
    """Ingest files (or directories of files, or archives) as one run of the lake at `lake`.

    The same content already in the lake is not ingested twice unless `force`;
    run_overrides fills runs columns the input does not carry, as in `ingest_paths`.
    before_export(con, run_id) may add derived rows to the run before it is published; `known`
    names (run_id, input sha256) of runs published elsewhere (a lake in object storage) that
    dedup and fresh ids must see too; `names` are the names the user knows inputs by, as in
    `ingest_paths`.
    """
    overrides = load.checked_overrides(run_overrides)
    with load.collected(paths, format, names) as files:
        if any(f.format.claims_directory for f in files):
            raise IngestError(None, "a Parquet lake is already a lake: ingest it into a database, "
                                    "or copy its run_id=<id> partitions")
        digest = load.run_digest(files)
        con = store.open(":memory:")
        try:
            _known_runs(con, lake)
            if known:
                con.executemany("INSERT INTO runs (run_id, sha256) VALUES (?, ?)", list(known))
            existing = con.execute("SELECT run_id FROM runs WHERE sha256 = ?", [digest]).fetchone()
            if existing and not force:
                return load.IngestResult(existing[0], "+".join(sorted({f.format.name for f in files})),
                                         {}, existing=True)
            return _ingest_new(con, files, digest, lake, name or load.default_name(paths, names), jobs,
                               overrides, before_export)
        except duckdb.Error as e:
            raise IngestError(None, f"the data was rejected: {str(e).splitlines()[0]}") from None
        finally:
            con.close()


def _ingest_new(con, files: list[load.InputFile], digest: str, lake: Path, name: str,
                jobs: int | None, overrides: dict, before_export) -> load.IngestResult:
    staging = staging_dir(lake, ".ingest-")
    try:
        _parse_to_staging(files, staging, jobs)
        run_id = load.new_run_id(con, digest)
        result = load.write_run(con, run_id, digest, files, name, None, overrides)
        if before_export:
            before_export(con, run_id)
        export_runs(con, [run_id], lake)
        return result
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _known_runs(con, lake: Path) -> None:
    """The lake's run ids and content hashes, so that dedup and fresh ids see them."""
    runs_dir = lake_tables(lake).get("runs") if lake.is_dir() else None
    if runs_dir is None or not any(runs_dir.glob("*/*.parquet")):
        return
    runs = lake_dataset(runs_dir).to_table(
        columns=["run_id", "sha256"])
    with store.registered(con, "_lake_runs", runs):
        con.execute("INSERT INTO runs (run_id, sha256) SELECT run_id, sha256 FROM _lake_runs")


def _parse_to_staging(files: list[load.InputFile], staging: Path, jobs: int | None) -> None:
    calls = [(f.label, (i, f.path, f.format.name, f.label, staging)) for i, f in enumerate(files)]
    n = jobs or workers.jobs()
    with closing(workers.in_order(parse_to_parquet, calls, n, load.parse_cost(files))) as done:
        for f, (tables, run, warnings, deferred, started) in zip(files, done):
            f.parsed = Parsed(tables={t: pq.read_table(p) for t, p in tables.items()}, run=run,
                              warnings=warnings, deferred=deferred)
            f.started = started

