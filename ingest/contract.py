"""What every format module provides, what its parse returns, and the one error an ingest raises."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any, Callable

import pyarrow as pa


def cli_flag(option: str) -> str:
    """How the command line names an ingest option: its flag."""
    return "--" + option.replace("_", "-")


@dataclass(frozen=True)
class Hint:
    """What the user can change to get past an error: an ingest option (an `ingest_paths`
    keyword such as `format`) and advice naming it as `{option}`. Each front end words the
    option its own way: the CLI as its flag, the API as its form field."""

    option: str
    advice: str = "try {option}"

    def worded(self, option_words: Callable[[str], str] = cli_flag) -> str:
        return self.advice.format(option=option_words(self.option))


class IngestError(Exception):
    """A bad input: which input (its name as the user knows it, a path, or None for the
    ingest as a whole), why, and what to try. Its str() is one line, fit to show a user."""

    def __init__(self, path: str | PurePath | None, reason: str, hint: Hint | None = None):
        # args carry everything, so the error pickles back whole from a parse worker
        super().__init__(path, reason, hint)
        self.path, self.reason, self.hint = path, " ".join(str(reason).split()), hint

    @property
    def name(self) -> str | None:
        """The input as shown: a path by its file name, a display name as given."""
        return self.path.name if isinstance(self.path, PurePath) else self.path

    @property
    def unrecognised(self) -> bool:
        """No format recognised the input: the advice is to name its format."""
        return self.hint is not None and self.hint.option == "format"

    def worded(self, option_words: Callable[[str], str] = cli_flag) -> str:
        text = f"{self.name}: {self.reason}" if self.name else self.reason
        return f"{text} ({self.hint.worded(option_words)})" if self.hint else text

    def __str__(self) -> str:
        return self.worded()

    def about(self, path: PurePath, name: str) -> IngestError:
        """This error with the input at `path` (or no input) shown as `name`."""
        if self.path is None or self.path == path:
            return IngestError(name, self.reason, self.hint)
        return self


@dataclass
class Parsed:
    """A parsed input: canonical tables without run_id, plus run-level facts.

    `tables` maps a canonical table name (see schema.sql) to an Arrow table whose
    columns are a subset of that table's. `deferred` is what the format's `after_load`
    applies once every input's tables are in (e.g. the DAPO filter's kept/used flags).
    """

    tables: dict[str, pa.Table] = field(default_factory=dict)
    run: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    # Set by a container of whole runs (a Parquet lake): their `runs` rows, run_id
    # included. Then every table, runs and ingests too, keeps its run_id column, may
    # be a pyarrow Dataset that streams from disk, and the runs are restored as they were.
    runs: list[dict[str, Any]] = field(default_factory=list)
    deferred: Any = None

    @property
    def rows(self) -> int:
        return sum(t.num_rows if isinstance(t, pa.Table) else t.count_rows()
                   for t in self.tables.values())


@dataclass(frozen=True)
class Sample:
    """A tiny valid input of a format: its files by relative path, and the paths to ingest
    (the CLI arguments, relative to where the files are written). It is also the format's
    corpus seed."""

    files: dict[str, bytes]
    args: tuple[str, ...]

    @classmethod
    def file(cls, name: str, data: bytes) -> Sample:
        """One file, ingested on its own."""
        return cls({name: data}, (name,))


@dataclass(frozen=True, kw_only=True)
class Format:
    """A registered trace format.

    `sniff(head, name)` gets the first bytes (already decompressed) and the file
    name and says whether this format claims the file; among the formats that
    claim it the highest `priority` wins. A format whose input is a whole directory
    declares `claims_directory(path)`; a claimed directory is one input, not walked.

    Hooks, each optional:
    - `run_facts(path)`: runs columns the input's path implies (e.g. the framework in a
      PolyTrace log layout); what the file itself says wins.
    - `after_load(con, run_id, deferred)`: runs inside the run's transaction once every
      input's tables are in, with the `Parsed.deferred` of each of this format's inputs
      (in input order). It may update the run's rows and returns a Parsed holding only
      run facts (filling those no input gave) and warnings.
    `sample()` builds the format's Sample.
    """

    name: str
    priority: int
    sniff: Callable[[bytes, str], bool]
    parse: Callable[[PurePath], Parsed]
    sample: Callable[[], Sample]
    description: str = ""
    claims_directory: Callable[[PurePath], bool] | None = None
    run_facts: Callable[[PurePath], dict] | None = None
    after_load: Callable[[Any, str, list], Parsed] | None = None
    # CPU a byte of it costs to parse, against the NDJSON logs the parse executor's thresholds
    # were measured on (ingest/workers.py): where more than one worker starts to pay
    parse_cost: float = 1.0
