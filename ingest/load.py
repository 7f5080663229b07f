"""Transactional load: parse every input first, then write the run in one DuckDB transaction."""
from __future__ import annotations

import hashlib
import json
import tempfile
from collections import Counter
from contextlib import ExitStack, closing, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path, PurePath
from typing import Callable, Iterator, Mapping

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.ingest import live, registry, sources, workers
from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, Hint, IngestError, Parsed, cli_flag
from polytrace.ingest.formats import verl_console
from polytrace.ingest.live import Appended, Chunk
from polytrace.ingest.parsing import now, parse_input
from polytrace.ingest.run_facts import RUN_COLUMNS
from polytrace.ingest.sources import Source, Spool
from polytrace.store import vocabulary
from polytrace.store.aggregates import materialize
from polytrace.store.migrate import RETIRED_TABLES
from polytrace.store.runs import RUN_ID, changed, data_tables, exists, row_counts

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
                    return IngestResult(existing[0], existing[1], row_counts(con, existing[0]), existing=True,
                                        warnings=_not_applied(existing, format, checked_overrides(run_overrides)))
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
            raise IngestError(s.label, "unknown format", _name_the_format())
    # only what is read gets hashed: a checkpoint beside the logs costs nothing
    sources.hashed([f.source for f in recognised])
    distinct, repeats = _read_once(recognised)
    files += distinct
    if not files:
        shown = ", ".join(sources.display(p, names) for p in paths)
        raise IngestError(shown, "no recognised trace file", _name_the_format())
    files[0].notes = notes + [f"{where}: skipped {len(skipped)} {what}(s) no format recognises, "
                              f"e.g. {skipped[0]}" for (where, what), skipped in unrecognised.items()]
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
        given_cap = (overrides or {}).get("max_response_len") if "max_response_len" not in run else None
        run = {**(overrides or {}), **run}
        if run.get("framework") is None:
            run["framework"] = vocabulary.detected(con, run_id)
        con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)} WHERE run_id = ?",
                    [*(run.get(k) for k in RUN_COLUMNS), run_id])
        if given_cap is not None:
            files[0].notes += _outgrown_cap(con, run_id, given_cap)
        _log_many(con, [(f, run_id, "ok", "; ".join(_warnings(f)) or None, f.rows,
                         f.started or now()) for f in files])
        materialize(con, run_id)
    warnings = [w for f in files for w in _warnings(f)]
    return IngestResult(run_id, fmt_name, row_counts(con, run_id), warnings=warnings)


def _warnings(f: InputFile) -> list[str]:
    return f.notes + f.parsed.warnings


def _not_applied(existing: tuple[str, str], format: str | None, overrides: dict) -> list[str]:
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


# --- live appends: a followed file's new whole steps into its run (ingest/live.py) ---------------

def append_chunk(con, run_id: str, chunk: Chunk, *, name: str | None = None,
                 source: str | None = None) -> Appended:
    """Commit what is whole in `chunk` to the live run `run_id` (created on its first append, named
    `name`, following the directory `source`), in one transaction with the file's new committed
    offset: a log's whole lines, or a complete step file. Bytes before the committed offset are
    skipped, so sending them again changes nothing. Only the new steps' aggregates are computed,
    so a step costs the same in a long run as in a short one.

    Raises Gap when the chunk starts past the committed offset, IngestError when its bytes do not
    parse; then nothing changed.
    """
    with store.transaction(con):
        _forget_deleted(con, run_id)
        state = live.file_states(con, run_id).get(chunk.file_name, live.FileState())
        if chunk.reset and (state.committed or state.identity):
            state = live.FileState(0, state.format, note=f"{chunk.file_name} is a new file under the same name "
                                                         "(rotated or truncated): followed from its first byte")
        fmt = _live_format(state, chunk)
        how = live.mode(fmt.name, _chunk_gzipped(chunk))
        taken = _take_lines(con, run_id, chunk, state, fmt, source) if how == "lines" \
            else _take_whole(chunk, state, fmt, how)
        if isinstance(taken, live.Appended):
            return taken
        _new_live_run(con, run_id, name or run_id, source)
        changed(con, run_id)
        steps = sorted(_steps_of(taken.parsed))
        rows = _write_live(con, run_id, taken.parsed.tables, taken.replace)
        facts_changed = _live_facts(con, run_id, fmt, taken.parsed, source, chunk.file_name)
        state = live.FileState(taken.committed, fmt.name, chunk.identity or state.identity,
                               chunk.mtime, steps if how != "lines" else [], state.note)
        _keep_state(con, run_id, chunk, state, fmt, taken.notes, rows, taken.parsed.warnings, source)
        _mark_live(con, run_id, steps)
        if facts_changed or steps:  # a run column the aggregates read (the cap) changes every step's
            materialize(con, run_id, None if facts_changed else steps)
    return live.Appended(taken.committed, steps, rows, taken.notes)


@dataclass
class _Taken:
    """What an append takes of its chunk: the parsed rows, the file's new committed offset, the
    steps whose old rows they replace (a reloaded step file), and what to say."""

    parsed: Parsed
    committed: int
    replace: list[int] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _take_lines(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format,
                source: str | None) -> _Taken | Appended:
    """A log's whole new lines; or, with none yet, the file's offset as it stands."""
    taken = _whole_lines(con, run_id, chunk, state, fmt)
    if not taken:
        if chunk.reset:  # the new file's identity, at byte 0
            _keep_state(con, run_id, chunk, live.FileState(0, fmt.name, chunk.identity, note=state.note),
                        fmt, [], source=source)
        return live.Appended(state.committed)
    return _Taken(_parse_chunk(fmt, chunk.file_name, taken, state.committed), state.committed + len(taken))


def _take_whole(chunk: Chunk, state: live.FileState, fmt: Format, how: str) -> _Taken | Appended:
    """A complete step file or trace; nothing while it is not complete or unchanged since taken."""
    if not chunk.complete:
        return live.Appended(state.committed)
    if chunk.offset:
        raise live.Gap(chunk.file_name, 0)  # a whole file is sent whole
    size = chunk.size  # before parsing: a file that grows meanwhile is taken again later
    if state.committed and (state.committed, state.mtime) == (size, chunk.mtime):
        return live.Appended(state.committed, state.steps)
    if state.committed and how == "trace":
        raise IngestError(chunk.file_name, "changed after it was loaded; a trace is loaded once "
                                           "(ingest the directory again to take the new one)")
    replace = state.steps if state.committed else []
    notes = [f"{chunk.file_name} changed after it was loaded: its step(s) {replace[:5]} were reloaded"] \
        if replace else []
    parsed = _parse_chunk(fmt, chunk.file_name, chunk.data if chunk.path is None else chunk.path, 0)
    return _Taken(parsed, size, replace, notes)


def _forget_deleted(con, run_id: str) -> None:
    """A live run deleted while followed starts again from its files' first bytes; appends never
    reach a run that a batch ingest made."""
    if not exists(con, run_id):
        con.execute("DELETE FROM live_files WHERE live_run = ?", [run_id])
        con.execute("DELETE FROM live_runs WHERE live_run = ?", [run_id])
    elif not con.execute("SELECT 1 FROM live_runs WHERE live_run = ?", [run_id]).fetchall():
        raise RunConflict(None, f"run {run_id} was ingested whole, not followed: appends go to a live run")


def _live_format(state: live.FileState, chunk: Chunk) -> Format:
    name = state.format or chunk.format
    if name is None and chunk.offset == 0:
        head = (sources.without_bom(chunk.data[:sources.HEAD_BYTES]) if chunk.data is not None
                else sources.read_head(chunk.path))
        if head.startswith(sources.GZIP_MAGIC):
            head = _gunzipped_head(head)
        name = live.sniff_bytes(head, PurePath(chunk.file_name).name)
    if name is None:
        raise IngestError(chunk.file_name, "no format recognises its first bytes", _name_the_format())
    fmt = registry.get(name)
    if not live.mode(fmt.name):
        raise IngestError(chunk.file_name, f"{fmt.name} is not followed live; "
                                           f"followed: {', '.join(live.FOLLOWED)}")
    return fmt


def _gunzipped_head(data: bytes) -> bytes:
    import zlib

    try:
        return zlib.decompressobj(wbits=31).decompress(data, sources.HEAD_BYTES)
    except zlib.error:
        return b""


def _chunk_gzipped(chunk: Chunk) -> bool:
    if chunk.data is not None:
        return chunk.offset == 0 and chunk.data[:2] == sources.GZIP_MAGIC
    return sources.is_gzip(chunk.path) if chunk.path else False


def _whole_lines(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format) -> bytes:
    """The chunk's whole lines past the committed offset; a DAPO filter line only once its step's
    packed lengths are in the run."""
    if chunk.offset > state.committed:
        raise live.Gap(chunk.file_name, state.committed)
    data = chunk.data if chunk.data is not None else sources.read_bytes(chunk.path)
    taken = live.whole_lines(data[state.committed - chunk.offset:])
    return _filter_ready(con, run_id, taken) if fmt.name == "polytrace-filter" else taken


def _filter_ready(con, run_id: str, data: bytes) -> bytes:
    """The filter lines, in order, up to the first whose step has no samples in the run yet."""
    import msgspec

    lines = data.splitlines(keepends=True)
    wanted = []
    for line in lines:
        try:
            step = msgspec.json.decode(line).get("workload_step") if line.strip() else None
        except (msgspec.DecodeError, AttributeError, RecursionError):
            step = None
        # a bad line (or a step out of range) waits for nothing: the parse says what is wrong with it
        wanted.append(step if isinstance(step, int) and -(2**31) <= step < 2**31 else None)
    present = {r[0] for r in con.execute(
        "SELECT DISTINCT step FROM samples WHERE run_id = $run AND list_contains($steps, step)",
        {"run": run_id, "steps": [s for s in wanted if s is not None]}).fetchall()}
    ready = 0
    for line, step in zip(lines, wanted):
        if step is not None and step not in present:
            break
        ready += len(line)
    return data[:ready]


def _parse_chunk(fmt: Format, file_name: str, data: bytes | Path, offset: int) -> Parsed:
    """Parse whole lines (or a whole file) with the format's own parse, as a file of their own
    named like the followed one (a trace's rank may come from its name)."""
    label = sources.short(file_name)
    if isinstance(data, Path):
        return parse_input(data, fmt.name, label)[0]
    if fmt.name == "verl-console" and not verl_console.STEP_LINE_IN_HEAD.search(data):
        # a log's preamble before its first step: only the run facts it names
        return Parsed(run=verl_console.run_facts(data.decode("utf-8", errors="replace")))
    if not data.strip():
        return Parsed()
    with tempfile.TemporaryDirectory(prefix="polytrace-live-") as tmp:
        path = Path(tmp) / label
        path.write_bytes(data)
        try:
            return parse_input(path, fmt.name, label)[0]
        except IngestError as e:
            where = f"in the bytes from {offset}: " if offset else ""
            raise IngestError(label, where + e.reason, e.hint) from None


def _steps_of(parsed: Parsed) -> set[int]:
    import pyarrow.compute as pc

    steps: set[int] = set()
    for data in [*parsed.tables.values(), parsed.deferred]:
        if isinstance(data, pa.Table) and "step" in data.column_names and data.num_rows:
            steps.update(s for s in pc.unique(data.column("step")).to_pylist() if s is not None)
    return steps


def _write_live(con, run_id: str, tables: dict[str, pa.Table], replace: list[int]) -> int:
    """Insert an append's rows; the net change in rows. The steps in `replace` (a reloaded step
    file) lose their old rows first, and a step's metric logged again replaces its old value
    (as a batch ingest keeps the last value of a step logged twice)."""
    rows = 0
    for table, data in tables.items():
        if not data.num_rows:
            continue
        flags = _filter_flags(con, run_id, replace) if replace and table == "samples" else None
        if replace:
            rows -= _deleted(con, f'DELETE FROM "{table}" WHERE run_id = $run AND step BETWEEN $lo AND $hi '
                                  "AND list_contains($steps, step)",
                             {"run": run_id, "lo": min(replace), "hi": max(replace), "steps": replace})
        if table == "step_metrics":
            rows -= _overridden(con, run_id, data)
        _insert(con, table, run_id, data)
        if flags is not None and flags.num_rows:
            with store.registered(con, "_flags", flags):
                con.execute("UPDATE samples SET kept = f.kept, used = f.used FROM _flags f WHERE samples.run_id = ? "
                            "AND samples.step = f.step AND samples.prompt_id = f.prompt_id", [run_id])
        rows += data.num_rows
    return rows


def _filter_flags(con, run_id: str, steps: list[int]) -> pa.Table:
    """The kept/used flags a DAPO filter line set on these steps' prompts: a reloaded step file
    keeps them, as the filter's lines were taken already (a batch ingest applies them last)."""
    return con.sql("SELECT DISTINCT step, prompt_id, kept, used FROM samples WHERE run_id = $run "
                   "AND list_contains($steps, step) AND (kept IS NOT NULL OR used IS NOT NULL)",
                   params={"run": run_id, "steps": steps}).to_arrow_table()


def _deleted(con, sql: str, params: dict) -> int:
    return con.execute(sql, params).fetchall()[0][0]


def _overridden(con, run_id: str, data: pa.Table) -> int:
    """Delete the stored values the new step metrics replace; how many."""
    import pyarrow.compute as pc

    lo, hi = pc.min_max(data.column("step")).values()
    with store.registered(con, "_logged_again", data.select(["step", "key"])):
        # the step range lets the scan skip the run's older row groups
        return _deleted(con, "DELETE FROM step_metrics WHERE run_id = $run AND step BETWEEN $lo AND $hi "
                             "AND EXISTS (SELECT 1 FROM _logged_again n WHERE n.step = step_metrics.step "
                             "AND n.key = step_metrics.key)", {"run": run_id, "lo": lo.as_py(), "hi": hi.as_py()})


def _new_live_run(con, run_id: str, name: str, source: str | None) -> None:
    if exists(con, run_id):
        return
    con.execute("INSERT INTO runs (run_id, name, format, created_at) VALUES (?, ?, '', ?)", [run_id, name, now()])
    con.execute("INSERT INTO live_runs (live_run, source, facts) VALUES (?, ?, '{}')", [run_id, source])


def _live_facts(con, run_id: str, fmt: Format, parsed: Parsed, source: str | None, file_name: str) -> bool:
    """Fill the run's columns as a batch ingest of the same files would: the facts files give,
    first mention wins, then what the format's after_load derives from the run so far. Whether a
    column changed (the per-step aggregates read some, such as max_response_len)."""
    (stored,) = con.execute("SELECT facts FROM live_runs WHERE live_run = ?", [run_id]).fetchone()
    facts = json.loads(stored or "{}")
    origin = Path(source) / file_name if source else None
    _filled(facts, {**(fmt.run_facts(origin) if fmt.run_facts and origin else {}), **parsed.run})
    derived: dict = {}
    if fmt.after_load and (parsed.tables or parsed.deferred is not None):
        after = fmt.after_load(con, run_id, [parsed.deferred])
        derived = after.run
        parsed.warnings.extend(after.warnings)
    columns = ("format", *RUN_COLUMNS, "length_unit")
    before = con.execute(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    current = dict(zip(columns, before))
    if facts.get("framework") is None and derived.get("framework") is None and current["framework"] is None:
        derived["framework"] = vocabulary.detected(con, run_id)
    run = {k: facts[k] if facts.get(k) is not None else derived.get(k, current[k]) for k in RUN_COLUMNS}
    con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)}, format = ? WHERE run_id = ?",
                [*(run[k] for k in RUN_COLUMNS), _live_formats(con, run_id, fmt.name), run_id])
    con.execute("UPDATE live_runs SET facts = ? WHERE live_run = ?", [json.dumps(facts), run_id])
    after = con.execute(f"SELECT {', '.join(columns)} FROM runs WHERE run_id = ?", [run_id]).fetchone()
    return tuple(before[1:]) != tuple(after[1:])


def _live_formats(con, run_id: str, adding: str) -> str:
    """The run's formats as a batch ingest names them: every followed file's, sorted, joined by '+'."""
    have = {r[0] for r in con.execute("SELECT format FROM live_files WHERE live_run = ? AND committed > 0 "
                                      "AND format IS NOT NULL", [run_id]).fetchall()}
    return "+".join(sorted(have | {adding}))


def _keep_state(con, run_id: str, chunk: Chunk, state: live.FileState, fmt: Format, notes: list[str],
                rows: int = 0, warnings: list[str] | None = None, source: str | None = None) -> None:
    """The file's committed offset (live_files) and its line in the ingest log, beside its rows."""
    when = now()
    notes = [*([state.note] if state.note else []), *notes]
    con.execute("DELETE FROM live_files WHERE live_run = ? AND file_name = ?", [run_id, chunk.file_name])
    con.execute("INSERT INTO live_files (live_run, file_name, format, committed, identity, mtime, steps, note, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, chunk.file_name, fmt.name, state.committed, state.identity, state.mtime,
                 state.steps, "; ".join(notes) or None, when])
    if not exists(con, run_id):
        return
    shown = f"{source}/{chunk.file_name}" if source else chunk.file_name
    said = "; ".join([*notes, *(warnings or [])]) or None
    logged = con.execute("SELECT ingest_id FROM ingests WHERE run_id = ? AND file_name = ?",
                         [run_id, shown]).fetchall()
    if logged:
        con.execute("UPDATE ingests SET bytes = ?, rows = rows + ?, error = coalesce(?, error), "
                    "finished_at = ? WHERE ingest_id = ?", [state.committed, rows, said, when, logged[0][0]])
    else:
        con.execute("INSERT INTO ingests (run_id, file_name, format, bytes, rows, status, error, started_at, "
                    "finished_at) VALUES (?, ?, ?, ?, ?, 'ok', ?, ?, ?)",
                    [run_id, shown, fmt.name, state.committed, rows, said, when, when])


def _mark_live(con, run_id: str, steps: list[int]) -> None:
    when = now()
    con.execute("UPDATE live_runs SET last_append_at = $when, "
                "last_step = CASE WHEN $top IS NULL THEN last_step ELSE greatest(coalesce(last_step, $top), $top) END, "
                "last_step_at = CASE WHEN $top IS NULL THEN last_step_at ELSE $when END WHERE live_run = $run",
                {"when": when, "top": max(steps) if steps else None, "run": run_id})
