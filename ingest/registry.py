"""The list of trace formats, and detection of a file's format from its first bytes."""
from __future__ import annotations

from pathlib import Path

from ingest.contract import Format, IngestError
from ingest.formats import polytrace_packed
from ingest.sources import read_head

FORMATS: list[Format] = [
    polytrace_packed.FORMAT,
]


def get(name: str) -> Format:
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    known = ", ".join(f.name for f in FORMATS)
    raise IngestError(f"unknown format {name!r}; known formats: {known}")


def detect(path: Path) -> Format | None:
    """The highest-priority format whose sniff claims the file, or None."""
    head = read_head(path)
    claims = [f for f in FORMATS if f.sniff(head, path.name)]
    return max(claims, key=lambda f: f.priority) if claims else None
