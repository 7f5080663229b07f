"""Transactional load: parse every file first, then write the run in one DuckDB transaction."""
from __future__ import annotations

import gc
import hashlib
from collections import Counter, deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable, Iterator

import duckdb
import pyarrow as pa

from polytrace import store
from polytrace.ingest import registry, workers
from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, IngestError, Parsed
from polytrace.ingest.layout import run_facts
from polytrace.ingest.run_facts import RUN_COLUMNS
from polytrace.ingest.sources import expand, read_head, sha256_file
from polytrace.store.aggregates import materialize
from polytrace.store.runs import data_tables, row_counts

# Parsed Arrow data held before it is inserted: bounds ingest memory on runs of any size.
FLUSH_BYTES = 256 * 1024**2
# Below this many input bytes, forking parse workers costs more than it saves.
PARALLEL_MIN_BYTES = 32 * 1024**2
Progress = Callable[[int, int, str], None]


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
    """One input (a file, or a directory a format takes whole) and what parsing it gave."""

    path: Path
    sha256: str
    bytes: int
    format: Format | None = None
    parsed: Parsed | None = None
    started: datetime | None = None
    rows: int = 0


def _now() -> datetime:
    return datetime.now(timezone.utc).replace(tzinfo=None)


def ingest_paths(
    con: duckdb.DuckDBPyConnection,
    paths: list[Path],
    *,
    name: str | None = None,
    format: str | None = None,
    force: bool = False,
    progress: Progress | None = None,
    run_overrides: dict | None = None,
) -> IngestResult:
    """Ingest files (or directories of files) as one run; a Parquet lake restores each of its runs.

    run_overrides fills runs columns (RUN_COLUMNS, e.g. max_response_len) the input does
    not carry; what the input says wins.

    Raises IngestError with a one-line reason; then no data table changed and a
    `failed` row per file records the attempt in `ingests`.
    """
    started = _now()
    files: list[InputFile] = []
    try:
        files = collect(paths, format)
        digest = run_digest(files)
        if not force:
            existing = con.execute(
                "SELECT run_id, format FROM runs WHERE sha256 = ? ORDER BY created_at LIMIT 1",
                [digest]).fetchone()
            if existing:
                return IngestResult(existing[0], existing[1], row_counts(con, existing[0]), existing=True)
        if any(f.path.is_dir() for f in files):  # a container of whole runs (a Parquet lake)
            _parse_all(files, progress)
            return _restore(con, files, name)
        run_id = new_run_id(con, digest)
        return write_run(con, run_id, digest, files, name or default_name(paths), progress,
                         checked_overrides(run_overrides))
    except IngestError as e:
        _log_failure(con, files or [InputFile(p, "", 0) for p in paths], str(e), started)
        raise
    except duckdb.Error as e:
        msg = f"database rejected the data: {str(e).splitlines()[0]}"
        _log_failure(con, files, msg, started)
        raise IngestError(msg) from None


def collect(paths: list[Path], forced: str | None) -> list[InputFile]:
    """The inputs below `paths` with their hashes and formats; IngestError if none is a trace."""
    fmt = registry.get(forced) if forced else None
    wholes = {p: _directory_format(p, fmt) for p in paths}
    files = [_whole_directory(p, f) for p, f in wholes.items() if f]
    # a file named twice (or also inside a named directory) is still one input
    listed = list({p.resolve(): p for p in expand([p for p, f in wholes.items() if not f])}.values())
    named_dir = any(p.is_dir() for p in paths)
    for path, digest in zip(listed, _hashes(listed)):
        f = InputFile(path, digest, path.stat().st_size)
        f.format = fmt or registry.detect(path)
        if f.format is None and not named_dir:
            if not read_head(path, 4096).strip():
                raise IngestError(f"{path.name}: empty file")
            raise IngestError(f"{path.name}: unknown format (try --format; known: "
                              f"{', '.join(x.name for x in registry.FORMATS)})")
        if f.format is not None:
            files.append(f)
    if not files:
        where = ", ".join(str(p) for p in paths)
        raise IngestError(f"{where}: no recognised trace file")
    return files


def _hashes(paths: list[Path]) -> list[str]:
    """sha256 of each file; hashlib and file reads release the GIL, so threads overlap them."""
    if len(paths) < 2:
        return [sha256_file(p) for p in paths]
    with ThreadPoolExecutor(max_workers=min(4, len(paths))) as pool:
        return list(pool.map(sha256_file, paths))


def _directory_format(path: Path, forced: Format | None) -> Format | None:
    """The format that takes this directory as one input (a Parquet lake), if any."""
    if not path.is_dir():
        return None
    if forced:
        return forced if forced.claims_directory else None
    return registry.claiming(path)


def _whole_directory(root: Path, fmt: Format) -> InputFile:
    h, size = hashlib.sha256(), 0
    for path in expand([root]):
        h.update(f"{path.relative_to(root)}\0{sha256_file(path)}\n".encode())
        size += path.stat().st_size
    return InputFile(root, h.hexdigest(), size, fmt)


def run_digest(files: list[InputFile]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.sha256):
        h.update(f.sha256.encode())
    return h.hexdigest()


def _parse_all(files: list[InputFile], progress: Progress | None) -> None:
    with _gc_paused():
        for i, f in enumerate(files):
            if progress:
                progress(i, len(files), f.path.name)
            parse_one(f)
    if progress:
        progress(len(files), len(files), "loading")


@contextmanager
def _gc_paused():
    """Parsing allocates millions of acyclic objects; cyclic GC passes over them only cost time."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def parse_one(f: InputFile) -> None:
    f.started = _now()
    try:
        f.parsed = f.format.parse(f.path)
    except IngestError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, OverflowError, UnicodeError,
            pa.ArrowException, EOFError, OSError, RecursionError, MemoryError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise IngestError(f"{f.path.name}: {reason}") from None


def new_run_id(con: duckdb.DuckDBPyConnection, digest: str) -> str:
    run_id = digest[:12]
    salt = 0
    while con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        salt += 1
        run_id = hashlib.sha256(f"{digest}:{salt}".encode()).hexdigest()[:12]
    return run_id


def default_name(paths: list[Path]) -> str:
    p = paths[0].resolve()
    return p.name if len(paths) == 1 else f"{p.parent.name}/{p.name} (+{len(paths) - 1})"


def _merged_run(files: list[InputFile]) -> dict:
    run: dict = {}
    for f in files:
        facts = run_facts(f.path) if f.format.name.startswith("polytrace") else {}
        for k, v in {**facts, **f.parsed.run}.items():
            if v is not None and run.get(k) is None:
                run[k] = v
    return run


def checked_overrides(overrides: dict | None) -> dict:
    unknown = set(overrides or {}) - set(RUN_COLUMNS)
    if unknown:
        raise IngestError(f"cannot set run field(s) {', '.join(sorted(unknown))}; "
                          f"settable: {', '.join(RUN_COLUMNS)}")
    return {k: v for k, v in (overrides or {}).items() if v is not None}


def write_run(con, run_id: str, digest: str, files: list[InputFile], name: str,
              progress: Progress | None = None, overrides: dict | None = None) -> IngestResult:
    """Store the files as the new run `run_id` in one transaction, parsing those not parsed yet."""
    fmt_name = "+".join(sorted({f.format.name for f in files}))
    with store.transaction(con):
        con.execute("INSERT INTO runs (run_id, name, format, sha256, created_at) VALUES (?, ?, ?, ?, ?)",
                    [run_id, name, fmt_name, digest, _now()])
        filters = _stream(con, run_id, files, progress)
        run = {**(overrides or {}), **_merged_run(files)}
        con.execute(f"UPDATE runs SET {', '.join(f'{k} = ?' for k in RUN_COLUMNS)} WHERE run_id = ?",
                    [*(run.get(k) for k in RUN_COLUMNS), run_id])
        for data in filters:
            _apply_filter(con, run_id, data)
        _log_many(con, [(f, run_id, "ok", "; ".join(f.parsed.warnings) or None, f.rows,
                         f.started or _now()) for f in files])
        materialize(con, run_id)
    warnings = [w for f in files for w in f.parsed.warnings]
    return IngestResult(run_id, fmt_name, row_counts(con, run_id), warnings=warnings)


def _stream(con, run_id: str, files: list[InputFile], progress: Progress | None) -> list[pa.Table]:
    """Parse file by file and insert every FLUSH_BYTES of Arrow data, inside the caller's transaction.

    Memory stays bounded by one flush, not by the run, and the run still lands all or
    nothing. Returns the sample_filter tables, which apply once every sample is in.
    """
    pending: dict[str, list[pa.Table]] = {}
    filters, size = [], 0
    with _gc_paused():
        for i, f in enumerate(_parsed_in_order(files)):
            if progress:
                progress(i, len(files), f.path.name)
            f.rows = f.parsed.rows
            for table, data in f.parsed.tables.items():
                if table == "sample_filter":
                    filters.append(data)
                    continue
                pending.setdefault(table, []).append(data)
                size += data.nbytes
            f.parsed.tables = {}
            if size >= FLUSH_BYTES:
                _flush(con, run_id, pending)
                size = 0
        if progress:
            progress(len(files), len(files), "loading")
        _flush(con, run_id, pending)
    return filters


def parse_jobs(files: list[InputFile]) -> int:
    """Worker processes for parsing these files (ingest.workers.jobs); 1 below
    PARALLEL_MIN_BYTES in all."""
    todo = [f for f in files if f.parsed is None]
    if len(todo) < 2 or sum(f.bytes for f in todo) < PARALLEL_MIN_BYTES:
        return 1
    return min(workers.jobs(), len(todo))


def _parsed_in_order(files: list[InputFile]) -> Iterator[InputFile]:
    """Each file, parsed, in input order; files the caller parsed already pass through.

    With more than one job the parsing runs in forked worker processes, at most `jobs`
    files ahead of the caller, so the caller's inserts overlap the next files' parsing
    and memory stays bounded.
    """
    jobs = parse_jobs(files)
    if jobs == 1:
        for f in files:
            if f.parsed is None:
                parse_one(f)
            yield f
        return
    pool = workers.pool(jobs)
    try:
        ahead: deque = deque()
        for f in files:
            ahead.append((f, pool.submit(parse_by_name, f.path, f.format.name) if f.parsed is None else None))
            if len(ahead) > jobs:
                yield _collected(*ahead.popleft())
        while ahead:
            yield _collected(*ahead.popleft())
    finally:
        pool.shutdown(cancel_futures=True)


def _collected(f: InputFile, future) -> InputFile:
    if future is not None:
        f.parsed, f.started = workers.result(future, f.path.name)
    return f


def parse_by_name(path: Path, format_name: str) -> tuple[Parsed, datetime]:
    """Parse one file in a worker process. The format travels by name: formats hold
    functions, which do not pickle."""
    f = InputFile(path, "", 0, registry.get(format_name))
    parse_one(f)
    return f.parsed, f.started


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


def _restore(con, files: list[InputFile], name: str | None) -> IngestResult:
    """Put back the whole runs a Parquet lake carries: same ids, rows and ingest history.

    A run whose id is already here with the same content is left alone; one with other
    content is a conflict. The new runs land in one transaction.
    """
    if len(files) != 1:
        raise IngestError("ingest a Parquet lake on its own, not together with other inputs")
    if name:
        raise IngestError("--name does not apply to a Parquet lake: restored runs keep their names")
    f = files[0]
    fresh = _restorable(con, f)
    known = {"runs", "ingests", *data_tables(con)}
    skipped = sorted(set(f.parsed.tables) - known)
    warnings = [*f.parsed.warnings, *(f"table {t} is unknown to this version; skipped"
                                      for t in skipped)]
    if fresh:
        tables = {t: data for t, data in f.parsed.tables.items() if t in known}
        _insert_runs(con, tables, fresh, f, "; ".join(warnings) or None)
    run_ids = [r["run_id"] for r in f.parsed.runs]
    rows: Counter = Counter()
    for run_id in run_ids:
        rows.update(row_counts(con, run_id))
    return IngestResult(run_ids[0], f.format.name, dict(rows), existing=not fresh,
                        warnings=warnings, run_ids=run_ids)


def _restorable(con, f: InputFile) -> list[str]:
    """The lake's runs that are not here yet; a run id here with other content is a conflict."""
    fresh = []
    for run in f.parsed.runs:
        here = con.execute("SELECT sha256 FROM runs WHERE run_id = ?", [run["run_id"]]).fetchall()
        if not here:
            fresh.append(run["run_id"])
        elif here[0][0] != run.get("sha256"):
            raise IngestError(f"{f.path.name}: run {run['run_id']} already exists here "
                              "with different content")
    return fresh


def _insert_runs(con, tables: dict, run_ids: list[str], f: InputFile, note: str | None) -> None:
    """These runs' rows of every table, their aggregates and a log row, in one transaction."""
    views = {table: f"_lake_{i}" for i, table in enumerate(tables)}
    with ExitStack() as stack:
        for table, view in views.items():
            stack.enter_context(store.registered(con, view, tables[table]))
        with store.transaction(con):
            for table, view in views.items():
                con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM {view} '
                            "WHERE run_id IN (SELECT unnest($run_ids))", {"run_ids": run_ids})
            for run_id in run_ids:
                materialize(con, run_id)
                rows = sum(row_counts(con, run_id).values())
                _log_many(con, [(f, run_id, "ok", note, rows, f.started or _now())])


def _apply_filter(con, run_id: str, data: pa.Table) -> None:
    want = Counter(data.column("step").to_pylist())
    have = dict(con.execute(
        "SELECT step, count(DISTINCT prompt_id) FROM samples WHERE run_id = ? GROUP BY step",
        [run_id]).fetchall())
    missing = sorted(s for s in want if s not in have)
    if missing:
        raise IngestError(
            f"filter indices name step(s) {missing[:5]} with no packed lengths in the same ingest "
            "(ingest the filter file together with its packed_lengths_step_N.jsonl files)")
    # indices address prompts by file position, so a count mismatch would mark the wrong prompts
    for step in sorted(want):
        if want[step] != have[step]:
            raise IngestError(f"filter indices give step {step} prompt_count {want[step]} but its "
                              f"packed lengths hold {have[step]} prompts")
    with store.registered(con, "_filter", data):
        con.execute(
            "UPDATE samples SET kept = f.kept, used = f.used FROM _filter f "
            "WHERE samples.run_id = ? AND samples.step = f.step AND samples.prompt_id = f.prompt_id",
            [run_id])


def _log_many(con, entries: list[tuple]) -> None:
    """One `ingests` row per (file, run_id, status, error, rows, started), in one INSERT."""
    finished = _now()
    cols = {
        "run_id": from_list([e[1] for e in entries], pa.string()),
        "file_name": from_list([str(e[0].path) for e in entries], pa.string()),
        "sha256": from_list([e[0].sha256 or None for e in entries], pa.string()),
        "format": from_list([e[0].format.name if e[0].format else None for e in entries], pa.string()),
        "bytes": from_list([e[0].bytes for e in entries], pa.int64()),
        "rows": from_list([e[4] for e in entries], pa.int64()),
        "status": from_list([e[2] for e in entries], pa.string()),
        "error": from_list([e[3] for e in entries], pa.string()),
        "started_at": from_list([e[5] for e in entries], pa.timestamp("us")),
        "finished_at": from_list([finished] * len(entries), pa.timestamp("us")),
    }
    with store.registered(con, "_ingest_log", pa.table(cols)):
        con.execute(f"INSERT INTO ingests ({', '.join(cols)}) SELECT * FROM _ingest_log")


def _log_failure(con, files: list[InputFile], reason: str, started: datetime) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
    _log_many(con, [(f, None, "failed", reason, 0, started)
                    for f in files or [InputFile(Path("?"), "", 0)]])
