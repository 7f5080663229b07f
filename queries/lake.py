"""DuckDB over a Parquet lake: an in-memory connection whose canonical tables are views of the lake's files."""
from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import duckdb

from polytrace.ingest.contract import IngestError
from polytrace.ingest.formats.parquet_lake import is_lake, lake_tables
from polytrace.ingest.load import ensure_schema

# DuckDB 2.0.x's window_self_join optimizer drops a filter on a Hive partition column on
# one side of the self-join it builds for window functions: wrong rows, no error
# (tests/test_lake_engine.py keeps a regression test against the native tables).
LAKE_SETTINGS = ("SET disabled_optimizers = 'window_self_join'",)


@lru_cache(maxsize=1)
def canonical_schema() -> tuple[dict[str, list[tuple[str, str]]], dict[str, str]]:
    """Every canonical table's (column, type) list in order, and every view's SQL."""
    con = duckdb.connect()
    try:
        ensure_schema(con)
        tables: dict[str, list[tuple[str, str]]] = {}
        for table, column, type_ in con.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE table_name IN (SELECT table_name FROM duckdb_tables()) "
                "ORDER BY table_name, column_index").fetchall():
            tables.setdefault(table, []).append((column, type_))
        views = dict(con.execute(
            "SELECT view_name, sql FROM duckdb_views() WHERE NOT internal ORDER BY view_name").fetchall())
    finally:
        con.close()
    return tables, views


def table_glob(root: Path, table: str) -> str:
    return str(root.resolve() / f"table={table}" / "*" / "*.parquet")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _scan(table: str, root: Path) -> str:
    return (f"read_parquet({_literal(table_glob(root, table))}, hive_partitioning = true, "
            "hive_types = {'run_id': 'VARCHAR'})")


def _view_sql(con, table: str, columns: list[tuple[str, str]], root: Path) -> str:
    """The lake's files as the canonical table: its columns in order and with their types;
    a column the files lack (an older export, or a local id like ingests.ingest_id) is NULL."""
    scan = _scan(table, root)
    found = dict(con.execute(f"SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM {scan})")
                 .fetchall())
    cols = []
    for name, type_ in columns:
        if name not in found:
            cols.append(f'NULL::{type_} AS "{name}"')
        elif found[name] != type_:
            cols.append(f'"{name}"::{type_} AS "{name}"')
        else:
            cols.append(f'"{name}"')
    return f"SELECT {', '.join(cols)} FROM {scan}"


def open_lake(root: str | Path) -> duckdb.DuckDBPyConnection:
    """An in-memory connection over the lake at root; it can read nothing else.

    Tables the lake lacks stay empty; the canonical views (step_timings, ...) sit on top.
    """
    root = Path(root)
    if not is_lake(root):
        raise IngestError(f"{root} is not a Parquet lake (no table=<name> directory; "
                          "write one with `polytrace export` or `polytrace ingest --lake`)")
    tables, views = canonical_schema()
    con = duckdb.connect()
    for setting in LAKE_SETTINGS:
        con.execute(setting)
    ensure_schema(con)
    present = lake_tables(root)
    for table, columns in tables.items():
        if table in present and any(present[table].glob("*/*.parquet")):
            sql = _view_sql(con, table, columns, root)
            con.execute(f'DROP TABLE "{table}"')
            con.execute(f'CREATE VIEW "{table}" AS {sql}')
    for sql in views.values():
        con.execute(sql.replace("CREATE VIEW", "CREATE OR REPLACE VIEW", 1))
    con.execute(f"SET allowed_directories = [{_literal(str(root.resolve()) + '/')}]")
    con.execute("SET enable_external_access = false")
    con.execute("SET lock_configuration = true")
    return con
