"""Forked parse workers: how many, and a pool of them.

Fork, not forkserver: a worker starts in milliseconds with every module already
imported, and it touches nothing of the parent's but the file it is given (never its
DuckDB connection or threads).
"""
from __future__ import annotations

import multiprocessing
import os
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool

from polytrace import settings
from polytrace.ingest.contract import IngestError


def jobs() -> int:
    """Workers to use: POLYTRACE_PARSE_JOBS, else one per core; 1 inside a worker, which
    cannot start workers of its own."""
    if multiprocessing.current_process().daemon:
        return 1
    return settings.get().parse_jobs or os.cpu_count() or 1


def pool(n: int) -> ProcessPoolExecutor:
    return ProcessPoolExecutor(n, mp_context=multiprocessing.get_context("fork"))


def result(future: Future, name: str):
    """The worker's answer; its IngestError passes through, a dead worker becomes one."""
    try:
        return future.result()
    except BrokenProcessPool:
        raise IngestError(f"{name}: the parse worker died (out of memory?); "
                          "try POLYTRACE_PARSE_JOBS=1") from None
