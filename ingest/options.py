"""What an ingest may do, given by its caller (the service layer, from the one Settings object):
the inflate limit, the tokenizer and the parse workers. A caller scopes them with `applied()`;
the formats and sources read them with `current()`, and parse workers get them with each call."""
from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from polytrace.settings import FIELDS


@dataclass(frozen=True)
class IngestOptions:
    max_inflate_bytes: int = FIELDS["max_inflate_bytes"][0]  # declared in settings
    tokenizer: Path | None = None   # a local tokenizer.json for text-only lengths
    parse_jobs: int | None = None   # None: one per core, workers only for large inputs

    @classmethod
    def of(cls, settings) -> IngestOptions:
        """The ingest's part of a Settings object."""
        return cls(max_inflate_bytes=settings.max_inflate_bytes, tokenizer=settings.tokenizer,
                   parse_jobs=settings.parse_jobs)


# A follower's defaults (ingest/live.py): a step file or trace unchanged SETTLE_S seconds is
# complete, and new bytes are looked for every POLL_S seconds.
SETTLE_S = 10.0
POLL_S = 0.2

_current: ContextVar[IngestOptions] = ContextVar("polytrace_ingest_options", default=IngestOptions())


def current() -> IngestOptions:
    return _current.get()


@contextmanager
def applied(options: IngestOptions | None) -> Iterator[IngestOptions]:
    """`options` for the ingest run inside (None: the ones already in force)."""
    if options is None:
        yield current()
        return
    token = _current.set(options)
    try:
        yield options
    finally:
        _current.reset(token)
