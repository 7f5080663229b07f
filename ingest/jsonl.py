"""Typed JSON decoding for the JSON formats, batch by batch: JSON lines, or a document's
top-level members; every defect one IngestError line. Memory is one batch, never the file."""
from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated

import msgspec

from polytrace.ingest.contract import IngestError
from polytrace.ingest.sources import Utf8Checker, blocks, check_utf8, line_blocks

# Integer fields as the canonical INTEGER columns hold them.
Length = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
SmallInt = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
# A step's generation batch; the bound keeps a corrupt count from expanding into billions of rows.
Count = Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]
Tokens = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]

_LINE_PATH = re.compile(r"`\$\[(\d+)\]")
_BYTE = re.compile(r"\(byte (\d+)\)")
# One top-level member of a document can be this large; a bigger one is refused, not buffered.
MAX_MEMBER_BYTES = 256 << 20


def decode_batches(decoder: msgspec.json.Decoder, path: Path) -> Iterator[list]:
    """The file's JSON lines as typed objects, one list per batch of about BATCH_BYTES."""
    records, seen = 0, False
    for offset, block in line_blocks(path):
        check_utf8(block, path, offset)
        if not seen and block.isspace():
            continue
        seen = True
        try:
            items = decoder.decode_lines(block)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise IngestError(path, _with_line(line_numbered(str(e), records, offset), path)) from None
        except RecursionError:
            raise IngestError(path, "JSON nested too deeply") from None
        records += len(items)
        yield items
    if not seen:
        raise IngestError(path, "empty file")


def decode_lines(decoder: msgspec.json.Decoder, path: Path) -> list:
    """All JSON lines of a file as typed objects (for a file known to be small)."""
    return [item for batch in decode_batches(decoder, path) for item in batch]


def decode_members(decoder: msgspec.json.Decoder, path: Path) -> Iterator[tuple[str, object]]:
    """(key, typed value) for each top-level member of a file holding one JSON object, in file
    order, reading it a batch at a time: memory is one member, not the document."""
    for key, value in _members(path):
        try:
            yield key, decoder.decode(value)
        except (msgspec.ValidationError, msgspec.DecodeError) as e:
            raise IngestError(path, f"{e} (step key {key!r})") from None
        except RecursionError:
            raise IngestError(path, "JSON nested too deeply") from None


# A complete string, or one structural byte: a lone quote is a string the batch cuts short.
# Inside a member only strings and brackets matter, so commas (one per number) are not tokens.
_TOKEN = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}",:]')
_NESTED = re.compile(rb'"(?:[^"\\]|\\.)*"|[\[\]{}"]')


def _members(path: Path) -> Iterator[tuple[str, bytes]]:
    """The raw bytes of each member of `{"key": value, ...}`, found by tracking nesting over
    strings and brackets; msgspec validates each value when it decodes it."""
    source, utf8 = blocks(path), Utf8Checker(path)
    buf, base, pos, more = bytearray(), 0, 0, True
    state, depth, key, start, last = "open", 0, "", 0, 0

    def malformed(at: int) -> IngestError:
        return IngestError(path, f"JSON is malformed (byte {base + at})")

    while state != "done":
        m = (_NESTED if depth > 1 else _TOKEN).search(buf, pos)
        if m is None or (more and m.group() == b'"'):
            if not more:
                break
            block = next(source, None)
            utf8(block or b"", final=block is None)
            if block is None:
                more = False
                continue
            keep = min(pos if m is None else m.start(), start if state == "value" else last)
            del buf[:keep]
            base, pos, start, last = base + keep, pos - keep, start - keep, last - keep
            buf += block
            if len(buf) > MAX_MEMBER_BYTES:
                raise IngestError(path, f"a top-level member larger than {MAX_MEMBER_BYTES >> 20} MB "
                                        f"near byte {base}")
            continue
        tok, pos = m.group(), m.end()
        if state != "value" and buf[last:m.start()].strip():
            raise malformed(last)
        if state == "open":
            if tok != b"{":
                raise IngestError(path, "not a JSON object")
            state, depth = "first", 1
        elif state in ("first", "key"):
            if tok == b"}" and state == "first":
                state = "done"
            elif tok.startswith(b'"'):
                key, state = _key(tok, path), "colon"
            else:
                raise malformed(m.start())
        elif state == "colon":
            if tok != b":":
                raise malformed(m.start())
            state, start = "value", pos
        elif tok in (b"{", b"["):
            depth += 1
        elif tok in (b"}", b"]") and depth > 1:
            depth -= 1
        elif tok == b"}" or (tok == b"," and depth == 1):
            yield key, bytes(buf[start:m.start()])
            state = "done" if tok == b"}" else "key"
        last = pos
    if state == "open":
        raise IngestError(path, "empty file" if not buf.strip() else "not a JSON object")
    if state != "done":
        raise IngestError(path, "Input data was truncated")
    if buf[pos:].strip():
        raise IngestError(path, "JSON is malformed: trailing characters")
    for block in source:
        utf8(block)
        if block.strip():
            raise IngestError(path, "JSON is malformed: trailing characters")
    if more:
        utf8(b"", final=True)


def _key(token: bytes, path: Path) -> str:
    try:
        return msgspec.json.decode(token, type=str)
    except msgspec.DecodeError as e:
        raise IngestError(path, f"malformed member name ({e})") from None


def encode_lines(records: list) -> bytes:
    """Records as JSON lines (a format's sample)."""
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _with_line(message: str, path: Path) -> str:
    """A `(byte N)` of the file's text as `(line L, byte N)`, the line an editor goes to (read
    again, up to that byte: only a failed parse pays for it)."""
    m = _BYTE.search(message)
    if not m:
        return message
    at, line = int(m.group(1)), 1
    for offset, block in line_blocks(path):
        line += block.count(b"\n", 0, max(0, at - offset))
        if offset + len(block) >= at:
            break
    return f"{message[:m.start()]}(line {line}, byte {at}){message[m.end():]}"


def line_numbered(message: str, before: int = 0, offset: int = 0) -> str:
    """msgspec's `$[i].field` paths of decode_lines as `record i+1: $.field` (blank lines are not
    counted), for a batch that follows `before` records and starts at byte `offset`."""
    if offset:
        message = _BYTE.sub(lambda b: f"(byte {int(b.group(1)) + offset})", message)
    m = _LINE_PATH.search(message)
    if not m:
        return message
    rest = message[:m.start()] + "`$" + message[m.end():]
    return f"record {before + int(m.group(1)) + 1}: {rest}"
