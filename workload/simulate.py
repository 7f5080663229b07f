"""Predict each rollout engine's time per step under dispatch policies, from a run's recorded lengths."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import CostModel
from polytrace.workload.policies import (
    ORACLE,
    length_balanced,
    lpt,
    predict_lengths,
    round_robin,
)

POLICIES = ("as-recorded", "round-robin", "length-balanced", "predicted-balanced", "partial-rollout:q", "cap:C")


@dataclass
class Step:
    """One step's samples (validation samples excluded), in (prompt_id, sample_id) order."""

    step: int
    prompt_id: np.ndarray
    dp_rank: np.ndarray
    prompt_len: np.ndarray
    response_len: np.ndarray


def load_steps(con, run_id: str) -> list[Step]:
    if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise WorkloadError(f"no run {run_id!r} in the database")
    table = con.execute(
        "SELECT step, prompt_id, coalesce(dp_rank, 0) AS dp_rank, coalesce(prompt_len, 0) AS prompt_len,"
        " response_len FROM samples WHERE run_id = ? AND NOT coalesce(validate, false)"
        " AND response_len IS NOT NULL ORDER BY step, prompt_id, sample_id", [run_id]).fetchnumpy()
    if len(table["step"]) == 0:
        raise WorkloadError(f"run {run_id!r} has no training samples to simulate")
    steps = []
    cuts = np.flatnonzero(np.diff(table["step"])) + 1
    for idx in np.split(np.arange(len(table["step"])), cuts):
        steps.append(Step(int(table["step"][idx[0]]),
                          *(np.asarray(table[k][idx], dtype=np.int64)
                            for k in ("prompt_id", "dp_rank", "prompt_len", "response_len"))))
    return steps


def finish_times(model: CostModel, prompts: np.ndarray, lengths: np.ndarray, factor: float = 1.0
                 ) -> np.ndarray:
    """Each sample's finish time on one engine: prefill, then decode iterations while the batch shrinks.

    At iteration i every sample with length >= i is live and its context is prompt + i.
    """
    if len(lengths) == 0:
        return np.zeros(0)
    lengths = np.asarray(lengths, dtype=np.int64)
    top = int(lengths.max())
    finishing = np.bincount(lengths, minlength=top + 1).astype(float)
    prompt_finishing = np.bincount(lengths, weights=np.asarray(prompts, float), minlength=top + 1)
    # Live at iteration i (1..top): samples whose length is >= i.
    live = finishing[::-1].cumsum()[::-1][1:]
    live_prompt = prompt_finishing[::-1].cumsum()[::-1][1:]
    i = np.arange(1, top + 1)
    per_iter = factor * model.iteration_seconds(live, live_prompt + i * live)
    elapsed = np.concatenate([[0.0], np.cumsum(per_iter)])
    return model.prefill_seconds(len(lengths), float(np.sum(prompts))) + elapsed[lengths]


def engine_rows(model: CostModel, step: int, policy: str, assign: np.ndarray, prompts: np.ndarray,
                lengths: np.ndarray, engines: int) -> list[dict]:
    rows = []
    for e in range(engines):
        mine = assign == e
        t = finish_times(model, prompts[mine], lengths[mine], model.factor(e))
        rows.append({"step": step, "policy": policy, "engine": e, "n": int(mine.sum()),
                     "tokens": int(lengths[mine].sum()), "max_len": int(lengths[mine].max(initial=0)),
                     "predicted_s": float(t.max(initial=0.0))})
    longest = max(r["predicted_s"] for r in rows)
    for r in rows:
        r["idle_frac"] = 1.0 - r["predicted_s"] / longest if longest > 0 else 0.0
    return rows


def step_row(step: int, policy: str, rows: list[dict]) -> dict:
    longest = max(r["predicted_s"] for r in rows)
    busy = sum(r["predicted_s"] for r in rows)
    idle = 1.0 - busy / (len(rows) * longest) if longest > 0 else 0.0
    return {"step": step, "policy": policy, "engine": None, "n": sum(r["n"] for r in rows),
            "tokens": sum(r["tokens"] for r in rows), "max_len": max(r["max_len"] for r in rows),
            "predicted_s": longest, "idle_frac": idle, "rollout_idle_frac": idle}


def parse_policy(name: str) -> tuple[str, float | None]:
    if name.startswith("partial-rollout"):
        _, sep, q = name.partition(":")
        try:
            value = float(q) if sep else 0.9
        except ValueError:
            value = -1.0
        if not 0 < value <= 1:
            raise WorkloadError(f"partial-rollout:q needs 0 < q <= 1, got {name!r}")
        return "partial-rollout", value
    if name.startswith("cap:"):
        return "cap", parse_cap(name)
    if name not in POLICIES:
        raise WorkloadError(f"unknown policy {name!r}; known: {', '.join(POLICIES)}")
    return name, None


def parse_cap(name: str) -> float:
    """C of a cap:C policy: a response-length cap of at least one token."""
    try:
        cap = float(name.partition(":")[2])
    except ValueError:
        cap = 0.0
    if not cap >= 1:
        raise WorkloadError(f"cap:C needs a response-length cap C >= 1 (tokens), got {name!r}")
    return cap


def simulate(steps: list[Step], model: CostModel, policies: list[str], engines: int | None = None
             ) -> list[dict]:
    """Per-engine rows and one per-step row (engine None) for every policy; speedup vs as-recorded.

    as-recorded, the baseline of every speedup, is always among the results.
    """
    recorded = 1 + max(int(s.dp_rank.max()) for s in steps)
    engines = engines or recorded
    if engines < 1:
        raise WorkloadError(f"--engines must be at least 1, got {engines}")
    out: list[dict] = []
    baseline = {}
    for name in ["as-recorded", *[p for p in policies if p != "as-recorded"]]:
        policy, q = parse_policy(name)
        rows = _run_policy(steps, model, policy, q, engines, recorded)
        for r in rows:
            r["policy"] = name
            r["oracle"] = policy in ORACLE
            if r["engine"] is None:
                if name == "as-recorded":
                    baseline[r["step"]] = r["predicted_s"]
                r["speedup"] = baseline[r["step"]] / r["predicted_s"] if r["predicted_s"] else None
        out.extend(rows)
    return out


def _run_policy(steps, model, policy, q, engines, recorded) -> list[dict]:
    rows, previous, carry = [], None, None
    for k, s in enumerate(steps):
        prompts, lengths, n_engines = s.prompt_len, s.response_len, engines
        if policy == "as-recorded":
            assign, n_engines = s.dp_rank, recorded
        elif policy == "cap":
            assign, n_engines, lengths = s.dp_rank, recorded, np.minimum(lengths, int(q))
        elif policy == "round-robin":
            assign = round_robin(s.prompt_id, engines)
        elif policy == "length-balanced":
            assign = length_balanced(s.dp_rank, lengths, prompts, engines, model)
        elif policy == "predicted-balanced":
            guess = predict_lengths(prompts, previous)
            assign = lpt(guess, prompts, engines, model)
        else:
            assign, prompts, lengths, carry, n_engines = _partial(s, q, carry, k == len(steps) - 1,
                                                                  recorded)
        previous = (s.prompt_len, s.response_len)
        step_engines = engine_rows(model, s.step, policy, assign, prompts, lengths, n_engines)
        rows.extend(step_engines)
        rows.append(step_row(s.step, policy, step_engines))
        if policy == "partial-rollout":
            # what this step hands to the next: samples cut at the cap, and the tokens they still owe
            rows[-1]["carried"] = 0 if carry is None else len(carry[2])
            rows[-1]["carried_tokens"] = 0 if carry is None else int(carry[2].sum())
    return rows


def _partial(s: Step, q: float, carry, last: bool, engines: int):
    """Cap this step at the q-quantile of its new samples' lengths; longer samples continue next step.

    Carried samples resume on their engine with the tokens made so far as context. The
    last step drains: nothing is left unfinished.
    """
    assign, prompts, lengths = s.dp_rank, s.prompt_len, s.response_len
    if carry is not None:
        assign = np.concatenate([assign, carry[0]])
        prompts = np.concatenate([prompts, carry[1]])
        lengths = np.concatenate([lengths, carry[2]])
    if last:
        return assign, prompts, lengths, None, engines
    cap = max(int(np.ceil(np.quantile(s.response_len, q))), 1)
    over = lengths > cap
    carry = (assign[over], prompts[over] + cap, lengths[over] - cap)
    return assign, prompts, np.minimum(lengths, cap), carry, engines
