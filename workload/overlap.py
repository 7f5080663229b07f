"""What if a synchronous run trained asynchronously: its step time with generation overlapping
training on two GPU pools (one step off policy, or fully async within a staleness bound),
predicted from its own log with the per-step generation model of genfit.

A step of the synchronous run takes gen + train + sync + checkpoint + validation. The fitted
model splits gen into a part that does not shrink with more engines (latency: the fixed cost,
the bounding sample's decode iterations and its tool time) and a part that does (throughput:
the tokens decoded, attended over and prefilled). Give the rollout pool a share f of the GPUs
and the trainer the rest, each part scaling with its pool (throughput work as 1/f, training as
1/(1 - f)); with a staleness bound of k versions a sample may take k trainer steps, so

    step(f, k) = max(throughput / f, train / (1 - f), (latency + throughput / f) / k)
                 + sync + checkpoint + validation

One step off policy is k = 1. The share is one split for the whole run (the one that minimizes
its predicted time), on the job's GPUs when their count is known. Speedups are against the
model's own prediction of the synchronous step, so its error cancels as in step_whatif.
"""
from __future__ import annotations

from fractions import Fraction

import numpy as np

MODES = (("one-step-off", 1), ("fully-async:2", 2), ("fully-async:4", 4))
COLUMNS = ("step", "mode", "staleness", "rollout_share", "rollout_gpus", "gpus", "measured_s",
           "gen_s", "train_s", "predicted_sync_s", "predicted_s", "speedup", "limited_by")
LIMITS = ("rollout throughput", "training", "slowest sample")  # the three terms of step(f, k)
SHARES_WITHOUT_GPUS = 16  # the split's resolution when the job's GPU count is unknown


def is_async(con, run_id: str) -> bool:
    """Whether the run trained asynchronously already: trajectories, async metrics or pool sizes."""
    return con.execute(
        "SELECT EXISTS (SELECT 1 FROM trajectories WHERE run_id = $r) "
        "OR EXISTS (SELECT 1 FROM canonical_metrics WHERE run_id = $r AND key LIKE 'async/%') "
        "OR EXISTS (SELECT 1 FROM runs WHERE run_id = $r AND coalesce(trainer_gpus, rollout_gpus) IS NOT NULL)",
        {"r": run_id}).fetchall()[0][0]


def step_rest(con, run_id: str, steps: np.ndarray) -> dict[str, np.ndarray]:
    """Each step's measured step time and what is not generation: the training stages (step -
    gen - sync - checkpoint - validation), the logged weight sync, checkpoint and validation (s).
    A step without timing_s/step gets NaN and is left out by the caller."""
    keys = {"timing_s/step": "step_s", "timing_s/gen": "gen", "timing_s/update_weights": "sync",
            "timing_s/sync_rollout_weights": "sync", "timing_s/save_checkpoint": "checkpoint",
            "timing_s/testing": "validation"}
    rows = con.execute("SELECT step, key, max(value) FROM canonical_metrics WHERE run_id = ? "
                       "AND list_contains(?, key) AND isfinite(value) GROUP BY step, key",
                       [run_id, list(keys)]).fetchall()
    index = {int(s): i for i, s in enumerate(steps)}
    out = {name: np.zeros(len(steps)) for name in ("gen", "sync", "checkpoint", "validation")}
    out["step_s"] = np.full(len(steps), np.nan)
    for step, key, value in rows:
        i, name = index.get(int(step)), keys[key]
        if i is not None:
            out[name][i] = out[name][i] + value if name == "sync" else value
    out["train"] = out["step_s"] - out["gen"] - out["sync"] - out["checkpoint"] - out["validation"]
    return out


def shares(gpus: int | None) -> list[Fraction]:
    """The rollout pool's possible shares: k of the job's GPUs (1 <= k < gpus), else sixteenths."""
    n = gpus if gpus and gpus >= 2 else SHARES_WITHOUT_GPUS
    return [Fraction(k, n) for k in range(1, n)]


def predict(latency: np.ndarray, throughput: np.ndarray, rest: dict[str, np.ndarray],
            gpus: int | None) -> list[dict]:
    """Rows of COLUMNS per step and mode, each mode at the split that minimizes the run's time."""
    fixed = rest["sync"] + rest["checkpoint"] + rest["validation"]
    train = np.maximum(rest["train"], 0.0)
    sync_step = latency + throughput + train + fixed
    known = bool(gpus and gpus >= 2)
    out = []
    for mode, k in MODES:
        best = min(shares(gpus), key=lambda f: float(_step(latency, throughput, train, fixed, f, k)[0].sum()))
        predicted, limited = _step(latency, throughput, train, fixed, best, k)
        for i in range(len(latency)):
            out.append({"step": int(rest["steps"][i]), "mode": mode, "staleness": k,
                        "rollout_share": float(best), "rollout_gpus": int(best * gpus) if known else None,
                        "gpus": gpus if known else None,
                        "measured_s": float(rest["step_s"][i]), "gen_s": float(latency[i] + throughput[i]),
                        "train_s": float(train[i]), "predicted_sync_s": float(sync_step[i]),
                        "predicted_s": float(predicted[i]),
                        "speedup": float(sync_step[i] / predicted[i]) if predicted[i] > 0 else None,
                        "limited_by": limited[i]})
    return out


def _step(latency, throughput, train, fixed, share: Fraction, k: int) -> tuple[np.ndarray, list[str]]:
    f = float(share)
    parts = np.stack([throughput / f, train / (1 - f), (latency + throughput / f) / k])
    return parts.max(axis=0) + fixed, [LIMITS[j] for j in parts.argmax(axis=0)]


def whatif(con, run_id: str, cal) -> list[dict]:
    """The async what-if rows of a synchronous run fitted per step (genfit kind 'step'); none for
    a run that trained asynchronously already, or whose steps logged no step time."""
    if is_async(con, run_id):
        return []
    from polytrace.workload.genfit import step_features  # scipy: only when a fit is simulated

    s, coef = cal.steps, np.array(cal.step_model.coef)
    features = step_features(s)
    latency = s.tool + features[:, :3] @ coef[:3]
    throughput = features[:, 3:] @ coef[3:]
    rest = step_rest(con, run_id, s.step)
    timed = np.isfinite(rest["step_s"])
    if not timed.any():
        return []
    rest = {name: values[timed] for name, values in rest.items()} | {"steps": s.step[timed]}
    gpus = con.execute("SELECT n_gpus FROM runs WHERE run_id = ?", [run_id]).fetchall()[0][0]
    return predict(latency[timed], throughput[timed], rest, gpus)
