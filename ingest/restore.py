"""Lake restore: the whole runs a Parquet lake carries put back under their ids, in one transaction."""
from __future__ import annotations

import hashlib
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from polytrace import store
from polytrace.ingest import sources, workers
from polytrace.ingest.contract import Hint, IngestError
from polytrace.ingest.parsing import now, parse_input
from polytrace.ingest.writes import IngestResult, InputFile, Progress, RunConflict, log_many
from polytrace.store.aggregates import materialize
from polytrace.store.migrate import RETIRED_TABLES
from polytrace.store import aggregates
from polytrace.store.runs import DERIVED, RUN_ID, data_tables, row_counts


def restore(con, files: list[InputFile], name: str | None, trusted: bool,
            progress: Progress | None = None) -> IngestResult:
    """Put back the whole runs a Parquet lake carries: same ids and rows.

    A run whose id is already here with the same content is left alone; one with other
    content is a RunConflict. The new runs land in one transaction. A trusted lake (one
    the user ingests from their own disk) keeps its digests and its ingest history. An
    untrusted one (an upload) is restored only as what its bytes are: each run's digest is
    computed from its partition files, never read from its `runs` row (anyone can write
    the digest of someone else's trace there, and uploads deduplicate on it), and the
    origin's ingest history, which nothing here can check, stays behind.
    """
    _parse_all(files, progress)
    if len(files) != 1:
        raise IngestError(None, "ingest a Parquet lake on its own, not together with other inputs")
    if name:
        raise IngestError(None, "a run name does not apply to a Parquet lake: restored runs keep "
                                "their names", Hint("name", "drop {option}"))
    f = files[0]
    for run in f.parsed.runs:
        if not RUN_ID.match(run["run_id"]):
            raise IngestError(f.label, f"run id {run['run_id'][:80]!r} is not a valid run id (a letter "
                                       "or digit, then letters, digits, '_', '.' or '-'; 64 at most)")
    digests = {r["run_id"]: r.get("sha256") for r in f.parsed.runs} if trusted else lake_digests(f.path)
    fresh = _restorable(con, f, digests)
    if trusted:
        _same_rows(con, f, [r["run_id"] for r in f.parsed.runs if r["run_id"] not in fresh])
    known = {"runs", *data_tables(con), *(("ingests",) if trusted else ())}
    skipped = sorted(set(f.parsed.tables) - known - {"ingests", *RETIRED_TABLES})
    warnings = [*f.parsed.warnings, *(f"table {t} is unknown to this version; skipped"
                                      for t in skipped)]
    if fresh:
        tables = {t: data for t, data in f.parsed.tables.items() if t in known}
        _insert_runs(con, tables, {r: digests[r] for r in fresh}, f, "; ".join(warnings) or None)
    run_ids = [r["run_id"] for r in f.parsed.runs]
    rows: Counter = Counter()
    for run_id in run_ids:
        rows.update(row_counts(con, run_id))
    return IngestResult(run_ids[0], f.format.name, dict(rows), existing=not fresh,
                        warnings=warnings, run_ids=run_ids)


def lake_digests(root: Path) -> dict[str, str]:
    """Each run of a lake -> the digest of its partitions' files, paths and bytes: what the
    run is, whatever its `runs` row says."""
    lines: dict[str, list[str]] = {}
    for s in sources.expand([root], {}):
        rel = s.path.relative_to(root)
        run = next((p.partition("=")[2] for p in rel.parts if p.startswith("run_id=")), None)
        if run is not None:
            lines.setdefault(run, []).append(f"{rel.as_posix()}\0{sources.sha256_file(s.path)}\n")
    return {run: hashlib.sha256("".join(sorted(ls)).encode()).hexdigest() for run, ls in lines.items()}


def _restorable(con, f: InputFile, digests: dict[str, str | None]) -> list[str]:
    """The lake's runs that are not here yet; a run id here with another digest is a conflict."""
    fresh = []
    for run in f.parsed.runs:
        here = con.execute("SELECT sha256 FROM runs WHERE run_id = ?", [run["run_id"]]).fetchall()
        if not here:
            fresh.append(run["run_id"])
        elif here[0][0] != digests[run["run_id"]]:
            raise RunConflict(f.label, f"run {run['run_id']} already exists here with different content")
    return fresh


def _same_rows(con, f: InputFile, run_ids: list[str]) -> None:
    """A run here under the digest its lake's runs row claims must have the rows the lake holds:
    files changed after the export are a conflict, as an upload's bytes would be (its digest is
    computed from them). Row counts per table are compared; values are not."""
    import pyarrow.compute as pc

    inputs = set(data_tables(con)) - {*aggregates.names(), *DERIVED}  # the rows row_counts counts
    for run_id in run_ids:
        here = row_counts(con, run_id)
        for table, data in f.parsed.tables.items():
            if table not in inputs or "run_id" not in data.schema.names:
                continue
            there = data.count_rows(filter=pc.field("run_id") == run_id)  # a dataset: counted, not read
            if there != here.get(table, 0):
                raise RunConflict(f.label, f"run {run_id} is here under the digest the lake's runs row gives, "
                                           f"but the lake holds other rows ({table}: {there:,} in the lake, "
                                           f"{here.get(table, 0):,} here): its files changed after the export")


def _insert_runs(con, tables: dict, digests: dict[str, str | None], f: InputFile, note: str | None) -> None:
    """These runs' rows of every table with their digests, their aggregates and a log row,
    in one transaction."""
    run_ids = list(digests)
    views = {table: f"_lake_{i}" for i, table in enumerate(tables)}
    with ExitStack() as stack:
        for table, view in views.items():
            stack.enter_context(store.registered(con, view, tables[table]))
        with store.transaction(con):
            for table, view in views.items():
                con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM {view} '
                            "WHERE run_id IN (SELECT unnest($run_ids))", {"run_ids": run_ids})
            con.executemany("UPDATE runs SET sha256 = ? WHERE run_id = ?",
                            [[digest, run_id] for run_id, digest in digests.items()])
            for run_id in run_ids:
                materialize(con, run_id)
                rows = sum(row_counts(con, run_id).values())
                log_many(con, [(f, run_id, "ok", note, rows, f.started or now())])


def _parse_all(files: list[InputFile], progress: Progress | None) -> None:
    """Parse each input here, not in workers: a lake is one input, read whole as the tables it holds."""
    for i, f in enumerate(files):
        if progress:
            progress(i, len(files), f.label)
        with workers.gc_paused():
            f.parsed, f.started = parse_input(f.path, f.format.name, f.label)
    if progress:
        progress(len(files), len(files), "loading")
