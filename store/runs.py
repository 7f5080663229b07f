"""Run-level storage: which tables hold a run's rows, how many, and removing a run whole."""
from __future__ import annotations

import re

import duckdb

from polytrace.store import aggregates
from polytrace.store.connection import transaction

# Tables a run's rows are derived into by the catalog, not ingested: not counted as its rows.
DERIVED = ("run_overview", "run_answers")
# The one shape of a run id, checked wherever an id comes in: it names lake partitions,
# files and URLs as it is.
RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


def data_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """Every table that holds per-run data (has a run_id column), except runs and ingests."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_columns() WHERE column_name = 'run_id' "
        "AND database_name = current_database() AND schema_name = 'main' "
        "AND table_name NOT IN ('runs', 'ingests') "
        "AND table_name IN (SELECT table_name FROM duckdb_tables()) ORDER BY table_name").fetchall()
    return [r[0] for r in rows]


def row_counts(con: duckdb.DuckDBPyConnection, run_id: str) -> dict[str, int]:
    """Rows per canonical table; the derived aggregate tables are not input rows."""
    counts = {}
    derived = {*aggregates.names(), *DERIVED}
    for table in (t for t in data_tables(con) if t not in derived):
        # fetchall, not fetchone: DuckDB 2.0 refuses register() while a result is unfinished
        n = con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [run_id]).fetchall()[0][0]
        if n:
            counts[table] = n
    return counts


def run_tables(con: duckdb.DuckDBPyConnection) -> list[str]:
    """The tables a run's rows are in: runs, the data tables and their aggregates, not the answers
    derived from them."""
    return [t for t in [*data_tables(con), "runs"] if t not in DERIVED]


def count(con: duckdb.DuckDBPyConnection) -> int:
    return con.execute("SELECT count(*) FROM runs").fetchall()[0][0]


def exists(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    return bool(con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall())


def changed(con: duckdb.DuckDBPyConnection, run_id: str) -> None:
    """The run's rows changed: the answers and findings kept for it are no longer its own (its
    overview line stays, stale, until the next refresh). Called in the changing write's transaction."""
    con.execute("DELETE FROM run_answers WHERE run_id = ?", [run_id])
    con.execute("UPDATE run_overview SET findings = NULL WHERE run_id = ?", [run_id])


def delete_run(con: duckdb.DuckDBPyConnection, run_id: str) -> bool:
    """Remove a run and all its rows in one transaction, its ingest log (file names and
    digests) included; False if it did not exist."""
    with transaction(con):
        found = exists(con, run_id)
        if found:
            for table in [*data_tables(con), "ingests"]:
                con.execute(f'DELETE FROM "{table}" WHERE run_id = ?', [run_id])
            con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
    return found
