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
from msgspec.structs import astuple

from polytrace.ingest.canonical import KEY_TYPES, TOOL_TYPES, TURN_TYPES, samples_table, table
from polytrace.columns import from_list
from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.jsonl import Length, Seconds, SmallInt, decode_batches, encode_lines
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
    batches, cap = [], None
    for rollouts in decode_batches(_decoder, path):
        batches.append(_tables(rollouts))
        caps = {r.max_response_len for r in rollouts} - {None}
        cap = max(caps | ({cap} - {None})) if caps else cap
    return Parsed(
        tables={name: pa.concat_tables([b[name] for b in batches]) for name in batches[0]},
        run={"task": "multi-turn", "max_response_len": cap},
    )


def _tables(rollouts: list[Rollout]) -> dict[str, pa.Table]:
    """One batch of rollouts as samples, turns and tool_calls. Columns come from transposing
    each Struct's fields (astuple, zip) in C, not from one Python pass per field."""
    n = len(rollouts)
    cols = dict(zip(Rollout.__struct_fields__, zip(*map(astuple, rollouts)))) if n else \
        {f: () for f in Rollout.__struct_fields__}
    keys = {"step": cols["step"], "prompt_id": cols["prompt_group_id"], "sample_id": cols["sample_id"]}
    keys = {k: np.fromiter(v, np.int32, n) for k, v in keys.items()}
    turns = [t for r in rollouts for t in r.turns]
    calls = [c for r in rollouts for c in r.tool_calls]
    turn_counts = np.fromiter(map(len, cols["turns"]), np.int64, n)
    call_counts = np.fromiter(map(len, cols["tool_calls"]), np.int64, n)
    return {
        "samples": _with_keys(samples_table({
            "prompt_len": cols["prompt_len"],
            "response_len": cols["final_response_len"],
            "truncated": _truncated(cols),
            "validate": cols["validate"],
            "turn_count": _filled(cols["turn_count"], turn_counts),
            "tool_call_count": _filled(cols["tool_call_count"], call_counts),
            "finish_reason": cols["finish_reason"],
        }), keys, None),
        "turns": _with_keys(_fields(turns, Turn, TURN_TYPES, rollouts), keys, turn_counts),
        "tool_calls": _with_keys(_fields(calls, ToolCall, TOOL_TYPES), keys, call_counts),
    }


def _fields(items: list, struct: type, types: dict, rollouts: list[Rollout] | None = None) -> pa.Table:
    """Structs as a table of their canonical columns (ToolCall's response_token_len is
    response_tokens). For turns, pass their rollouts: a turn without its number is numbered
    by its position in the rollout."""
    cols = zip(*map(astuple, items)) if items else [()] * len(struct.__struct_fields__)
    named = {_RENAMED.get(f, f): c for f, c in zip(struct.__struct_fields__, cols)}
    if rollouts is not None and None in named["turn"]:
        named["turn"] = [i if t.turn is None else t.turn for r in rollouts for i, t in enumerate(r.turns)]
    return table(named, types)


_RENAMED = {"response_token_len": "response_tokens"}


def _filled(given: tuple, counted: np.ndarray) -> list:
    """A logged count, or the length of its list where none was logged."""
    return [c if g is None else g for g, c in zip(given, counted.tolist())]


def _truncated(cols: dict) -> list:
    """Hit the cap: finish_reason 'length' or response >= max_response_len; NULL when neither is known."""
    return [True if reason == "length" or (cap is not None and final >= cap)
            else None if reason is None and cap is None else False
            for reason, cap, final in zip(cols["finish_reason"], cols["max_response_len"],
                                          cols["final_response_len"])]


def _with_keys(rows: pa.Table, keys: dict, counts: np.ndarray | None) -> pa.Table:
    """Prepend step/prompt_id/sample_id, repeated `counts` times per rollout for child rows."""
    for i, (name, values) in enumerate(keys.items()):
        col = values if counts is None else np.repeat(values, counts)
        rows = rows.add_column(i, name, from_list(col, KEY_TYPES[name]))
    return rows


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
