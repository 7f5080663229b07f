"""Staged ingest: an upload parsed into a database file of its own, outside the server's write
lock, then committed by streaming its rows over, the only part that takes the lock.

Parsing a 2 GiB trace takes minutes; while it ran inside the lock every other upload, delete,
live append and overview refresh waited. Staged, the writer is held only for the copy (and, in
the rare run id collision, the new id's summing up).
"""
from __future__ import annotations

from pathlib import Path
from typing import Callable

import duckdb

from polytrace import store
from polytrace.ingest import sources
from polytrace.ingest.load import NO_SPACE, DiskFull, RunConflict, new_run_id, reclaim, root_cause
from polytrace.ingest.writes import IngestResult
from polytrace.store.runs import data_tables, row_counts

# Derived per run from the run's own rows, and naming its id: copied as they are, or summed up
# again when the run's id changes
SUMMED = ("run_overview", "run_answers")
LAKE = "parquet-lake"


def commit(con, staging: Path, staged: IngestResult, refresh: Callable[[object, list[str]], None],
           not_applied: Callable[[tuple[str, str]], list[str]]) -> IngestResult:
    """Copy the runs `staged` wrote into `staging` into this database, in one transaction.

    The same content here already is that run (existing, with `not_applied`'s warnings about
    it); a lake's run id here with other content is a RunConflict; a new run whose id is taken
    gets a fresh one and is summed up again (`refresh`). Raises DiskFull when the disk is.
    """
    source = store.open(staging, "r")
    try:
        copies, existing = _plan(con, source, staged)
        if existing is not None and not copies:
            return IngestResult(existing[0], existing[1], row_counts(con, existing[0]), existing=True,
                                warnings=staged.warnings + not_applied(existing), run_ids=staged.run_ids)
        with store.transaction(con):
            for old, new in copies.items():
                _copy_run(con, source, old, new)
        renamed = [new for old, new in copies.items() if old != new]
        if renamed:  # in its own transaction, as after any ingest
            refresh(con, renamed)
    except duckdb.Error as e:
        cause = root_cause(e)
        if NO_SPACE in cause:
            reclaim(con)  # the next small write finds room in the blocks this one left free
            raise DiskFull(None, f"no space left for the database: {cause}") from None
        raise
    finally:
        source.close()
    run_ids = [copies.get(r, r) for r in staged.run_ids]
    rows: dict[str, int] = {}
    for run_id in run_ids:
        for table, n in row_counts(con, run_id).items():
            rows[table] = rows.get(table, 0) + n
    return IngestResult(run_ids[0], staged.format, rows, existing=not copies, warnings=staged.warnings,
                        run_ids=run_ids)


def commit_failure(con, staging: Path) -> None:
    """The failed attempts a staged ingest logged, in this database's ingest log (when it can)."""
    try:
        source = store.open(staging, "r")
    except store.StoreError:
        return  # the staging database was never written: nothing was logged
    try:
        _copy(con, source, "ingests", "SELECT * EXCLUDE (ingest_id) FROM ingests WHERE status = 'failed'", [])
    except duckdb.Error:
        pass  # a full disk: the caller says the reason all the same
    finally:
        source.close()


def _plan(con, source, staged: IngestResult) -> tuple[dict[str, str], tuple[str, str] | None]:
    """Staged run id -> its id here, for each run to copy; and the run here that a staged run
    of the same content already is."""
    copies, existing = {}, None
    for run_id, digest in source.execute("SELECT run_id, sha256 FROM runs ORDER BY run_id").fetchall():
        if staged.format == LAKE:  # a lake's runs keep their ids
            here = con.execute("SELECT format, sha256 FROM runs WHERE run_id = ?", [run_id]).fetchall()
            if here and here[0][1] != digest:
                (lake,) = source.execute("SELECT file_name FROM ingests WHERE run_id = ? LIMIT 1", [run_id]).fetchone()
                raise RunConflict(sources.short(lake), f"run {run_id} already exists here with different content")
            if here:
                existing = existing or (run_id, here[0][0])
            else:
                copies[run_id] = run_id
            continue
        same = con.execute("SELECT run_id, format FROM runs WHERE sha256 = ? ORDER BY created_at LIMIT 1",
                           [digest]).fetchall()
        if same:
            existing = existing or same[0]
        else:  # the digest's id, or a salted one when another content holds it (as ingest_paths names it)
            copies[run_id] = new_run_id(con, digest)
    return copies, existing


def _copy_run(con, source, old: str, new: str) -> None:
    """One staged run's rows of every table into this database, under the id `new`."""
    staged_tables = set(["runs", "ingests", *data_tables(source)])
    for table in ["runs", *data_tables(con)]:
        if table not in staged_tables or (old != new and table in SUMMED):
            continue
        _copy(con, source, table, f'SELECT * REPLACE ($new AS run_id) FROM "{table}" WHERE run_id = $old',
              {"old": old, "new": new})
    _copy(con, source, "ingests", "SELECT * EXCLUDE (ingest_id) REPLACE ($new AS run_id) FROM ingests "
                                  "WHERE run_id = $old", {"old": old, "new": new})


def _copy(con, source, table: str, select: str, params) -> None:
    """The rows `select` reads from the staging database, inserted into `table` here as a stream."""
    reader = source.sql(select, params=params).to_arrow_reader(1 << 17)
    with store.registered(con, "_staged", reader):
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _staged')
