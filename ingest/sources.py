"""Reading input files safely: transparent gzip with an inflate limit, hashing, directory expansion."""
from __future__ import annotations

import gzip
import hashlib
import io
import zlib
from pathlib import Path
from typing import BinaryIO, Iterator

from polytrace import settings
from polytrace.ingest.contract import IngestError

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024


def max_inflate_bytes() -> int:
    """Largest decompressed size accepted from one gzip file (POLYTRACE_MAX_INFLATE_BYTES)."""
    return int(settings.get().max_inflate_bytes)


class _LimitedReader(io.RawIOBase):
    """Wraps a decompressing stream and fails once it yields more than `limit` bytes."""

    def __init__(self, inner: BinaryIO, limit: int, name: str):
        self._inner, self._limit, self._name, self._seen = inner, limit, name, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._inner.readinto(buffer)
        except (OSError, EOFError, zlib.error) as e:
            raise IngestError(f"{self._name}: corrupt or truncated gzip ({e})") from None
        self._seen += n
        if self._seen > self._limit:
            raise IngestError(
                f"{self._name}: gzip inflates past {self._limit} bytes "
                "(limit POLYTRACE_MAX_INFLATE_BYTES)"
            )
        return n

    def close(self) -> None:
        self._inner.close()
        super().close()


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_stream(path: Path) -> BinaryIO:
    """Open a file for reading, decompressing gzip (by magic bytes) under the inflate limit."""
    if is_gzip(path):
        raw = _LimitedReader(gzip.open(path, "rb"), max_inflate_bytes(), path.name)
        return io.BufferedReader(raw, buffer_size=1 << 20)
    return open(path, "rb")


def read_bytes(path: Path) -> bytes:
    with open_stream(path) as f:
        return f.read()


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    with open_stream(path) as f:
        return f.read(n)


def read_text(path: Path) -> str:
    """Whole file as UTF-8 text; non-UTF-8 bytes are a bad input."""
    return _utf8(read_bytes(path), path.name)


def check_utf8(data: bytes, name: str) -> None:
    """Reject non-UTF-8 bytes, even where a decoder would skip them (fast path for ASCII)."""
    if not data.isascii():
        _utf8(data, name)


def _utf8(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise IngestError(f"{name}: not UTF-8 text (byte {e.start})") from None


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def expand(paths: list[Path]) -> Iterator[Path]:
    """Files named directly, and every non-hidden file below named directories, sorted."""
    for p in paths:
        if p.is_dir():
            yield from sorted(
                f for f in p.rglob("*")
                if f.is_file() and not any(part.startswith(".") for part in f.relative_to(p).parts)
            )
        elif p.is_file():
            yield p
        else:
            raise IngestError(f"{p}: no such file or directory")
