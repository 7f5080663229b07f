"""The parse executor: worker processes that parse inputs, for ingest into a database (load)
and into a lake (lake_ingest).

Workers are forked by a forkserver that has the ingest modules imported already, so each
starts warm in milliseconds, yet shares nothing with its caller: not a server's listening
socket, nor its DuckDB connection or event-loop threads (the forkserver is a fresh
interpreter that inherits no descriptors). Each worker exits when its caller dies, and the
forkserver when its last worker has: a kill -9 of the server leaves no parser running and
no port held.
"""
from __future__ import annotations

import gc
import logging
import multiprocessing
import multiprocessing.context
import os
import threading
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import popen_forkserver, spawn
from pathlib import Path
from typing import Callable, Iterator

from polytrace.ingest import options
from polytrace.ingest.contract import IngestError

# Imported once by the forkserver: the worker functions, and with them every format.
PRELOAD = ["polytrace.ingest.parsing"]
# Below this much input, one process parses faster than several (unless POLYTRACE_PARSE_JOBS
# asks for workers): a forkserver takes ~0.3 CPU seconds to start (importing pyarrow, numpy
# and the formats), about 100 MB of parsing, and on two cores it competes with the caller's
# own parsing and hashing meanwhile. The CLI's whole ingest of search-R1 multi-turn files,
# one fresh process each, 1 worker against 2: no faster at 102 MB, 4-15% faster at 200 MB.
WORKERS_MIN_BYTES = 128 * 1024**2
log = logging.getLogger("polytrace.ingest")
_in_worker = False


def jobs() -> int:
    """Workers to use: the ingest's parse_jobs (POLYTRACE_PARSE_JOBS), else one per core; 1 inside
    a worker, which cannot start workers of its own."""
    if _in_worker:
        return 1
    return options.current().parse_jobs or os.cpu_count() or 1


@contextmanager
def gc_paused():
    """Parsing allocates millions of acyclic objects; cyclic GC passes over them only cost time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def in_order(fn: Callable, calls: list[tuple[str, tuple]], n: int, cost: float | None = None) -> Iterator:
    """fn(*args) for each (input name, args) of `calls`, the results in call order; `cost`: what
    they cost to parse, in bytes of NDJSON (default: their files' bytes).

    With n > 1 the caller is one of n parsers. n - 1 worker processes start meanwhile (a
    forkserver takes a few tenths of a second to import the formats) and then each takes
    the next free call; the caller runs every call no worker has taken, and rather than wait
    for a worker's result it runs a later free call and keeps that result until its turn.
    Calls are handed out at most 2n ahead of the consumer, so memory stays bounded. `fn` is
    a module-level function (one of a PRELOAD module starts warm); a worker's IngestError
    passes through, a dead worker becomes one.
    """
    cost = _input_bytes(calls) if cost is None else cost
    if n <= 1 or len(calls) < 2 or (options.current().parse_jobs is None and cost < WORKERS_MIN_BYTES):
        for _, args in calls:
            with gc_paused():
                result = fn(*args)
            yield result
        return
    shared = _Shared(fn, calls, n)
    threading.Thread(target=shared.feed, name="parse-feeder", daemon=True).start()
    kept: dict[int, object] = {}  # results the caller made ahead of their turn
    try:
        for i, (name, args) in enumerate(calls):
            while i not in kept:
                slot = shared.claim(i)
                if slot is None or slot.done():
                    kept[i] = _run(fn, args) if slot is None else _result(name, slot)
                    break
                ahead = shared.claim_ahead(i)
                if ahead is None:
                    kept[i] = _result(name, slot)
                else:
                    kept[ahead] = _run(fn, calls[ahead][1])
                    shared.put_back(i, slot)
            shared.consumed(i)
            yield kept.pop(i)
    finally:
        shared.close()


def _run(fn: Callable, args: tuple):
    with gc_paused():
        return fn(*args)


FREE, WORKER, CALLER = range(3)


class _Shared:
    """Who runs each call. A feeder thread starts the workers (blocking on the forkserver,
    off the caller's path), then keeps each worker busy with the next free call within the
    window; the caller claims the others."""

    def __init__(self, fn: Callable, calls: list[tuple[str, tuple]], n: int):
        self.fn, self.calls = fn, calls
        self.options = options.current()
        self.workers = min(n - 1, len(calls) - 1)
        self.window = 2 * n
        self.lock = threading.Condition()
        self.state = [FREE] * len(calls)
        self.done = 0  # calls the consumer has had
        self.busy = 0  # calls in the workers' hands
        self.slots: dict[int, Future] = {}
        self.closed = False
        self.pool: ProcessPoolExecutor | None = None

    def claim(self, i: int) -> Future | None:
        """Call i for the caller (None), or the slot of the worker that has it."""
        with self.lock:
            if self.state[i] == FREE:
                self.state[i] = CALLER
                return None
            return self.slots.pop(i)

    def put_back(self, i: int, slot: Future) -> None:
        with self.lock:
            self.slots[i] = slot

    def claim_ahead(self, i: int) -> int | None:
        """A free call after i within the window, now the caller's; None if there is none."""
        with self.lock:
            for j in range(i + 1, min(len(self.calls), self.done + self.window)):
                if self.state[j] == FREE:
                    self.state[j] = CALLER
                    return j
        return None

    def consumed(self, i: int) -> None:
        with self.lock:
            self.done = i + 1
            self.lock.notify_all()

    def _next_free(self) -> int | None:
        end = min(len(self.calls), self.done + self.window)
        return next((j for j in range(self.done, end) if self.state[j] == FREE), None)

    def feed(self) -> None:
        started = False
        try:
            self.pool = _pool(self.workers)
            # start every worker, and learn that they are ready, before handing out a call
            for ping in [self.pool.submit(_ready) for _ in range(self.workers)]:
                ping.result()
            started = True
            while True:
                with self.lock:
                    while not self.closed and FREE in self.state and (
                            self.busy >= self.workers or self._next_free() is None):
                        self.lock.wait()
                    if self.closed or FREE not in self.state:
                        return
                    i, slot = self._next_free(), Future()
                    self.state[i], self.slots[i] = WORKER, slot
                    self.busy += 1
                self._chain(self.pool.submit(_call, self.options, self.fn, self.calls[i][1]), slot)
        except Exception as e:  # noqa: BLE001  (the pool broke: the caller runs the rest)
            if not started:
                log.warning("parse workers did not start (%s): parsing in one process; a TMPDIR path "
                            "much over 60 characters is one known cause (the forkserver's socket "
                            "lives there)", e)
            with self.lock:
                for slot in self.slots.values():
                    if not slot.done():
                        slot.set_exception(e)
        finally:
            if self.closed and self.pool is not None:
                self.pool.shutdown(wait=False, cancel_futures=True)

    def _chain(self, source: Future, target: Future) -> None:
        """When the worker's future is done: the slot gets its outcome, the feeder a free worker."""

        def copy(f: Future) -> None:
            with self.lock:
                self.busy -= 1
                self.lock.notify_all()
            if f.cancelled():
                target.set_exception(BrokenProcessPool("cancelled"))
            elif f.exception() is not None:
                target.set_exception(f.exception())
            else:
                target.set_result(f.result())

        source.add_done_callback(copy)

    def close(self) -> None:
        with self.lock:
            self.closed = True
            self.lock.notify_all()
        if self.pool is not None:
            # workers still starting need not hold up the caller: they exit on their own
            self.pool.shutdown(wait=False, cancel_futures=True)


def _ready() -> bool:
    return True


def _input_bytes(calls: list[tuple[str, tuple]]) -> int:
    """Bytes of the files the calls name: what parsing them costs, roughly."""
    return sum(a.stat().st_size for _, args in calls for a in args if isinstance(a, Path) and a.is_file())


def _pool(n: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(n, mp_context=_context(), initializer=_started)


def _context() -> multiprocessing.context.ForkServerContext:
    # what a new process is told to set up; unchanged for any process but a worker this thread launches
    spawn.get_preparation_data = _worker_preparation_data
    context = _Context()
    # takes effect when the forkserver starts: once per process
    context.set_forkserver_preload(PRELOAD)
    return context


class _Launch(popen_forkserver.Popen):
    """Starts a worker without the caller's __main__: multiprocessing would run the caller's
    script again in every worker (slow, and a script that ingests at its top level would
    fail there), while parse work needs only the preloaded ingest modules."""

    def _launch(self, process_obj) -> None:
        _without_main.on = True
        try:
            super()._launch(process_obj)
        finally:
            _without_main.on = False


class _Worker(multiprocessing.context.ForkServerProcess):
    @staticmethod
    def _Popen(process_obj):
        return _Launch(process_obj)


class _Context(multiprocessing.context.ForkServerContext):
    Process = _Worker


_without_main = threading.local()
_preparation_data = spawn.get_preparation_data


def _worker_preparation_data(name: str) -> dict:
    data = _preparation_data(name)
    if getattr(_without_main, "on", False):
        data.pop("init_main_from_path", None)
        data.pop("init_main_from_name", None)
    return data


def _started() -> None:
    """In a new worker: start no workers of its own, and exit as soon as the caller does.

    Its parent is the forkserver, which lives on while any worker holds its pipe, so a
    parent-death signal would never come; the caller's own pipe to the worker reads EOF
    the moment the caller dies, even by kill -9."""
    global _in_worker
    _in_worker = True
    caller = multiprocessing.parent_process()
    if caller is not None:
        threading.Thread(target=_exit_with, args=(caller,), name="exit-with-caller", daemon=True).start()


def _exit_with(caller) -> None:
    caller.join()
    os._exit(1)


def _call(given: options.IngestOptions, fn: Callable, args: tuple):
    """In a worker: fn(*args) under the caller's ingest options, sent with each call (the worker
    reads no settings of its own)."""
    with options.applied(given), gc_paused():
        return fn(*args)


def _result(name: str, future: Future):
    try:
        return future.result()
    except BrokenProcessPool:
        raise IngestError(name, "the parse worker died (out of memory?); "
                                "try POLYTRACE_PARSE_JOBS=1") from None
