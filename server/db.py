"""The one DuckDB connection this process owns: read-only cursors with time limits, serialized writes."""
from __future__ import annotations

import heapq
import itertools
import threading
import time
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any, Callable, Iterator, TypeVar

import duckdb
import pyarrow as pa

from polytrace.ingest.load import ensure_schema
from polytrace.queries.catalog import Query, Result, execute
from polytrace.queries.lake import open_lake

T = TypeVar("T")
ARROW_BATCH_ROWS = 65_536


class QueryTimeout(Exception):
    pass


class Watchdog:
    """One thread that interrupts cursors past their deadline (a Timer thread per query costs more
    than a dashboard query)."""

    def __init__(self):
        self._due: list[tuple[float, int, duckdb.DuckDBPyConnection]] = []
        self._live: set[int] = set()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        self._stopped = False
        threading.Thread(target=self._run, name="polytrace-query-watchdog", daemon=True).start()

    def arm(self, cur: duckdb.DuckDBPyConnection, timeout_ms: int) -> int:
        token = next(self._ids)
        entry = (time.monotonic() + timeout_ms / 1000, token, cur)
        with self._wake:
            heapq.heappush(self._due, entry)
            self._live.add(token)
            if self._due[0] is entry:  # only a new earliest deadline needs the thread awake
                self._wake.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._wake:
            self._live.discard(token)

    def stop(self) -> None:
        with self._wake:
            self._stopped = True
            self._wake.notify()

    def _run(self) -> None:
        with self._wake:
            while not self._stopped:
                while self._due and self._due[0][1] not in self._live:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                deadline, token, cur = self._due[0]
                if time.monotonic() < deadline:
                    self._wake.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self._due)
                self._live.discard(token)
                cur.interrupt()


class ResultCache:
    """Recent query answers, up to a budget of rows. Data changes only through Database.write,
    which empties the cache; an answer computed across a write is not kept."""

    def __init__(self, max_rows: int):
        self.max_rows = max_rows
        self.generation = 0
        self._answers: OrderedDict[tuple, tuple[int, Any]] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Any | None:
        with self._lock:
            hit = self._answers.get(key)
            if hit is not None:
                self._answers.move_to_end(key)
                return hit[1]
        return None

    def put(self, key: tuple, generation: int, rows: int, answer: Any) -> None:
        with self._lock:
            if (self.max_rows <= 0 or generation != self.generation or rows > self.max_rows // 4
                    or key in self._answers):
                return
            self._answers[key] = (rows, answer)
            self._rows += rows
            while self._rows > self.max_rows:
                self._rows -= self._answers.popitem(last=False)[1][0]

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._answers.clear()
            self._rows = 0


class Database:
    def __init__(self, path: str, cache_rows: int = 0, lake: str | None = None):
        """The DuckDB file at path or, when lake is given, views over that Parquet lake
        (read-only: the server cannot upload to it or delete from it)."""
        self.lake = lake
        if lake:
            self.con = open_lake(lake)  # can read the lake's files and nothing else
        else:
            # External access stays off: ingest hands DuckDB Arrow tables, never file paths.
            self.con = duckdb.connect(path, config={"enable_external_access": False})
            ensure_schema(self.con)
        self._write_lock = threading.Lock()
        self._watchdog = Watchdog()
        self.cache = ResultCache(cache_rows)

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

    def read(self, fn: Callable[[duckdb.DuckDBPyConnection], T], timeout_ms: int, what: str) -> T:
        """Run fn on a read-only cursor; interrupt it after timeout_ms."""
        with self.reader() as cur:
            token = self._watchdog.arm(cur, timeout_ms)
            try:
                return fn(cur)
            except duckdb.InterruptException:
                raise QueryTimeout(
                    f"{what} exceeded {timeout_ms} ms (raise POLYTRACE_QUERY_TIMEOUT_MS)") from None
            finally:
                self._watchdog.disarm(token)

    def _cached(self, kind: str, query: Query, bound: dict[str, Any], row_cap: int,
                run: Callable[[duckdb.DuckDBPyConnection], T], rows: Callable[[T], int],
                timeout_ms: int) -> T:
        key = (kind, query.name, query.sql, tuple(sorted(bound.items())), row_cap)
        answer = self.cache.get(key)
        if answer is None:
            generation = self.cache.generation
            answer = self.read(run, timeout_ms, f"query {query.name!r}")
            self.cache.put(key, generation, rows(answer), answer)
        return answer

    def query(self, query: Query, bound: dict[str, Any], timeout_ms: int, row_cap: int) -> Result:
        """A catalog query as Python rows, at most row_cap of them."""
        return self._cached("rows", query, bound, row_cap,
                            lambda cur: execute(cur, query, bound, row_cap),
                            lambda result: len(result.rows), timeout_ms)

    def query_arrow(self, query: Query, bound: dict[str, Any], timeout_ms: int,
                    row_cap: int) -> tuple[pa.Table, bool]:
        """A catalog query as an Arrow table (types kept), at most row_cap rows, and whether it cut any."""
        def run(cur) -> tuple[pa.Table, bool]:
            reader = cur.sql(query.sql, params=bound).to_arrow_reader(ARROW_BATCH_ROWS)
            batches, n = [], 0
            for batch in reader:
                batches.append(batch)
                n += batch.num_rows
                if n > row_cap:
                    break
            table = pa.Table.from_batches(batches, schema=reader.schema)
            return table.slice(0, row_cap), n > row_cap

        return self._cached("arrow", query, bound, row_cap, run, lambda answer: answer[0].num_rows,
                            timeout_ms)

    def write(self, fn: Callable[[duckdb.DuckDBPyConnection], T]) -> T:
        """Run fn on a writing cursor; one writer at a time."""
        with self._write_lock:
            cur = self.con.cursor()
            try:
                return fn(cur)
            finally:
                cur.close()
                self.cache.clear()

    def close(self) -> None:
        self._watchdog.stop()
        self.con.close()
