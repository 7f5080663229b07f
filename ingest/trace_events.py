"""Streaming decode of a Chrome-trace JSON document: its traceEvents array in bounded chunks."""
from __future__ import annotations

import re
from pathlib import PurePath
from typing import BinaryIO, Iterator

import msgspec

from polytrace.ingest.contract import IngestError
from polytrace.ingest.sources import Budget

BLOCK_BYTES = 2 << 20
# A header, or a run of bytes with no decodable event boundary, longer than this is not a trace.
MAX_CARRY_BYTES = 64 << 20
_KEY = b'"traceEvents"'
# Where one event object ends and the next begins. The same bytes can occur inside an
# event (nested args, strings); a cut there does not decode as a list, so it is never taken.
_BOUNDARY = re.compile(rb"\}\s*,\s*\{")
_CANDIDATES = 4


class EventStream:
    """Iterate a trace document's events as typed lists of at most ~BLOCK_BYTES of JSON each.

    `event_types` are msgspec Structs tried in turn on each chunk: a fast strict one
    first, then more lenient ones for chunks it rejects. `meta_type` is a Struct with
    defaults for every field; the top-level keys before and after the events array are
    decoded into it and collected in `meta` (complete once iteration ends). Memory stays
    bounded by one block plus one chunk of decoded events.
    """

    def __init__(self, stream: BinaryIO, name: str | PurePath, event_types: tuple[type, ...],
                 meta_type: type, budget: Budget):
        self.stream, self.name, self.budget = stream, name, budget
        self.meta: list = []
        self._meta_type = meta_type
        self._chunks = [msgspec.json.Decoder(list[t]) for t in event_types]
        self._tails = [msgspec.json.Decoder(msgspec.defstruct(
            "Tail", [("traceEvents", list[t], msgspec.field(default_factory=list))], bases=(meta_type,)))
            for t in event_types]
        self.bytes_read = 0

    def _read(self) -> bytes:
        block = self.stream.read(BLOCK_BYTES)
        self._took(len(block))
        return block

    def _read_into(self, buf: bytearray, end: int) -> int:
        """Read the next block into buf after `end`, growing buf only when it has no room."""
        if len(buf) - end < BLOCK_BYTES:
            buf.extend(bytes(end + BLOCK_BYTES - len(buf)))
        with memoryview(buf) as view:
            got = self.stream.readinto(view[end:end + BLOCK_BYTES])
        self._took(got)
        return got

    def _took(self, n: int) -> None:
        self.bytes_read += n
        self.budget.take(n, self.name)

    def __iter__(self) -> Iterator[list]:
        # buf[:end] is "[" + the undecoded rest. Blocks are read into it in place and the
        # rest moved to its front: no copy of the document beside the read itself.
        head = self._open_array()
        buf = bytearray(b"[" + head)
        end = len(buf)
        while True:
            got = self._read_into(buf, end)
            if not got:
                yield self._finish(bytes(buf[1:end]))
                return
            end += got
            events, rest = self._cut(buf, end)
            if events is not None:
                yield events
                left = end - rest
                buf[1:1 + left] = buf[rest:end]
                end = 1 + left
            elif end > MAX_CARRY_BYTES:
                raise IngestError(self.name, f"malformed JSON in traceEvents near byte "
                                  f"{self.bytes_read - end}")

    def _open_array(self) -> bytes:
        """Decode the header up to `"traceEvents": [` and return the bytes after the bracket."""
        buf = b""
        while True:
            block = self._read()
            buf += block
            at = buf.find(_KEY)
            if at >= 0:
                after = buf[at + len(_KEY):].lstrip()
                if len(after) >= 64 or not block:
                    break
            if not block:
                raise IngestError(self.name, "no traceEvents array (not a Chrome/Kineto trace)")
            if len(buf) > MAX_CARRY_BYTES:
                raise IngestError(self.name, f"no traceEvents array in the first "
                                  f"{MAX_CARRY_BYTES >> 20} MB")
        head = buf[:at].strip()
        if not head.startswith(b"{"):
            raise IngestError(self.name, "not a JSON object with a traceEvents array")
        try:
            self.meta.append(self._decode([msgspec.json.Decoder(self._meta_type)],
                                          head.rstrip(b",") + b"}", "header"))
        except msgspec.DecodeError as e:
            raise IngestError(self.name, f"{e} (trace header)") from None
        if not after.startswith(b":"):
            raise IngestError(self.name, "traceEvents is not followed by ':'")
        after = after[1:].lstrip()
        if not after.startswith(b"["):
            raise IngestError(self.name, "traceEvents is not an array")
        return after[1:]

    def _cut(self, buf: bytearray, end: int) -> tuple[list | None, int]:
        """Events of buf[:end] up to its last event boundary that decodes, and where the next
        event starts.

        The byte after the boundary's "}" becomes "]" for the decode, so no copy is made.
        """
        window = max(0, end - (64 << 10))
        matches = list(_BOUNDARY.finditer(buf, window, end)) or list(_BOUNDARY.finditer(buf, 0, end))
        for m in reversed(matches[-_CANDIDATES:]):
            close = m.start() + 1
            saved, buf[close] = buf[close], ord("]")
            view = memoryview(buf)[:close + 1]
            try:
                events = self._decode(self._chunks, view, "events")
            except msgspec.DecodeError:
                continue
            finally:
                view.release()
                buf[close] = saved
            return events, m.end() - 1
        return None, 0

    def _finish(self, carry: bytes) -> list:
        try:
            tail = self._decode(self._tails, b'{"traceEvents":[' + carry, "end")
        except msgspec.DecodeError as e:
            reason = "truncated JSON" if "truncated" in str(e) else str(e)
            raise IngestError(self.name, f"{reason} (trace end)") from None
        self.meta.append(tail)
        return tail.traceEvents

    def _decode(self, decoders: list, data: bytes, where: str):
        """Decode with the first decoder that accepts the types; DecodeError passes through."""
        for decoder in decoders:
            try:
                return decoder.decode(data)
            except msgspec.ValidationError as e:
                error = e
            except RecursionError:
                raise IngestError(self.name, f"JSON nested too deeply in the trace {where}") from None
        raise IngestError(self.name, f"unexpected field type in the trace {where} ({error})") from None
