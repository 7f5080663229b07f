"""One multi-turn tool-use rollout as a multiturn_workload_step_N.jsonl line (the search_r1 layout)."""
from __future__ import annotations

import numpy as np

# Engine seconds per generated token under a full rollout batch, and tool latency
# (lognormal median, seconds): orders of magnitude seen in the search_r1 traces.
SECONDS_PER_TOKEN = 0.02
TOOL_MEDIAN_S = 0.4
PROMPT_BUDGET = 4096


def rollout_line(step: int, group: int, sample: int, prompt_len: int, tool_tokens: np.ndarray,
                 outputs: np.ndarray, cap: int, rng: np.random.Generator) -> dict:
    """A rollout of len(outputs) engine calls with a tool call between consecutive calls.

    The response budget `cap` counts generated and tool tokens; a call that would pass
    it is cut and ends the rollout with finish_reason 'length'.
    """
    turns, calls, rle = [], [], []
    context, budget, finish = prompt_len, cap, "stop"
    for i, want in enumerate(int(x) for x in outputs):
        last = i == len(outputs) - 1
        made = min(want, budget)
        finish = "length" if made < want else ("stop" if last else "tool_calls")
        turns.append({
            "turn": i, "generation_prompt_len": context, "prompt_tokens": context,
            "cached_tokens": turns[-1]["total_len_after"] if turns else 0,
            "max_new_tokens": budget, "completion_tokens": made,
            "generated_text_token_len": made, "assistant_append_len": made,
            "assistant_loss_len": made, "total_len_after": context + made,
            "finish_reason": finish, "tool_call_count": int(finish == "tool_calls"),
            "engine_latency_s": float(made * SECONDS_PER_TOKEN * rng.lognormal(0.0, 0.3)),
        })
        rle.append([1, made])
        context, budget = context + made, budget - made
        if finish != "tool_calls":
            break
        answer = min(int(tool_tokens[i]), budget)
        queries = int(rng.integers(1, 4))
        calls.append({
            "turn": i, "tool_name": "search", "query_count": queries,
            "latency_s": float(TOOL_MEDIAN_S * rng.lognormal(0.0, 0.6)),
            "response_token_len": answer, "append_len": answer, "loss_len": 0,
            "status": "success", "total_results": 3 * queries,
        })
        rle.append([0, answer])
        context, budget = context + answer, budget - answer
        if budget <= 0:
            finish = "length"
            break
    generated = sum(t["completion_tokens"] for t in turns)
    return {
        "step": step, "prompt_len": prompt_len, "max_response_len": cap,
        "max_model_len": PROMPT_BUDGET + cap, "turns": turns, "tool_calls": calls,
        "finish_reason": finish, "final_total_len": context,
        "final_response_len": context - prompt_len,
        "final_response_attention_len": context - prompt_len,
        "final_response_loss_len": generated, "response_loss_mask_rle": rle,
        "turn_count": len(turns), "tool_call_count": len(calls), "validate": False,
        "prompt_group_id": group, "sample_id": sample,
    }
