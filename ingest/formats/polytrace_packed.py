"""PolyTrace packed lengths: packed_lengths_step_N.jsonl, one line per prompt, one sample per output[j]."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import msgspec
import pyarrow as pa

from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, IngestError, Parsed
from polytrace.ingest.sniffing import first_line_keys
from polytrace.ingest.sources import check_utf8, read_bytes

Length = Annotated[int, msgspec.Meta(ge=0, le=2**31 - 1)]
SmallInt = Annotated[int, msgspec.Meta(ge=-(2**31), le=2**31 - 1)]


class PackedLine(msgspec.Struct):
    step: SmallInt
    input: Length
    output: list[Length]
    rank: SmallInt | None = None
    dp_rank: SmallInt | None = None
    tp_rank: SmallInt | None = None
    validate: bool | None = None


_decoder = msgspec.json.Decoder(PackedLine)
_LINE_PATH = re.compile(r"`\$\[(\d+)\]")


def decode_lines(decoder: msgspec.json.Decoder, path: Path) -> list:
    """All JSON lines of a file as typed objects; any defect is one IngestError line."""
    data = read_bytes(path)
    if not data or data.isspace():
        raise IngestError(f"{path.name}: empty file")
    check_utf8(data, path.name)
    try:
        return decoder.decode_lines(data)
    except (msgspec.ValidationError, msgspec.DecodeError) as e:
        raise IngestError(f"{path.name}: {line_numbered(str(e))}") from None
    except RecursionError:
        raise IngestError(f"{path.name}: JSON nested too deeply") from None


def line_numbered(message: str) -> str:
    """msgspec's `$[i].field` paths of decode_lines as `record i+1: $.field` (blank lines are not counted)."""
    m = _LINE_PATH.search(message)
    if not m:
        return message
    rest = message[:m.start()] + "`$" + message[m.end():]
    return f"record {int(m.group(1)) + 1}: {rest}"


def sniff(head: bytes, name: str) -> bool:
    keys = first_line_keys(head)
    return {"input", "output"} <= keys and "step" in keys and "turns" not in keys


def parse(path: Path) -> Parsed:
    lines = decode_lines(_decoder, path)
    cols: dict[str, list] = {k: [] for k in (
        "step", "prompt_id", "sample_id", "rank", "dp_rank", "tp_rank",
        "prompt_len", "response_len", "validate")}
    prompt_in_step: dict[int, int] = {}
    for line in lines:
        prompt_id = prompt_in_step.get(line.step, 0)
        prompt_in_step[line.step] = prompt_id + 1
        for j, out in enumerate(line.output):
            cols["step"].append(line.step)
            cols["prompt_id"].append(prompt_id)
            cols["sample_id"].append(j)
            cols["rank"].append(line.rank)
            cols["dp_rank"].append(line.dp_rank)
            cols["tp_rank"].append(line.tp_rank)
            cols["prompt_len"].append(line.input)
            cols["response_len"].append(out)
            cols["validate"].append(line.validate)
    if not cols["step"]:
        raise IngestError(f"{path.name}: no samples (every output list is empty)")
    return Parsed(tables={"samples": samples_table(cols)})


SAMPLE_TYPES = {
    "step": pa.int32(), "prompt_id": pa.int32(), "sample_id": pa.int32(),
    "rank": pa.int32(), "dp_rank": pa.int32(), "tp_rank": pa.int32(),
    "prompt_len": pa.int32(), "response_len": pa.int32(), "truncated": pa.bool_(),
    "validate": pa.bool_(), "kept": pa.bool_(), "used": pa.bool_(),
    "turn_count": pa.int32(), "tool_call_count": pa.int32(),
    "finish_reason": pa.string(), "reward": pa.float64(),
}


def samples_table(cols: dict[str, list]) -> pa.Table:
    return pa.table({k: from_list(v, SAMPLE_TYPES[k]) for k, v in cols.items()})


FORMAT = Format(
    name="polytrace-packed",
    priority=50,
    sniff=sniff,
    parse=parse,
    description="PolyTrace packed_lengths_step_N.jsonl: one line per prompt with its n_sampling response lengths",
)
