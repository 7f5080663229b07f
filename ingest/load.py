"""Transactional load: parse every input first, then write the run in one DuckDB transaction."""
from __future__ import annotations

import hashlib
from collections import Counter
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable, Iterator, Mapping

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.ingest import registry, sources, workers
from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, Hint, IngestError, Parsed, cli_flag
from polytrace.ingest.parsing import now, parse_input
from polytrace.ingest.run_facts import RUN_COLUMNS
from polytrace.ingest.sources import Source, Spool
from polytrace.store.aggregates import materialize
from polytrace.store.runs import RUN_ID, data_tables, row_counts

# Parsed Arrow data held before it is inserted: bounds ingest memory on runs of any size.
FLUSH_BYTES = 256 * 1024**2
# Below this many input bytes, starting parse workers costs more than it saves.
PARALLEL_MIN_BYTES = 32 * 1024**2
Progress = Callable[[int, int, str], None]
# How the operating system words ENOSPC in the errors DuckDB passes on.
NO_SPACE = "No space left on device"
# A DuckDB file starts with its header: the main block and two database headers of 4 KiB.
DUCKDB_HEADER_BYTES = 3 * 4096


class RunConflict(IngestError):
    """The input is a run this database already holds under its id with other content."""


class DiskFull(IngestError):
    """The database's disk filled up during the ingest; nothing was written."""


@dataclass
class IngestResult:
    run_id: str
    format: str
    rows: dict[str, int]
    existing: bool = False
    warnings: list[str] = field(default_factory=list)
    # every run the ingest wrote or found: several when a Parquet lake restores many
    run_ids: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.run_ids = self.run_ids or [self.run_id]


@dataclass
class InputFile:
    """One input (a file, an archive member, or a directory a format takes whole) and what
    parsing it gave."""

    source: Source
    format: Format | None = None
    parsed: Parsed | None = None
    started: datetime | None = None
    rows: int = 0
    notes: list[str] = field(default_factory=list)  # what reading the inputs skipped

    @property
    def path(self) -> Path:
        return self.source.path

    @property
    def label(self) -> str:
        return self.source.label


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
                _parse_all(files, progress)
                return _restore(con, files, name, trusted)
            digest = run_digest(files)
            if not force:
                existing = con.execute(
                    "SELECT run_id, format FROM runs WHERE sha256 = ? ORDER BY created_at LIMIT 1",
                    [digest]).fetchone()
                if existing:
                    return IngestResult(existing[0], existing[1], row_counts(con, existing[0]),
                                        existing=True)
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
            _reclaim(con)
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


def _reclaim(con) -> None:
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
        yield _collect(paths, forced, names or {}, spool)
    finally:
        spool.close()


def _collect(paths: list[Path], forced: str | None, names: Mapping[Path, str],
             spool: Spool) -> list[InputFile]:
    fmt = registry.get(forced) if forced else None
    wholes = {p: _directory_format(p, fmt) for p in paths}
    files = [InputFile(_whole_directory(p, names), f) for p, f in wholes.items() if f]
    # a file named twice (or also inside a named directory) is still one input
    unique: dict[Path, Source] = {}
    for s in sources.expand([p for p, f in wholes.items() if not f], names):
        unique.setdefault(s.path.resolve(), s)
    if _likely_parallel(list(unique.values())):
        workers.warm()
    read = sources.hashed(list(sources.opened(iter(unique.values()), spool)))
    notes = [note for s in read for note in s.notes]
    unrecognised: dict[str, list[str]] = {}
    for s in read:
        f = InputFile(s, fmt or registry.detect(s.path))
        if f.format is not None:
            files.append(f)
        elif s.archive is not None:
            unrecognised.setdefault(sources.short(s.archive), []).append(s.member)
        elif not s.found:
            if not sources.read_head(s.path, 4096).strip():
                raise IngestError(s.label, "empty file")
            raise IngestError(s.label, "unknown format", _name_the_format())
    if not files:
        shown = ", ".join(sources.display(p, names) for p in paths)
        raise IngestError(shown, "no recognised trace file", _name_the_format())
    files[0].notes = notes + [f"{archive}: skipped {len(members)} member(s) no format recognises, "
                              f"e.g. {members[0]}" for archive, members in unrecognised.items()]
    return files


def _likely_parallel(listed: list[Source]) -> bool:
    """Whether these files (archives not opened yet) will probably be parsed by workers."""
    several = len(listed) > 1 or any(sources.is_archive(s.path) for s in listed)
    return several and sum(s.path.stat().st_size for s in listed) >= PARALLEL_MIN_BYTES \
        and workers.jobs() > 1


def _name_the_format() -> Hint:
    return Hint("format", f"try {{option}}; known: {registry.known()}")


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


def _parse_all(files: list[InputFile], progress: Progress | None) -> None:
    for i, f in enumerate(files):
        if progress:
            progress(i, len(files), f.label)
        with workers.gc_paused():
            f.parsed, f.started = parse_input(f.path, f.format.name, f.label)
    if progress:
        progress(len(files), len(files), "loading")


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


def _filled(run: dict, facts: dict) -> None:
    """Take each fact the run does not have yet."""
    for k, v in facts.items():
        if v is not None and run.get(k) is None:
            run[k] = v


def checked_overrides(overrides: dict | None) -> dict:
    unknown = set(overrides or {}) - set(RUN_COLUMNS)
    if unknown:
        raise IngestError(None, f"cannot set run field(s) {', '.join(sorted(unknown))}; "
                                f"settable: {', '.join(RUN_COLUMNS)}")
    return {k: v for k, v in (overrides or {}).items() if v is not None}


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
            _filled(run, {**(f.format.run_facts(f.source.origin) if f.format.run_facts else {}),
                          **f.parsed.run})
        for fmt, data in deferred.items():
            after = fmt.after_load(con, run_id, data)
            _filled(run, after.run)
            next(f for f in files if f.format is fmt).parsed.warnings.extend(after.warnings)
        run = {**(overrides or {}), **run}
        con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)} WHERE run_id = ?",
                    [*(run.get(k) for k in RUN_COLUMNS), run_id])
        _log_many(con, [(f, run_id, "ok", "; ".join(_warnings(f)) or None, f.rows,
                         f.started or now()) for f in files])
        materialize(con, run_id)
    warnings = [w for f in files for w in _warnings(f)]
    return IngestResult(run_id, fmt_name, row_counts(con, run_id), warnings=warnings)


def _warnings(f: InputFile) -> list[str]:
    return f.notes + f.parsed.warnings


def _stream(con, run_id: str, files: list[InputFile], progress: Progress | None) -> dict[Format, list]:
    """Parse input by input and insert every FLUSH_BYTES of Arrow data, inside the caller's
    transaction.

    Memory stays bounded by one flush, not by the run, and the run still lands all or
    nothing. Returns, for each format with an after_load hook, its inputs' deferred data.
    """
    pending: dict[str, list[pa.Table]] = {}
    deferred: dict[Format, list] = {}
    size = 0
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
            f.parsed.tables = {}
            if size >= FLUSH_BYTES:
                _flush(con, run_id, pending)
                size = 0
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


def _parsed_in_order(files: list[InputFile]) -> Iterator[InputFile]:
    """Each input, parsed, in input order (by the parse executor); inputs the caller parsed
    already pass through."""
    todo = [f for f in files if f.parsed is None]
    calls = [(f.label, (f.path, f.format.name, f.label)) for f in todo]
    with closing(workers.in_order(parse_input, calls, parse_jobs(files))) as results:
        for f in files:
            if f.parsed is None:
                f.parsed, f.started = next(results)
            yield f


def _flush(con, run_id: str, pending: dict[str, list[pa.Table]]) -> None:
    for table, parts in pending.items():
        for data in _concatenated(parts):
            _insert(con, table, run_id, data)
    pending.clear()


def _concatenated(parts: list[pa.Table]) -> list[pa.Table]:
    """The parts of one canonical table as one table: one INSERT is much faster than many."""
    return [pa.concat_tables(parts, promote_options="permissive")] if len(parts) > 1 else parts


def _insert(con, table: str, run_id: str, data: pa.Table) -> None:
    if data.num_rows == 0:
        return
    # A stream, not the table: DuckDB keeps a registered table's buffers alive until the
    # transaction ends (the whole run, in memory); a stream's batches are copied as read.
    stream = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    with store.registered(con, "_incoming", stream):
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT *, ? AS run_id FROM _incoming', [run_id])


def _restore(con, files: list[InputFile], name: str | None, trusted: bool) -> IngestResult:
    """Put back the whole runs a Parquet lake carries: same ids and rows.

    A run whose id is already here with the same content is left alone; one with other
    content is a RunConflict. The new runs land in one transaction. A trusted lake (one
    the user ingests from their own disk) keeps its digests and its ingest history. An
    untrusted one (an upload) is restored only as what its bytes are: each run's digest is
    computed from its partition files, never read from its `runs` row (anyone can write
    the digest of someone else's trace there, and uploads deduplicate on it), and the
    origin's ingest history, which nothing here can check, stays behind.
    """
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
    known = {"runs", *data_tables(con), *(("ingests",) if trusted else ())}
    skipped = sorted(set(f.parsed.tables) - known - {"ingests"})
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
                _log_many(con, [(f, run_id, "ok", note, rows, f.started or now())])


def _log_many(con, entries: list[tuple]) -> None:
    """One `ingests` row per (input, run_id, status, error, rows, started), in one INSERT."""
    finished = now()
    cols = {
        "run_id": from_list([e[1] for e in entries], pa.string()),
        "file_name": from_list([e[0].source.name for e in entries], pa.string()),
        "sha256": from_list([e[0].source.sha256 or None for e in entries], pa.string()),
        "format": from_list([e[0].format.name if e[0].format else None for e in entries], pa.string()),
        "bytes": from_list([e[0].source.bytes for e in entries], pa.int64()),
        "rows": from_list([e[4] for e in entries], pa.int64()),
        "status": from_list([e[2] for e in entries], pa.string()),
        "error": from_list([e[3] for e in entries], pa.string()),
        "started_at": from_list([e[5] for e in entries], pa.timestamp("us")),
        "finished_at": from_list([finished] * len(entries), pa.timestamp("us")),
    }
    with store.registered(con, "_ingest_log", pa.table(cols)):
        con.execute(f"INSERT INTO ingests ({', '.join(cols)}) SELECT * FROM _ingest_log")


def _log_failure(con, files: list[InputFile], reason: str, started: datetime) -> None:
    """Record a failed attempt; the caller raises the reason, even when the log cannot be
    written (a full disk)."""
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
    try:
        _log_many(con, [(f, None, "failed", reason, 0, started)
                        for f in files or [InputFile(Source(Path("?"), "?", Path("?")))]])
    except duckdb.Error:
        pass
