"""What every format module provides, and what its parse returns."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import pyarrow as pa


class IngestError(Exception):
    """A bad input. The message is one line, fit to show a user as is."""

    def __init__(self, message: str):
        super().__init__(" ".join(str(message).split()))


@dataclass
class Parsed:
    """A parsed file: canonical tables without run_id, plus run-level facts.

    `tables` maps a canonical table name (see schema.sql) to an Arrow table whose
    columns are a subset of that table's. The pseudo-table `sample_filter`
    (step, prompt_id, kept, used) is applied as an update to `samples`.
    """

    tables: dict[str, pa.Table] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Set by a container of whole runs (a Parquet lake): their `runs` rows, run_id
    # included. Then every table, runs and ingests too, keeps its run_id column, may
    # be a pyarrow Dataset that streams from disk, and the runs are restored as they were.
    runs: list[dict[str, Any]] = field(default_factory=list)

    @property
    def rows(self) -> int:
        return sum(t.num_rows if isinstance(t, pa.Table) else t.count_rows()
                   for t in self.tables.values())


@dataclass(frozen=True)
class Format:
    """A registered trace format.

    `sniff(head, name)` gets the first bytes (already decompressed) and the file
    name and says whether this format claims the file; among the formats that
    claim it the highest `priority` wins. A format whose input is a whole directory
    declares `claims_directory(path)`; a claimed directory is one input, not walked.
    """

    name: str
    priority: int
    sniff: Callable[[bytes, str], bool]
    parse: Callable[[Path], Parsed]
    description: str = ""
    claims_directory: Callable[[Path], bool] | None = None
