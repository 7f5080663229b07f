"""The one DuckDB connection this process owns: read-only cursors with time limits, serialized writes."""
from __future__ import annotations

import threading
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import duckdb

from ingest.load import ensure_schema
from queries.catalog import Query, Result, execute

T = TypeVar("T")


class QueryTimeout(Exception):
    pass


class Database:
    def __init__(self, path: str):
        self.path = path
        # External access stays off: ingest hands DuckDB Arrow tables, never file paths.
        self.con = duckdb.connect(path, config={"enable_external_access": False})
        ensure_schema(self.con)
        self._write_lock = threading.Lock()

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside a read-only transaction: it cannot write, and sees one snapshot."""
        cur = self.con.cursor()
        try:
            cur.execute("BEGIN TRANSACTION READ ONLY")
            yield cur
        finally:
            try:
                cur.execute("ROLLBACK")
            except duckdb.Error:
                pass
            cur.close()

    def query(self, query: Query, bound: dict[str, Any], timeout_ms: int, row_cap: int) -> Result:
        with self.reader() as cur:
            timer = threading.Timer(timeout_ms / 1000, cur.interrupt)
            timer.start()
            try:
                return execute(cur, query, bound, row_cap)
            except duckdb.InterruptException:
                raise QueryTimeout(
                    f"query {query.name!r} exceeded {timeout_ms} ms "
                    "(raise POLYTRACE_QUERY_TIMEOUT_MS)") from None
            finally:
                timer.cancel()

    def write(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run fn on a writing cursor; one writer at a time."""
        with self._write_lock:
            cur = self.con.cursor()
            try:
                return fn(cur)
            finally:
                cur.close()

    def close(self) -> None:
        self.con.close()
