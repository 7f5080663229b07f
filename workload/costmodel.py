"""Rollout cost model: seconds per decode iteration t(live, context) plus prefill, calibrated from measurements.

t = a + b * live + c * sum of the live samples' contexts, fitted by non-negative least
squares, either to a grid of measured iterations (calib.json) or to a replay's
per-iteration log (iters.jsonl[.gz]). Prefill is p0 + p1 * prompt tokens.
"""
from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from polytrace.workload import WorkloadError


@dataclass(frozen=True)
class CostModel:
    a: float                 # s per iteration: fixed cost (kernel launches, sampling)
    b: float                 # s per live sample per iteration (batch-proportional work)
    c: float                 # s per context token per iteration (attention over the KV cache)
    p0: float = 0.0          # s per prefill
    p1: float = 0.0          # s per prompt token prefilled
    # Measured speed of each engine relative to the shared fit (dp_rank -> factor):
    # engines on contended or slower hardware decode slower at the same batch.
    speed: dict[int, float] = field(default_factory=dict)
    source: str = ""

    def factor(self, engine: int) -> float:
        return self.speed.get(engine, 1.0)

    def iteration_seconds(self, live: np.ndarray, context_sum: np.ndarray) -> np.ndarray:
        return self.a * (live > 0) + self.b * live + self.c * context_sum

    def prefill_seconds(self, n: int, prompt_tokens: float) -> float:
        return self.p0 + self.p1 * prompt_tokens if n else 0.0


# The fit of ../shared/data/gpu-replay-h200/calib.json (H200, 8-layer d=2048 bf16 decoder):
# for simulating where no calibration file is at hand, e.g. the demo.
H200_REPLAY_GRID = CostModel(a=0.004617029619636911, b=0.0, c=1.593519244487597e-09, p0=0.0,
                             p1=1.3900921826813155e-06, source="H200 replay grid (built in)")


def _fit(features: np.ndarray, seconds: np.ndarray) -> np.ndarray:
    # Scale columns so NNLS is well conditioned; the solution is scaled back.
    from scipy.optimize import nnls  # scipy (0.3-0.5 s to import): only when a cost model is fitted

    norm = np.maximum(np.abs(features).max(axis=0), 1e-12)
    coef, _ = nnls(features / norm, seconds)
    return coef / norm


def _decode_features(live, context) -> np.ndarray:
    live, context = np.asarray(live, float), np.asarray(context, float)
    return np.stack([np.ones_like(live), live, live * context], axis=1)


def from_grid(doc: dict, source: str = "") -> CostModel:
    """Fit to calib.json: decode [{batch, context, seconds}], prefill [{batch, prompt, seconds}]."""
    try:
        dec = doc["decode"]
        a, b, c = _fit(_decode_features([r["batch"] for r in dec], [r["context"] for r in dec]),
                       np.array([r["seconds"] for r in dec], float))
        pre = doc.get("prefill") or []
        p0 = p1 = 0.0
        if pre:
            tokens = np.array([r["batch"] * r["prompt"] for r in pre], float)
            p0, p1 = _fit(np.stack([np.ones_like(tokens), tokens], axis=1),
                          np.array([r["seconds"] for r in pre], float))
    except (KeyError, TypeError, ValueError) as e:
        raise WorkloadError(f"{source or 'calibration'}: not a decode/prefill grid ({e})") from None
    return CostModel(float(a), float(b), float(c), float(p0), float(p1), source=source)


def from_iterations(rows: list[dict], prefill: CostModel | None = None, source: str = "") -> CostModel:
    """Fit to per-iteration measurements {dp_rank, live, context, seconds}; one speed factor per engine.

    The shared (a, b, c) is fitted on all engines; each engine's factor is its measured
    decode seconds over the shared fit's prediction for the same iterations.
    """
    try:
        live = np.array([r["live"] for r in rows], float)
        context = np.array([r["context"] for r in rows], float)
        seconds = np.array([r["seconds"] for r in rows], float)
        engines = np.array([r.get("dp_rank", 0) for r in rows])
    except (KeyError, TypeError, ValueError) as e:
        raise WorkloadError(f"{source or 'calibration'}: not a per-iteration log ({e})") from None
    if len(rows) < 3:
        raise WorkloadError(f"{source or 'calibration'}: too few iterations to fit ({len(rows)})")
    a, b, c = _fit(_decode_features(live, context), seconds)
    model = CostModel(float(a), float(b), float(c))
    predicted = model.iteration_seconds(live, live * context)
    speed = {int(e): float(seconds[engines == e].sum() / predicted[engines == e].sum())
             for e in np.unique(engines)}
    p0, p1 = (prefill.p0, prefill.p1) if prefill else (0.0, 0.0)
    return CostModel(float(a), float(b), float(c), p0, p1, speed, source)


def read_text(path: Path, what: str) -> str:
    """A JSON or JSONL file, gzipped or not; WorkloadError names `what` when it cannot be read."""
    path = Path(path)
    if not path.is_file():
        raise WorkloadError(f"{what} {path} does not exist")
    try:
        opener = gzip.open if path.name.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeError, EOFError) as e:
        raise WorkloadError(f"{path}: cannot read ({str(e).splitlines()[0]})") from None


def json_lines(text: str, path: Path) -> list:
    try:
        return [json.loads(line) for line in text.splitlines() if line.strip()]
    except ValueError as e:
        raise WorkloadError(f"{path}: not JSON lines ({str(e).splitlines()[0]})") from None


def load(path: Path) -> CostModel:
    """A calibration file: calib.json (grid) or iters.jsonl[.gz] (prefill from a calib.json beside it)."""
    path = Path(path)
    text = read_text(path, "calibration file")
    stripped = text.lstrip()
    if stripped.startswith("{") and "\n{" not in stripped.rstrip():
        try:
            return from_grid(json.loads(text), source=str(path))
        except ValueError as e:
            raise WorkloadError(f"{path}: not JSON ({str(e).splitlines()[0]})") from None
    beside = path.parent / "calib.json"
    prefill = load(beside) if beside.is_file() else None
    return from_iterations(json_lines(text, path), prefill, source=str(path))
