"""PolyTrace packed lengths: packed_lengths_step_N.jsonl, one line per prompt, one sample per output[j]."""
from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa

from polytrace.ingest.canonical import SAMPLE_TYPES, table
from polytrace.columns import from_list, from_numpy
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import Length, SmallInt, decode_batches, encode_lines
from polytrace.ingest.layout import run_facts
from polytrace.ingest.sniffing import first_line_keys


class PackedLine(msgspec.Struct, gc=False):
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
    prompt_in_step: dict[int, int] = {}
    batches = [_samples(lines, prompt_in_step) for lines in decode_batches(_decoder, path)]
    if not any(t.num_rows for t in batches):
        raise IngestError(path, "no samples (every output list is empty)")
    return Parsed(tables={"samples": pa.concat_tables(batches)})


def _samples(lines: list[PackedLine], prompt_in_step: dict[int, int]) -> pa.Table:
    """One batch of lines as samples rows: each line's values repeated once per output, in
    Arrow (take) rather than per sample in Python. A prompt's id is its position in its step."""
    prompt_ids = []
    for line in lines:
        prompt_id = prompt_in_step.get(line.step, 0)
        prompt_in_step[line.step] = prompt_id + 1
        prompt_ids.append(prompt_id)
    counts = np.fromiter(map(len, (line.output for line in lines)), np.int64, len(lines))
    parent = from_numpy(np.repeat(np.arange(len(lines), dtype=np.int64), counts))
    per_line = table({
        "step": [line.step for line in lines], "prompt_id": prompt_ids,
        "rank": [line.rank for line in lines], "dp_rank": [line.dp_rank for line in lines],
        "tp_rank": [line.tp_rank for line in lines], "prompt_len": [line.input for line in lines],
        "validate": [line.validate for line in lines]}, SAMPLE_TYPES).take(parent)
    starts = np.repeat(np.cumsum(counts) - counts, counts)
    sample_id = np.arange(int(counts.sum()), dtype=np.int64) - starts
    outputs = [out for line in lines for out in line.output]
    return pa.table({
        "step": per_line["step"], "prompt_id": per_line["prompt_id"],
        "sample_id": from_list(sample_id, pa.int32()),
        **{k: per_line[k] for k in ("rank", "dp_rank", "tp_rank", "prompt_len")},
        "response_len": from_list(outputs, pa.int32()), "validate": per_line["validate"]})


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
