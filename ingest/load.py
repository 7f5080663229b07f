"""Transactional load: parse every input first, then write the run in one DuckDB transaction.

A Parquet lake given as input is restored whole (ingest/restore.py); a followed run's appends are
ingest/append.py. Front ends import each ingest write from here (ingest_paths, append_chunk).
"""
from __future__ import annotations

import hashlib
from contextlib import closing, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Mapping

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.ingest import registry, sources, workers
from polytrace.ingest.append import append_chunk
from polytrace.ingest.contract import Format, IngestError, cli_flag
from polytrace.ingest.parsing import now, parse_input
from polytrace.ingest.restore import restore
from polytrace.ingest.run_facts import RUN_COLUMNS
from polytrace.ingest.sources import Source, Spool
from polytrace.ingest.writes import (
    IngestResult,
    InputFile,
    Progress,
    RunConflict,
    fill_missing,
    insert,
    log_many,
    name_the_format,
)
from polytrace.store import vocabulary
from polytrace.store.aggregates import materialize
from polytrace.store.runs import row_counts

# The names front ends and tests import from here, whose homes are the modules beside it.
__all__ = ["DiskFull", "IngestResult", "InputFile", "RunConflict", "append_chunk", "collected", "ingest_paths",
           "checked_overrides", "default_name", "new_run_id", "parse_jobs", "root_cause", "run_digest",
           "write_run"]

# Parsed Arrow data held before it is inserted: bounds ingest memory on runs of any size.
FLUSH_BYTES = 256 * 1024**2
# ... or every this many parsed tables: each holds a few KB of Arrow objects however small it is
FLUSH_PARTS = 1000
# Below this many input bytes, starting parse workers costs more than it saves.
PARALLEL_MIN_BYTES = 32 * 1024**2
# How the operating system words ENOSPC in the errors DuckDB passes on.
NO_SPACE = "No space left on device"
# A DuckDB file starts with its header: the main block and two database headers of 4 KiB.
DUCKDB_HEADER_BYTES = 3 * 4096


class DiskFull(IngestError):
    """The database's disk filled up during the ingest; nothing was written."""


def ingest_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    *,
    name: str | None = None,
    format: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    run_overrides: dict | None = None,
    names: Mapping[Path, str] | None = None,
    option_words: Callable[[str], str] = cli_flag,
    trusted: bool = True,
) -> IngestResult:
    """Ingest files (or directories of files, or archives) as one run; a Parquet lake restores
    each of its runs.

    run_overrides fills runs columns (RUN_COLUMNS, e.g. max_response_len) the input does
    not carry; what the input says wins. `names` gives the names the user knows inputs by
    (a path given, or a file below a directory given; default: the path as given), and
    `option_words` how hints name an ingest option (default: the CLI flag); both shape
    the `ingests` log and the errors. `trusted=False` (an upload from anyone) restores a
    Parquet lake only as what its bytes are (see `_restore`).

    Raises IngestError (RunConflict, DiskFull); then no data table changed and a `failed`
    row per input records the attempt in `ingests` (when the disk has room for it).
    """
    started = now()
    names = names or {}
    files: list[InputFile] = []
    try:
        with collected(paths, format, names) as files:
            if any(f.path.is_dir() for f in files):  # a container of whole runs (a Parquet lake)
                return restore(con, files, name, trusted, progress)
            digest = run_digest(files)
            if not force:
                existing = con.execute(
                    "SELECT run_id, format FROM runs WHERE sha256 = ? ORDER BY created_at LIMIT 1",
                    [digest]).fetchone()
                if existing:  # what collecting skipped is said all the same
                    said = [n for f in files for n in f.notes]
                    return IngestResult(existing[0], existing[1], row_counts(con, existing[0]), existing=True,
                                        warnings=said + not_applied(existing, format, checked_overrides(run_overrides)))
            run_id = new_run_id(con, digest)
            return write_run(con, run_id, digest, files, name or default_name(paths, names), progress,
                             checked_overrides(run_overrides))
    except IngestError as e:
        _log_failure(con, files or [InputFile(Source(p, sources.display(p, names), p)) for p in paths],
                     e.worded(option_words), started)
        raise
    except duckdb.Error as e:
        cause = root_cause(e)
        if NO_SPACE in cause:
            reclaim(con)
            msg = f"no space left for the database: {cause}"
            _log_failure(con, files, msg, started)
            raise DiskFull(None, msg) from None
        msg = f"database rejected the data: {cause}"
        _log_failure(con, files, msg, started)
        raise IngestError(None, msg) from None


def root_cause(e: BaseException) -> str:
    """The first line of the error that started a chain of DuckDB errors: once a statement
    fails inside a transaction, every later one (an unregister, say) only says that the
    transaction is aborted."""
    first = e
    while isinstance(first.__context__, duckdb.Error):
        first = first.__context__
    return str(first).splitlines()[0]


def reclaim(con) -> None:
    """After a disk-full rollback, move the write-ahead log into the blocks the failed
    ingest left free in the database file, so that the next small write has room on disk.

    A checkpoint that runs out of room itself invalidates the database until a restart, so
    it runs only when the file holds, on disk, two free blocks besides one for each table
    with rows and room for the log twice over.
    """
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass  # rolled back already
    try:
        _, _, block, total, _, free, *_ = con.execute("PRAGMA database_size").fetchone()
        (path,) = con.execute("SELECT path FROM duckdb_databases() "
                              "WHERE database_name = current_database()").fetchone()
        wal = Path(f"{path}.wal")
        # blocks past the end of the file were counted but never reached the disk
        on_disk = (Path(path).stat().st_size - DUCKDB_HEADER_BYTES) // block
        free_on_disk = free - max(0, total - on_disk)
        tables = con.execute("SELECT count(*) FROM duckdb_tables() WHERE estimated_size > 0").fetchone()[0]
        wal_blocks = -(-wal.stat().st_size // block) if wal.exists() else 0
        if wal_blocks and free_on_disk >= 2 + tables + 2 * wal_blocks:
            con.execute("CHECKPOINT")
    except (duckdb.Error, OSError, TypeError):
        pass  # then the next write says whether there is room


@contextmanager
def collected(paths: list[Path], forced: str | None = None,
              names: Mapping[Path, str] | None = None) -> Iterator[list[InputFile]]:
    """The inputs below `paths` with their hashes and formats; IngestError if none is a trace.
    Archive members are spooled to a temporary directory that lasts as long as the context."""
    spool = Spool()
    try:
        yield _found_inputs(paths, forced, names or {}, spool)
    finally:
        spool.close()


def _found_inputs(paths: list[Path], forced: str | None, names: Mapping[Path, str],
             spool: Spool) -> list[InputFile]:
    fmt = registry.get(forced) if forced else None
    lakes = {p: lake for p in paths if (lake := sources.unzipped_lake(p, spool))}
    names = {**names, **{lake: sources.display(p, names) for p, lake in lakes.items()}}
    paths = [lakes.get(p, p) for p in paths]
    wholes = {p: _directory_format(p, fmt) for p in paths}
    files = [InputFile(_whole_directory(p, names), f) for p, f in wholes.items() if f]
    # a file named twice (or also inside a named directory) is still one input
    unique: dict[Path, Source] = {}
    walked = [p for p, f in wholes.items() if not f and p.is_dir()]  # the directories files are found in
    for s in sources.expand([p for p, f in wholes.items() if not f], names):
        unique.setdefault(s.path.resolve(), s)
    read = list(sources.opened(iter(unique.values()), spool))
    notes = [note for s in read for note in s.notes]
    unrecognised: dict[tuple[str, str], list[str]] = {}  # (archive or directory, what) -> names in it
    recognised = []
    for s in read:
        f = InputFile(s, fmt or registry.detect(s.path))
        if f.format is not None:
            recognised.append(f)
        elif s.archive is not None:
            unrecognised.setdefault((sources.short(s.archive), "member"), []).append(s.member)
        elif s.found:
            root = next(p for p in walked if s.origin.is_relative_to(p))
            where = sources.short(sources.display(root, names))
            unrecognised.setdefault((where, "file"), []).append(s.origin.relative_to(root).as_posix())
        else:
            head = sources.read_head(s.path, 4096).lstrip()
            if not head:
                raise IngestError(s.label, "empty file")
            if s.path.name.endswith((".json", ".jsonl")) and head[:1] not in (b"{", b"["):
                raise IngestError(s.label, "not JSON: a .json or .jsonl file must start with '{' or '['")
            raise IngestError(s.label, "unknown format", name_the_format())
    # only what is read gets hashed: a checkpoint beside the logs costs nothing
    sources.hashed([f.source for f in recognised])
    distinct, repeats = _read_once(recognised)
    files += distinct
    if not files:
        shown = ", ".join(sources.display(p, names) for p in paths)
        raise IngestError(shown, "no recognised trace file", name_the_format())
    files[0].notes = notes + [f"{where}: skipped {len(skipped)} {what}(s) no format recognises: "
                              f"{sources.listed(skipped)}" for (where, what), skipped in unrecognised.items()]
    files[0].notes += repeats
    return files


def _read_once(files: list[InputFile]) -> tuple[list[InputFile], list[str]]:
    """Each content once, as its first input, and a line for each input left out: a run recorded
    twice in one tree, or a file copied beside itself, would count every row of it twice."""
    first: dict[str, InputFile] = {}
    repeats = []
    for f in files:
        earlier = first.setdefault(f.source.sha256, f)
        if earlier is not f:
            repeats.append(f"{f.source.name} has the same bytes as {earlier.source.name}: read once")
    return list(first.values()), repeats


def _directory_format(path: Path, forced: Format | None) -> Format | None:
    """The format that takes this directory as one input (a Parquet lake), if any."""
    if not path.is_dir():
        return None
    if forced:
        return forced if forced.claims_directory else None
    return registry.claiming(path)


def _whole_directory(root: Path, names: Mapping[Path, str]) -> Source:
    h, size = hashlib.sha256(), 0
    for s in sources.expand([root], {}):
        h.update(f"{s.path.relative_to(root)}\0{sources.sha256_file(s.path)}\n".encode())
        size += s.path.stat().st_size
    return Source(root, sources.display(root, names), root, h.hexdigest(), size)


def run_digest(files: list[InputFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.source.sha256):
        h.update(f.source.sha256.encode())
    return h.hexdigest()


def new_run_id(con: duckdb.DuckDBPyConnection, digest: str) -> str:
    run_id = digest[:12]
    salt = 0
    while con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        salt += 1
        run_id = hashlib.sha256(f"{digest}:{salt}".encode()).hexdigest()[:12]
    return run_id


def default_name(paths: list[Path], names: Mapping[Path, str] | None = None) -> str:
    if names and paths[0] in names:
        first = sources.short(names[paths[0]])
        return first if len(paths) == 1 else f"{first} (+{len(paths) - 1})"
    p = paths[0].resolve()
    return p.name if len(paths) == 1 else f"{p.parent.name}/{p.name} (+{len(paths) - 1})"


def checked_overrides(overrides: dict | None) -> dict:
    unknown = set(overrides or {}) - set(RUN_COLUMNS)
    if unknown:
        raise IngestError(None, f"cannot set run field(s) {', '.join(sorted(unknown))}; "
                                f"settable: {', '.join(RUN_COLUMNS)}")
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    if "framework" in given:
        try:
            given["framework"] = vocabulary.framework_named(given["framework"])
        except vocabulary.VocabularyError as e:
            raise IngestError(None, str(e)) from None
    return given


def write_run(con, run_id: str, digest: str, files: list[InputFile], name: str,
              progress: Progress | None = None, overrides: dict | None = None) -> IngestResult:
    """Store the inputs as the new run `run_id` in one transaction, parsing those not parsed yet."""
    fmt_name = "+".join(sorted({f.format.name for f in files}))
    with store.transaction(con):
        con.execute("INSERT INTO runs (run_id, name, format, sha256, created_at) VALUES (?, ?, ?, ?, ?)",
                    [run_id, name, fmt_name, digest, now()])
        deferred = _stream(con, run_id, files, progress)
        run: dict = {}
        for f in files:
            fill_missing(run, {**(f.format.run_facts(f.source.origin) if f.format.run_facts else {}),
                          **f.parsed.run})
        for fmt, data in deferred.items():
            after = fmt.after_load(con, run_id, data)
            fill_missing(run, after.run)
            next(f for f in files if f.format is fmt).parsed.warnings.extend(after.warnings)
        given_cap = (overrides or {}).get("max_response_len") if "max_response_len" not in run else None
        run = {**(overrides or {}), **run}
        if run.get("framework") is None:
            run["framework"] = vocabulary.detected(con, run_id)
        con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)} WHERE run_id = ?",
                    [*(run.get(k) for k in RUN_COLUMNS), run_id])
        if given_cap is not None:
            files[0].notes += _outgrown_cap(con, run_id, given_cap)
        files[0].notes += _recorded_twice(con, run_id)
        log_many(con, [(f, run_id, "ok", "; ".join(_said(f)) or None, f.rows,
                         f.started or now()) for f in files])
        materialize(con, run_id)
    warnings = [w for f in files for w in _said(f)]
    return IngestResult(run_id, fmt_name, row_counts(con, run_id), warnings=warnings)


def _recorded_twice(con, run_id: str) -> list[str]:
    """A warning naming the steps whose metrics the inputs record more than once with different
    values: a resumed run's log repeats the steps after its checkpoint, and two runs' files given
    together share step numbers. The catalog reads one value a step and key, so it is said."""
    steps = [r[0] for r in con.execute(
        "SELECT DISTINCT step FROM (SELECT step FROM step_metrics WHERE run_id = ? AND isfinite(value) "
        "AND key <> 'log/truncated' GROUP BY step, key HAVING count(DISTINCT value) > 1) ORDER BY step",
        [run_id]).fetchall()]
    if not steps:
        return []
    shown = ", ".join(str(s) for s in steps[:5]) + (f" (+{len(steps) - 5} more)" if len(steps) > 5 else "")
    return [f"{len(steps)} step(s) recorded more than once with different values: {shown} (a resumed "
            "run, or two runs' files together?); each figure reads one of the recordings"]


def _said(f: InputFile) -> list[str]:
    return f.notes + f.parsed.warnings


def not_applied(existing: tuple[str, str], format: str | None, overrides: dict) -> list[str]:
    """What an ingest of content already stored asked for and did not get: the stored run stays as
    it was loaded."""
    given = [*overrides, *(["format"] if format and format not in existing[1].split("+") else [])]
    if not given:
        return []
    return [f"these inputs are run {existing[0]} already: {', '.join(given)} not applied "
            "(ingest again with force, --force, to load them with it)"]


def _outgrown_cap(con, run_id: str, cap: int) -> list[str]:
    """A line when token lengths run past the cap the user gave: generation stops at the cap, so
    the cap is likely not the run's, and every such response would count as cut at it."""
    over, n, longest = con.execute(
        "SELECT count(*) FILTER (WHERE s.response_len > $cap), count(*), max(s.response_len) FROM samples s "
        "JOIN runs r USING (run_id) WHERE s.run_id = $run AND coalesce(r.length_unit, 'tokens') = 'tokens'",
        {"run": run_id, "cap": cap}).fetchall()[0]
    if not over:
        return []
    return [f"{over:,} of {n:,} responses are longer than the response cap given, {cap:,} tokens (the "
            f"longest {longest:,}): is it the run's cap? The cap findings count them as cut at it"]


def _stream(con, run_id: str, files: list[InputFile], progress: Progress | None) -> dict[Format, list]:
    """Parse input by input and insert every FLUSH_BYTES of Arrow data, inside the caller's
    transaction.

    Memory stays bounded by one flush, not by the run, and the run still lands all or
    nothing. Returns, for each format with an after_load hook, its inputs' deferred data.
    """
    pending: dict[str, list[pa.Table]] = {}
    deferred: dict[Format, list] = {}
    size = parts = 0
    with workers.gc_paused(), closing(_parsed_in_order(files)) as parsed:
        for i, f in enumerate(parsed):
            if progress:
                progress(i, len(files), f.label)
            f.rows = f.parsed.rows
            if f.format.after_load:
                deferred.setdefault(f.format, []).append(f.parsed.deferred)
            for table, data in f.parsed.tables.items():
                pending.setdefault(table, []).append(data)
                size += data.nbytes
                parts += 1
            f.parsed.tables = {}
            if size >= FLUSH_BYTES or parts >= FLUSH_PARTS:
                _flush(con, run_id, pending)
                size = parts = 0
        if progress:
            progress(len(files), len(files), "loading")
        _flush(con, run_id, pending)
    return deferred


def parse_jobs(files: list[InputFile]) -> int:
    """Worker processes for parsing these inputs (ingest.workers.jobs); 1 below
    PARALLEL_MIN_BYTES in all."""
    todo = [f for f in files if f.parsed is None]
    if len(todo) < 2 or sum(f.source.bytes for f in todo) < PARALLEL_MIN_BYTES:
        return 1
    return min(workers.jobs(), len(todo))


def parse_cost(files: list[InputFile]) -> float:
    """What parsing these inputs costs, in bytes of NDJSON (Format.parse_cost)."""
    return sum(f.source.bytes * f.format.parse_cost for f in files)


def _parsed_in_order(files: list[InputFile]) -> Iterator[InputFile]:
    """Each input, parsed, in input order (by the parse executor); inputs the caller parsed
    already pass through."""
    todo = [f for f in files if f.parsed is None]
    calls = [(f.label, (f.path, f.format.name, f.label)) for f in todo]
    with closing(workers.in_order(parse_input, calls, parse_jobs(files), parse_cost(todo))) as results:
        for f in files:
            if f.parsed is None:
                f.parsed, f.started = next(results)
            yield f


# Many parts of this size or less on average are made contiguous before the INSERT
SMALL_PARTS, SMALL_PART_BYTES = 64, 1 << 20


def _flush(con, run_id: str, pending: dict[str, list[pa.Table]]) -> None:
    for table, parts in pending.items():
        for data in _concatenated(parts):
            insert(con, table, run_id, data)
    pending.clear()


def _concatenated(parts: list[pa.Table]) -> list[pa.Table]:
    """The parts of one canonical table as one table: one INSERT is much faster than many. Many
    small parts (a directory of tiny step files) are made contiguous: DuckDB pays per Arrow batch
    it appends (10,000 two-row batches took 1.2 GB), copying a few MB costs nothing."""
    if len(parts) == 1:
        return parts
    whole = pa.concat_tables(parts, promote_options="permissive")
    small = len(parts) > SMALL_PARTS and whole.nbytes < len(parts) * SMALL_PART_BYTES
    return [whole.combine_chunks() if small else whole]


def _log_failure(con, files: list[InputFile], reason: str, started: datetime) -> None:
    """Record a failed attempt; the caller raises the reason, even when the log cannot be
    written (a full disk)."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
    try:
        log_many(con, [(f, None, "failed", reason, 0, started)
                        for f in files or [InputFile(Source(Path("?"), "?", Path("?")))]])
    except duckdb.Error:
        pass

