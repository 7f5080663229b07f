"""What one query may take: a time limit and a row cap, which the runner applies. Apart from the
runner so that a caller can build them without importing Arrow (the CLI's light commands)."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    timeout_ms: int | None = None  # interrupt the query after this long
    row_cap: int | None = None     # keep at most this many rows, and say so
