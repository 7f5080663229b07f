"""What a replay's measured engine time is made of, next to a cost model's view of it.

A replay (../shared/data/gpu-replay-h200) logs each engine's total time (engines.jsonl)
and every decode iteration (iters.jsonl). Per engine, the total splits into prefill,
decode iterations, and time outside any iteration (for example writing a profiler trace).
The iterations split again by the cost model: those that ran near its prediction, and
those that took more than SLOW times it (for example while a profiler was attached).
Taking the slow iterations' excess and the outside time away leaves the undisturbed time,
the part of the measurement a model that sees only the workload can be held to. Its
per-sample log (requests.jsonl) checks the model sample by sample: each one's predicted
finish time against the measured one.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import CostModel, json_lines, read_text
from polytrace.workload.simulate import finish_times

SLOW = 1.5
FINISH_COLUMNS = ("finish_error_p50_pct", "finish_error_p90_pct")
EXPLAIN_COLUMNS = ("prefill_s", "decode_s", "outside_s", "iterations", "model_decode_s", "slow_share",
                   "slow_excess_s", "undisturbed_s")


def read_engines(path: Path) -> dict[tuple[int, int], dict]:
    """(step, dp_rank) -> that engine's line of an engines.jsonl (total_s required)."""
    path = Path(path)
    engines = {}
    try:
        for row in json_lines(read_text(path, "engines file"), path):
            engines[(int(row["step"]), int(row["dp_rank"]))] = {**row, "total_s": float(row["total_s"])}
    except (ValueError, KeyError, TypeError) as e:
        raise WorkloadError(f"{path}: not an engines.jsonl with step, dp_rank, total_s ({e})") from None
    if not engines:
        raise WorkloadError(f"{path}: no measured engines")
    return engines


def _arrays_by_engine(path: Path, fields: tuple[str, ...], what: str) -> dict[tuple[int, int], dict]:
    """(step, dp_rank) -> {field: numpy array} from a JSON-lines file of per-engine records."""
    path = Path(path)
    rows = json_lines(read_text(path, f"{what} file"), path)
    by_engine: dict[tuple[int, int], list] = {}
    try:
        for r in rows:
            key = (int(r.get("step", 0)), int(r["dp_rank"]))
            by_engine.setdefault(key, []).append(tuple(float(r[f]) for f in fields))
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise WorkloadError(f"{path}: {what} lines need dp_rank, {', '.join(fields)} ({e})") from None
    return {key: dict(zip(fields, np.array(values).T)) for key, values in by_engine.items()}


def read_iterations(path: Path) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """(step, dp_rank) -> that engine's decode iterations: live, context, seconds."""
    return _arrays_by_engine(path, ("live", "context", "seconds"), "iters.jsonl")


def read_requests(path: Path) -> dict[tuple[int, int], dict[str, np.ndarray]]:
    """(step, dp_rank) -> that engine's samples: prompt_len, output_len, finish_s."""
    return _arrays_by_engine(path, ("prompt_len", "output_len", "finish_s"), "requests.jsonl")


def finish_errors(requests: dict[tuple[int, int], dict], model: CostModel) -> dict[tuple[int, int], dict]:
    """Per engine: how far the model's finish time of each sample is from the measured one,
    as the median and 90th percentile of |predicted - measured| / measured, in percent."""
    out = {}
    for key, r in requests.items():
        if (r["output_len"] < 0).any() or (r["prompt_len"] < 0).any():
            raise WorkloadError(f"step {key[0]} engine {key[1]}: a negative prompt_len or output_len")
        predicted = finish_times(model, r["prompt_len"], r["output_len"].astype(np.int64), model.factor(key[1]))
        error = np.abs(predicted - r["finish_s"]) / np.maximum(r["finish_s"], 1e-9) * 100
        out[key] = {"finish_error_p50_pct": float(np.median(error)),
                    "finish_error_p90_pct": float(np.quantile(error, 0.9))}
    return out


def explain(engines: dict[tuple[int, int], dict], iterations: dict[tuple[int, int], dict],
            model: CostModel) -> dict[tuple[int, int], dict]:
    """Per measured engine: its time split as the module describes."""
    out = {}
    for key, engine in engines.items():
        it = iterations.get(key)
        if it is None:
            raise WorkloadError(f"no logged iterations for step {key[0]} engine {key[1]}")
        predicted = model.factor(key[1]) * model.iteration_seconds(it["live"], it["live"] * it["context"])
        slow = it["seconds"] > SLOW * predicted
        decode = float(it["seconds"].sum())
        prefill = float(engine.get("prefill_s") or 0.0)
        outside = engine["total_s"] - prefill - decode
        excess = float((it["seconds"] - predicted)[slow].sum())
        out[key] = {"prefill_s": prefill, "decode_s": decode, "outside_s": outside,
                    "iterations": len(slow), "model_decode_s": float(predicted.sum()),
                    "slow_share": float(slow.mean()) if len(slow) else 0.0, "slow_excess_s": excess,
                    "undisturbed_s": engine["total_s"] - excess - max(outside, 0.0)}
    return out
