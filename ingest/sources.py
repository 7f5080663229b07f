"""The source layer: what an ingest reads, and how its inputs are named.

Files named directly or found in named directories; gzip opened by its magic bytes; and
.zip/.tar/.tar.gz/.tgz archives, whose members become inputs of their own (each detected
on its own), streamed to a temporary spool directory. Everything decompressed counts
against the inflate limit (POLYTRACE_MAX_INFLATE_BYTES): per gzip file, and per archive
for all its members together.
"""
from __future__ import annotations

import codecs
import gzip
import hashlib
import io
import itertools
import re
import shutil
import tarfile
import tempfile
import zipfile
import zlib
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path, PurePath, PurePosixPath
from typing import BinaryIO, Iterator, Mapping

from polytrace.ingest import options
from polytrace.ingest.contract import IngestError

GZIP_MAGIC = b"\x1f\x8b"
HEAD_BYTES = 64 * 1024
BOM = b"\xef\xbb\xbf"
BLOCK_BYTES = 1 << 20
# Decompressed bytes a format decodes at a time: an ingest's memory is bounded by this batch
# (and the compact Arrow tables it yields), not by the size of a file or what it inflates to.
BATCH_BYTES = 8 << 20
# One line longer than this is not a log line (and would defeat the batch bound).
MAX_LINE_BYTES = 64 << 20
ARCHIVE_SUFFIXES = (".tar.gz", ".tgz", ".tar", ".zip")
ARCHIVE_SEPARATOR = "!"


def max_inflate_bytes() -> int:
    """Largest decompressed size accepted from one gzip file or archive (POLYTRACE_MAX_INFLATE_BYTES,
    as the ingest's caller gave it)."""
    return int(options.current().max_inflate_bytes)


class Budget:
    """Decompressed bytes one input may still yield; an archive's members share one."""

    def __init__(self, limit: int):
        self.left = limit
        self.limit = limit

    def take(self, n: int, name: str | PurePath) -> None:
        self.left -= n
        if self.left < 0:
            raise IngestError(name, f"inflates past {self.limit} bytes (limit POLYTRACE_MAX_INFLATE_BYTES)")


# A trace or log deflates 5-130 times; deflate's ceiling is ~1,030. Past BOMB_AFTER inflated
# bytes, a file that inflates more than BOMB_RATIO times is refused at once instead of being
# parsed up to the inflate limit (a GiB of newlines in a few MB would hold the writer minutes).
BOMB_RATIO = 500
BOMB_AFTER = 64 << 20


class _LimitedReader(io.RawIOBase):
    """Wraps a decompressing stream and fails once it yields more than `limit` bytes, or
    inflates like a bomb (BOMB_RATIO)."""

    def __init__(self, inner: BinaryIO, limit: int, path: Path):
        self._inner, self._limit, self._path, self._seen = inner, limit, path, 0
        self._raw = getattr(inner, "fileobj", None)  # the compressed file under a GzipFile
        self._checked = BOMB_AFTER

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._inner.readinto(buffer)
        except (OSError, EOFError, zlib.error) as e:
            raise IngestError(self._path, f"corrupt or truncated gzip ({e})") from None
        self._seen += n
        if self._seen > self._limit:
            raise IngestError(self._path, f"gzip inflates past {self._limit} bytes "
                                          "(limit POLYTRACE_MAX_INFLATE_BYTES)")
        if self._seen >= self._checked:
            self._checked += BOMB_AFTER
            self._check_ratio()
        return n

    def _check_ratio(self) -> None:
        packed = self._raw.tell() if self._raw is not None else 0
        if packed and self._seen > BOMB_RATIO * packed:
            raise IngestError(self._path, f"gzip inflates more than {BOMB_RATIO} times ({self._seen >> 20} MiB "
                                          f"from {packed >> 10} KiB read): a compression bomb, not a trace")

    def close(self) -> None:
        self._inner.close()
        super().close()


def is_gzip(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_stream(path: Path) -> BinaryIO:
    """Open a file for reading, decompressing gzip (by magic bytes) under the inflate limit."""
    if is_gzip(path):
        raw = _LimitedReader(gzip.open(path, "rb"), max_inflate_bytes(), path)
        return io.BufferedReader(raw, buffer_size=BLOCK_BYTES)
    return open(path, "rb")


def read_bytes(path: Path) -> bytes:
    """The whole (decompressed) file in memory: only for inputs known to be small; formats
    read through blocks() or line_blocks(), whose memory is one batch."""
    with open_stream(path) as f:
        return f.read()


def blocks(path: Path, size: int | None = None) -> Iterator[bytes]:
    """The file's bytes, decompressed under the inflate limit, `size` (BATCH_BYTES) at a time, without
    a leading UTF-8 byte order mark: offsets count from the text after it."""
    size = size or BATCH_BYTES
    with open_stream(path) as f:
        if block := without_bom(f.read(size)):
            yield block
        while block := f.read(size):
            yield block


def without_bom(head: bytes) -> bytes:
    """Text without the UTF-8 byte order mark some editors write first (Windows Notepad, Excel):
    left in, it hid a log's first line from every reader."""
    return head[len(BOM):] if head.startswith(BOM) else head


def line_blocks(path: Path, size: int | None = None) -> Iterator[tuple[int, bytes]]:
    """(offset, block) for consecutive blocks of whole lines of about `size` (BATCH_BYTES) each; only the
    last block may end without a newline. `offset` is where the block starts in the
    (decompressed) file. A line longer than MAX_LINE_BYTES is an IngestError."""
    offset, rest = 0, b""
    for block in blocks(path, size):
        data = rest + block if rest else block
        cut = data.rfind(b"\n") + 1
        if not cut:
            if len(data) > MAX_LINE_BYTES:
                raise IngestError(path, f"a line longer than {MAX_LINE_BYTES >> 20} MB at byte {offset}")
            rest = data
            continue
        yield offset, data[:cut] if cut < len(data) else data
        offset += cut
        rest = data[cut:]
    if rest:
        yield offset, rest


def text_stream(path: Path) -> BinaryIO:
    """The (decompressed) file as a stream that raises the one-line UTF-8 error on the first
    non-UTF-8 byte, for readers that take a stream (CSV): read a batch of lines at a time."""

    def checked() -> Iterator[bytes]:
        for offset, block in line_blocks(path):
            check_utf8(block, path, offset)
            yield block

    return io.BufferedReader(_Joined(checked()), BLOCK_BYTES)


@contextmanager
def seekable(path: Path) -> Iterator[Path]:
    """A path to the file's bytes that a reader may seek in (Parquet): the file itself, or for a
    gzip file a temporary decompressed copy, written a block at a time under the inflate limit."""
    if not is_gzip(path):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="polytrace-inflated-") as tmp:
        copy = Path(tmp) / path.name
        with open(copy, "wb") as out:
            out.writelines(blocks(path, BLOCK_BYTES))
        yield copy


def read_head(path: Path, n: int = HEAD_BYTES) -> bytes:
    with open_stream(path) as f:
        return without_bom(f.read(n))


def check_utf8(data: bytes, path: str | PurePath, offset: int = 0) -> None:
    """Reject non-UTF-8 bytes, even where a decoder would skip them (fast path for ASCII);
    `data` starts at byte `offset` of the file."""
    if not data.isascii():
        try:
            data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise IngestError(path, f"not UTF-8 text (byte {offset + e.start})") from None


class Utf8Checker:
    """check_utf8 over consecutive blocks of a file, which may cut a character in two."""

    def __init__(self, path: str | PurePath):
        self.path, self.offset = path, 0
        self.decoder = codecs.getincrementaldecoder("utf-8")()

    def __call__(self, block: bytes, final: bool = False) -> None:
        pending = self.decoder.getstate()[0]
        if pending or final or not block.isascii():
            try:
                self.decoder.decode(block, final)
            except UnicodeDecodeError as e:
                raise IngestError(self.path, f"not UTF-8 text (byte {self.offset - len(pending) + e.start})") \
                    from None
        self.offset += len(block)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(BLOCK_BYTES), b""):
            h.update(chunk)
    return h.hexdigest()


# --- naming -------------------------------------------------------------------------------------

_reading: ContextVar[tuple[PurePath, str] | None] = ContextVar("polytrace_reading", default=None)


@contextmanager
def reading(path: PurePath, label: str) -> Iterator[None]:
    """While a format parses the input at `path`, name_of(path) is `label`."""
    token = _reading.set((path, label))
    try:
        yield
    finally:
        _reading.reset(token)


def name_of(path: PurePath) -> str:
    """How the user knows the input at `path`, for a format to name it in its data and warnings:
    archive!member for a spooled archive member, else the file name."""
    current = _reading.get()
    return current[1] if current is not None and current[0] == path else path.name


def short(name: str) -> str:
    """A display name shortened for messages: its last part."""
    return PurePosixPath(name.replace("\\", "/")).name


NAMED = 10  # names a message lists before it counts the rest


def listed(names: list[str]) -> str:
    """Every name, or the first NAMED and how many more: what was skipped, said in full."""
    shown = ", ".join(names[:NAMED])
    return shown + (f" and {len(names) - NAMED} more" if len(names) > NAMED else "")


# --- inputs -------------------------------------------------------------------------------------

@dataclass
class Source:
    """One input file as the ingest reads it."""

    path: Path            # its bytes on disk (a spooled, decompressed copy for an archive member)
    name: str             # as the user knows it: the path as given, or archive!member
    origin: Path          # where it sits in the user's tree, for facts a path implies
    sha256: str = ""
    bytes: int = 0
    found: bool = False   # found by walking a named directory, not named itself
    archive: str | None = None  # display name of the archive it came from, and its name there
    member: str | None = None
    notes: list[str] = field(default_factory=list)  # what reading it skipped

    @property
    def label(self) -> str:
        """Its name in messages: the file name, or archive!member."""
        if self.archive is None:
            return short(self.name)
        return f"{short(self.archive)}{ARCHIVE_SEPARATOR}{self.member}"


def display(path: Path, names: Mapping[Path, str]) -> str:
    return names.get(path, str(path))


def expand(paths: list[Path], names: Mapping[Path, str]) -> Iterator[Source]:
    """Files named directly, and every non-hidden file below named directories, sorted;
    a file below a named directory is named after it unless `names` names the file."""
    for p in paths:
        if p.is_dir():
            shown = display(p, names)
            for f in sorted(f for f in p.rglob("*") if f.is_file() and not _hidden(f.relative_to(p))):
                rel = f.relative_to(p).as_posix()
                yield Source(f, names.get(f, f"{shown}/{rel}"), f, found=True)
        elif p.is_file():
            yield Source(p, display(p, names), p)
        else:
            raise IngestError(display(p, names), "no such file or directory")


def _hidden(rel: PurePath) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def hashed(sources: list[Source]) -> list[Source]:
    """Fill in each file's sha256 and size; hashlib and file reads release the GIL, so threads
    overlap them."""
    todo = [s for s in sources if not s.sha256]
    if len(todo) < 2:
        digests = [sha256_file(s.path) for s in todo]
    else:
        with ThreadPoolExecutor(max_workers=min(4, len(todo))) as pool:
            digests = list(pool.map(lambda s: sha256_file(s.path), todo))
    for s, digest in zip(todo, digests):
        s.sha256, s.bytes = digest, s.path.stat().st_size
    return sources


# --- archives -----------------------------------------------------------------------------------

def is_archive(path: Path) -> bool:
    """A .zip or .tar(.gz) archive, by its name and its (decompressed) magic bytes."""
    if not path.name.lower().endswith(ARCHIVE_SUFFIXES):
        return False
    head = read_head(path, 512)
    return head[257:262] == b"ustar" or head.startswith((b"PK\x03\x04", b"PK\x05\x06"))


class Spool:
    """A temporary directory for archive members, made on first use, removed on close."""

    def __init__(self) -> None:
        self._root: Path | None = None
        self._count = 0

    def new_file(self, member: str) -> Path:
        return self.new_folder() / (PurePosixPath(member).name or "member")

    def new_folder(self) -> Path:
        if self._root is None:
            self._root = Path(tempfile.mkdtemp(prefix="polytrace-spool-"))
        self._count += 1
        folder = self._root / str(self._count)
        folder.mkdir()
        return folder

    def close(self) -> None:
        if self._root is not None:
            shutil.rmtree(self._root, ignore_errors=True)


def members(archive: Source, spool: Spool) -> Iterator[Source]:
    """Each regular, non-hidden member of an archive, in archive order, spooled (gzip members
    decompressed) and hashed as the archive streams by; what is skipped goes to the first
    member's notes."""
    budget = Budget(max_inflate_bytes())
    skipped: dict[str, list[str]] = {}
    first = None
    for member, stream in _entries(archive, skipped):
        source = _spooled(archive, member, stream, spool, budget)
        if first is None:
            first = source
        yield source
    if first is not None:
        first.notes += [f"{archive.label}: skipped {len(names)} {why} member(s): {listed(names)}"
                        for why, names in skipped.items()]


def _entries(archive: Source, skipped: dict[str, list[str]]) -> Iterator[tuple[str, BinaryIO]]:
    def take(name: str, regular: bool) -> bool:
        why = "hidden" if _hidden(PurePosixPath(name)) else None if regular else "non-regular"
        if why:
            skipped.setdefault(why, []).append(name)
        return why is None

    if zipfile.is_zipfile(archive.path):
        yield from _zip_entries(archive, take)
    else:
        yield from _tar_entries(archive, take)


def _safe_name(archive: Source, member: str) -> str:
    p = PurePosixPath(member.replace("\\", "/"))
    if p.is_absolute() or ".." in p.parts or (p.parts and ":" in p.parts[0]):
        raise IngestError(archive.label, f"member name escapes the archive: {member!r}")
    return str(p)


def _tar_entries(archive: Source, take) -> Iterator[tuple[str, BinaryIO]]:
    with open_stream(archive.path) as raw:
        try:
            with tarfile.open(fileobj=raw, mode="r|") as tar:
                for m in tar:
                    name = _safe_name(archive, m.name)
                    if not m.isdir() and take(name, m.isfile()):
                        yield name, tar.extractfile(m)
        except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
            raise IngestError(archive.label, f"not a readable tar archive ({e})") from None


def _zip_entries(archive: Source, take) -> Iterator[tuple[str, BinaryIO]]:
    try:
        with zipfile.ZipFile(archive.path) as zf:
            for info in zf.infolist():
                name = _safe_name(archive, info.filename)
                if not info.is_dir() and take(name, True):
                    with zf.open(info) as f:
                        yield name, f
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError, zlib.error,
            ValueError) as e:
        # a corrupt directory can point a member at a negative offset (OSError) or name it
        # in bytes that are not the UTF-8 its flags promise (UnicodeDecodeError)
        raise IngestError(archive.label, f"not a readable zip archive ({e})") from None


# A zipped Parquet lake's member: its partition path from table= on
_LAKE_MEMBER = re.compile(r"(?:^|/)(table=[^/]+/run_id=[^/]+/[^/]+\.parquet)$")


def unzipped_lake(path: Path, spool: Spool) -> Path | None:
    """A zip of a Parquet lake (polytrace export, zipped) unpacked into the spool, its partition
    layout kept, under the inflate limit; None for any other archive."""
    if not path.name.lower().endswith(".zip") or not is_archive(path):
        return None
    archive = Source(path, path.name, path)
    try:
        with zipfile.ZipFile(path) as zf:
            infos = [i for i in zf.infolist() if not i.is_dir() and not _hidden(PurePosixPath(i.filename))]
            parts = [_LAKE_MEMBER.search(_safe_name(archive, i.filename)) for i in infos]
            if not infos or not all(parts):
                return None
            root, budget = spool.new_folder(), Budget(max_inflate_bytes())
            for info, part in zip(infos, parts):
                to = root / part.group(1)
                to.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as f, open(to, "wb") as out:
                    while block := f.read(BLOCK_BYTES):
                        budget.take(len(block), f"{path.name}{ARCHIVE_SEPARATOR}{info.filename}")
                        out.write(block)
            return root
    except (zipfile.BadZipFile, NotImplementedError, RuntimeError, OSError, EOFError, zlib.error, ValueError) as e:
        raise IngestError(archive.label, f"not a readable zip archive ({e})") from None


def _spooled(archive: Source, member: str, stream: BinaryIO, spool: Spool, budget: Budget) -> Source:
    to = spool.new_file(member)
    source = Source(to, f"{archive.name}{ARCHIVE_SEPARATOR}{member}", archive.origin / member,
                    found=archive.found, archive=archive.name, member=member)
    shown = source.label
    h, size = hashlib.sha256(), 0
    try:
        head = stream.read(2)
        if head == GZIP_MAGIC:
            stream = gzip.GzipFile(fileobj=_prefixed(head, stream), mode="rb")
            head = b""
        with open(to, "wb") as out:
            while block := head or stream.read(BLOCK_BYTES):
                head = b""
                budget.take(len(block), shown)
                h.update(block)
                out.write(block)
                size += len(block)
    except (OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as e:
        raise IngestError(shown, f"corrupt or truncated data ({e})") from None
    source.sha256, source.bytes = h.hexdigest(), size
    return source


class _Joined(io.RawIOBase):
    """A read-only stream over consecutive byte blocks."""

    def __init__(self, parts: Iterator[bytes]):
        self._parts, self._part, self._at = parts, memoryview(b""), 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._at == len(self._part):
            part = next(self._parts, None)
            if part is None:
                return 0
            self._part, self._at = memoryview(part), 0
        n = min(len(buffer), len(self._part) - self._at)
        buffer[:n] = self._part[self._at:self._at + n]
        self._at += n
        return n


def _prefixed(head: bytes, rest: BinaryIO) -> io.RawIOBase:
    """A stream with bytes already read from it put back in front."""
    return _Joined(itertools.chain([head], iter(lambda: rest.read(BLOCK_BYTES), b"")))


def opened(sources: Iterator[Source], spool: Spool) -> Iterator[Source]:
    """The sources with every archive replaced by its members."""
    for s in sources:
        if is_archive(s.path):
            yield from members(s, spool)
        else:
            yield s
