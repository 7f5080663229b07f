"""PolyTrace packed lengths: packed_lengths_step_N.jsonl, one line per prompt, one sample per output[j]."""
from __future__ import annotations

from pathlib import Path

import msgspec

from polytrace.ingest.canonical import samples_table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import Length, SmallInt, decode_lines, encode_lines
from polytrace.ingest.layout import run_facts
from polytrace.ingest.sniffing import first_line_keys


class PackedLine(msgspec.Struct):
    step: SmallInt
    input: Length
    output: list[Length]
    rank: SmallInt | None = None
    dp_rank: SmallInt | None = None
    tp_rank: SmallInt | None = None
    validate: bool | None = None


_decoder = msgspec.json.Decoder(PackedLine)


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
        raise IngestError(path, "no samples (every output list is empty)")
    return Parsed(tables={"samples": samples_table(cols)})


def sample() -> Sample:
    """Three prompts of step 0 with two samples each, over two dp ranks."""
    lines = [
        {"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 10,
         "output": [1, 3], "n_sampling": 2, "validate": False},
        {"step": 0, "rank": 2, "dp_rank": 1, "tp_rank": 0, "local_index": 0, "input": 20,
         "output": [5, 7], "n_sampling": 2, "validate": False},
        {"step": 0, "rank": 2, "dp_rank": 1, "tp_rank": 0, "local_index": 1, "input": 30,
         "output": [9, 11], "n_sampling": 2, "validate": False},
    ]
    return Sample.file("packed_lengths_step_0.jsonl", encode_lines(lines))


FORMAT = Format(
    name="polytrace-packed",
    priority=50,
    sniff=sniff,
    parse=parse,
    sample=sample,
    run_facts=run_facts,
    description="PolyTrace packed_lengths_step_N.jsonl: one line per prompt with its n_sampling response lengths",
)
