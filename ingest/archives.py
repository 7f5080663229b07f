"""Trace files inside a .tar(.gz) or .zip archive, read in place: no extraction to disk."""
from __future__ import annotations

import gzip
import tarfile
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import BinaryIO, Iterator

from polytrace.ingest.contract import IngestError
from polytrace.ingest.sources import open_stream

ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
TRACE_SUFFIXES = (".json", ".json.gz")


def is_archive(head: bytes, name: str) -> bool:
    """A tar (already un-gzipped in `head`) or zip archive by magic bytes and file name."""
    if not name.lower().endswith(ARCHIVE_SUFFIXES):
        return False
    return head[257:262] == b"ustar" or head.startswith(b"PK\x03\x04")


def _safe_name(archive: str, member: str) -> str:
    p = PurePosixPath(member.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
        raise IngestError(f"{archive}: member name escapes the archive: {member!r}")
    return str(p)


def is_trace_member(name: str) -> bool:
    return name.lower().endswith(TRACE_SUFFIXES) and not PurePosixPath(name).name.startswith(".")


def _maybe_gunzip(name: str, f: BinaryIO) -> BinaryIO:
    return gzip.GzipFile(fileobj=f, mode="rb") if name.lower().endswith(".gz") else f


def members(path: Path, skipped: list[str]) -> Iterator[tuple[str, BinaryIO]]:
    """(member name, decompressed stream) for each trace-named regular file, in archive order.

    Other members are listed in `skipped`. Size limits are the reader's job: the caller
    counts the bytes it reads against one budget for the whole archive.
    """
    if zipfile.is_zipfile(path):
        yield from _zip_members(path, skipped)
    else:
        yield from _tar_members(path, skipped)


def _tar_members(path: Path, skipped: list[str]) -> Iterator[tuple[str, BinaryIO]]:
    with open_stream(path) as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|") as tar:
                for m in tar:
                    name = _safe_name(path.name, m.name)
                    if not m.isfile() or not is_trace_member(name):
                        if not m.isdir():
                            skipped.append(name)
                        continue
                    yield name, _maybe_gunzip(name, tar.extractfile(m))
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise IngestError(f"{path.name}: not a readable tar archive ({e})") from None


def _zip_members(path: Path, skipped: list[str]) -> Iterator[tuple[str, BinaryIO]]:
    try:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                name = _safe_name(path.name, info.filename)
                if info.is_dir():
                    continue
                if not is_trace_member(name):
                    skipped.append(name)
                    continue
                with zf.open(info) as f:
                    yield name, _maybe_gunzip(name, f)
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError, zlib.error,
            ValueError) as e:
        # a corrupt directory can point a member at a negative offset (OSError) or name it
        # in bytes that are not the UTF-8 its flags promise (UnicodeDecodeError)
        raise IngestError(f"{path.name}: not a readable zip archive ({e})") from None
