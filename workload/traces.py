"""Writers for the PolyTrace JSONL files: packed lengths, reward timings, DAPO filter indices, multi-turn rollouts."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np


def write_jsonl(path: Path, rows: list[dict]) -> None:
    """One JSON object per line, keys in the given order: identical rows give identical bytes."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for row in rows:
            f.write(json.dumps(row))
            f.write("\n")


def packed_lines(step: int, inputs: np.ndarray, outputs: np.ndarray, dp_of_prompt: np.ndarray,
                 tp: int, validate: bool = False) -> list[dict]:
    """packed_lengths_step_N.jsonl lines in file order: one per prompt, rank = dp_rank * tp."""
    lines, local = [], {}
    for p in range(len(inputs)):
        dp = int(dp_of_prompt[p])
        local[dp] = local.get(dp, -1) + 1
        lines.append({
            "step": int(step), "rank": dp * tp, "dp_rank": dp, "tp_rank": 0,
            "local_index": local[dp], "input": int(inputs[p]),
            "output": [int(x) for x in outputs[p]], "n_sampling": int(outputs.shape[1]),
            "validate": validate,
        })
    return lines


def reward_line(step: int, dp: int, tp: int, seconds: float, responses: np.ndarray) -> dict:
    """One reward_timings_step_N.jsonl line: a rank's reward time and the responses it scored."""
    return {
        "step": int(step), "rank": dp * tp, "tp_rank": 0, "dp_rank": dp,
        "batch_size": int(responses.size), "reward_time_s": float(seconds),
        "response_sum": int(responses.sum()), "response_mean": float(responses.mean()),
        "response_max": int(responses.max()), "validate": False,
    }


def filter_line(workload_step: int, trainer_step: int, gen_batch_index: int, n_sampling: int,
                prompt_count: int, train_batch_size: int, before: int, kept: list[int],
                used: list[int]) -> dict:
    """One dapo_filter_indices.jsonl line: which prompts of a generation batch were kept and used."""
    return {
        "workload_step": workload_step, "trainer_step": trainer_step,
        "gen_batch_index": gen_batch_index, "prompt_count": prompt_count, "n_sampling": n_sampling,
        "train_batch_size": train_batch_size, "num_prompt_in_batch_before": before,
        "kept_prompt_count": len(kept), "used_prompt_count": len(used),
        "kept_prompt_indices": kept, "used_prompt_indices": used,
    }
