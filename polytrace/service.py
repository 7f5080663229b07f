"""The use cases that change a database, one function each: the write and everything that must
follow it (the runs' overview lines and stored answers), so that no front end can forget a step.

The CLI, `Client`, the routers, the live followers and the demo call these; each takes the
connection it writes with (the server's comes from its one writer) and the ingest options its
front end built from the one Settings object.
"""
from __future__ import annotations

import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Protocol

from polytrace import store
from polytrace.ingest import options as ingest_options
from polytrace.ingest import staging as staged_runs
from polytrace.ingest.lake_ingest import ingest_to_lake
from polytrace.ingest.live import Appended, Chunk
from polytrace.ingest.load import IngestResult, append_chunk, checked_overrides, ingest_paths, not_applied
from polytrace.ingest.options import IngestOptions
from polytrace.queries import overview
from polytrace.store import lake, object_lake, runs
from polytrace.store.lake import is_object_store
from polytrace.workload import whatif


class Marks(Protocol):
    """Runs whose overview line is refreshed later (server/watch.py OverviewLines)."""

    def mark(self, run_id: str) -> None: ...


def refresh(con, run_ids: list[str]) -> None:
    """These runs' overview lines and stored answers, after a write changed them."""
    overview.refresh(con, run_ids)


def keep_sums(con, run_ids: list[str], sums: tuple[list[dict], list[tuple]]) -> None:
    """These runs' overview lines and stored answers as queries.overview.summed computed them off the
    writer, from the runs as they are now."""
    overview.keep(con, run_ids, sums)


def refresh_stale(con) -> list[str]:
    """The runs an older catalog summed up (or a write left unsummed), summed up again; their ids."""
    stale = overview.stale(con)
    overview.refresh(con, stale)
    return stale


def ingest_run(con, paths: list[Path], *, options: IngestOptions | None = None, **how) -> IngestResult:
    """Ingest files as one run (`how`: ingest_paths' keywords) and sum up what it added."""
    with ingest_options.applied(options):
        result = ingest_paths(con, paths, **how)
    if not result.existing:
        refresh(con, result.run_ids)
    return result


def stage_run(staging: Path, paths: list[Path], *, options: IngestOptions | None = None,
              memory_limit: int | None = None, threads: int | None = None, **how) -> IngestResult:
    """Ingest files as one run into a database file of its own (`staging`), summed up: the part
    of an upload that takes time, done without the server's writer (commit_staged copies it)."""
    con = store.open(staging)
    try:
        store.bound(con, memory_limit, threads)
        return ingest_run(con, paths, options=options, **how)
    finally:
        con.close()


def commit_staged(con, *, staging: Path, staged: IngestResult, format: str | None = None,
                  run_overrides: dict | None = None) -> IngestResult:
    """The run stage_run wrote into `staging`, copied into this database (or the run here that
    has its content)."""
    overrides = checked_overrides(run_overrides)
    return staged_runs.commit(con, staging, staged, refresh,
                              lambda existing: not_applied(existing, format, overrides))


def commit_failure(con, *, staging: Path) -> None:
    """What a failed stage_run logged, in this database's ingest log."""
    staged_runs.commit_failure(con, staging)


def ingest_into_lake(paths: list[Path], lake: Path | str, *, options: IngestOptions | None = None,
                     **how) -> IngestResult:
    """Ingest files as one run of a Parquet lake (a folder, or s3://bucket/prefix), its overview
    line written with it. Into object storage, the run is built in a local lake first and then
    published with its commit."""
    with ingest_options.applied(options):
        if not is_object_store(lake):
            return ingest_to_lake(paths, Path(lake), before_export=_summed_up, **how)
        with tempfile.TemporaryDirectory(prefix="polytrace-lake-") as local:
            result = ingest_to_lake(paths, Path(local), before_export=_summed_up,
                                    known=object_lake.known_runs(lake), **how)
            if not result.existing:
                object_lake.publish(Path(local), [result.run_id], object_lake.location(lake))
            return result


def _summed_up(con, run_id: str) -> None:
    refresh(con, [run_id])


def export_runs(con, run_ids: list[str], out: Path | str) -> dict[str, int]:
    """Runs of a database into a Parquet lake (a folder, or s3://bucket/prefix); rows per table."""
    if is_object_store(out):
        return object_lake.export_to(con, run_ids, out)
    return lake.export_runs(con, run_ids, Path(out))


@contextmanager
def fetched(paths: list[str], options: IngestOptions | None = None) -> Iterator[tuple[list[Path], dict[Path, str]]]:
    """The inputs as local paths, and the names to know them by (ingest's `names`): an s3://
    URL's objects are streamed into a temporary folder first, at most the ingest's inflate
    limit in all, and are named after the URL (the run's default name: its last segment). A
    PolyTrace lake there is copied as the runs its readers see, each whole, for ingest to restore."""
    limit = (options or IngestOptions()).max_inflate_bytes
    local, names = [], {}
    with tempfile.TemporaryDirectory(prefix="polytrace-s3-") as tmp:
        for i, p in enumerate(paths):
            if is_object_store(p):
                fetch = object_lake.copied_to_folder if object_lake.is_published_lake(p) else object_lake.download
                local.append(fetch(p, Path(tmp) / str(i), limit))
                names[local[-1]] = p.rstrip("/")
            else:
                local.append(Path(p))
        yield local, names


def append(con, run_id: str, chunk: Chunk, *, name: str | None = None, source: str | None = None,
           options: IngestOptions | None = None, lines: Marks | None = None) -> Appended:
    """Append a followed file's whole steps to a live run. A run that changed is summed up at
    once, or, given `lines`, marked for them to sum up off the append path."""
    with ingest_options.applied(options):
        appended = append_chunk(con, run_id, chunk, name=name, source=source)
    if appended.steps or appended.rows:
        if lines is not None:
            lines.mark(run_id)
        else:
            refresh(con, [run_id])
    return appended


def delete_run(con, run_id: str) -> bool:
    """Remove a run, its rows, overview line and answers (one transaction); False if unknown."""
    return runs.delete_run(con, run_id)


def simulate_run(con, run_id: str, **plan) -> whatif.Simulation:
    """Simulate the run (`plan`: whatif.simulation's keywords), store the results in the whatif
    table and sum the run up again."""
    simulation = whatif.simulation(con, run_id, **plan)
    simulation.stored = whatif.store(con, run_id, simulation.rows, simulation.calibration,
                                     simulation.forecast, simulation.overlap)
    refresh(con, [run_id])
    return simulation
