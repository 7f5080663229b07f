"""A W&B run written with WANDB_MODE=offline: `wandb/offline-run-*/run-<id>.wandb`, the run's record log.

The file is a LevelDB-style log (wandb's datastore): a 7-byte header (`:W&B`, 0xBEE1, version 0),
then 32 KiB blocks of records, each a 7-byte header (CRC-32 of the type byte and the payload,
length, type: full, first, middle or last piece) and a piece of one protobuf
`wandb_internal.Record`. wandb 0.31 no longer ships a Python reader for it (its Go core writes
and reads the log), so this module reads the log and decodes the few protobuf fields it needs
by their numbers in wandb/proto/wandb_internal.proto; tests/test_sources_new.py checks the
decoding against the wandb package's own generated classes on files the package wrote.

What is read: every history row (Record.history: items keyed by key or nested_key, values
as value_json or, in newer writers, typed number/integer fields) into step_metrics under the
verl formats' key normalisation, at HistoryRecord.step (else its `_step` item); the run's
config (RunRecord.config, then Record.config updates) into runs.config, and from a verl config
the model, data.max_response_length and trainer.n_gpus_per_node x trainer.nnodes. Text, bool
and nested values are not metrics. A log cut inside its last record (a run still writing, or
killed) is read up to it, with a warning.
"""
from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, BinaryIO

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sources import open_stream
from polytrace.ingest.step_metrics import StepMetrics

HEADER = struct.Struct("<4sHB")
IDENT, MAGIC, VERSION = b":W&B", 0xBEE1, 0
PIECE = struct.Struct("<IHB")
BLOCK = 32 * 1024
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
# A history row or a config is kilobytes; a record past this is no run's
MAX_RECORD_BYTES = 64 << 20
# wandb_internal.proto field numbers
RECORD_HISTORY, RECORD_CONFIG, RECORD_RUN = 2, 5, 17
RUN_CONFIG = 4
HISTORY_ITEM, HISTORY_STEP = 1, 2
ITEM_KEY, ITEM_NESTED_KEY, ITEM_INTEGER, ITEM_NUMBER, ITEM_VALUE_JSON = 1, 2, 5, 6, 16
CONFIG_UPDATE, CONFIG_REMOVE = 1, 2
STEP_KEY = "_step"
_constants = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# --- the record log -------------------------------------------------------------------------

def records(stream: BinaryIO, path: Path, warnings: list[str]) -> Iterator[bytes]:
    """Each record's payload, pieces joined and checksums checked, read a 32 KiB block at a time
    (a piece never crosses a block): memory is one block and one record."""
    block = stream.read(BLOCK)
    if len(block) < HEADER.size or HEADER.unpack_from(block) != (IDENT, MAGIC, VERSION):
        raise IngestError(path, "not a W&B record log (no :W&B header of version 0)")
    pos, base, pending, held = HEADER.size, 0, None, 0
    while block:
        while BLOCK - pos >= PIECE.size and pos < len(block):  # a shorter tail is padding
            if len(block) - pos < PIECE.size:
                warnings.append(f"the log ends inside a record header at byte {base + pos}; read up to it")
                return
            crc, length, kind = PIECE.unpack_from(block, pos)
            start, pos = pos + PIECE.size, pos + PIECE.size + length
            if kind == 0 and length == 0:  # zero padding to the block's end
                break
            if pos > len(block):
                if len(block) == BLOCK:
                    raise IngestError(path, f"corrupt record at byte {base + start - PIECE.size} "
                                            "(a piece longer than its block)")
                warnings.append(f"the log ends inside a record at byte {base + start - PIECE.size}; read up to it")
                return
            piece = block[start:pos]
            if zlib.crc32(piece, zlib.crc32(bytes([kind]))) != crc:
                raise IngestError(path, f"corrupt record at byte {base + start - PIECE.size} (checksum mismatch)")
            if kind == FULL and pending is None:
                yield piece
            elif kind == FIRST and pending is None:
                pending, held = [piece], len(piece)
            elif kind in (MIDDLE, LAST) and pending is not None:
                pending.append(piece)
                held += len(piece)
                if held > MAX_RECORD_BYTES:
                    raise IngestError(path, f"a record of more than {MAX_RECORD_BYTES >> 20} MiB at byte "
                                            f"{base + start - PIECE.size}: not a W&B run's record")
                if kind == LAST:
                    yield b"".join(pending)
                    pending = None
            else:
                raise IngestError(path, f"record pieces out of order at byte {base + start - PIECE.size}")
        base, pos, block = base + len(block), 0, stream.read(BLOCK)
    if pending is not None:
        warnings.append("the log ends inside a record split over blocks; read up to it")


# --- protobuf wire format -------------------------------------------------------------------

def varint(buf: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(buf) or shift > 63:
            raise ValueError("truncated or overlong varint")
        b = buf[pos]
        value |= (b & 0x7F) << shift
        pos, shift = pos + 1, shift + 7
        if not b & 0x80:
            return value, pos


def fields(buf: bytes) -> Iterator[tuple[int, int | float | bytes]]:
    """(field number, value) of a message: ints for varints, raw bytes for the rest."""
    pos = 0
    while pos < len(buf):
        tag, pos = varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            value, pos = varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated field")
        yield number, value


def text(value) -> str:
    return bytes(value).decode("utf-8")


def signed(n: int) -> int:
    """A sint64 from its zigzag encoding."""
    return (n >> 1) ^ -(n & 1)


# --- history and config ---------------------------------------------------------------------

def item(buf: bytes) -> tuple[str, Any]:
    """A HistoryItem or ConfigItem as (key, value); nested keys joined with '.' as W&B shows them."""
    key, nested, value = "", [], None
    for number, raw in fields(buf):
        if number == ITEM_KEY:
            key = text(raw)
        elif number == ITEM_NESTED_KEY:
            nested.append(text(raw))
        elif number == ITEM_NUMBER and len(raw) == 8:
            value = struct.unpack("<d", raw)[0]
        elif number == ITEM_INTEGER and isinstance(raw, int):
            value = signed(raw)
        elif number == ITEM_VALUE_JSON:
            value = json.loads(text(raw), parse_constant=_constants.__getitem__)
    return (".".join(nested) if nested else key), value


def history(buf: bytes) -> tuple[int | None, dict[str, float]]:
    """A history row: its step and its numeric values."""
    step, values = None, {}
    for number, raw in fields(buf):
        if number == HISTORY_STEP:
            step = next((v for n, v in fields(raw) if n == 1 and isinstance(v, int)), None)
            step = signed_int64(step) if step is not None else None
        elif number == HISTORY_ITEM:
            key, value = item(raw)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                values[key] = float(value)
    logged = values.pop(STEP_KEY, None)
    if step is None and logged is not None and math.isfinite(logged) and logged == int(logged):
        step = int(logged)
    return step, values


def signed_int64(n: int) -> int:
    """An int64 varint (two's complement in 64 bits)."""
    return n - (1 << 64) if n >= 1 << 63 else n


def apply_config(config: dict, buf: bytes) -> None:
    for number, raw in fields(buf):
        if number in (CONFIG_UPDATE, CONFIG_REMOVE):
            key, value = item(raw)
            if number == CONFIG_UPDATE:
                config[key] = value
            else:
                config.pop(key, None)


def run_facts(config: dict) -> dict:
    """Run columns a verl config names; the config itself (less W&B's own keys) as runs.config."""
    def at(*keys):
        node = config
        for k in keys:
            node = node.get(k) if isinstance(node, dict) else None
        return node

    facts: dict = {"config": json.dumps({k: v for k, v in config.items() if not k.startswith("_")})}
    if "actor_rollout_ref" in config:
        facts["framework"] = "verl"
    model = at("actor_rollout_ref", "model", "path")
    if isinstance(model, str) and model.strip("/"):
        facts["model"] = model.rstrip("/").rsplit("/", 1)[-1]
    cap = at("data", "max_response_length")
    if isinstance(cap, int) and 0 < cap < 2**31:
        facts["max_response_len"] = cap
    per_node, nodes = at("trainer", "n_gpus_per_node"), at("trainer", "nnodes")
    if isinstance(per_node, int) and isinstance(nodes, int) and 0 < per_node * nodes < 2**31:
        facts["n_gpus"] = per_node * nodes
    return facts


def parse(path: Path) -> Parsed:
    with open_stream(path) as stream:
        try:
            return _parsed(stream, path)
        except (OSError, EOFError, zlib.error) as e:
            raise IngestError(path, f"corrupt or truncated data ({e})") from None


def _parsed(stream: BinaryIO, path: Path) -> Parsed:
    warnings: list[str] = []
    metrics, config, unstepped = StepMetrics(), {}, 0
    for i, record in enumerate(records(stream, path, warnings), 1):
        try:
            for number, raw in fields(record):
                if number == RECORD_HISTORY:
                    step, values = history(raw)
                    if step is None:
                        unstepped += 1
                    else:
                        metrics.add(step, values)
                elif number == RECORD_RUN:
                    for n, sub in fields(raw):
                        if n == RUN_CONFIG:
                            apply_config(config, sub)
                elif number == RECORD_CONFIG:
                    apply_config(config, raw)
        except (ValueError, UnicodeDecodeError, struct.error, RecursionError, OverflowError) as e:
            raise IngestError(path, f"record {i}: not a W&B record ({e})") from None
        except IngestError as e:
            raise IngestError(path, f"record {i}: {e.reason}") from None
    if not metrics.steps:
        raise IngestError(path, "no history row with a step in the W&B run")
    if unstepped:
        warnings.append(f"{unstepped} history row(s) without a step skipped")
    return metrics.parsed("history row", run=run_facts(config), warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    return len(head) >= HEADER.size and HEADER.unpack_from(head) == (IDENT, MAGIC, VERSION)


# --- the sample: a log written the way wandb writes one -------------------------------------

def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return _varint(number << 3) + _varint(value)
    return _varint(number << 3 | 2) + _varint(len(value)) + value


def _items(number: int, values: dict[str, Any], nested: bool) -> bytes:
    key = ITEM_NESTED_KEY if nested else ITEM_KEY
    return b"".join(_field(number, _field(key, k.encode()) + _field(ITEM_VALUE_JSON, json.dumps(v).encode()))
                    for k, v in values.items())


def log_file(payloads: list[bytes]) -> bytes:
    """Records as a one-block log: header, then one full piece each."""
    out = bytearray(HEADER.pack(IDENT, MAGIC, VERSION))
    for p in payloads:
        out += PIECE.pack(zlib.crc32(p, zlib.crc32(bytes([FULL]))), len(p), FULL) + p
    assert len(out) <= BLOCK
    return bytes(out)


def sample() -> Sample:
    """A verl run's record log: its config, then two history rows with an old-style timing key,
    a text value and a NaN."""
    config = {"actor_rollout_ref": {"model": {"path": "/models/Qwen2.5-7B"}},
              "data": {"max_response_length": 1024}, "trainer": {"n_gpus_per_node": 8, "nnodes": 1}}
    run = _field(RECORD_RUN, _field(1, b"abc123") + _field(RUN_CONFIG, _items(CONFIG_UPDATE, config, False)))
    rows = [{"timing/gen": 6.0, "timing_s/step": 10.0, "note": "x", "_step": 1},
            {"timing/gen": 4.5, "timing_s/step": 8.0, "critic/score/mean": math.nan, "_step": 2}]
    hist = [_field(RECORD_HISTORY, _items(HISTORY_ITEM, r, True) + _field(HISTORY_STEP, _field(1, r["_step"])))
            for r in rows]
    return Sample.file("run-abc123.wandb", log_file([run, *hist]))


FORMAT = Format(
    name="wandb-offline",
    priority=50,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="W&B offline run log (wandb/offline-run-*/run-*.wandb): history rows and the run config",
)
