"""What every ingest writer shares (a batch ingest, a lake restore, a live append): the inputs and
the result of an ingest, a conflict with a stored run, and the writes of a canonical table's rows
and of the ingest log inside the caller's transaction."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

import pyarrow as pa

from polytrace import store
from polytrace.ingest import registry
from polytrace.columns import from_list
from polytrace.ingest.contract import Format, Hint, IngestError, Parsed
from polytrace.ingest.parsing import now
from polytrace.ingest.sources import Source

# (input number, inputs, what): called as each input is parsed, and with "loading" at the end
Progress = Callable[[int, int, str], None]


class RunConflict(IngestError):
    """The input is a run this database already holds under its id with other content."""


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


def fill_missing(run: dict, facts: dict) -> None:
    """Take each fact the run does not have yet."""
    for k, v in facts.items():
        if v is not None and run.get(k) is None:
            run[k] = v


def name_the_format() -> Hint:
    """The hint of an input no format recognises: the option that names one, and the known ones."""
    return Hint("format", f"try {{option}}; known: {registry.known()}")


def insert(con, table: str, run_id: str, data: pa.Table) -> None:
    """Append `data` to the canonical table `table` as rows of `run_id`."""
    if data.num_rows == 0:
        return
    # A stream, not the table: DuckDB keeps a registered table's buffers alive until the
    # transaction ends (the whole run, in memory); a stream's batches are copied as read.
    stream = pa.RecordBatchReader.from_batches(data.schema, data.to_batches())
    with store.registered(con, "_incoming", stream):
        con.execute(f'INSERT INTO "{table}" BY NAME SELECT *, ? AS run_id FROM _incoming', [run_id])


def log_many(con, entries: list[tuple]) -> None:
    """One `ingests` row per (input, run_id, status, said, rows, started), in one INSERT: what was
    said is a failed file's reason, or a loaded file's warnings."""
    finished = now()
    cols = {
        "run_id": from_list([e[1] for e in entries], pa.string()),
        "file_name": from_list([e[0].source.name for e in entries], pa.string()),
        "sha256": from_list([e[0].source.sha256 or None for e in entries], pa.string()),
        "format": from_list([e[0].format.name if e[0].format else None for e in entries], pa.string()),
        "bytes": from_list([e[0].source.bytes for e in entries], pa.int64()),
        "rows": from_list([e[4] for e in entries], pa.int64()),
        "status": from_list([e[2] for e in entries], pa.string()),
        "error": from_list([e[3] if e[2] == "failed" else None for e in entries], pa.string()),
        "started_at": from_list([e[5] for e in entries], pa.timestamp("us")),
        "finished_at": from_list([finished] * len(entries), pa.timestamp("us")),
        "warnings": from_list([e[3] if e[2] == "ok" else None for e in entries], pa.string()),
    }
    with store.registered(con, "_ingest_log", pa.table(cols)):
        con.execute(f"INSERT INTO ingests ({', '.join(cols)}) SELECT * FROM _ingest_log")

