"""The one query runner: a catalog query, its parameters and limits in; an Arrow table out.

REST, the pages, the CLI, `connect()` and Spark all run catalog queries through `run`;
JSON, CSV, Parquet, terminal tables and polars are renderings of its Answer
(queries/render.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.queries.catalog import ParamError, Query, bind

ARROW_BATCH_ROWS = 65_536


class QueryError(Exception):
    """A query that could not answer; the message is one line, fit for a user."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


class QueryTimeout(QueryError):
    """The query ran past its time limit."""


class BadValue(QueryError):
    """Well-typed parameters the query could not use (out of range, not convertible)."""


@dataclass(frozen=True)
class Limits:
    timeout_ms: int | None = None  # interrupt the query after this long
    row_cap: int | None = None     # keep at most this many rows, and say so


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
        reader = self.con.sql(sql, params=bound).to_arrow_reader(ARROW_BATCH_ROWS)
        batches, n = [], 0
        for batch in reader:
            batches.append(batch)
            n += batch.num_rows
            if row_cap is not None and n > row_cap:
                break
        table = pa.Table.from_batches(batches, schema=reader.schema)
        if row_cap is None or n <= row_cap:
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
    return Answer(table, truncated)


def _arrow(engine: Engine, query: Query, bound: dict, row_cap: int | None) -> tuple[pa.Table, bool]:
    try:
        return engine.arrow(query.sql, bound, row_cap)
    except OSError as e:
        # DuckDB's Arrow stream reports an interrupt as an OSError, not InterruptException
        if "INTERRUPT" in str(e).upper():
            raise duckdb.InterruptException(str(e)) from None
        raise


__all__ = ["Answer", "BadValue", "Engine", "Limits", "ParamError", "QueryError", "QueryTimeout",
           "run", "run_bound"]
