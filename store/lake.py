"""The Parquet lake: `table=<name>/run_id=<id>/part-0.parquet`, written by export and read by
DuckDB (an in-memory connection whose canonical tables are views of the files) or Spark."""
from __future__ import annotations

import shutil
import tempfile
from functools import lru_cache
from pathlib import Path

import duckdb
import pyarrow as pa

from polytrace.store import migrate
from polytrace.store.connection import bound, read_snapshot
from polytrace.store.errors import StoreError
from polytrace.store.runs import RUN_ID, data_tables, exists

PART_FILE = "part-0.parquet"
# run_id is the partition key, so it lives in the directory name, never in the files
# (Spark refuses a column that is both in the files and in the partition path).
# ingest_id is a local sequence number; a restored history gets fresh ones.
LOCAL_COLUMNS = {"ingests": ("run_id", "ingest_id")}
# DuckDB 2.0.x's window_self_join optimizer drops a filter on a Hive partition column on
# one side of the self-join it builds for window functions: wrong rows, no error
# (tests/test_lake_engine.py keeps a regression test against the native tables).
LAKE_SETTINGS = ("SET disabled_optimizers = 'window_self_join'",)


# ---- layout ---------------------------------------------------------------------------------

def partition_dir(root: Path, table: str, run_id: str) -> Path:
    return root / f"table={table}" / f"run_id={run_id}"


def is_lake(path: Path) -> bool:
    """A directory holding at least one `table=<name>` subdirectory."""
    return path.is_dir() and any(
        p.is_dir() and p.name.startswith("table=") for p in path.iterdir())


def lake_tables(root: Path) -> dict[str, Path]:
    """Table name -> its directory, for every `table=<name>` directory of the lake."""
    return {p.name.partition("=")[2]: p for p in sorted(root.iterdir())
            if p.is_dir() and p.name.startswith("table=")}


def lake_state(root: str | Path) -> tuple:
    """Changes whenever a writer publishes or removes a run, or adds a table: each partition is
    renamed into (or out of) its table's folder, which changes that folder's modification time."""
    if is_object_store(root):
        from polytrace.store import object_lake

        return object_lake.lake_state(str(root))
    root = Path(root)
    try:
        return (root.stat().st_mtime_ns, *(p.stat().st_mtime_ns for p in lake_tables(root).values()))
    except OSError:  # a table folder removed while we looked: a change all the same
        return ()


def partitions(table_dir: Path) -> dict[str, Path]:
    """run_id -> partition directory, for every `run_id=<id>` directory of one table."""
    return {p.name.partition("=")[2]: p for p in sorted(table_dir.iterdir())
            if p.is_dir() and p.name.startswith("run_id=")}


def lake_dataset(table_dir: Path):
    """One table's files as a pyarrow Dataset that streams from disk, run_id read as text."""
    # Imported here: pyarrow.dataset pulls in pandas, which every other ingest can skip.
    import pyarrow.dataset as ds

    # A partition named run_id=0001 is an id, not the number 1.
    partitioning = ds.partitioning(pa.schema([("run_id", pa.string())]), flavor="hive")
    return ds.dataset(table_dir, format="parquet", partitioning=partitioning)


def table_glob(root: Path, table: str) -> str:
    return str(root.resolve() / f"table={table}" / "*" / "*.parquet")


# ---- writing: export ------------------------------------------------------------------------

def export_runs(con: duckdb.DuckDBPyConnection, run_ids: list[str], out: Path,
                tables: list[str] | None = None) -> dict[str, int]:
    """Write every table's rows of these runs under `out`, replacing only their partitions
    (`tables`: these, for a connection whose tables are views, as over a lake).

    All runs are read in one snapshot and staged in a hidden directory inside `out`;
    each partition then replaces the old one by a rename, so readers never see a
    half-written file. Returns rows written per table.
    """
    _check_runs(con, run_ids)
    tables = tables or ["runs", "ingests", *data_tables(con)]
    staging = staging_dir(out, ".export-")
    try:
        rows = _stage(con, run_ids, tables, staging)
        for run_id in run_ids:
            for table in tables:
                _publish(partition_dir(staging, table, run_id), partition_dir(out, table, run_id),
                         staging / "replaced" / table / run_id)
    except OSError as e:
        raise StoreError(f"cannot write a lake at {out}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return rows


def _check_runs(con, run_ids: list[str]) -> None:
    if not run_ids:
        raise StoreError("name at least one run to export")
    for run_id in run_ids:
        if not RUN_ID.match(run_id):
            raise StoreError(f"run id {run_id!r} cannot name a lake partition")
        if not exists(con, run_id):
            raise StoreError(f"no run {run_id!r} in this database (see `polytrace query runs`)")


def staging_dir(lake: Path, prefix: str) -> Path:
    """A new hidden directory inside the lake (created if need be), for files about to be published."""
    try:
        lake.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(prefix=prefix, dir=lake))
    except OSError as e:
        raise StoreError(f"cannot write a lake at {lake}: {e.strerror}") from None


def _stage(con, run_ids: list[str], tables: list[str], staging: Path) -> dict[str, int]:
    rows = dict.fromkeys(tables, 0)
    with read_snapshot(con):
        for run_id in run_ids:
            for table in tables:
                rows[table] += _write_partition(con, table, run_id,
                                                partition_dir(staging, table, run_id))
    return rows


def _write_partition(con, table: str, run_id: str, target: Path) -> int:
    """One table's rows of one run as a Parquet file; a run without rows gets an empty file,
    so that the lake always carries every table's schema."""
    import pyarrow.parquet as pq  # where used: it is not needed to start up

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


# ---- reading: DuckDB over the lake -----------------------------------------------------------

@lru_cache(maxsize=1)
def canonical_schema() -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """Every canonical table's (column, type) list in order, and every view's SQL."""
    con = duckdb.connect()
    try:
        migrate.ensure(con)
        tables: dict[str, list[tuple[str, str]]] = {}
        for table, column, type_ in con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE table_name IN (SELECT table_name FROM duckdb_tables()) "
                "AND table_name != 'store_meta' ORDER BY table_name, column_index").fetchall():
            tables.setdefault(table, []).append((column, type_))
        views = dict(con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name").fetchall())
    finally:
        con.close()
    return tables, views


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _scan(files: str, union_by_name: bool = False) -> str:
    return (f"read_parquet({_literal(files)}, hive_partitioning = true, "
            f"{'union_by_name = true, ' if union_by_name else ''}hive_types = {{'run_id': 'VARCHAR'}})")


def _file_schemas(con, root: Path, table: str) -> dict[str, pa.Schema]:
    """Every Parquet file of one table, as and in the order DuckDB globs them, with its schema.
    StoreError names the first that is not readable Parquet, in the words of `polytrace ingest`."""
    import pyarrow.parquet as pq  # where used: it is not needed to start up
    from pyarrow.fs import LocalFileSystem

    local = LocalFileSystem()  # once: pyarrow finding it from each path took a tenth of the time
    schemas = {}
    for (file,) in con.execute("SELECT file FROM glob(?)", [table_glob(root, table)]).fetchall():
        try:
            schemas[file] = pq.read_schema(file, filesystem=local)
        except FileNotFoundError:  # a writer replaced its partition meanwhile: the views glob again
            continue
        except (pa.ArrowException, OSError, ValueError) as e:  # ValueError: metadata that is not UTF-8
            raise StoreError(f"{root}: {_relative(file, root)}: not a readable Parquet file "
                             f"({_first_line(e)})") from None
    return schemas


def _check_columns(root: Path, table: str, columns: list[tuple[str, str]],
                   schemas: dict[str, pa.Schema]) -> None:
    """A file that shares no column with its table holds other data, which the view would show as
    rows of NULLs. (One that shares some is an export of another version: what it lacks is NULL.)"""
    known = {name for name, _ in columns}
    for file, schema in schemas.items():
        if not known & set(schema.names):
            shown = ", ".join(schema.names[:6]) + (", ..." if len(schema.names) > 6 else "")
            raise StoreError(f"{root}: {_relative(file, root)}: not a file of table {table} "
                             f"(none of its columns is one of the table's: {shown or 'it has none'})")


def _relative(file: str, root: Path) -> Path:
    return Path(file).relative_to(root.resolve())


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def _view_sql(con, table: str, columns: list[tuple[str, str]], root: Path, union_by_name: bool) -> str:
    """The lake's files as the canonical table. DuckDB reads every file of a glob as it reads the
    first (and fails on one that lacks a column the first has) unless `union_by_name` matches them
    by name, at the cost of reading every footer."""
    return canonical_select(con, columns, _scan(table_glob(root, table), union_by_name))


def canonical_select(con, columns: list[tuple[str, str]], scan: str) -> str:
    """A scan of a table's files as the canonical table: its columns in order and with their
    types; a column the files lack (an older export, or a local id like ingests.ingest_id) is NULL."""
    found = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {scan})").fetchall())
    if not found.keys() & {name for name, _ in columns}:
        raise ForeignFiles("none of its columns is one of the table's")
    cols = []
    for name, type_ in columns:
        if name not in found:
            cols.append(f'NULL::{type_} AS "{name}"')
        elif found[name] != type_:
            cols.append(f'"{name}"::{type_} AS "{name}"')
        else:
            cols.append(f'"{name}"')
    return f"SELECT {', '.join(cols)} FROM {scan}"


class ForeignFiles(Exception):
    """The first file of a table shares no column with it."""


def _create_view(con, table: str, columns: list[tuple[str, str]], root: Path, mixed: bool) -> None:
    """The table's view over its files. A lake of one export version takes DuckDB's way (the first
    file's schema); one whose view fails, or of mixed versions, has every file's schema read: a
    damaged or foreign file is then named, and the versions are matched by column name."""
    if not mixed:
        try:
            return _replace(con, table, _view_sql(con, table, columns, root, union_by_name=False))
        except (duckdb.Error, ForeignFiles):
            pass
    schemas = _file_schemas(con, root, table)
    if not schemas:  # the files went away meanwhile (a writer replacing its partitions)
        return None
    _check_columns(root, table, columns, schemas)
    try:
        _replace(con, table, _view_sql(con, table, columns, root, union_by_name=True))
    except (duckdb.Error, ForeignFiles) as e:  # files pyarrow reads and DuckDB does not: one line all the same
        raise StoreError(f"{root}: table={table}: DuckDB cannot read its files ({_first_line(e)})") from None


def _replace(con, table: str, sql: str) -> None:
    con.execute(f'DROP TABLE "{table}"')
    con.execute(f'CREATE VIEW "{table}" AS {sql}')


def replace_with_view(con, table: str, sql: str) -> None:
    """The canonical table (or its view over an earlier state of the lake) as a view of `sql`."""
    kind = con.execute("SELECT table_type FROM information_schema.tables WHERE table_name = ?", [table]).fetchone()
    if kind and kind[0] == "VIEW":
        con.execute(f'CREATE OR REPLACE VIEW "{table}" AS {sql}')
    else:
        _replace(con, table, sql)


def _mixed_versions(con, root: Path) -> bool:
    """Whether the lake holds exports of different versions. A run is exported whole by one
    version, so its runs file's schema says which: those files are one row each, and few."""
    first, *others = _file_schemas(con, root, "runs").values() or [None]
    return any(not schema.equals(first) for schema in others)


def open_lake(root: str | Path, memory_limit: int | None = None,
              threads: int | None = None) -> duckdb.DuckDBPyConnection:
    """An in-memory connection over the lake at root; it can read nothing else. Its
    configuration is locked: `memory_limit` and `threads` (connection.bound) are set first.

    Tables the lake lacks stay empty; the canonical views (step_timings, ...) sit on top.
    """
    if is_object_store(root):
        from polytrace.store import object_lake

        return object_lake.open_lake(str(root), memory_limit, threads)
    root = Path(root)
    if not is_lake(root):
        raise StoreError(f"{root} is not a Parquet lake (no table=<name> directory; "
                         "write one with `polytrace export` or `polytrace ingest --lake`)")
    tables, _ = canonical_schema()
    con = lake_connection()
    try:
        mixed = _mixed_versions(con, root)
        present = lake_tables(root)
        for table, columns in tables.items():
            if table in present and any(present[table].glob("*/*.parquet")):
                _create_view(con, table, columns, root, mixed)
    except BaseException:
        con.close()
        raise
    con.execute(f"SET allowed_directories = [{_literal(str(root.resolve()) + '/')}]")
    return locked(con, memory_limit, threads)


def is_object_store(location: str | Path) -> bool:
    """Whether a lake location names object storage (s3://bucket/prefix) rather than a folder."""
    return isinstance(location, str) and location.startswith("s3://")


def lake_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory connection with the canonical (empty) tables, for a lake's views to replace."""
    con = duckdb.connect()
    for setting in LAKE_SETTINGS:
        con.execute(setting)
    migrate.ensure(con)
    return con


def locked(con: duckdb.DuckDBPyConnection, memory_limit: int | None, threads: int | None) -> duckdb.DuckDBPyConnection:
    """The canonical views over the lake's tables, then the connection shut to everything else."""
    for sql in canonical_schema()[1].values():
        con.execute(sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    con.execute("SET enable_external_access = false")
    bound(con, memory_limit, threads)
    con.execute("SET lock_configuration = true")
    return con
