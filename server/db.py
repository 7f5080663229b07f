"""The one DuckDB connection this process owns: catalog queries and read-only cursors with time
limits, serialized writes, a cache of recent query answers, and the write generations that make
their ETags."""
from __future__ import annotations

import atexit
import logging
import secrets
import threading
import time
import weakref
from collections import OrderedDict
from contextlib import contextmanager, suppress
from typing import Any, Callable, Iterator, TypeVar

import duckdb

from polytrace import store
from polytrace.queries import answers
from polytrace.queries.catalog import Query
from polytrace.queries.runner import Answer, Limits, QueryTimeout, run_bound
from polytrace.store import object_lake
from polytrace.store.errors import StoreError
from polytrace.store.lake import is_object_store, lake_state, open_lake

T = TypeVar("T")
# Databases not closed yet: closed at interpreter exit, before daemon threads are stopped.
_OPEN: weakref.WeakSet[Database] = weakref.WeakSet()
# How long close() lets interrupted work leave DuckDB.
CLOSE_WAIT_S = 10.0
# A lake in object storage is listed at most this often (a LIST request), not on every query.
OBJECT_STORE_POLL_S = 2.0
log = logging.getLogger("polytrace.server")


class Closing(duckdb.ConnectionException):
    """The database is closing (the server is shutting down): no new query or write. A
    ConnectionException, as a closed connection's would be, so that a follower says it and
    goes on."""


class Busy(Exception):
    """Every query slot stayed taken for the query's whole time limit: try again shortly."""


class ResultCache:
    """Recent query answers, up to a budget of rows. Data changes only through Database.write,
    which empties the cache; an answer computed across a write is not kept."""

    def __init__(self, max_rows: int):
        self.max_rows = max_rows
        self.generation = 0
        self._answers: OrderedDict[tuple, Answer] = OrderedDict()
        self._rows = 0
        self._lock = threading.Lock()

    def get(self, key: tuple) -> Answer | None:
        with self._lock:
            hit = self._answers.get(key)
            if hit is not None:
                self._answers.move_to_end(key)
            return hit

    def put(self, key: tuple, generation: int, answer: Answer) -> None:
        rows = answer.table.num_rows
        with self._lock:
            if (self.max_rows <= 0 or generation != self.generation or rows > self.max_rows // 4
                    or key in self._answers):
                return
            self._answers[key] = answer
            self._rows += rows
            while self._rows > self.max_rows:
                self._rows -= self._answers.popitem(last=False)[1].table.num_rows

    def clear(self) -> None:
        with self._lock:
            self.generation += 1
            self._answers.clear()
            self._rows = 0


class Database:
    def __init__(self, path: str, cache_rows: int = 0, lake: str | None = None, *,
                 memory_limit: int | None = None, threads: int | None = None, query_slots: int | None = None):
        """The DuckDB file at path or, when lake is given, views over that Parquet lake
        (read-only: the server cannot upload to it or delete from it). DuckDB gets at most
        `memory_limit` bytes and `threads` threads; at most `query_slots` catalog queries run at once."""
        self.lake = lake
        # a lake in object storage: the Arrow datasets its views read, which each cursor registers
        self._sources: dict[str, object] = {}
        if lake and is_object_store(lake):
            self.con, self._sources = object_lake.opened(lake, memory_limit, threads)
        elif lake:
            self.con = open_lake(lake, memory_limit, threads)
        else:
            self.con = store.open(path, "w")
            store.bound(self.con, memory_limit, threads)
        self._slots = threading.BoundedSemaphore(query_slots) if query_slots else None
        self.query_slots = query_slots
        self._lake_state = lake_state(lake) if lake else None
        self._lake_generation = 0
        self._lake_polled = time.monotonic()
        self._following = False  # a thread is listing a lake in object storage
        self._write_lock = threading.Lock()
        self.cache = ResultCache(cache_rows)
        # ETags: this process's id (generations restart with it), and per run the generation of
        # its last write; a write that names no run (an upload, a delete) may change any.
        self.boot = secrets.token_hex(4)
        self._run_writes: dict[str, int] = {}
        self._any_write = 0
        self._busy: set[duckdb.DuckDBPyConnection] = set()  # cursors in use, for close()
        self._idle = threading.Condition()
        self._closing = False
        _OPEN.add(self)

    @contextmanager
    def _cursor(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor of the connection, counted in use until it is closed."""
        with self._idle:
            if self._closing:
                raise Closing("the server is shutting down: try again once it is back")
            cur = self.con.cursor()
            self._busy.add(cur)
            sources = self._sources
        try:
            for name, source in sources.items():
                cur.register(name, source)
            yield cur
        finally:
            cur.close()
            with self._idle:
                self._busy.discard(cur)
                if self._closing:
                    self._idle.notify_all()

    @contextmanager
    def reader(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """A cursor inside a read-only transaction: it cannot write, and sees one snapshot."""
        with self._cursor() as cur, store.read_snapshot(cur):
            yield cur

    def read(self, fn: Callable[[duckdb.DuckDBPyConnection], T], timeout_ms: int, what: str,
             snapshot: bool = True) -> T:
        """Run fn on a cursor in a read-only transaction (one snapshot); interrupt it after
        timeout_ms (QueryTimeout). With snapshot=False, for fn of one SELECT (its own snapshot),
        there is no transaction: its BEGIN and ROLLBACK cost as much CPU as a light lookup."""
        with self.reader() if snapshot else self._cursor() as cur:
            try:
                with store.time_limit(cur, timeout_ms, what):
                    return fn(cur)
            except store.Timeout as e:
                raise QueryTimeout(str(e)) from None

    def query(self, query: Query, bound: dict[str, Any], limits: Limits) -> Answer:
        """A catalog query through the runner, answered from the cache or the answer its run's last
        write kept (queries/answers.py) when it can be."""
        self._follow_lake()
        key = (query.name, query.sql, tuple(sorted(bound.items())), limits.row_cap)
        answer = self.cache.get(key)
        if answer is None:
            generation = self.cache.generation
            # A catalog query is one SELECT (catalog.statement_problem), its own transaction
            # and snapshot: wrapping it in a read-only one cost ~1 ms of CPU per request with 8
            # clients (DuckDB's transaction bookkeeping), a fifth of a light query's REST cost.
            with self._cursor() as cur:
                answer = answers.read(cur, query, bound, limits.row_cap)
                if answer is None:
                    with self._slot(limits.timeout_ms):
                        answer = run_bound(cur, query, bound, limits)
            self.cache.put(key, generation, answer)
        return answer

    @contextmanager
    def _slot(self, timeout_ms: int | None) -> Iterator[None]:
        """One of the query slots, waited for up to the query's own time limit (Busy past it)."""
        if self._slots is None:
            yield
            return
        if not self._slots.acquire(timeout=None if timeout_ms is None else timeout_ms / 1000):
            raise Busy(f"the server is running {self.query_slots} queries already (POLYTRACE_QUERY_SLOTS): "
                       "try again in a moment")
        try:
            yield
        finally:
            self._slots.release()

    def write(self, fn: Callable[[duckdb.DuckDBPyConnection], T], runs: list[str] | None = None) -> T:
        """Run fn on a writing cursor; one writer at a time. `runs`: the only runs fn may change
        (a live append), so the other runs keep their ETags; [] for none (a write that keeps what
        readers compute anyway: a run's overview line and answers); None: any run."""
        with self._write_lock, self._cursor() as cur:
            try:
                return fn(cur)
            finally:
                self.cache.clear()
                if runs is None:
                    self._any_write = self.cache.generation
                for run_id in runs or ():
                    self._run_writes[run_id] = self.cache.generation

    def etag(self, runs: list[str] | None = None, variant: str = "") -> str:
        """A weak ETag for an answer that reads these runs (None: every run and the run list): it
        changes with every write that may change them, and when the server restarts."""
        self._follow_lake()
        if runs is None:
            generation = self.cache.generation
        else:
            generation = max([self._any_write, *(self._run_writes.get(r, 0) for r in runs)])
        return f'W/"{self.boot}-{generation}{"-" + variant if variant else ""}"'

    def _follow_lake(self) -> None:
        """Over a lake, other processes add and replace runs (ingest --lake, export): when its
        folders changed, every cached answer and every ETag is stale, as after a write here.
        (The views find new files by themselves: they glob at each query. A table the lake
        lacked when the server started stays empty until a restart.) A lake in object storage
        is followed off the request path (_follow_object_store)."""
        if self.lake is None:
            return
        if is_object_store(self.lake):
            return self._start_following()
        state = lake_state(self.lake)
        if state == self._lake_state:
            return
        with self._write_lock:
            if state != self._lake_state:
                self._moved_to(state)

    def _moved_to(self, state: tuple) -> None:
        self._lake_state = state
        self.cache.clear()
        self._any_write = self.cache.generation

    def _start_following(self) -> None:
        """At most every OBJECT_STORE_POLL_S, one thread lists the lake's commits; the request
        that started it goes on with the views as they are."""
        with self._idle:
            if self._following or time.monotonic() - self._lake_polled < OBJECT_STORE_POLL_S:
                return
            self._following, self._lake_polled = True, time.monotonic()
        threading.Thread(target=self._follow_object_store, name="polytrace-lake-follow", daemon=True).start()

    def _follow_object_store(self) -> None:
        """Views over the runs published now, when the commits changed: datasets of a new
        generation (a cursor opened before keeps the last one too), then every answer stale."""
        try:
            state = lake_state(self.lake)
            if state == self._lake_state:
                return
            with self._write_lock, self._cursor() as cur:
                new = object_lake.follow(cur, self.lake, self._lake_generation + 1)
                self._lake_generation += 1
                last = {k: v for k, v in self._sources.items() if k.endswith(f"_{self._lake_generation - 1}")}
                self._sources = {**last, **new}
                self._moved_to(state)
        except (StoreError, duckdb.Error) as e:  # the last runs stay in view; the next poll tries again
            log.warning("cannot follow the lake %s: %s", self.lake, e)
        finally:
            self._following = False

    def close(self) -> None:
        """Interrupt the queries and writes still running, wait up to CLOSE_WAIT_S for their
        threads to leave DuckDB, and close the connection. (A thread still inside DuckDB when
        the interpreter exits aborts the process: "terminate called after throwing an
        instance of ''".) An interrupted write rolls back."""
        deadline = time.monotonic() + CLOSE_WAIT_S
        with self._idle:
            self._closing = True
            # again and again: an interrupt between two statements of a cursor stops neither
            while self._busy and time.monotonic() < deadline:
                for cur in self._busy:
                    with suppress(duckdb.ConnectionException):  # closed, not yet counted out
                        cur.interrupt()
                self._idle.wait(0.05)
        _OPEN.discard(self)
        self.con.close()


@atexit.register
def _close_all() -> None:
    for db in list(_OPEN):
        db.close()
