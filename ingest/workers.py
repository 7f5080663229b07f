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
import multiprocessing
import multiprocessing.context
import os
import threading
from collections import deque
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from multiprocessing import forkserver, popen_forkserver, spawn
from typing import Callable, Iterator

from polytrace import settings
from polytrace.ingest.contract import IngestError

# Imported once by the forkserver: the worker functions, and with them every format.
PRELOAD = ["polytrace.ingest.parsing"]
_in_worker = False


def jobs() -> int:
    """Workers to use: POLYTRACE_PARSE_JOBS, else one per core; 1 inside a worker, which
    cannot start workers of its own."""
    if _in_worker:
        return 1
    return settings.get().parse_jobs or os.cpu_count() or 1


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


def in_order(fn: Callable, calls: list[tuple[str, tuple]], n: int) -> Iterator:
    """fn(*args) for each (input name, args) of `calls`, the results in call order.

    With n > 1 the calls run in n worker processes, at most n calls ahead of the consumer,
    so that the consumer's work overlaps the next calls and memory stays bounded. `fn` is a
    module-level function (one of a PRELOAD module starts warm); a worker's IngestError
    passes through, a dead worker becomes one.
    """
    if n <= 1 or len(calls) < 2:
        for _, args in calls:
            with gc_paused():
                result = fn(*args)
            yield result
        return
    env = _settings_env()
    pool = _pool(min(n, len(calls)))
    try:
        ahead: deque[tuple[str, Future]] = deque()
        for name, args in calls:
            ahead.append((name, pool.submit(_call, env, fn, args)))
            if len(ahead) > n:
                yield _result(*ahead.popleft())
        while ahead:
            yield _result(*ahead.popleft())
    finally:
        pool.shutdown(cancel_futures=True)


def warm() -> None:
    """Start the forkserver now, so that it imports the ingest modules while the caller reads
    its inputs rather than when the first pool needs it (once per process)."""
    _context()
    forkserver.ensure_running()


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


def _settings_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k.startswith(settings.PREFIX)}


def _call(env: dict[str, str], fn: Callable, args: tuple):
    """In a worker: fn(*args) under the caller's POLYTRACE_* settings as they are now (the
    forkserver's environment is the caller's as it was when the forkserver started)."""
    for key in [k for k in os.environ if k.startswith(settings.PREFIX) and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    with gc_paused():
        return fn(*args)


def _result(name: str, future: Future):
    try:
        return future.result()
    except BrokenProcessPool:
        raise IngestError(name, "the parse worker died (out of memory?); "
                                "try POLYTRACE_PARSE_JOBS=1") from None
