"""Receiving uploads: multipart files streamed to a temporary directory, under a byte limit and
a time limit; folders a killed server left behind are removed at the next start."""
from __future__ import annotations

import errno
import fcntl
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import BinaryIO

import anyio
from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from polytrace.ingest import registry
from polytrace.ingest.contract import IngestError
from polytrace.ingest.run_facts import GIVEN_RUN_FACTS
from polytrace.server.errors import ApiError

FILE_FIELD = "file"
FILES = "files"
TEXT_FIELDS = ("name", "format", "framework", *GIVEN_RUN_FACTS)
MAX_FILES = 10_000
MAX_TEXT_BYTES = 4096
# Folders in one file's name: deeper trees are not traces, and path handling recurses on them.
MAX_FOLDERS = 64
UPLOAD_PREFIX = "polytrace-upload-"
# Hand the parser (and its disk writes) to a worker thread in slices this big.
FLUSH_BYTES = 1 << 20


@dataclass
class Upload:
    """The uploaded files on disk, named as the client named them, and the text fields.

    Its temporary folder stays locked (flock) while the upload lives: a folder nobody locks
    is one a killed server left behind (remove_stale).
    """

    root: Path
    lock: int
    files: list[Path] = field(default_factory=list)
    client_names: list[str] = field(default_factory=list)
    fields: dict[str, str] = field(default_factory=dict)
    folder_name: str = FILES

    @classmethod
    def new(cls) -> Upload:
        for _ in range(3):
            root = Path(tempfile.mkdtemp(prefix=UPLOAD_PREFIX))
            lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                # a server starting at this moment may have taken it for a stale one
                if os.path.samestat(os.fstat(lock), os.stat(root)):
                    return cls(root, lock)
            except FileNotFoundError:
                pass
            os.close(lock)
        raise OSError(errno.EAGAIN, "temporary upload folders keep disappearing")

    @property
    def folder(self) -> Path:
        """Where the files are; several files ingest as this directory."""
        return self.root / self.folder_name

    @property
    def dropped_folder(self) -> str | None:
        """The folder every file came from (a folder dropped on the page), if they all did."""
        tops = {PurePosixPath(n).parts[0] for n in self.client_names}
        return tops.pop() if len(tops) == 1 and all("/" in n for n in self.client_names) else None

    def name_folder(self) -> None:
        """Give several files the directory a run is named after: the dropped folder when
        every file came from one, else `first (+N)`."""
        if self.dropped_folder:
            self.folder_name = f"{self.folder_name}/{self.dropped_folder}"
            return
        new = safe_relative(f"{self.client_names[0]} (+{len(self.client_names) - 1})", 0).name
        (self.root / self.folder_name).rename(self.root / new)
        self.files = [self.root / new / p.relative_to(self.folder) for p in self.files]
        self.folder_name = new

    def discard(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)
        os.close(self.lock)


def forced_format(value: str | None) -> str | None:
    """The format a client forced (an upload's form field, an append's parameter), by its registry name."""
    if not value:
        return None
    try:
        return registry.get(value).name
    except IngestError as e:
        raise ApiError(422, f"parameter 'format': {e}") from None


def form_field(option: str) -> str:
    """How the API names an ingest option in a hint: the form field that sets it."""
    return f"the {option!r} form field"


def remove_stale(tmp: str | None = None) -> int:
    """Remove the upload folders no live upload holds (a killed server's); returns how many.
    Another server's uploads in progress hold their locks and are left alone."""
    removed = 0
    for root in Path(tmp or tempfile.gettempdir()).glob(f"{UPLOAD_PREFIX}*"):
        try:
            lock = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            if os.fstat(lock).st_uid != os.getuid():
                continue
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            shutil.rmtree(root, ignore_errors=True)
            removed += 1
        except OSError:
            continue  # locked: an upload in progress
        finally:
            os.close(lock)
    return removed


def too_large(limit: int, size: int | None = None) -> ApiError:
    got = f"upload of {size} bytes" if size is not None else "upload"
    return ApiError(413, f"{got} exceeds the limit of {limit} bytes (POLYTRACE_MAX_UPLOAD_BYTES)")


def safe_relative(name: str, index: int) -> PurePosixPath:
    """The client's file name as a relative path with no way out of the upload directory."""
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".", "..")]
    # 200 bytes per part stays under every file system's 255-byte name limit
    parts = ["".join(c for c in p if c.isprintable()).encode()[:200].decode("utf-8", "ignore")
             for p in parts]
    parts = [p for p in parts if p]
    if len(parts) - 1 > MAX_FOLDERS:
        raise ApiError(422, f"parameter 'file': a name starting {name[:40]!r} is nested in "
                            f"{len(parts) - 1} folders (at most {MAX_FOLDERS})")
    return PurePosixPath(*parts) if parts else PurePosixPath(f"upload-{index}")


class _Receiver:
    """python-multipart callbacks that write file parts straight to disk."""

    def __init__(self, upload: Upload):
        self.upload = upload
        self.header_name = b""
        self.header_value = b""
        self.disposition = b""
        self.out: BinaryIO | None = None
        self.text: bytearray | None = None
        self.text_name = ""

    def callbacks(self) -> dict:
        return {
            "on_part_begin": self.on_part_begin,
            "on_header_field": lambda d, s, e: self._add("header_name", d[s:e]),
            "on_header_value": lambda d, s, e: self._add("header_value", d[s:e]),
            "on_header_end": self.on_header_end,
            "on_headers_finished": self.on_headers_finished,
            "on_part_data": self.on_part_data,
            "on_part_end": self.on_part_end,
        }

    def _add(self, attr: str, data: bytes) -> None:
        setattr(self, attr, getattr(self, attr) + data)

    def on_part_begin(self) -> None:
        self.disposition = b""

    def on_header_end(self) -> None:
        if self.header_name.lower() == b"content-disposition":
            self.disposition = self.header_value
        self.header_name = self.header_value = b""

    def on_headers_finished(self) -> None:
        _, options = parse_options_header(self.disposition)
        name = options.get(b"name", b"").decode("utf-8", "replace")
        if name == FILE_FIELD:
            self._open_file(options.get(b"filename", b"").decode("utf-8", "replace"))
        elif name in TEXT_FIELDS:
            self.text, self.text_name = bytearray(), name
        else:
            raise ApiError(422, f"parameter {name!r}: unknown form field "
                                f"(expected {FILE_FIELD!r}, {', '.join(map(repr, TEXT_FIELDS))})")

    def _open_file(self, client_name: str) -> None:
        files = self.upload.files
        if len(files) >= MAX_FILES:
            raise ApiError(422, f"parameter 'file': more than {MAX_FILES} files in one upload")
        rel = safe_relative(client_name, len(files))
        path = self.upload.root / FILES / rel
        try:
            # two parts of one name would leave one file: the run would silently lack the other
            if path.is_file():
                raise ApiError(422, f"parameter 'file': two files are named {str(rel)!r}")
            if path.exists() or any(p.is_file() for p in path.parents):
                raise ApiError(422, f"parameter 'file': {str(rel)!r} names both a file and a folder")
            path.parent.mkdir(parents=True, exist_ok=True)
            self.out = open(path, "wb")
        except OSError as e:
            if e.errno == errno.ENOSPC:
                raise
            raise ApiError(422, f"parameter 'file': cannot store a file named {client_name[:80]!r} "
                                f"({e.strerror})") from None
        files.append(path)
        self.upload.client_names.append(str(rel))

    def on_part_data(self, data: bytes, start: int, end: int) -> None:
        if self.out is not None:
            self.out.write(data[start:end])
        elif self.text is not None:
            self.text += data[start:end]
            if len(self.text) > MAX_TEXT_BYTES:
                raise ApiError(422, f"parameter {self.text_name!r}: longer than {MAX_TEXT_BYTES} bytes")

    def on_part_end(self) -> None:
        if self.out is not None:
            self.out.close()
            self.out = None
        elif self.text is not None:
            self.upload.fields[self.text_name] = self.text.decode("utf-8", "replace")
            self.text = None

    def close(self) -> None:
        if self.out is not None:
            self.out.close()


def _boundary(request: Request) -> bytes:
    kind, options = parse_options_header(request.headers.get("content-type", ""))
    if kind != b"multipart/form-data":
        raise ApiError(415, "POST /api/runs expects multipart/form-data with one or more 'file' parts")
    if not options.get(b"boundary"):
        raise ApiError(400, "multipart/form-data without a boundary")
    return options[b"boundary"]


def _declared_length(request: Request) -> int | None:
    try:
        return int(request.headers["content-length"])
    except (KeyError, ValueError):
        return None


async def receive(request: Request, limit: int, timeout_s: float) -> Upload:
    """Stream the request body to disk, failing with 413 as soon as it passes `limit` bytes
    and with 408 when it has not all arrived after `timeout_s` seconds."""
    boundary = _boundary(request)
    declared = _declared_length(request)
    if declared is not None and declared > limit:
        raise too_large(limit, declared)
    upload = Upload.new()
    receiver = _Receiver(upload)
    try:
        parser = MultipartParser(boundary, receiver.callbacks())
        with anyio.fail_after(timeout_s):
            seen, pending = 0, bytearray()
            async for chunk in request.stream():
                seen += len(chunk)
                if seen > limit:
                    raise too_large(limit)
                pending += chunk
                if len(pending) >= FLUSH_BYTES:
                    await anyio.to_thread.run_sync(parser.write, bytes(pending))
                    pending.clear()
            await anyio.to_thread.run_sync(parser.write, bytes(pending))
        parser.finalize()
        if receiver.out is not None or receiver.text is not None:
            raise ApiError(400, "multipart body ends in the middle of a part")
    except BaseException as e:
        receiver.close()
        upload.discard()
        if isinstance(e, FormParserError):
            raise ApiError(400, f"malformed multipart body: {e}") from None
        if isinstance(e, ClientDisconnect):
            raise ApiError(400, "client disconnected during the upload") from None
        if isinstance(e, TimeoutError):
            raise ApiError(408, f"the upload did not arrive within {timeout_s:g} s "
                                "(POLYTRACE_UPLOAD_TIMEOUT_S)") from None
        if isinstance(e, OSError) and e.errno == errno.ENOSPC:
            raise ApiError(507, "no disk space left on the server for this upload") from None
        raise
    if not upload.files:
        upload.discard()
        raise ApiError(422, "parameter 'file': at least one file is required")
    return upload
