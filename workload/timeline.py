"""The demo run's step timeline: stage seconds from its lengths, written as verl metrics and as
per-GPU PyTorch profiler (Kineto) traces.

Each step runs as a synchronous RLVR step does: every rollout engine decodes its samples
(the cost model, the batch shrinking as samples finish) and then waits for the slowest one;
the reward runs on CPU; the trainer computes log-probs for every response and trains on the
responses the filter used, ending in one NCCL all-reduce that every rank enters and leaves
together. The GPU traces therefore show the rollout long tail as idle time on the engines
that finished early, the same idle the Rollout tail section shows from the lengths.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polytrace.workload.costmodel import H200_REPLAY_GRID, CostModel
from polytrace.workload.simulate import finish_times

LOG_PROB_S_PER_TOKEN = 4e-6      # one forward pass over prompt + response, per GPU's share
TRAIN_S_PER_TOKEN = 1.2e-5       # forward + backward + optimizer, per used token
ALLREDUCE_S = 0.25
WEIGHT_SYNC_S = 0.12             # trainer weights copied to the rollout engines
OTHER_S = 0.4                    # bookkeeping no stage accounts for
DECODE_KERNELS = 48              # a rollout is drawn as this many kernels
TRAIN_KERNELS = 4                # and each training stage as this many
LAUNCH_GAP_S = 2e-4              # the GPU waits on the CPU's launch before each of them
DECODE_NAMES = ("flash_fwd_splitkv_kernel", "ampere_bf16_s16816gemm_128x128", "sampling_topk_kernel")
NCCL = "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


@dataclass
class StepWork:
    """What one step of the run did: per sample prompt and response lengths and engine, the
    samples the trainer used, and the reward seconds per engine."""

    step: int
    prompt_len: np.ndarray
    response_len: np.ndarray
    engine: np.ndarray
    used: np.ndarray
    reward_s: np.ndarray


@dataclass
class StepTimes:
    """When one step starts (s since the run's start) and how long each of its stages takes."""

    step: int
    start_s: float
    gen_s: np.ndarray          # per engine: its own rollout
    reward_s: float
    old_log_prob_s: float
    ref_s: float
    update_actor_s: np.ndarray  # per engine (its trainer ranks' share of the used tokens)

    @property
    def rollout_s(self) -> float:
        return float(self.gen_s.max())

    @property
    def update_start_s(self) -> float:
        return self.start_s + WEIGHT_SYNC_S + self.rollout_s + self.reward_s + self.old_log_prob_s + self.ref_s

    @property
    def step_s(self) -> float:
        return self.update_start_s - self.start_s + float(self.update_actor_s.max()) + ALLREDUCE_S + OTHER_S


def step_times(work: list[StepWork], engines: int, model: CostModel = H200_REPLAY_GRID) -> list[StepTimes]:
    """The steps back to back, each engine's rollout from the cost model."""
    out, clock = [], 0.0
    for w in work:
        tokens = w.prompt_len + w.response_len
        gen = np.array([finish_times(model, w.prompt_len[w.engine == e], w.response_len[w.engine == e])
                        .max(initial=0.0) for e in range(engines)])
        forward = LOG_PROB_S_PER_TOKEN * tokens.sum() / engines
        update = np.array([TRAIN_S_PER_TOKEN * tokens[w.used & (w.engine == e)].sum() for e in range(engines)])
        t = StepTimes(w.step, clock, gen, float(w.reward_s.max()), forward, forward, update)
        out.append(t)
        clock += t.step_s
    return out


def verl_lines(work: list[StepWork], times: list[StepTimes], gpus: int) -> list[dict]:
    """verl's file-logger lines: timing_s per stage, perf/* and response lengths."""
    lines = []
    for w, t in zip(work, times):
        tokens = int((w.prompt_len + w.response_len).sum())
        lines.append({"step": w.step, "data": {
            "timing_s/gen": round(t.rollout_s, 6), "timing_s/reward": round(t.reward_s, 6),
            "timing_s/old_log_prob": round(t.old_log_prob_s, 6), "timing_s/ref": round(t.ref_s, 6),
            "timing_s/update_actor": round(float(t.update_actor_s.max()), 6),
            "timing_s/step": round(t.step_s, 6),
            "perf/total_num_tokens": tokens, "perf/time_per_step": round(t.step_s, 6),
            "perf/throughput": round(tokens / t.step_s / gpus, 3),
            "response_length/mean": float(w.response_len.mean()),
            "response_length/max": int(w.response_len.max()),
            "prompt_length/mean": float(w.prompt_len.mean()),
        }})
    return lines


def write_kineto(out_dir: Path, times: list[StepTimes], engines: int, tp: int) -> list[Path]:
    """One Chrome-trace JSON per GPU; the tp ranks of an engine run in lockstep."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for engine in range(engines):
        events = _rank_events(times, engine)
        for rank in range(engine * tp, (engine + 1) * tp):
            doc = {"schemaVersion": 1, "distributedInfo": {"backend": "nccl", "rank": rank,
                                                           "world_size": engines * tp},
                   "deviceProperties": [{"id": 0, "name": "Synthetic H200"}], "traceEvents": events}
            path = out_dir / f"rank-{rank}.pt.trace.json"
            path.write_text(json.dumps(doc, separators=(",", ":")))
            paths.append(path)
    return paths


def _rank_events(times: list[StepTimes], engine: int) -> list[dict]:
    events: list[dict] = []
    corr = [0]

    def kernel(name: str, cat: str, stream: int, start_s: float, dur_s: float) -> None:
        corr[0] += 1
        ts, dur = round(start_s * 1e6, 3), round(dur_s * 1e6, 3)
        events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": ts, "dur": dur,
                       "args": {"device": 0, "stream": stream, "correlation": corr[0]}})
        events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                       "ts": round(ts - 2.0, 3), "dur": 1.5, "args": {"correlation": corr[0]}})

    for t in times:
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{t.step}", "pid": 1,
                       "tid": 1, "ts": round(t.start_s * 1e6, 3), "dur": round(t.step_s * 1e6, 3)})
        kernel("Memcpy HtoD (Pinned -> Device)", "gpu_memcpy", 9, t.start_s + LAUNCH_GAP_S,
               WEIGHT_SYNC_S - 2 * LAUNCH_GAP_S)
        _back_to_back(kernel, DECODE_NAMES, DECODE_KERNELS, t.start_s + WEIGHT_SYNC_S, float(t.gen_s[engine]))
        at = t.start_s + WEIGHT_SYNC_S + t.rollout_s + t.reward_s  # idle: waiting for the slowest, then reward
        for name, seconds in (("fwd_logprob_gemm_kernel", t.old_log_prob_s), ("fwd_ref_gemm_kernel", t.ref_s),
                              ("bwd_gemm_kernel", float(t.update_actor_s[engine]))):
            _back_to_back(kernel, (name,), TRAIN_KERNELS, at, seconds)
            at += seconds
        # every rank enters the all-reduce when it is done and leaves when the slowest is
        done = t.update_start_s + float(t.update_actor_s.max())
        kernel(NCCL, "kernel", 13, at, done - at + ALLREDUCE_S)
    return events


def _back_to_back(kernel, names: tuple[str, ...], count: int, start_s: float, seconds: float) -> None:
    """`count` kernels filling [start, start + seconds), each after a launch gap."""
    slot = seconds / count
    for k in range(count if slot > LAUNCH_GAP_S else 0):
        kernel(names[k % len(names)], "kernel", 7, start_s + k * slot + LAUNCH_GAP_S, slot - LAUNCH_GAP_S)
