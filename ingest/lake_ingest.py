"""`polytrace ingest --lake`: each input file parsed by its own process straight to Parquet, then
published into the lake as one run.

Parsing is the slow part (JSON traces, one file per rank), so it runs in a process pool;
each worker writes its Arrow tables to Parquet files in a staging directory inside the lake.
The parent then assembles the run exactly as `ingest` into a database would (run row,
sample filters, ingest log, per-step aggregates), in an in-memory DuckDB reading those files,
and publishes its partitions with `export_runs`, so a reader never sees half a run.
"""
from __future__ import annotations

import multiprocessing
import shutil
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from polytrace import store
from polytrace.ingest import load
from polytrace.ingest.contract import IngestError, Parsed
from polytrace.store.lake import export_runs, lake_dataset, lake_tables, staging_dir


def ingest_to_lake(paths: list[Path], lake: Path, *, name: str | None = None,
                   format: str | None = None, force: bool = False, jobs: int | None = None,
                   run_overrides: dict | None = None) -> load.IngestResult:
    """Ingest files (or directories of files) as one run of the lake at `lake`.

    The same content already in the lake is not ingested twice unless `force`;
    run_overrides fills runs columns the input does not carry, as in `ingest_paths`.
    """
    overrides = load.checked_overrides(run_overrides)
    files = load.collect(paths, format)
    if any(f.format.claims_directory for f in files):
        raise IngestError("a Parquet lake is already a lake: ingest it into a database, "
                          "or copy its run_id=<id> partitions")
    digest = load.run_digest(files)
    con = store.open(":memory:")
    try:
        _known_runs(con, lake)
        existing = con.execute("SELECT run_id FROM runs WHERE sha256 = ?", [digest]).fetchone()
        if existing and not force:
            return load.IngestResult(existing[0], "+".join(sorted({f.format.name for f in files})),
                                     {}, existing=True)
        return _ingest_new(con, files, digest, lake, name or load.default_name(paths), jobs,
                           overrides)
    except duckdb.Error as e:
        raise IngestError(f"the data was rejected: {str(e).splitlines()[0]}") from None
    finally:
        con.close()


def _ingest_new(con, files: list[load.InputFile], digest: str, lake: Path, name: str,
                jobs: int | None, overrides: dict) -> load.IngestResult:
    staging = staging_dir(lake, ".ingest-")
    try:
        _parse_in_parallel(files, staging, jobs)
        run_id = load.new_run_id(con, digest)
        result = load.write_run(con, run_id, digest, files, name, None, overrides)
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


def _parse_in_parallel(files: list[load.InputFile], staging: Path, jobs: int | None) -> None:
    work = [(i, f.path, f.format.name, staging) for i, f in enumerate(files)]
    if len(files) == 1 or jobs == 1:
        done = [_parse_to_parquet(*w) for w in work]
    else:
        # forkserver: the parent may hold DuckDB and Arrow threads, which fork would copy mid-flight
        context = multiprocessing.get_context("forkserver")
        with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
            done = list(pool.map(_parse_to_parquet, *zip(*work)))
    for f, (tables, run, warnings, started) in zip(files, done):
        f.parsed = Parsed(tables={t: pq.read_table(p) for t, p in tables.items()}, run=run,
                          warnings=warnings)
        f.started = started


def _parse_to_parquet(i: int, path: Path, format_name: str, staging: Path):
    """In a worker: parse one file, write each of its tables to staging; return the file paths."""
    parsed, started = load.parse_by_name(path, format_name)
    tables = {}
    for table, data in parsed.tables.items():
        path = staging / f"{i}-{table}.parquet"
        pq.write_table(data, path)
        tables[table] = path
    return tables, parsed.run, parsed.warnings, started

