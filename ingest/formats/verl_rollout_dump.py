"""verl's rollout dump (trainer.rollout_data_dir): one `{step}.jsonl` per training step, one line per generated sample.

The writer is RayPPOTrainer._dump_generations (verl/trainer/ppo/ray_trainer.py), read in verl
0.4.1, 0.5.0, 0.6.1, 0.7.1 and 0.9.1 (0.3.0.post1 has no dump). Every version writes, per sample i,
`json.dumps({"input": ..., "output": ..., ["gts": ...,] "score": ..., "step": global_steps,
**extra}, ensure_ascii=False)`:
- input and output are the prompt and response texts, decoded with skip_special_tokens=True;
- gts (0.6 on) is reward_model.ground_truth, any JSON or null;
- score is token_level_scores.sum(-1), a float (json.dumps writes NaN as a bare literal);
- extra is every list of reward_extra_infos_dict as long as the batch (acc, pred, request_id,
  uid ...); an extra field named score replaces the score in place.
The batch is reordered for DP balance before the dump, so a prompt's samples are not adjacent:
samples with the same input text in a step are one prompt group (prompt_id, numbered by first
appearance; sample_id counts within the group in file order).

Lengths are tokens when POLYTRACE_TOKENIZER (`polytrace ingest --tokenizer PATH`) names a local
tokenizer.json, read by the optional `tokenizers` package: the dumped texts are re-encoded
without special tokens, so a chat template's special tokens are not counted. Without one they
are characters, and the run's length_unit says 'chars'. Numeric extra fields (true/false as
1/0) go to sample_metrics; text ones (pred, request_id, uid) are not kept.

Async runs: a line whose extra fields carry integer `min_global_steps` and `max_global_steps` (the
weight versions a trajectory was generated across, which verl's agent loop records per sample in
async mode and its newer trainer turns into training/off_policy/trajectory_staleness*; volcengine/verl
after b178a3cd, read in a public copy of verl/trainer/ppo/ray_trainer.py) also gives a
`trajectories` row: start_version = min_global_steps, end_version = max_global_steps, and
consume_version = step - 1, the trainer's weights in verl's own formula ((global_steps - 1) -
min_global_steps is its worst-case staleness). Those two fields are not kept in sample_metrics.
"""
from __future__ import annotations

import json
import math
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from polytrace.ingest import options
from polytrace.ingest.canonical import KEY_TYPES, samples_table, table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import SmallInt, line_numbered
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import check_utf8, line_blocks

TOKENIZER_VARIABLE = "POLYTRACE_TOKENIZER"
WRITTEN = ("input", "output", "gts", "score", "step", "min_global_steps", "max_global_steps")
STEP_FILE = re.compile(r"^\d+\.jsonl(\.gz)?$")
METRIC_TYPES = {**KEY_TYPES, "key": pa.string(), "value": pa.float64()}
TRAJECTORY_TYPES = {**KEY_TYPES, "trajectory_id": pa.string(), "start_version": pa.int32(),
                    "end_version": pa.int32(), "consume_version": pa.int32(), "status": pa.string(),
                    "tokens": pa.int64()}


def versions(row: dict[str, Any]) -> tuple[int, int] | None:
    """The weight versions an async sample was generated across, when the dump carries them."""
    lo, hi = row.get("min_global_steps"), row.get("max_global_steps")
    if isinstance(lo, int) and isinstance(hi, int) and not isinstance(lo, bool) and not isinstance(hi, bool):
        return lo, hi
    return None


class Line(msgspec.Struct):
    input: str
    output: str
    step: SmallInt
    score: float | bool | None = None


_lines = msgspec.json.Decoder(dict[str, Any])
_constants = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


def records(block: bytes, path: Path, line: int) -> list[dict[str, Any]]:
    """A batch's JSON lines (the batch starts after `line` lines); Python's NaN/Infinity
    literals, which json.dumps writes, included."""
    try:
        return _lines.decode_lines(block)
    except msgspec.DecodeError:
        pass
    except RecursionError:
        raise IngestError(path, "JSON nested too deeply") from None
    rows = []
    for i, text in enumerate(block.split(b"\n"), line + 1):
        if text.strip():
            try:
                row = json.loads(text, parse_constant=_constants.__getitem__)
            except ValueError as e:
                raise IngestError(path, f"line {i}: not JSON ({e})") from None
            except RecursionError:
                raise IngestError(path, f"line {i}: JSON nested too deeply") from None
            if not isinstance(row, dict):
                raise IngestError(path, f"line {i}: not a JSON object")
            rows.append(row)
    return rows


def typed(rows: list[dict[str, Any]], path: Path, before: int, offset: int) -> list[Line]:
    try:
        return msgspec.convert(rows, list[Line])
    except msgspec.ValidationError as e:
        raise IngestError(path, line_numbered(str(e), before, offset)) from None


def extras(row: dict[str, Any]) -> list[tuple[str, float]]:
    """The reward function's numeric extra fields; bools as 1/0, text and nulls left out."""
    try:
        return [(k, float(v)) for k, v in row.items()
                if k not in WRITTEN and isinstance(v, (int, float))]
    except OverflowError:
        raise IngestError(None, "an extra field's value is out of the float range") from None


class Groups:
    """Prompt groups as lines arrive: samples with the same input in a step are one group,
    numbered by first appearance; a sample's id counts within its group."""

    def __init__(self, tokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: dict[tuple[int, str], int] = {}
        self.sizes: list[int] = []
        self.prompt_len: list[int] = []

    def add(self, lines: list[Line]) -> tuple[list[int], list[int], list[int]]:
        """prompt_id, sample_id and prompt length of each line."""
        new = [key for key in dict.fromkeys((line.step, line.input) for line in lines) if key not in self.ids]
        self.prompt_len += lengths([text for _, text in new], self.tokenizer)
        for key in new:
            self.ids[key] = len(self.sizes)
            self.sizes.append(0)
        prompt_ids, sample_ids = [], []
        for line in lines:
            prompt = self.ids[line.step, line.input]
            prompt_ids.append(prompt)
            sample_ids.append(self.sizes[prompt])
            self.sizes[prompt] += 1
        return prompt_ids, sample_ids, [self.prompt_len[p] for p in prompt_ids]


def tokenizer_path() -> str | None:
    path = options.current().tokenizer
    return str(path) if path else None


@lru_cache(maxsize=2)
def load_tokenizer(path: str):
    try:
        from tokenizers import Tokenizer  # optional: pip install 'polytrace[tokenizers]'
    except ImportError:
        raise IngestError(None, f"{TOKENIZER_VARIABLE}/--tokenizer needs the tokenizers package "
                                "(pip install 'polytrace[tokenizers]')") from None
    try:
        return Tokenizer.from_file(path)
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exception for a missing or bad file
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise IngestError(None, f"tokenizer {path} cannot be read ({reason})") from None


def lengths(texts: list[str], tokenizer) -> list[int]:
    if tokenizer is None:
        return [len(t) for t in texts]
    return [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]


def parse(path: Path) -> Parsed:
    """Batch by batch (sources.line_blocks): memory is one batch and the step's prompt texts."""
    given = tokenizer_path()
    groups = Groups(load_tokenizer(given) if given else None)
    samples: dict[str, list] = {k: [] for k in ("step", "prompt_id", "sample_id", "prompt_len",
                                                "response_len", "reward")}
    metrics: dict[str, list] = {k: [] for k in METRIC_TYPES}
    trajectories: dict[str, list] = {k: [] for k in TRAJECTORY_TYPES}
    line = count = 0
    for offset, block in line_blocks(path):
        if offset == 0 and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not a verl rollout dump")
        check_utf8(block, path, offset)
        rows = records(block, path, line)
        lines = typed(rows, path, count, offset)
        line, count = line + block.count(b"\n"), count + len(lines)
        prompt_ids, sample_ids, prompt_len = groups.add(lines)
        samples["step"] += [x.step for x in lines]
        samples["prompt_id"] += prompt_ids
        samples["sample_id"] += sample_ids
        samples["prompt_len"] += prompt_len
        response_len = lengths([x.output for x in lines], groups.tokenizer)
        samples["response_len"] += response_len
        samples["reward"] += [None if x.score is None else float(x.score) for x in lines]
        for i, (row, x, p, s, n) in enumerate(zip(rows, lines, prompt_ids, sample_ids, response_len)):
            span = versions(row)
            if span is not None:
                values = (x.step, p, s, f"{x.step}:{count - len(lines) + i + 1}", span[0], span[1],
                          x.step - 1, "accepted", n)
                for col, v in zip(TRAJECTORY_TYPES, values):
                    trajectories[col].append(v)
            try:
                pairs = extras(row)
            except IngestError as e:
                raise IngestError(path, f"step {x.step}: {e.reason}") from None
            for key, value in pairs:
                for col, v in zip(METRIC_TYPES, (x.step, p, s, key, value)):
                    metrics[col].append(v)
    if not count:
        raise IngestError(path, "empty file" if not line else "no sample line")
    tables = {"samples": samples_table(samples)}
    if metrics["key"]:
        tables["sample_metrics"] = table(metrics, METRIC_TYPES)
    if trajectories["step"]:
        tables["trajectories"] = table(trajectories, TRAJECTORY_TYPES)
    return Parsed(tables=tables, run={"framework": "verl"},
                  deferred="tokens" if groups.tokenizer else "chars")


def after_load(con, run_id: str, units: list[str]) -> Parsed:
    """Record on the run whether its sample lengths are tokens or characters."""
    unit = "chars" if "chars" in units else "tokens"
    con.execute("UPDATE runs SET length_unit = ? WHERE run_id = ?", [unit, run_id])
    warnings = [] if unit == "tokens" else [
        "sample lengths are characters: no tokenizer given (--tokenizer PATH to a tokenizer.json)"]
    return Parsed(warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    line = first_line(head)
    try:
        obj = json.loads(line, parse_constant=_constants.__getitem__)
    except (ValueError, RecursionError):
        # a first line longer than the head: verl writes input first, and names files {step}.jsonl
        return line.startswith(b'{"input": "') and bool(STEP_FILE.match(name))
    return (isinstance(obj, dict) and {"input", "output", "score", "step"} <= set(obj)
            and isinstance(obj["input"], str) and isinstance(obj["output"], str))


def sample() -> Sample:
    """Step 3 of a GRPO run, written as verl 0.6.1 writes it: two prompts of two samples in
    DP-balanced order, one prompt's scores tied (no learning signal), an acc and a pred."""
    rows = [
        {"input": "1+1=", "output": "2", "gts": "2", "score": 1.0, "step": 3, "acc": True, "pred": "2"},
        {"input": "2+2=", "output": "5, no: 4", "gts": "4", "score": 0.0, "step": 3, "acc": False,
         "pred": "5"},
        {"input": "1+1=", "output": "two", "gts": "2", "score": 1.0, "step": 3, "acc": True, "pred": "2"},
        {"input": "2+2=", "output": "4", "gts": "4", "score": 1.0, "step": 3, "acc": True, "pred": "4"},
    ]
    return Sample.file("3.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode())


FORMAT = Format(
    name="verl-rollout-dump",
    priority=55,
    sniff=sniff,
    parse=parse,
    sample=sample,
    after_load=after_load,
    description="verl trainer.rollout_data_dir: {step}.jsonl, one {input, output, gts, score, step, ...} "
                "line per sample",
)
