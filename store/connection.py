"""DuckDB connections with PolyTrace's policy: one writer that keeps the schema current, read-only
readers, no external access, transactions, registered Arrow data and time limits."""
from __future__ import annotations

import atexit
import heapq
import itertools
import os
import re
import shutil
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import duckdb

from polytrace.store import migrate
from polytrace.store.errors import StoreError, Timeout

# External access stays off: ingest hands DuckDB Arrow data, never file paths.
POLICY = {"enable_external_access": False}


def open(path: str | Path, mode: str = "w") -> duckdb.DuckDBPyConnection:  # noqa: A001 (the store's verb)
    """A PolyTrace database at `path` (":memory:" for a throwaway one).

    mode "w": the one writer; creates the file if need be, applies the schema and upgrades
    an older database (aggregates recomputed). mode "r": read-only; the file must exist and
    be current, else StoreError names the command that upgrades it.
    """
    if mode not in ("r", "w"):
        raise ValueError(f"mode must be 'r' or 'w', not {mode!r}")
    where = str(path)
    if mode == "r" and where != ":memory:" and not Path(where).is_file():
        raise StoreError(f"no database at {where} (ingest a run first: polytrace ingest PATH --db {where})")
    if mode == "w":
        _copy_of_empty(where)
    try:
        con = duckdb.connect(where, read_only=mode == "r", config=POLICY)
    except duckdb.Error as e:
        raise StoreError(f"cannot open database {where}: {_why_not(str(e))}") from None
    try:
        if mode == "w":
            migrate.ensure(con)
        else:
            problem = migrate.problem(con)
            if problem:
                raise StoreError(f"{where}: {problem}")
    except BaseException:
        con.close()
        raise
    return con


def _copy_of_empty(where: str) -> None:
    """A database file not there yet is made a copy of an empty current one, made once per process:
    the schema's statements (tables, aggregates, views and the vocabulary) cost a tenth of a second,
    a copy a millisecond; ensure() then finds it current. Linked into place only if still absent,
    so a file another process creates meanwhile is left alone. Where that fails (no hard links on
    this filesystem, a full disk), duckdb.connect creates the file, or says why it cannot."""
    if where == ":memory:" or os.path.lexists(where) or not Path(where).parent.is_dir():
        return
    staged = Path(f"{where}.{os.getpid()}-{threading.get_ident()}.new")
    try:
        shutil.copyfile(_empty_database(), staged)
        os.link(staged, where)
    except (OSError, duckdb.Error):
        pass  # the file is there now, or cannot be made so here: connect below says which
    finally:
        staged.unlink(missing_ok=True)


_empty: Path | None = None
_empty_lock = threading.Lock()


def _empty_database() -> Path:
    global _empty
    with _empty_lock:
        if _empty is None or not _empty.is_file():
            folder = Path(tempfile.mkdtemp(prefix="polytrace-empty-"))
            atexit.register(shutil.rmtree, folder, True)
            con = duckdb.connect(str(folder / "empty.duckdb"), config=POLICY)
            try:
                migrate.ensure(con)
            finally:
                con.close()
            _empty = folder / "empty.duckdb"
        return _empty


# DuckDB's words when another process holds the file's lock (a writer, or a reader while we write).
_HELD = re.compile(r"Conflicting lock is held in (?P<exe>.*?) \(PID (?P<pid>\d+)\)")


def bound(con: duckdb.DuckDBPyConnection, memory_limit: int | None = None, threads: int | None = None) -> None:
    """Cap the connection's DuckDB memory (bytes; past it a query spills or fails with
    OutOfMemoryException) and its worker threads; None leaves DuckDB's own default."""
    if memory_limit is not None:
        con.execute(f"SET memory_limit = '{int(memory_limit)}B'")
    if threads is not None:
        con.execute(f"SET threads = {int(threads)}")


def _why_not(error: str) -> str:
    """DuckDB's reason, or for a file another process holds, which process and what to do."""
    held = _HELD.search(error)
    if not held:
        return error.splitlines()[0]
    return (f"another process has it open (PID {held['pid']}: {_command(held['pid'], held['exe'])}), "
            "and DuckDB lets no two processes open one database file when either writes it: stop "
            "that process, or if it is a PolyTrace server (`polytrace serve` or `demo`), go through it "
            "(its REST API answers every query and a run's findings, and POST /api/runs uploads)")


def _command(pid: str, exe: str) -> str:
    """The command line of process `pid` from the polytrace command on, else `exe`."""
    try:
        args = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return exe
    args = [a for a in args if a]
    start = next((i for i, a in enumerate(args) if Path(a).name == "polytrace"), None)
    text = " ".join(args if start is None else ["polytrace", *args[start + 1:]]) or exe
    return text if len(text) <= 160 else text[:157] + "..."


@contextmanager
def transaction(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """BEGIN … COMMIT, or ROLLBACK on any exception (which passes on)."""
    con.execute("BEGIN TRANSACTION")
    try:
        yield con
        con.execute("COMMIT")
    except BaseException:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass  # an aborted transaction (e.g. disk full) may already be gone
        raise


@contextmanager
def read_snapshot(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A read-only transaction: it cannot write, and sees one snapshot."""
    con.execute("BEGIN TRANSACTION READ ONLY")
    try:
        yield con
    finally:
        try:
            con.execute("ROLLBACK")
        except duckdb.Error:
            pass


@contextmanager
def registered(con: duckdb.DuckDBPyConnection, name: str, data: Any) -> Iterator[str]:
    """Arrow data (a table, record batch reader or dataset) visible to SQL as `name` for the block."""
    con.register(name, data)
    try:
        yield name
    finally:
        con.unregister(name)


class Watchdog:
    """One thread that interrupts connections past their deadline (a Timer thread per query
    costs more than a dashboard query)."""

    def __init__(self):
        self._due: list[tuple[float, int, Any]] = []
        self._live: set[int] = set()
        self._ids = itertools.count()
        self._wake = threading.Condition()
        threading.Thread(target=self._run, name="polytrace-watchdog", daemon=True).start()

    def arm(self, con, timeout_ms: int) -> int:
        token = next(self._ids)
        entry = (time.monotonic() + timeout_ms / 1000, token, con)
        with self._wake:
            heapq.heappush(self._due, entry)
            self._live.add(token)
            if self._due[0] is entry:  # only a new earliest deadline needs the thread awake
                self._wake.notify()
        return token

    def disarm(self, token: int) -> None:
        with self._wake:
            self._live.discard(token)

    def _run(self) -> None:
        with self._wake:
            while True:
                while self._due and self._due[0][1] not in self._live:
                    heapq.heappop(self._due)
                if not self._due:
                    self._wake.wait()
                    continue
                deadline, token, con = self._due[0]
                if time.monotonic() < deadline:
                    self._wake.wait(deadline - time.monotonic())
                    continue
                heapq.heappop(self._due)
                self._live.discard(token)
                con.interrupt()


_watchdog: Watchdog | None = None
_watchdog_lock = threading.Lock()


@contextmanager
def time_limit(con, timeout_ms: int | None, what: str) -> Iterator[None]:
    """Interrupt `con` (DuckDB, or anything with interrupt()) after timeout_ms; Timeout names
    the setting that raises the limit."""
    global _watchdog
    if timeout_ms is None:
        yield
        return
    with _watchdog_lock:
        _watchdog = _watchdog or Watchdog()
    token = _watchdog.arm(con, timeout_ms)
    try:
        yield
    except duckdb.InterruptException:
        raise Timeout(f"{what} exceeded {timeout_ms} ms (raise POLYTRACE_QUERY_TIMEOUT_MS)") from None
    finally:
        _watchdog.disarm(token)
