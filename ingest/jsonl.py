"""Typed JSON decoding for the JSON formats: whole files or JSON lines, every defect one IngestError line."""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Annotated

import msgspec

from polytrace.ingest.contract import IngestError
from polytrace.ingest.sources import check_utf8, read_bytes

# Integer fields as the canonical INTEGER columns hold them.
Length = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
SmallInt = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]
# A step's generation batch; the bound keeps a corrupt count from expanding into billions of rows.
Count = Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]
Tokens = Annotated[int, msgspec.Meta(ge=0)]
Seconds = Annotated[float, msgspec.Meta(ge=0)]

_LINE_PATH = re.compile(r"`\$\[(\d+)\]")


def decode_lines(decoder: msgspec.json.Decoder, path: Path) -> list:
    """All JSON lines of a file as typed objects."""
    return _decode(decoder.decode_lines, path)


def decode_document(decoder: msgspec.json.Decoder, path: Path):
    """A file holding one JSON document, as a typed object."""
    return _decode(decoder.decode, path)


def _decode(decode, path: Path):
    data = read_bytes(path)
    if not data or data.isspace():
        raise IngestError(path, "empty file")
    check_utf8(data, path)
    try:
        return decode(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise IngestError(path, line_numbered(str(e))) from None
    except RecursionError:
        raise IngestError(path, "JSON nested too deeply") from None


def encode_lines(records: list) -> bytes:
    """Records as JSON lines (a format's sample)."""
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def line_numbered(message: str) -> str:
    """msgspec's `$[i].field` paths of decode_lines as `record i+1: $.field` (blank lines are not counted)."""
    m = _LINE_PATH.search(message)
    if not m:
        return message
    rest = message[:m.start()] + "`$" + message[m.end():]
    return f"record {int(m.group(1)) + 1}: {rest}"
