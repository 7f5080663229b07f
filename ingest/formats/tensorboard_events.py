"""TensorBoard event files (`events.out.tfevents.*`): every scalar summary into step_metrics.

OpenRLHF, ROLL, NeMo-RL and AReaL log to TensorBoard by default (through tensorboardX,
torch.utils.tensorboard or TensorFlow). A row is one scalar: step = the Event's step, key = its
tag as written (no renaming: the framework's own vocabulary file maps it), value = the scalar
as float64 (a float32 `simple_value` widened exactly). Both encodings are read: `simple_value`
(TF1, tensorboardX, torch) and a rank-0 float/double `tensor` (TF2's `tf.summary.scalar`, and
`new_style` scalars), from `float_val`/`double_val` or `tensor_content`. Histograms, images,
text, graphs and hparams are skipped, counted in a warning. The events' wall times order the
values of several files (see after_load) and are then dropped: a wall clock is not a stage time.

The file is a TFRecord stream: each record is an 8-byte little-endian length, the masked
CRC-32C of those 8 bytes, the payload (one serialized `Event`), and the payload's masked
CRC-32C. The reader:
- frames records here (16 bytes of framing), a decompressed batch at a time from
  `sources.blocks`, so gzip and archive members stream under the inflate limit and memory is
  one batch plus the distinct (step, tag) values kept;
- checks both checksums with `google-crc32c` (Google's CRC-32C library, in C);
- decodes each Event with the compiled protobuf classes tensorboardX ships (its copies of
  TensorFlow's event.proto, summary.proto and tensor.proto), on protobuf's C (upb) backend.
Why not the alternatives: the `tensorboard` package's event_file_loader, without TensorFlow,
reads through its stub record reader, whose CRC-32C is a pure-Python byte loop (about 3 MB/s
here), opens only paths (no gzip stream, no inflate limit) and brings grpcio, werkzeug and the
data server (about 50 MB); tbparse reads a whole log into pandas through tensorboard's
EventAccumulator; tensorboardX has no reader. tensorboardX and google-crc32c are the
`tensorboard` extra; detection works without them (the header check below is pure Python) and
parsing then names the install command.

Damage: a record whose length checksum fails is a one-line IngestError (no later record can be
found, and the bytes from there are not an event file: TensorBoard stops there too); a record whose payload checksum fails is skipped and counted; a file
cut inside its last record (a run still writing, or killed) is read up to it, with a warning; a
file whose first record is not an event, or that holds no scalar, is a one-line IngestError. A record longer than
MAX_RECORD_BYTES (a huge graph or image, or a forged length) is skipped unread.

Several event files in one run (one per rank, or one per restart): a (step, tag) logged by more
than one file keeps the value whose step was logged latest by wall time (ties: the later input),
as a restarted run overrides the steps it logs again, and that is warned.
"""
from __future__ import annotations

import struct
from collections import Counter
from itertools import chain
from pathlib import Path
from typing import Iterator

import numpy as np
import pyarrow as pa

from polytrace.columns import from_list, from_numpy
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sources import blocks

HEADER = struct.Struct("<QI")
U32 = struct.Struct("<I")
NAME_PREFIX = "events.out.tfevents."
FILE_VERSION = b"brain.Event:"
# Longer records are skipped unread: a scalar event is tens of bytes, and this bounds a batch.
MAX_RECORD_BYTES = 64 << 20
INSTALL = "reading TensorBoard event files needs the tensorboard extra: pip install 'polytrace[tensorboard]'"
# tensorflow/core/framework/types.proto
DT_FLOAT, DT_DOUBLE = 1, 2
EVENT_TYPES = {"step": pa.int32(), "key": pa.string(), "value": pa.float64(), "wall_time": pa.float64()}


# --- CRC-32C -----------------------------------------------------------------------------------
# Pure Python, for the 12 bytes a sniff checks and the sample's few bytes: detection needs no
# extra. Parsing checks every byte with google-crc32c.

def _table() -> list[int]:
    table = []
    for n in range(256):
        for _ in range(8):
            n = (n >> 1) ^ 0x82F63B78 if n & 1 else n >> 1
        table.append(n)
    return table


_CRC_TABLE = _table()


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked(crc: int) -> int:
    """TFRecord's masking of a CRC (a CRC of data holding CRCs is weak otherwise)."""
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def record(payload: bytes) -> bytes:
    """One TFRecord around `payload`."""
    length = struct.pack("<Q", len(payload))
    return length + U32.pack(masked(crc32c(length))) + payload + U32.pack(masked(crc32c(payload)))


# --- detection ---------------------------------------------------------------------------------

def sniff(head: bytes, name: str) -> bool:
    """A first TFRecord header whose length checksum holds, and the writer's file name or the
    first event's `file_version: brain.Event:N` (a TFRecord of anything else is not claimed)."""
    if len(head) < HEADER.size:
        return False
    length, crc = HEADER.unpack_from(head)
    if masked(crc32c(head[:8])) != crc:
        return False
    return name.startswith(NAME_PREFIX) or FILE_VERSION in head[HEADER.size:HEADER.size + min(length, 256)]


# --- records -----------------------------------------------------------------------------------

class Damage:
    """What reading a file's records skipped, for the warnings."""

    def __init__(self) -> None:
        self.records = 0  # records framed, whatever their checksums
        self.bad_payloads = 0
        self.first_bad: int | None = None
        self.long_records = 0
        self.ended: str | None = None

    def notes(self) -> list[str]:
        notes = []
        if self.bad_payloads:
            notes.append(f"{self.bad_payloads} record(s) failing their checksum skipped "
                         f"(the first at byte {self.first_bad})")
        if self.long_records:
            notes.append(f"{self.long_records} record(s) longer than {MAX_RECORD_BYTES >> 20} MB skipped unread")
        if self.ended:
            notes.append(self.ended)
        return notes


def records(path: Path, damage: Damage) -> Iterator[list[bytes]]:
    """The payloads of the whole records whose checksums hold, a list per decompressed batch
    (a list, not one record at a time: a scalar event is ~50 bytes, and per-record generator
    steps cost a tenth of the parse)."""
    from google_crc32c import value as crc

    buf, pos, base, skip = b"", 0, 0, 0  # base: the file offset of buf[0]
    long_at = 0
    for block in blocks(path):
        if skip:  # inside a record too long to keep
            taken = min(skip, len(block))
            skip -= taken
            base += taken
            block = block[taken:]
            if not block:
                continue
        buf, base, pos = buf[pos:] + block, base + pos, 0
        end = len(buf)
        batch: list[bytes] = []
        while end - pos >= 12:
            length, header_crc = HEADER.unpack_from(buf, pos)
            if masked(crc(buf[pos:pos + 8])) != header_crc:  # no later record can be found
                if not damage.records:
                    raise IngestError(path, f"not a TensorBoard event file (the record at byte {base + pos} "
                                            "fails its length checksum)")
                raise IngestError(path, f"corrupt record header at byte {base + pos} (length checksum "
                                        "mismatch): not an event file from there on")
            stop = pos + 12 + length
            if length > MAX_RECORD_BYTES:
                damage.long_records += 1
                damage.records += 1
                if stop + 4 <= end:
                    pos = stop + 4
                    continue
                long_at, skip = base + pos, stop + 4 - end
                base, buf, pos, end = base + end, b"", 0, 0
                break
            if stop + 4 > end:
                break
            payload = buf[pos + 12:stop]
            if masked(crc(payload)) != U32.unpack_from(buf, stop)[0]:
                damage.bad_payloads += 1
                if damage.first_bad is None:
                    damage.first_bad = base + pos
            else:
                batch.append(payload)
            damage.records += 1
            pos = stop + 4
        yield batch
    if skip or len(buf) > pos:
        if not damage.records:
            raise IngestError(path, "not a TensorBoard event file (too short for one record)")
        where = long_at if skip else base + pos
        damage.ended = (f"the file ends inside a record at byte {where} (a run still writing, or "
                        "killed): read up to it")


# --- events ------------------------------------------------------------------------------------

class Scalars:
    """The last value of each (step, tag) in one file, and the wall time each step was last logged."""

    def __init__(self) -> None:
        self.steps: dict[int, dict[str, float]] = {}
        self.walls: dict[int, float] = {}
        self.logged = 0  # scalars read, repeats included
        self.skipped: Counter[str] = Counter()
        self.events = 0
        self.other_plugin: set[str] = set()  # tags whose metadata names a plugin other than scalars

    def table(self) -> pa.Table:
        ordered = sorted(self.steps.items())
        rows = [row for _, row in ordered]
        counts = np.fromiter(map(len, rows), np.int64, len(rows))
        total = int(counts.sum())
        return pa.table({
            "step": from_numpy(np.repeat(np.fromiter((s for s, _ in ordered), np.int32, len(rows)), counts)),
            "key": from_list(list(chain.from_iterable(rows)), pa.string()),
            "value": from_numpy(np.fromiter(chain.from_iterable(r.values() for r in rows), np.float64, total)),
            "wall_time": from_numpy(np.repeat(np.fromiter((self.walls[s] for s, _ in ordered), np.float64,
                                                          len(rows)), counts)),
        })

    def warnings(self) -> list[str]:
        notes = []
        kept = sum(len(row) for row in self.steps.values())
        if self.logged > kept:
            notes.append(f"{self.logged - kept} scalar(s) logged again at a step and tag already logged: "
                         "the later value kept")
        if self.skipped:
            kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(self.skipped.items()))
            notes.append(f"summary values that are not scalars skipped: {kinds}")
        return notes


def tensor_scalar(value, tags_elsewhere: set[str]) -> float | None:
    """A rank-0 float or double tensor (TF2's scalar encoding) as a float; None for any other tensor."""
    if value.HasField("metadata"):
        plugin = value.metadata.plugin_data.plugin_name
        if plugin and plugin != "scalars":
            tags_elsewhere.add(value.tag)
    if value.tag in tags_elsewhere:
        return None
    t = value.tensor
    if t.dtype not in (DT_FLOAT, DT_DOUBLE) or t.tensor_shape.dim:
        return None
    if t.tensor_content:
        fmt = "<f" if t.dtype == DT_FLOAT else "<d"
        return struct.unpack(fmt, t.tensor_content)[0] if len(t.tensor_content) == struct.calcsize(fmt) else None
    vals = t.float_val if t.dtype == DT_FLOAT else t.double_val
    return vals[0] if len(vals) == 1 else None


def read_scalars(path: Path, damage: Damage) -> Scalars:
    try:
        from google.protobuf.message import DecodeError
        from tensorboardX.proto.event_pb2 import Event
    except ImportError:
        raise IngestError(path, INSTALL) from None

    out = Scalars()
    steps, walls, skipped = out.steps, out.walls, out.skipped
    decode = Event.FromString
    logged, undecodable = 0, 0
    current, row = None, {}
    for batch in records(path, damage):
        for payload in batch:
            try:
                event = decode(payload)
            except DecodeError:
                undecodable += 1
                continue
            values = event.summary.value
            if not values:
                continue
            step = event.step
            if step != current:  # events come a step at a time: one lookup per step, not per event
                row = steps.get(step)
                if row is None:
                    row = steps[step] = {}
                current = step
            walls[step] = event.wall_time
            logged += len(values)
            for v in values:
                kind = v.WhichOneof("value")
                if kind == "simple_value":
                    row[v.tag] = v.simple_value
                elif kind == "tensor" and (x := tensor_scalar(v, out.other_plugin)) is not None:
                    row[v.tag] = x
                else:
                    skipped[kind or "empty"] += 1
    out.events = damage.records - damage.bad_payloads - damage.long_records - undecodable
    out.logged = logged - sum(skipped.values())
    if not out.events:
        raise IngestError(path, "not a TensorBoard event file (no record in it is an Event)")
    if undecodable:
        skipped["undecodable event"] = undecodable
    for step in (min(steps, default=0), max(steps, default=0)):
        if not -(2**31) <= step < 2**31:
            raise IngestError(path, f"step {step} is out of range")
    for step in [s for s, row in steps.items() if not row]:  # events of other kinds only
        del steps[step]
    return out


def parse(path: Path) -> Parsed:
    damage = Damage()
    scalars = read_scalars(path, damage)
    warnings = damage.notes() + scalars.warnings()
    if not scalars.steps:  # as every format refuses an input that gives no row
        damaged = "; ".join(damage.notes())
        raise IngestError(path, f"no scalar summary in {scalars.events} event(s)"
                                + (f" ({damaged})" if damaged else ""))
    # the rows go in at after_load, once every event file of the run is parsed (see there)
    return Parsed(deferred=scalars.table(), warnings=warnings)


def after_load(con, run_id: str, deferred: list[pa.Table]) -> Parsed:
    """Insert every event file's scalars; a (step, tag) several files log keeps the value of the
    file that logged that step latest by wall time (ties: the later input), and is warned."""
    from polytrace import store  # where used: parse workers import every format, not DuckDB

    tables = [t.append_column("input", from_list([i] * t.num_rows, pa.int32()))
              for i, t in enumerate(deferred) if t is not None and t.num_rows]
    if not tables:
        return Parsed()
    data = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
    with store.registered(con, "_tensorboard_scalars", data):
        if len(tables) == 1:  # one file holds each (step, tag) once already
            con.execute("INSERT INTO step_metrics (run_id, step, key, value) "
                        "SELECT ?, step, key, value FROM _tensorboard_scalars", [run_id]).fetchall()
            return Parsed()
        con.execute("""
            INSERT INTO step_metrics (run_id, step, key, value)
            SELECT ?, step, key, value FROM _tensorboard_scalars
            QUALIFY row_number() OVER (PARTITION BY step, key ORDER BY wall_time DESC, input DESC) = 1
        """, [run_id]).fetchall()
        again, steps = con.execute("""
            SELECT sum(n - 1)::BIGINT, list(DISTINCT step ORDER BY step) FROM (
                SELECT step, count(*) AS n FROM _tensorboard_scalars GROUP BY step, key HAVING n > 1)
        """).fetchall()[0]
    if not again:
        return Parsed()
    shown = ", ".join(map(str, steps[:8])) + (f" (+{len(steps) - 8} more)" if len(steps) > 8 else "")
    return Parsed(warnings=[f"{again} scalar(s) at {len(steps)} step(s) logged by more than one event file "
                            f"(several ranks, or a restart): the step logged latest kept: step(s) {shown}"])


# --- the sample --------------------------------------------------------------------------------
# Protobuf written by hand (field numbers from tensorflow/core/util/event.proto and
# framework/summary.proto, tensor.proto): the sample needs no writer.

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _bytes_field(number: int, data: bytes) -> bytes:
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def event(wall_time: float, step: int = 0, *, file_version: str | None = None,
          values: list[bytes] = ()) -> bytes:
    """A serialized Event: wall_time (1, double), step (2), file_version (3) or a summary (5)."""
    out = b"\x09" + struct.pack("<d", wall_time)
    if step:
        out += b"\x10" + _varint(step)
    if file_version is not None:
        out += _bytes_field(3, file_version.encode())
    if values:
        out += _bytes_field(5, b"".join(_bytes_field(1, v) for v in values))  # Summary.value
    return out


def simple_value(tag: str, x: float) -> bytes:
    """A Summary.Value with tag (1) and simple_value (2, float)."""
    return _bytes_field(1, tag.encode()) + b"\x15" + struct.pack("<f", x)


def tensor_value(tag: str, x: float, plugin: str | None = "scalars") -> bytes:
    """A Summary.Value holding x as TF2 writes a scalar: metadata (9) naming the plugin, and a
    tensor (8) of dtype DT_FLOAT (1), an empty shape (2) and 4 bytes of tensor_content (4)."""
    out = _bytes_field(1, tag.encode())
    if plugin:
        out += _bytes_field(9, _bytes_field(1, _bytes_field(1, plugin.encode())))
    return out + _bytes_field(8, b"\x08" + _varint(DT_FLOAT) + _bytes_field(2, b"")
                              + _bytes_field(4, struct.pack("<f", x)))


def sample() -> Sample:
    """The file version, then two steps: timing/generation as simple_value, and a TF2-style
    tensor scalar at step 2."""
    events = [event(1700000000.0, file_version="brain.Event:2"),
              event(1700000001.0, 1, values=[simple_value("timing/generation", 12.5)]),
              event(1700000002.0, 2, values=[simple_value("timing/generation", 10.0),
                                             tensor_value("rollout/response_length_mean", 512.0)])]
    return Sample.file("events.out.tfevents.1700000000.host.1.0", b"".join(record(e) for e in events))


FORMAT = Format(
    name="tensorboard",
    priority=70,
    sniff=sniff,
    parse=parse,
    sample=sample,
    after_load=after_load,
    description="TensorBoard event file (events.out.tfevents.*): every scalar into step_metrics, keyed by its tag",
)
