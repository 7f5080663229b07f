"""PolyTrace multi-turn workloads: multiturn_workload_step_N.jsonl, one line per rollout with its turns and tool calls.

Each line becomes one `samples` row (prompt_id = prompt_group_id, response_len =
final_response_len, truncated when finish_reason is 'length' or the response reaches
max_response_len), one `turns` row per `turns[]` entry and one `tool_calls` row per
`tool_calls[]` entry (response_tokens = response_token_len). Rollouts carry no rank,
so rank/dp_rank/tp_rank stay NULL. The Structs declare only the fields used, so
msgspec skips the rest (e.g. response_loss_mask_rle) without building objects.
"""
from __future__ import annotations

from pathlib import Path

import msgspec
import numpy as np
import pyarrow as pa

from polytrace.ingest.canonical import KEY_TYPES, TOOL_TYPES, TURN_TYPES, samples_table, table
from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.jsonl import Length, Seconds, SmallInt, decode_lines, encode_lines
from polytrace.ingest.layout import run_facts
from polytrace.ingest.sniffing import first_line_keys


class Turn(msgspec.Struct, gc=False):
    turn: Length | None = None
    prompt_tokens: Length | None = None
    cached_tokens: Length | None = None
    completion_tokens: Length | None = None
    engine_latency_s: Seconds | None = None
    finish_reason: str | None = None
    tool_call_count: Length | None = None


class ToolCall(msgspec.Struct, gc=False):
    turn: Length | None = None
    tool_name: str | None = None
    latency_s: Seconds | None = None
    status: str | None = None
    response_token_len: Length | None = None
    query_count: Length | None = None


class Rollout(msgspec.Struct, gc=False):
    step: SmallInt
    prompt_group_id: SmallInt
    sample_id: SmallInt
    final_response_len: Length
    prompt_len: Length | None = None
    max_response_len: Length | None = None
    turns: list[Turn] = []
    tool_calls: list[ToolCall] = []
    turn_count: Length | None = None
    tool_call_count: Length | None = None
    finish_reason: str | None = None
    validate: bool | None = None


_decoder = msgspec.json.Decoder(Rollout)


def sniff(head: bytes, name: str) -> bool:
    keys = first_line_keys(head)
    return "turns" in keys and ("prompt_group_id" in keys or "final_response_len" in keys)


def parse(path: Path) -> Parsed:
    rollouts = decode_lines(_decoder, path)
    keys = {
        "step": np.fromiter((r.step for r in rollouts), np.int32, len(rollouts)),
        "prompt_id": np.fromiter((r.prompt_group_id for r in rollouts), np.int32, len(rollouts)),
        "sample_id": np.fromiter((r.sample_id for r in rollouts), np.int32, len(rollouts)),
    }
    caps = {r.max_response_len for r in rollouts} - {None}
    run = {"task": "multi-turn", "max_response_len": max(caps) if caps else None}
    return Parsed(
        tables={
            "samples": _samples(rollouts, keys),
            "turns": _turns(rollouts, keys),
            "tool_calls": _tool_calls(rollouts, keys),
        },
        run=run,
    )


def _samples(rollouts: list[Rollout], keys: dict) -> pa.Table:
    table = samples_table({
        "prompt_len": [r.prompt_len for r in rollouts],
        "response_len": [r.final_response_len for r in rollouts],
        "truncated": [_truncated(r) for r in rollouts],
        "validate": [r.validate for r in rollouts],
        "turn_count": [len(r.turns) if r.turn_count is None else r.turn_count for r in rollouts],
        "tool_call_count": [len(r.tool_calls) if r.tool_call_count is None else r.tool_call_count
                            for r in rollouts],
        "finish_reason": [r.finish_reason for r in rollouts],
    })
    return _with_keys(table, keys, None)


def _truncated(r: Rollout) -> bool | None:
    """Hit the cap: finish_reason 'length' or response >= max_response_len; NULL when neither is known."""
    if r.finish_reason == "length" or (r.max_response_len is not None
                                       and r.final_response_len >= r.max_response_len):
        return True
    return None if r.finish_reason is None and r.max_response_len is None else False


def _with_keys(rows: pa.Table, keys: dict, counts: np.ndarray | None) -> pa.Table:
    """Prepend step/prompt_id/sample_id, repeated `counts` times per rollout for child rows."""
    for i, (name, values) in enumerate(keys.items()):
        col = values if counts is None else np.repeat(values, counts)
        rows = rows.add_column(i, name, from_list(col, KEY_TYPES[name]))
    return rows


def _turns(rollouts: list[Rollout], keys: dict) -> pa.Table:
    counts = np.fromiter((len(r.turns) for r in rollouts), np.int64, len(rollouts))
    turns = [t for r in rollouts for t in r.turns]
    index = [t.turn for t in turns]
    if None in index:
        # a turn without its number is numbered by its position in the rollout
        index = [i if t.turn is None else t.turn for r in rollouts for i, t in enumerate(r.turns)]
    cols = {
        "turn": index,
        "prompt_tokens": [t.prompt_tokens for t in turns],
        "cached_tokens": [t.cached_tokens for t in turns],
        "completion_tokens": [t.completion_tokens for t in turns],
        "engine_latency_s": [t.engine_latency_s for t in turns],
        "finish_reason": [t.finish_reason for t in turns],
        "tool_call_count": [t.tool_call_count for t in turns],
    }
    return _with_keys(table(cols, TURN_TYPES), keys, counts)


def _tool_calls(rollouts: list[Rollout], keys: dict) -> pa.Table:
    counts = np.fromiter((len(r.tool_calls) for r in rollouts), np.int64, len(rollouts))
    calls = [c for r in rollouts for c in r.tool_calls]
    cols = {
        "turn": [c.turn for c in calls],
        "tool_name": [c.tool_name for c in calls],
        "latency_s": [c.latency_s for c in calls],
        "status": [c.status for c in calls],
        "response_tokens": [c.response_token_len for c in calls],
        "query_count": [c.query_count for c in calls],
    }
    return _with_keys(table(cols, TOOL_TYPES), keys, counts)


def sample() -> Sample:
    """Two rollouts of one prompt at step 7: one with two turns and a tool call, one cut at the cap."""
    turn = {"turn": 0, "prompt_tokens": 50, "cached_tokens": 0, "completion_tokens": 10,
            "finish_reason": "tool_calls", "tool_call_count": 1, "engine_latency_s": 0.5}
    call = {"turn": 0, "tool_name": "search", "latency_s": 1.25, "status": "success",
            "response_token_len": 30, "query_count": 2}
    rollouts = [
        {"step": 7, "prompt_group_id": 0, "sample_id": 0, "prompt_len": 50, "max_response_len": 100,
         "final_response_len": 40, "finish_reason": "stop", "turn_count": 2, "tool_call_count": 1,
         "validate": False, "turns": [turn, {**turn, "turn": 1, "cached_tokens": 40}], "tool_calls": [call]},
        {"step": 7, "prompt_group_id": 0, "sample_id": 1, "prompt_len": 50, "max_response_len": 100,
         "final_response_len": 100, "finish_reason": "length", "turn_count": 1, "tool_call_count": 0,
         "validate": False, "turns": [{**turn, "finish_reason": "length"}], "tool_calls": []},
    ]
    return Sample.file("multiturn_workload_step_7.jsonl", encode_lines(rollouts))


FORMAT = Format(
    name="polytrace-multiturn",
    priority=60,
    sniff=sniff,
    parse=parse,
    sample=sample,
    run_facts=run_facts,
    description="PolyTrace multiturn_workload_step_N.jsonl: one line per rollout -> samples, "
                "turns and tool_calls",
)
