"""The one query runner: a catalog query, its parameters and limits in; an Arrow table out.

REST, the pages, the CLI, `connect()` and Spark all run catalog queries through `run`;
JSON, CSV, Parquet, terminal tables and polars are renderings of its Answer
(queries/render.py).
"""
from __future__ import annotations

import os
import queue
import warnings
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.queries.catalog import ParamError, Query, bind
from polytrace.queries.limits import Limits

ARROW_BATCH_ROWS = 65_536
# DuckDB 2.0 warns that Arrow from an execute() result is a copy of its rows: _capped knows.
_COPY_WARNING = ("ignore", "Arrow output on a DB-API result", UserWarning, r"polytrace\.queries\.runner")


class QueryError(Exception):
    """A query that could not answer; the message is one line, fit for a user."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class QueryTimeout(QueryError):
    """The query ran past its time limit."""


class BadValue(QueryError):
    """Well-typed parameters the query could not use (out of range, not convertible)."""


class OutOfMemory(QueryError):
    """The query needed more memory than the engine's limit and could not spill."""


@dataclass
class Answer:
    table: pa.Table
    truncated: bool

    @property
    def columns(self) -> list[str]:
        return self.table.column_names

    @cached_property
    def rows(self) -> list[tuple]:
        """The rows as Python tuples (dates as datetime, NaN as float)."""
        return list(zip(*(col.to_pylist() for col in self.table.columns))) if self.table.num_columns else []


class Engine(Protocol):
    """Where SQL runs: DuckDB (a database file or the lake) or Spark."""

    def arrow(self, sql: str, bound: dict[str, Any], row_cap: int | None) -> tuple[pa.Table, bool]: ...

    def interrupt(self) -> None: ...


class DuckDB:
    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con

    def arrow(self, sql: str, bound: dict[str, Any], row_cap: int | None) -> tuple[pa.Table, bool]:
        # A caller may have left a result of execute() unread (fetchone); DuckDB 2.0 refuses
        # new work on the connection until that result is run to its end.
        self.con.complete()
        if row_cap is not None:
            return self._capped(sql, bound, row_cap)
        # every row: streamed, so that the result is held once
        reader = self.con.sql(sql, params=bound).to_arrow_reader(ARROW_BATCH_ROWS)
        return pa.Table.from_batches(list(reader), schema=reader.schema), False

    def _capped(self, sql: str, bound: dict[str, Any], row_cap: int) -> tuple[pa.Table, bool]:
        """At most row_cap + 1 rows in one statement: a relation (con.sql) binds and plans its
        query, then again to run it, which doubles the cost of the catalog's planner-bound
        queries; execute() plans once, and its result, copied into Arrow whole, is bounded by
        the LIMIT (which keeps the query's row order: DuckDB's order preservation)."""
        warnings.filterwarnings(*_COPY_WARNING)  # each time: a test harness resets the filters
        table = self.con.execute(f"SELECT * FROM (\n{sql}\n) LIMIT {row_cap + 1}", bound).to_arrow_table()
        if table.num_rows <= row_cap:
            return table, False
        return table.slice(0, row_cap), True

    def interrupt(self) -> None:
        self.con.interrupt()


def engine_of(target: Any) -> Engine:
    """A DuckDB connection or cursor runs as DuckDB; an Engine runs as itself."""
    return DuckDB(target) if isinstance(target, duckdb.DuckDBPyConnection) else target


# DuckDB raises these on well-typed but out-of-range parameters (a huge step, a bad cast).
_BAD_VALUE = (duckdb.ConversionException, duckdb.OutOfRangeException, duckdb.InvalidInputException)


def run(target: Any, query: Query, params: dict[str, Any], limits: Limits = Limits()) -> Answer:
    """Bind `params` (raw strings or values) to `query`, run it on `target` within `limits`.

    Raises ParamError for a missing or malformed parameter, QueryTimeout past the time
    limit and BadValue when the engine rejects a bound value.
    """
    bound = bind(query, params)
    return run_bound(target, query, bound, limits)


def run_bound(target: Any, query: Query, bound: dict[str, Any], limits: Limits = Limits()) -> Answer:
    engine = engine_of(target)
    try:
        with store.time_limit(engine, limits.timeout_ms, f"query {query.name!r}"):
            table, truncated = _arrow(engine, query, bound, limits.row_cap)
    except store.Timeout as e:
        raise QueryTimeout(str(e)) from None
    except _BAD_VALUE as e:
        raise BadValue(f"query {query.name!r} rejected its parameters: {str(e).splitlines()[0]}") from None
    except duckdb.OutOfMemoryException as e:
        raise OutOfMemory(f"query {query.name!r} needed more memory than the engine's limit: "
                          f"{str(e).splitlines()[0]}") from None
    return Answer(table, truncated)


# Queries of one refresh at once: DuckDB plans a query on one thread, and the catalog's small
# answers cost their planning, so a second cursor nearly halves a refresh on two cores.
WORKERS = min(4, max(2, os.cpu_count() or 1))


def run_each(con: duckdb.DuckDBPyConnection, queries: list[Query], params: dict[str, Any],
             limits: Limits = Limits()) -> dict[str, Answer]:
    """Each query's answer to `params`, the queries shared out among cursors of `con` (each a
    connection of its own to the same database: they see what is committed), each within `limits`."""
    todo: queue.SimpleQueue[Query] = queue.SimpleQueue()
    for query in queries:
        todo.put(query)

    def worker() -> dict[str, Answer]:
        done = {}
        with con.cursor() as cur:
            while True:
                try:
                    query = todo.get_nowait()
                except queue.Empty:
                    return done
                done[query.name] = run(cur, query, params, limits)

    workers = min(WORKERS, len(queries))
    if not workers:
        return {}
    with ThreadPoolExecutor(workers) as pool:
        shares = [pool.submit(worker) for _ in range(workers)]
        return {name: answer for share in shares for name, answer in share.result().items()}


def having_rows(con: duckdb.DuckDBPyConnection, selects: dict[str, str], params: dict[str, Any],
                limits: Limits = Limits()) -> set[str]:
    """The names (identifiers) of `selects` whose SELECT answers a row to `params`, all asked in one
    statement within `limits`."""
    if not selects:
        return set()
    sql = " UNION ALL ".join(f"SELECT '{name}' WHERE EXISTS (\n{select}\n)"
                             for name, select in selects.items())
    engine = DuckDB(con)
    try:
        with store.time_limit(engine, limits.timeout_ms, "the refresh's probes"):
            table, _ = engine.arrow(sql, params, None)
    except store.Timeout as e:
        raise QueryTimeout(str(e)) from None
    return set(table.column(0).to_pylist())


def no_rows(con: duckdb.DuckDBPyConnection, queries: list[Query]) -> dict[str, Answer]:
    """Each query's answer without a row: its declared columns (which the catalog's tests hold to
    what it returns), typed as DuckDB gives them to Arrow, found for all of them in one statement."""
    types = sorted({c.type for q in queries for c in q.columns})
    if not types:
        return {}
    probe = ", ".join(f'CAST(NULL AS {t}) AS "{i}"' for i, t in enumerate(types))
    arrow_type = dict(zip(types, DuckDB(con).arrow(f"SELECT {probe}", {}, 0)[0].schema.types))
    schemas = {q.name: pa.schema([pa.field(c.name, arrow_type[c.type]) for c in q.columns]) for q in queries}
    # from no batches: Schema.empty_table would import pandas (0.2 s)
    return {name: Answer(pa.Table.from_batches([], schema=schema), False) for name, schema in schemas.items()}


def _arrow(engine: Engine, query: Query, bound: dict, row_cap: int | None) -> tuple[pa.Table, bool]:
    try:
        return engine.arrow(query.sql, bound, row_cap)
    except OSError as e:
        # DuckDB's Arrow stream reports an interrupt as an OSError, not InterruptException
        if "INTERRUPT" in str(e).upper():
            raise duckdb.InterruptException(str(e)) from None
        if "Out of Memory" in str(e):
            raise duckdb.OutOfMemoryException(str(e)) from None
        raise


__all__ = ["Answer", "BadValue", "Engine", "Limits", "OutOfMemory", "ParamError", "QueryError", "QueryTimeout",
           "having_rows", "no_rows", "run", "run_bound", "run_each"]
