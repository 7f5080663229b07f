"""Export of runs to a Parquet lake (layout and reading: ingest/formats/parquet_lake.py)."""
from __future__ import annotations

import re
import shutil
import tempfile
from pathlib import Path

import duckdb
import pyarrow.parquet as pq

from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats.parquet_lake import PART_FILE, partition_dir
from polytrace.ingest.load import data_tables

# run_id is the partition key, so it lives in the directory name, never in the files
# (Spark refuses a column that is both in the files and in the partition path).
# ingest_id is a local sequence number; a restored history gets fresh ones.
LOCAL_COLUMNS = {"ingests": ("run_id", "ingest_id")}
SAFE_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def export_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str], out: Path) -> dict[str, int]:
    """Write every table's rows of these runs under `out`, replacing only their partitions.

    All runs are read in one snapshot and staged in a hidden directory inside `out`;
    each partition then replaces the old one by a rename, so readers never see a
    half-written file. Returns rows written per table.
    """
    _check_runs(con, run_ids)
    tables = ["runs", "ingests", *data_tables(con)]
    staging = staging_dir(out, ".export-")
    try:
        rows = _stage(con, run_ids, tables, staging)
        for run_id in run_ids:
            for table in tables:
                _publish(partition_dir(staging, table, run_id), partition_dir(out, table, run_id),
                         staging / "replaced" / table / run_id)
    except OSError as e:
        raise IngestError(f"cannot write a lake at {out}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def staging_dir(lake: Path, prefix: str) -> Path:
    """A new hidden directory inside the lake (created if need be), for files about to be published."""
    try:
        lake.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=lake))
    except OSError as e:
        raise IngestError(f"cannot write a lake at {lake}: {e.strerror}") from None


def _check_runs(con, run_ids: list[str]) -> None:
    if not run_ids:
        raise IngestError("name at least one run to export")
    for run_id in run_ids:
        if not SAFE_RUN_ID.match(run_id):
            raise IngestError(f"run id {run_id!r} cannot name a lake partition")
        if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
            raise IngestError(f"no run {run_id!r} in this database (see `polytrace query runs`)")


def _stage(con, run_ids: list[str], tables: list[str], staging: Path) -> dict[str, int]:
    rows = dict.fromkeys(tables, 0)
    con.execute("BEGIN TRANSACTION READ ONLY")
    try:
        for run_id in run_ids:
            for table in tables:
                rows[table] += _write_partition(con, table, run_id,
                                                partition_dir(staging, table, run_id))
    finally:
        con.execute("ROLLBACK")
    return rows


def _write_partition(con, table: str, run_id: str, target: Path) -> int:
    """One table's rows of one run as a Parquet file; a run without rows gets an empty file,
    so that the lake always carries every table's schema."""
    excluded = ", ".join(f'"{c}"' for c in LOCAL_COLUMNS.get(table, ("run_id",)))
    reader = con.sql(f'SELECT * EXCLUDE ({excluded}) FROM "{table}" WHERE run_id = $run_id',
                     params={"run_id": run_id}).to_arrow_reader(1 << 17)
    target.mkdir(parents=True)
    written = 0
    with pq.ParquetWriter(target / PART_FILE, reader.schema, compression="zstd") as writer:
        for batch in reader:
            writer.write_batch(batch)
            written += batch.num_rows
    return written


def _publish(staged: Path, dest: Path, trash: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        trash.parent.mkdir(parents=True, exist_ok=True)
        dest.rename(trash)
    staged.rename(dest)
