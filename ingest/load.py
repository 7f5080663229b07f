"""Transactional load: parse every file first, then write the run in one DuckDB transaction."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import Callable

import duckdb
import pyarrow as pa

from ingest import registry
from ingest.contract import Format, IngestError, Parsed
from ingest.sources import expand, sha256_file

RUN_COLUMNS = ("framework", "model", "task", "max_response_len", "n_gpus", "config")
Progress = Callable[[int, int, str], None]


@dataclass
class IngestResult:
    run_id: str
    format: str
    rows: dict[str, int]
    existing: bool = False
    warnings: list[str] = field(default_factory=list)


@dataclass
class _File:
    path: Path
    sha256: str
    bytes: int
    format: Format | None = None
    parsed: Parsed | None = None
    started: datetime | None = None


def schema_sql() -> str:
    return resources.files("ingest").joinpath("schema.sql").read_text()


def ensure_schema(con: duckdb.DuckDBPyConnection) -> None:
    con.execute(schema_sql())


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
) -> IngestResult:
    """Ingest files (or directories of files) as one run and return its id.

    Raises IngestError with a one-line reason; then no data table changed and a
    `failed` row per file records the attempt in `ingests`.
    """
    started = _now()
    files: list[_File] = []
    try:
        files = _collect(paths, format)
        digest = _run_digest(files)
        if not force:
            existing = con.execute(
                "SELECT run_id, format FROM runs WHERE sha256 = ? ORDER BY created_at LIMIT 1",
                [digest]).fetchone()
            if existing:
                return IngestResult(existing[0], existing[1], _row_counts(con, existing[0]), existing=True)
        _parse_all(files, progress)
        run_id = _new_run_id(con, digest)
        result = _write(con, run_id, digest, files, name or _default_name(paths))
        return result
    except IngestError as e:
        _log_failure(con, files or [_File(p, "", 0) for p in paths], str(e), started)
        raise
    except duckdb.Error as e:
        msg = f"database rejected the data: {str(e).splitlines()[0]}"
        _log_failure(con, files, msg, started)
        raise IngestError(msg) from None


def _collect(paths: list[Path], forced: str | None) -> list[_File]:
    fmt = registry.get(forced) if forced else None
    listed = list(expand(paths))
    named_dir = any(p.is_dir() for p in paths)
    files = []
    for path in listed:
        f = _File(path, sha256_file(path), path.stat().st_size)
        f.format = fmt or registry.detect(path)
        if f.format is None and not named_dir:
            raise IngestError(f"{path.name}: unknown format (try --format; known: "
                              f"{', '.join(x.name for x in registry.FORMATS)})")
        if f.format is not None:
            files.append(f)
    if not files:
        where = ", ".join(str(p) for p in paths)
        raise IngestError(f"{where}: no recognised trace file")
    return files


def _run_digest(files: list[_File]) -> str:
    h = hashlib.sha256()
    for f in sorted(files, key=lambda f: f.sha256):
        h.update(f.sha256.encode())
    return h.hexdigest()


def _parse_all(files: list[_File], progress: Progress | None) -> None:
    for i, f in enumerate(files):
        if progress:
            progress(i, len(files), f.path.name)
        f.started = _now()
        try:
            f.parsed = f.format.parse(f.path)
        except IngestError:
            raise
        except (ValueError, TypeError, KeyError, IndexError, OverflowError, UnicodeError,
                pa.ArrowException, EOFError, OSError, RecursionError, MemoryError) as e:
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise IngestError(f"{f.path.name}: {reason}") from None
    if progress:
        progress(len(files), len(files), "loading")


def _new_run_id(con: duckdb.DuckDBPyConnection, digest: str) -> str:
    run_id = digest[:12]
    salt = 0
    while con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        salt += 1
        run_id = hashlib.sha256(f"{digest}:{salt}".encode()).hexdigest()[:12]
    return run_id


def _default_name(paths: list[Path]) -> str:
    p = paths[0].resolve()
    return p.name if len(paths) == 1 else f"{p.parent.name}/{p.name} (+{len(paths) - 1})"


def _merged_run(files: list[_File]) -> dict:
    run: dict = {}
    for f in files:
        for k, v in f.parsed.run.items():
            if v is not None and run.get(k) is None:
                run[k] = v
    return run


def _write(con, run_id: str, digest: str, files: list[_File], name: str) -> IngestResult:
    fmt_name = "+".join(sorted({f.format.name for f in files}))
    run = _merged_run(files)
    warnings = [w for f in files for w in f.parsed.warnings]
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute(
            "INSERT INTO runs (run_id, name, format, framework, model, task, max_response_len,"
            " n_gpus, config, sha256, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, name, fmt_name, *(run.get(k) for k in RUN_COLUMNS), digest, _now()])
        filters = []
        for f in files:
            for table, data in f.parsed.tables.items():
                if table == "sample_filter":
                    filters.append(data)
                else:
                    _insert(con, table, run_id, data)
        for data in filters:
            _apply_filter(con, run_id, data)
        for f in files:
            note = "; ".join(f.parsed.warnings) or None
            _log(con, f, run_id, "ok", note, f.parsed.rows, f.started or _now())
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return IngestResult(run_id, fmt_name, _row_counts(con, run_id), warnings=warnings)


def _insert(con, table: str, run_id: str, data: pa.Table) -> None:
    if data.num_rows == 0:
        return
    data = data.append_column("run_id", pa.array([run_id] * data.num_rows, pa.string()))
    con.register("_incoming", data)
    try:
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT * FROM _incoming')
    finally:
        con.unregister("_incoming")


def _apply_filter(con, run_id: str, data: pa.Table) -> None:
    steps = sorted(set(data.column("step").to_pylist()))
    have = {r[0] for r in con.execute(
        "SELECT DISTINCT step FROM samples WHERE run_id = ?", [run_id]).fetchall()}
    missing = [s for s in steps if s not in have]
    if missing:
        raise IngestError(
            f"filter indices name step(s) {missing[:5]} with no packed lengths in the same ingest "
            "(ingest the filter file together with its packed_lengths_step_N.jsonl files)")
    con.register("_filter", data)
    try:
        con.execute(
            "UPDATE samples SET kept = f.kept, used = f.used FROM _filter f "
            "WHERE samples.run_id = ? AND samples.step = f.step AND samples.prompt_id = f.prompt_id",
            [run_id])
    finally:
        con.unregister("_filter")


def _log(con, f: _File, run_id, status, error, rows, started) -> None:
    con.execute(
        "INSERT INTO ingests (run_id, file_name, sha256, format, bytes, rows, status, error,"
        " started_at, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [run_id, str(f.path), f.sha256 or None, f.format.name if f.format else None,
         f.bytes, rows, status, error, started, _now()])


def _log_failure(con, files: list[_File], reason: str, started: datetime) -> None:
    try:
        con.execute("ROLLBACK")
    except duckdb.Error:
        pass
    for f in files or [_File(Path("?"), "", 0)]:
        _log(con, f, None, "failed", reason, 0, started)




def _row_counts(con, run_id: str) -> dict[str, int]:
    counts = {}
    for table in data_tables(con):
        n = con.execute(f'SELECT count(*) FROM "{table}" WHERE run_id = ?', [run_id]).fetchone()[0]
        if n:
            counts[table] = n
    return counts


def data_tables(con) -> list[str]:
    """Every table that holds per-run data (has a run_id column), except runs and ingests."""
    rows = con.execute(
        "SELECT table_name FROM duckdb_columns() WHERE column_name = 'run_id' "
        "AND database_name = current_database() AND schema_name = 'main' "
        "AND table_name NOT IN ('runs', 'ingests') "
        "AND table_name IN (SELECT table_name FROM duckdb_tables()) ORDER BY table_name").fetchall()
    return [r[0] for r in rows]


def delete_run(con, run_id: str) -> bool:
    """Remove a run and all its rows in one transaction; False if it did not exist."""
    con.execute("BEGIN TRANSACTION")
    try:
        found = con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
        if found:
            for table in data_tables(con):
                con.execute(f'DELETE FROM "{table}" WHERE run_id = ?', [run_id])
            con.execute("DELETE FROM runs WHERE run_id = ?", [run_id])
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return bool(found)


def open_db(path: str | Path) -> duckdb.DuckDBPyConnection:
    """Open (creating if needed) a PolyTrace database file with the canonical schema."""
    try:
        con = duckdb.connect(str(path))
    except duckdb.Error as e:
        raise IngestError(f"cannot open database {path}: {str(e).splitlines()[0]}") from None
    ensure_schema(con)
    return con
