"""Property: for random PolyTrace-shaped input, the ingested rows are exactly the source lines."""
from __future__ import annotations

import json
import tempfile
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytrace.ingest.load import ingest_paths
from polytrace.store.migrate import ensure as ensure_schema

lengths = st.integers(min_value=0, max_value=2**31 - 1)
ranks = st.integers(min_value=0, max_value=63)
small = st.integers(min_value=0, max_value=10_000)
seconds = st.floats(min_value=0, max_value=1e6, allow_nan=False)
reasons = st.sampled_from(["stop", "length", "tool_calls", "abort", "é ünïcode"])

packed_line = st.fixed_dictionaries({
    "rank": ranks, "dp_rank": ranks, "tp_rank": ranks, "input": lengths,
    "output": st.lists(lengths, min_size=0, max_size=9), "validate": st.booleans(),
})
turn = st.fixed_dictionaries({
    "prompt_tokens": small, "cached_tokens": small, "completion_tokens": small,
    "engine_latency_s": seconds, "finish_reason": reasons, "tool_call_count": small,
})
call = st.fixed_dictionaries({
    "turn": small, "tool_name": st.sampled_from(["search", "python"]), "latency_s": seconds,
    "status": st.sampled_from(["success", "error"]), "response_token_len": small, "query_count": small,
})
rollout = st.fixed_dictionaries({
    "prompt_group_id": small, "sample_id": small, "prompt_len": small, "final_response_len": small,
    "max_response_len": small, "finish_reason": reasons, "validate": st.booleans(),
    "turns": st.lists(turn, max_size=4), "tool_calls": st.lists(call, max_size=4),
})
steps = st.integers(min_value=-5, max_value=2**31 - 1)


@pytest.fixture(scope="module")
def con():
    """One in-memory database for all examples; each example is its own run."""
    c = duckdb.connect()
    ensure_schema(c)
    yield c
    c.close()


def ingest_lines(con, lines: list[dict], name: str) -> str:
    """Write the lines as one JSONL file and ingest it as a new run (force: examples may repeat)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / name
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        return ingest_paths(con, [path], force=True).run_id


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=steps, lines=st.lists(packed_line, min_size=1, max_size=12).filter(
    lambda ls: any(line["output"] for line in ls)))
def test_packed_samples_equal_the_source_lines(con, step, lines):
    lines = [{"step": step, "local_index": i, **line} for i, line in enumerate(lines)]
    run_id = ingest_lines(con, lines, "packed_lengths_step_0.jsonl")
    got = con.execute("SELECT step, prompt_id, sample_id, rank, dp_rank, tp_rank, prompt_len, "
                      "response_len, validate FROM samples WHERE run_id = ? ORDER BY prompt_id, sample_id",
                      [run_id]).fetchall()
    want = [(step, i, j, line["rank"], line["dp_rank"], line["tp_rank"], line["input"], out,
             line["validate"])
            for i, line in enumerate(lines) for j, out in enumerate(line["output"])]
    assert got == want


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(step=steps, rollouts=st.lists(rollout, min_size=1, max_size=8))
def test_multiturn_rows_equal_the_source_lines(con, step, rollouts):
    lines = [{"step": step, **r, "turns": [{"turn": k, **t} for k, t in enumerate(r["turns"])],
              "turn_count": len(r["turns"]), "tool_call_count": len(r["tool_calls"])}
             for r in rollouts]
    run_id = ingest_lines(con, lines, "multiturn_workload_step_0.jsonl")
    order = "ORDER BY prompt_id, sample_id, rowid"
    samples = con.execute(
        "SELECT step, prompt_id, sample_id, prompt_len, response_len, truncated, validate, "
        f"turn_count, tool_call_count, finish_reason FROM samples WHERE run_id = ? {order}",
        [run_id]).fetchall()
    assert samples == sorted(
        ((step, r["prompt_group_id"], r["sample_id"], r["prompt_len"], r["final_response_len"],
          r["finish_reason"] == "length" or r["final_response_len"] >= r["max_response_len"],
          r["validate"], r["turn_count"], r["tool_call_count"], r["finish_reason"]) for r in lines),
        key=lambda row: row[1:3])
    turns = con.execute(
        "SELECT prompt_id, sample_id, turn, prompt_tokens, cached_tokens, completion_tokens, "
        f"engine_latency_s, finish_reason, tool_call_count FROM turns WHERE run_id = ? {order}",
        [run_id]).fetchall()
    assert turns == sorted(
        ((r["prompt_group_id"], r["sample_id"], t["turn"], t["prompt_tokens"], t["cached_tokens"],
          t["completion_tokens"], t["engine_latency_s"], t["finish_reason"], t["tool_call_count"])
         for r in lines for t in r["turns"]), key=lambda row: row[:2])
    calls = con.execute(
        "SELECT prompt_id, sample_id, turn, tool_name, latency_s, status, response_tokens, "
        f"query_count FROM tool_calls WHERE run_id = ? {order}", [run_id]).fetchall()
    assert calls == sorted(
        ((r["prompt_group_id"], r["sample_id"], c["turn"], c["tool_name"], c["latency_s"],
          c["status"], c["response_token_len"], c["query_count"]) for r in lines for c in r["tool_calls"]),
        key=lambda row: row[:2])
