"""A realistic synthetic DAPO-style run for the demo: packed lengths, reward timings, filter indices,
verl stage timings and GPU profiler traces."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from polytrace.workload.published import PUBLISHED_MATH, PUBLISHED_TOOL_USE
from polytrace.workload.synth import (
    contiguous_dp,
    lognormal_groups,
    sample_prompt_lengths,
    write_tool_use_steps,
)
from polytrace.workload.timeline import StepWork, step_times, verl_lines, write_kineto
from polytrace.workload.traces import (
    filter_line,
    packed_lines,
    reward_line,
    write_jsonl,
)

STEPS = 40
PROMPTS = 96          # generation batch, in prompts (DAPO's gen_batch_size)
N_SAMPLING = 8
DP, TP = 4, 2         # 8 GPUs; rank = dp_rank * TP
CAP = 8192            # max_response_len
TRAIN_BATCH = 32      # prompts per trainer step after dynamic-sampling filtering
# Responses grow by this factor over the run, as they do while RL training lengthens reasoning.
GROWTH = 1.6
# Share of a response's log-length variance shared by its prompt group (prompt difficulty).
GROUP_SHARE = 0.35
# Share of prompts whose group rewards differ (DAPO keeps only those), at the start and the end.
KEEP_FIRST, KEEP_LAST = 0.32, 0.22
# Reward (verifier) seconds: fixed cost per rank, cost per response token, and rare verifier
# timeouts that make one rank a straggler.
REWARD_BASE_S, REWARD_PER_TOKEN_S, TIMEOUT_P = 0.6, 2e-5, 0.03


def write_demo_traces(out_dir: Path, seed: int = 0) -> None:
    """Write one run that `polytrace ingest out_dir` reads back: STEPS steps of DAPO math, with
    verl's stage timings and a profiler trace per GPU from the same step timeline."""
    out_dir = Path(out_dir)
    rng = np.random.default_rng(seed)
    s, loc, scale = PUBLISHED_MATH.output_lognorm
    dp_of_prompt = contiguous_dp(PROMPTS, DP)
    dapo = _DapoFilter()
    work = []
    for step in range(STEPS):
        progress = step / max(STEPS - 1, 1)
        inputs = sample_prompt_lengths(PUBLISHED_MATH, rng, PROMPTS)
        outputs = lognormal_groups(rng, PROMPTS, N_SAMPLING, s, loc,
                                   scale * (1 + (GROWTH - 1) * progress), GROUP_SHARE, CAP)
        write_jsonl(out_dir / f"packed_lengths_step_{step}.jsonl",
                    packed_lines(step, inputs, outputs, dp_of_prompt, TP))
        reward_s = np.array([_reward_seconds(rng, outputs[dp_of_prompt == dp]) for dp in range(DP)])
        write_jsonl(out_dir / f"reward_timings_step_{step}.jsonl",
                    [reward_line(step, dp, TP, reward_s[dp], outputs[dp_of_prompt == dp]) for dp in range(DP)])
        keep_p = KEEP_FIRST + (KEEP_LAST - KEEP_FIRST) * progress
        used = dapo.add(step, np.flatnonzero(rng.random(PROMPTS) < keep_p).tolist())
        work.append(StepWork(step, np.repeat(inputs, N_SAMPLING), outputs.ravel(),
                             np.repeat(dp_of_prompt, N_SAMPLING),
                             np.repeat(np.isin(np.arange(PROMPTS), used), N_SAMPLING), reward_s))
    write_jsonl(out_dir / "dapo_filter_indices.jsonl", dapo.lines)
    times = step_times(work, DP)
    write_jsonl(out_dir / "verl_metrics.jsonl", verl_lines(work, times, DP * TP))
    write_kineto(out_dir / "profiler", times, DP, TP)


def write_demo_agent_traces(out_dir: Path, seed: int = 0, steps: int = 3, prompts: int = 32) -> None:
    """A separate multi-turn tool-use run (published call counts and per-call lengths).

    It is its own run, not part of write_demo_traces: its prompt ids are prompt groups, its
    rollouts carry no dp rank, and mixing them into the math run's steps would blur that
    run's per-rank and filter numbers.
    """
    write_tool_use_steps(PUBLISHED_TOOL_USE, Path(out_dir), steps, prompts, N_SAMPLING, CAP, seed)


def _reward_seconds(rng: np.random.Generator, responses: np.ndarray) -> float:
    seconds = (REWARD_BASE_S + REWARD_PER_TOKEN_S * responses.sum()) * rng.lognormal(0.0, 0.05)
    if rng.random() < TIMEOUT_P:
        seconds += rng.uniform(2.0, 6.0)
    return round(float(seconds), 6)


class _DapoFilter:
    """DAPO dynamic sampling: generation batches accumulate kept prompts until a train batch fills."""

    def __init__(self):
        self.lines: list[dict] = []
        self.trainer_step, self.gen_batch, self.before = 1, 0, 0

    def add(self, step: int, kept: list[int]) -> list[int]:
        """Record a generation batch's kept prompts; returns those the trainer used."""
        self.gen_batch += 1
        used = kept[:TRAIN_BATCH - self.before]
        self.lines.append(filter_line(step, self.trainer_step, self.gen_batch, N_SAMPLING, PROMPTS,
                                      TRAIN_BATCH, self.before, kept, used))
        self.before += len(used)
        if self.before >= TRAIN_BATCH:
            self.trainer_step, self.gen_batch, self.before = self.trainer_step + 1, 0, 0
        return used
