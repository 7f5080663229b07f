"""PolyTrace 2025 release: one step-keyed JSON document of length lists, single-turn or multi-turn.

Single-turn: `{"<step>": {"input": [...], "output": [...]}}`. `input[i]` is prompt i's
length. `output` is either one list per prompt (`output[i][j]` is sample j of prompt i;
the key `output_groups` is read the same way and wins over `output`), or a flat list:
when its length is a multiple k of len(input), consecutive runs of k belong to one
prompt (`output[i*k + j]` is sample j of prompt i, as the suite's own generator groups
them); otherwise each output is its own prompt i with sample 0, paired with `input[i]`
while there is one. The release notes that inputs and outputs do not always pair up;
a prompt without an input gets a NULL prompt_len, and every mismatch is a warning.

Multi-turn: `{"<step>": [turn_0, turn_1, ...]}`, each turn object shaped like a
single-turn step. Turn k's entry (prompt i, sample j) is turn k of rollout (i, j), with
prompt_tokens = its input and completion_tokens = its output; a rollout has as many turns
as turn objects that contain it. Its `samples` row has prompt_len = the input of its
first turn, response_len = the sum of its completion tokens (the format records no tool
tokens), turn_count = its turns. Tool calls are not recorded, so there are no tool_calls.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Union

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import TURN_TYPES, samples_table, table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import Length, decode_members
from polytrace.ingest.layout import run_facts


class Block(msgspec.Struct):
    input: list[Length] = []
    output: list[Union[Length, list[Length]]] = []
    output_groups: list[list[Length]] | None = None


_decoder = msgspec.json.Decoder(Union[Block, list[Block]])
_HEAD = re.compile(rb'\A\s*\{\s*"\s*-?\d+\s*"\s*:\s*[\[{]')


def sniff(head: bytes, name: str) -> bool:
    return bool(_HEAD.match(head))


def _entries(block: Block, step: int, warnings: list[str]) -> list[tuple[int, int, int | None, int]]:
    """(prompt_id, sample_id, prompt_len, response_len) for each output of one block."""
    out = block.output_groups if block.output_groups is not None else block.output
    inputs = block.input
    nested = [isinstance(o, list) for o in out]
    if any(nested) and not all(nested):
        raise IngestError(None, f"step {step}: output mixes lists and numbers")
    if any(nested):
        groups = out
    elif inputs and len(out) % len(inputs) == 0:
        k = len(out) // len(inputs)
        groups = [out[i * k:(i + 1) * k] for i in range(len(inputs))]
    else:
        groups = [[o] for o in out]
    if len(groups) != len(inputs):
        warnings.append(f"step {step}: {len(inputs)} inputs for {len(groups)} output groups")
    return [(i, j, inputs[i] if i < len(inputs) else None, length)
            for i, group in enumerate(groups) for j, length in enumerate(group)]


def _step(key: str) -> int:
    try:
        step = int(key)
    except ValueError:
        raise IngestError(None, f"step key {key!r} is not an integer") from None
    if not -(2**31) <= step < 2**31:
        raise IngestError(None, f"step key {key!r} is out of range")
    return step


def parse(path: Path) -> Parsed:
    # step by step as the document streams by: memory is one step's lists plus the tables so far
    built: dict[str, tuple[int, bool, dict[str, pa.Table], list[str]]] = {}
    for key, value in decode_members(_decoder, path):
        step, multi, notes = _step(key), isinstance(value, list), []
        tables = _multi_turn(step, value, notes) if multi else _single_turn(step, value, notes)
        built.pop(key, None)  # a key given twice: the later value wins, as in a JSON object
        built[key] = (step, multi, tables, notes)
    steps = sorted(built.values(), key=lambda b: b[0])
    if len({multi for _, multi, _, _ in steps}) > 1:
        raise IngestError(path, "some steps are single-turn objects and others multi-turn lists")
    names = ("samples", "turns") if steps and steps[0][1] else ("samples",)
    tables = {name: pa.concat_tables([t[name] for _, _, t, _ in steps]) if steps else samples_table({})
              for name in names}
    if not tables["samples"].num_rows:
        raise IngestError(path, "no samples (every output list is empty)")
    run = {"task": "multi-turn"} if "turns" in tables else {}
    return Parsed(tables=tables, run=run, warnings=[w for _, _, _, notes in steps for w in notes])


def _single_turn(step: int, block: Block, warnings: list[str]) -> dict[str, pa.Table]:
    cols: dict[str, list] = {k: [] for k in ("step", "prompt_id", "sample_id", "prompt_len", "response_len")}
    for prompt_id, sample_id, prompt_len, response_len in _entries(block, step, warnings):
        for k, v in zip(cols, (step, prompt_id, sample_id, prompt_len, response_len)):
            cols[k].append(v)
    return {"samples": samples_table(cols)}


def _multi_turn(step: int, blocks: list[Block], warnings: list[str]) -> dict[str, pa.Table]:
    turns: dict[str, list] = {k: [] for k in (
        "step", "prompt_id", "sample_id", "turn", "prompt_tokens", "completion_tokens")}
    rollouts: dict[tuple[int, int], list] = {}  # (prompt, sample) -> [prompt_len, response_len, turn_count]
    for turn, block in enumerate(blocks):
        for prompt_id, sample_id, prompt_len, completion in _entries(block, step, warnings):
            for k, v in zip(turns, (step, prompt_id, sample_id, turn, prompt_len, completion)):
                turns[k].append(v)
            acc = rollouts.setdefault((prompt_id, sample_id), [prompt_len, 0, 0])
            acc[1] += completion
            acc[2] += 1
    keys = sorted(rollouts)
    samples = samples_table({
        "step": [step] * len(keys), "prompt_id": [k[0] for k in keys],
        "sample_id": [k[1] for k in keys],
        "prompt_len": [rollouts[k][0] for k in keys],
        "response_len": [rollouts[k][1] for k in keys],
        "turn_count": [rollouts[k][2] for k in keys],
    })
    return {"samples": samples, "turns": table(turns, TURN_TYPES)}


def sample() -> Sample:
    """Step 0 with samples grouped per prompt, step 1 with a flat output list."""
    doc = {"0": {"input": [10, 20], "output": [[1, 2], [3, 4]]}, "1": {"input": [5], "output": [6, 7]}}
    return Sample.file("polytrace_2025.json", json.dumps(doc).encode())


FORMAT = Format(
    name="polytrace-2025",
    priority=40,
    sniff=sniff,
    parse=parse,
    sample=sample,
    run_facts=run_facts,
    description='PolyTrace 2025 step-keyed JSON {"<step>": {"input": [...], "output": [...]}} '
                "and its multi-turn variant (a list of turn objects per step)",
)
