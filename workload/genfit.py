"""A generation-time model fitted to a run's own steps (`polytrace simulate RUN --calibration log`).

No replay needed: the run's logged rollout times calibrate it. Two sources, the finer first:

Per engine, where the run has samples with a dp_rank and a measured gen time per engine
(rank_stage stage 'gen'): the simulator's own decode-iteration model (costmodel.CostModel)
is fitted to each engine's time. Summed over an engine's iterations, while finished
samples leave the batch, it is linear in its coefficients:

    engine_s = p0 + p1 * sum(p) + a * max(l) + b * sum(l) + c * sum(l*p + l*(l+1)/2)

(p, l: prompt and response length of each sample on the engine), so every dispatch policy
of simulate.py runs on it unchanged.

Per step, from a verl log's step metrics (timing_s/gen and the length statistics):

    gen_s = t0 + t_sync * s + tool + a * L + b * R + c * K + p * P

The rollout lasts as long as the sample that bounds it: L decode iterations, each costing
a + b * (live samples) + c * (their context), as in costmodel.py; its tool time and the
prefill add. All samples start together and leave the batch as they finish; response
lengths are taken as exponential with the step's mean m (the log has only mean and max),
so over the first L iterations:
- L: the bounding sample's tokens: timing_s/agent_loop/slowest/response_length (verl's
  slowest sample, by generation plus tool time) when logged, else response_length/max.
- R = N * E[min(l, L)] = N * m * (1 - exp(-L/m)): the live samples summed over the L
  iterations, i.e. the tokens decoded meanwhile.
- K = N * (mean prompt * E[min(l, L)] + E[min(l, L)^2] / 2), with
  E[min(l, L)^2] = 2 m^2 (1 - exp(-L/m) (1 + L/m)): the context those iterations attend over.
- P = N * mean prompt: prompt tokens prefilled.
- N = perf/total_num_tokens / (mean prompt + m), the step's samples; 1 when the log lacks
  token counts (then b, c and p absorb a constant batch size).
- tool = timing_s/agent_loop/slowest/tool_calls: the bounding sample's tool time. It adds
  one for one, so it is not fitted (0 without agent-loop keys).
- s = 1 unless the step follows a validation (a step with val-* metrics or
  timing_s/testing): validation leaves the engines awake with the current weights, so the
  next rollout skips the wake-up and weight sync that t_sync is (0.6 s on the shared
  log i80f2v90).
- t0: the rest of the fixed cost per rollout (scheduling, gathering the batch).

What if the response cap were C: L becomes min(L, C) (R and K follow through L). Steps
whose bounding sample hit the recorded cap go on to C when C is above it. What if there
were k times the engines: each gets 1/k of the batch, so b * R, c * K and p * P shrink by
k; L does not. Held fixed: tool time, t0 and t_sync, the per-iteration costs of one
engine, and that the engines share the batch evenly.

Every coefficient is >= 0. They are fitted to relative error (the target is mean absolute
percentage error) with a soft-L1 loss, so a few odd steps (a stalled tool, a profiler)
cannot drag the fit. R, K and P are the step's totals, so b, c and p are one engine's costs
over the recorded engine count, which the log does not state; the what-if over engines
needs only the ratio. Steps whose log line was cut (log/truncated) are left out.

Forward validation (expanding window): each step in the second half of the steps with a
gen time and lengths is predicted by a model fitted only on the steps strictly before it.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
from scipy.optimize import least_squares, nnls

from polytrace.workload import WorkloadError
from polytrace.workload.costmodel import CostModel

INLIER_SCALE = 0.05   # soft-L1 scale: relative errors past 5% count less than squared
STEP_MODEL = "log:step"
ENGINE_MODEL = "log:engine"
METRIC_KEYS = {
    "gen": "timing_s/gen",
    "resp_mean": "response_length/mean",
    "resp_max": "response_length/max",
    "clip": "response_length/clip_ratio",
    "prompt_mean": "prompt_length/mean",
    "tokens": "perf/total_num_tokens",
    "slow_len": "timing_s/agent_loop/slowest/response_length",
    "slow_tool": "timing_s/agent_loop/slowest/tool_calls",
}
NO_GEN_TIME = ("run {run!r} has no generation time to fit (timing_s/gen in its step metrics, or "
               "rank_stage stage 'gen' with per-rank samples): --calibration log needs a measured "
               "rollout time; packed-length traces (DAPO, verl-video) do not record one, so "
               "simulate them with a calibration file (calib.json, iters.jsonl)")


def robust_fit(features: np.ndarray, target: np.ndarray, offset: np.ndarray | None = None) -> np.ndarray:
    """Non-negative coefficients for target ~ offset + features @ coef, on relative error.

    Column 0 is the intercept. A column that is all zero, or constant beside the intercept
    (an indicator that never varies in the data), gets 0: the data cannot tell it apart.
    """
    X = np.asarray(features, float)
    y = np.asarray(target, float)
    rest = y - (0.0 if offset is None else np.asarray(offset, float))
    keep = (np.abs(X).max(axis=0) > 0) & ((np.ptp(X, axis=0) > 0) | (np.arange(X.shape[1]) == 0))
    coef = np.zeros(X.shape[1])
    if not keep.any() or len(y) == 0:
        return coef
    norm = np.abs(X[:, keep]).max(axis=0)
    A = X[:, keep] / norm / y[:, None]
    b = rest / y
    start, _ = nnls(A, b)
    fit = least_squares(lambda c: A @ c - b, start, bounds=(0.0, np.inf), loss="soft_l1",
                        f_scale=INLIER_SCALE, method="trf")
    coef[keep] = fit.x / norm
    return coef


def forward(n: int, fit, predict) -> list[tuple[int, float, int]]:
    """Expanding window over n ordered steps: (index, prediction, steps fitted on) for the second half.

    fit(k) fits a model on the first k steps only; predict(model, i) predicts step i.
    """
    return [(i, float(predict(fit(i), i)), i) for i in range(n // 2, n)]


def mape(measured, predicted) -> float:
    measured, predicted = np.asarray(measured, float), np.asarray(predicted, float)
    return float(np.mean(np.abs(predicted - measured) / measured) * 100) if len(measured) else float("nan")


def naive_baseline(gen: np.ndarray, longest: np.ndarray) -> float:
    """MAPE of a straight line of gen time on the longest response, fitted on the first half, on the second."""
    n = len(gen)
    h = n // 2
    if h < 2:
        return float("nan")
    x, y = np.asarray(longest, float), np.asarray(gen, float)
    slope, intercept = np.polyfit(x[:h], y[:h], 1) if np.ptp(x[:h]) > 0 else (0.0, y[:h].mean())
    return mape(y[h:], slope * x[h:] + intercept)


# ---------------------------------------------------------------- per step (verl step metrics)


@dataclass
class StepSeries:
    """The steps with a gen time and lengths, in step order; one array entry per step."""

    step: np.ndarray
    gen: np.ndarray          # measured timing_s/gen (s)
    longest: np.ndarray      # L: the longest (or rollout-bounding) sample's tokens
    resp_mean: np.ndarray
    prompt_mean: np.ndarray
    n: np.ndarray            # samples per step (1 when the log has no token count)
    tool: np.ndarray         # tool time of the rollout-bounding sample (s), 0 when not logged
    synced: np.ndarray       # 1 unless the step follows a validation
    clip: np.ndarray         # share of responses at the cap (0 when not logged)
    resp_max: np.ndarray | None = None  # response_length/max, for the naive baseline (None: not logged)
    span: float = 1.0        # the run's response cap (runs.max_response_len, else its longest L)
    sources: dict = field(default_factory=dict)  # which log key each quantity came from

    def __len__(self) -> int:
        return len(self.step)

    def take(self, idx) -> StepSeries:
        return replace(self, **{k: getattr(self, k)[idx] for k in
                                ("step", "gen", "longest", "resp_mean", "prompt_mean", "n", "tool",
                                 "synced", "clip")},
                       resp_max=None if self.resp_max is None else self.resp_max[idx])

    @property
    def has_n(self) -> bool:
        return self.sources.get("n") == METRIC_KEYS["tokens"]


def step_work(s: StepSeries, cap: float | None = None) -> tuple[np.ndarray, ...]:
    """L, R, K, P of each step: recorded, or at a response cap C.

    A cap ends the bounding sample at C iterations: L becomes min(L, C), and R and K, the
    work of the iterations before L, follow. Above the recorded cap, only the steps whose
    bounding sample hit it (clip ratio > 0 and L at the cap) go on, to C.
    """
    L = s.longest.astype(float)
    if cap is not None:
        L = np.where((s.clip > 0) & (L >= s.span), float(cap), np.minimum(L, float(cap)))
    m = np.maximum(s.resp_mean.astype(float), 1e-9)
    pm = s.prompt_mean.astype(float)
    kept = _mean_min(m, L)
    return L, s.n * kept, s.n * (pm * kept + _mean_min_sq(m, L) / 2), s.n * pm


def step_features(s: StepSeries, cap: float | None = None, engine_scale: float = 1.0) -> np.ndarray:
    """Columns 1, s, L, R, K, P of the per-step model; at a response cap C and engines x engine_scale.

    With engine_scale times the engines, each gets that share less of R, K and P; L stays.
    """
    L, R, K, P = step_work(s, cap)
    return np.stack([np.ones_like(L), s.synced.astype(float), L, R / engine_scale, K / engine_scale,
                     P / engine_scale], axis=1)


def _cap_ratio(s: StepSeries, cap: float | None) -> np.ndarray:
    """Response tokens at a cap over those recorded, lengths exponential as in step_work."""
    if cap is None:
        return np.ones(len(s))
    m = np.maximum(s.resp_mean.astype(float), 1e-9)
    new = np.where((s.clip > 0) | (cap < s.span), float(cap), s.span)
    return _mean_min(m, new) / _mean_min(m, s.span)


def _mean_min(mean, cap):
    """E[min(l, cap)] for l exponential with this mean."""
    return mean * (1 - np.exp(-cap / mean))


def _mean_min_sq(mean, cap):
    """E[min(l, cap)^2] for l exponential with this mean."""
    x = cap / mean
    return 2 * mean ** 2 * (1 - np.exp(-x) * (1 + x))


@dataclass(frozen=True)
class StepModel:
    coef: tuple[float, ...]  # t0, t_sync, a, b, c, p

    def predict(self, s: StepSeries, cap: float | None = None, engine_scale: float = 1.0) -> np.ndarray:
        return s.tool + step_features(s, cap, engine_scale) @ np.array(self.coef)

    def describe(self) -> str:
        t0, t_sync, a, b, c, p = self.coef
        return (f"gen_s = {t0:.3g} + {t_sync:.3g}*s + tool + {a:.3g}*L + {b:.3g}*R + {c:.3g}*K "
                f"+ {p:.3g}*P")


def fit_steps(s: StepSeries) -> StepModel:
    return StepModel(tuple(float(x) for x in robust_fit(step_features(s), s.gen, s.tool)))


def load_step_series(con, run_id: str) -> StepSeries:
    """The run's steps with timing_s/gen > 0 and response lengths, from canonical_metrics (the
    vocabulary's names, whatever framework logged them).

    An optional quantity (the slowest sample's length, the token count) is used only when
    every such step logged it; otherwise the run falls back (response_length/max, N = 1).
    """
    keys = list(METRIC_KEYS.values())
    rows = con.execute(
        "SELECT step, key, value FROM canonical_metrics WHERE run_id = ? AND list_contains(?, key) "
        "AND value IS NOT NULL AND isfinite(value)", [run_id, keys]).fetchall()
    validated = {r[0] for r in con.execute(
        "SELECT DISTINCT step FROM step_metrics WHERE run_id = ? AND key LIKE 'val-%' UNION "
        "SELECT step FROM canonical_metrics WHERE run_id = ? AND key = 'timing_s/testing'",
        [run_id, run_id]).fetchall()}
    # A line the console cut short may end in a number cut short too: leave its step out.
    cut = {r[0] for r in con.execute("SELECT step FROM step_metrics WHERE run_id = ? "
                                     "AND key = 'log/truncated' AND value > 0", [run_id]).fetchall()}
    by_step: dict[int, dict[str, float]] = {}
    names = {v: k for k, v in METRIC_KEYS.items()}
    for step, key, value in rows:
        by_step.setdefault(int(step), {})[names[key]] = float(value)
    steps = sorted(s for s, v in by_step.items() if s not in cut and v.get("gen", 0) > 0
                   and "resp_mean" in v and ("resp_max" in v or "slow_len" in v))
    rows = [by_step[s] for s in steps]
    sources = {"gen": METRIC_KEYS["gen"]}
    if rows and all("slow_len" in r for r in rows):
        longest, sources["longest"] = [r["slow_len"] for r in rows], METRIC_KEYS["slow_len"]
    else:
        steps = [s for s, r in zip(steps, rows) if "resp_max" in r]
        rows = [by_step[s] for s in steps]
        longest, sources["longest"] = [r["resp_max"] for r in rows], METRIC_KEYS["resp_max"]
    prompt = [r.get("prompt_mean", 0.0) for r in rows]
    if rows and all("tokens" in r for r in rows):
        n = [r["tokens"] / max(r["resp_mean"] + p, 1e-9) for r, p in zip(rows, prompt)]
        sources["n"] = METRIC_KEYS["tokens"]
    else:
        n = [1.0] * len(rows)
    sources["tool"] = METRIC_KEYS["slow_tool"] if any("slow_tool" in r for r in rows) else None
    cap = con.execute("SELECT max_response_len FROM runs WHERE run_id = ?", [run_id]).fetchone()
    span = float(cap[0]) if cap and cap[0] else float(max(longest, default=1.0))
    return StepSeries(
        step=np.array(steps, dtype=np.int64), gen=np.array([r["gen"] for r in rows], float),
        longest=np.array(longest, float), resp_mean=np.array([r["resp_mean"] for r in rows], float),
        prompt_mean=np.array(prompt, float), n=np.array(n, float),
        tool=np.array([r.get("slow_tool", 0.0) for r in rows], float),
        synced=np.array([0.0 if s - 1 in validated else 1.0 for s in steps]),
        clip=np.array([r.get("clip", 0.0) for r in rows], float), span=span, sources=sources,
        resp_max=np.array([r["resp_max"] for r in rows], float) if all("resp_max" in r for r in rows) else None)


def forward_steps(s: StepSeries) -> list[dict]:
    """Forward-validation rows of the per-step model."""
    def predict(model: StepModel, i: int) -> float:
        return float(model.predict(s.take([i]))[0])

    return [{"step": int(s.step[i]), "stage": "gen", "measured_s": float(s.gen[i]), "predicted_s": p,
             "fit_steps": k, "model": STEP_MODEL}
            for i, p, k in forward(len(s), lambda k: fit_steps(s.take(slice(0, k))), predict)]


def step_whatif(s: StepSeries, model: StepModel, caps: list[float], scales: list[tuple[str, float]]
                ) -> list[dict]:
    """whatif rows (engine NULL): as-recorded (the model's fit of each step), each cap, each engine count.

    scales are (name, engines / recorded engines). Speedups are against the model's own
    as-recorded prediction, so its error cancels.
    """
    base = model.predict(s)
    out = []
    cases = [("as-recorded", None, 1.0)] + [(f"cap:{c:g}", c, 1.0) for c in caps] + \
            [(f"engines:{name}", None, k) for name, k in scales]
    for policy, cap, k in cases:
        predicted = model.predict(s, cap, k)
        L = step_work(s, cap)[0]
        tokens = s.n * s.resp_mean * _cap_ratio(s, cap)
        for i in range(len(s)):
            out.append({"step": int(s.step[i]), "policy": policy, "engine": None,
                        "n": round(float(s.n[i])) if s.has_n else None,
                        "tokens": round(float(tokens[i])) if s.has_n else None, "max_len": round(float(L[i])),
                        "predicted_s": float(predicted[i]), "idle_frac": None,
                        "speedup": float(base[i] / predicted[i]) if predicted[i] > 0 else None,
                        "oracle": False})
    return out


# ---------------------------------------------------------------- per engine (samples + rank_stage gen)


def engine_features(prompts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """One engine's columns 1, sum(p), max(l), sum(l), sum(l*p + l*(l+1)/2) of the per-engine model."""
    p, n = np.asarray(prompts, float), np.asarray(lengths, float)
    return np.array([1.0 if len(n) else 0.0, p.sum(), n.max(initial=0.0), n.sum(),
                     (n * p + n * (n + 1) / 2).sum()])


@dataclass
class EngineSeries:
    """Per-engine measured gen time and features, grouped by step (steps in order)."""

    step: np.ndarray                 # one per step
    rows: list[np.ndarray]           # per step: (engines, 5) features
    seconds: list[np.ndarray]        # per step: measured seconds per engine
    longest: np.ndarray              # per step: longest response

    def __len__(self) -> int:
        return len(self.step)

    @property
    def gen(self) -> np.ndarray:
        return np.array([s.max() for s in self.seconds])


def load_engine_series(con, run_id: str) -> EngineSeries | None:
    """Steps with rank_stage 'gen' times and per-dp_rank samples; None when the run has none."""
    measured = con.execute(
        "SELECT step, dp_rank, max(seconds) FROM rank_stage WHERE run_id = ? AND stage = 'gen' "
        "AND dp_rank IS NOT NULL AND seconds > 0 GROUP BY step, dp_rank ORDER BY step, dp_rank",
        [run_id]).fetchall()
    if not measured:
        return None
    from polytrace.workload.simulate import load_steps

    try:
        steps = {s.step: s for s in load_steps(con, run_id)}
    except WorkloadError:
        return None
    times: dict[int, dict[int, float]] = {}
    for step, engine, seconds in measured:
        times.setdefault(int(step), {})[int(engine)] = float(seconds)
    order = [st for st in sorted(times) if st in steps]
    if not order:
        return None
    rows, seconds, longest = [], [], []
    for st in order:
        s, engines = steps[st], sorted(times[st])
        rows.append(np.stack([engine_features(s.prompt_len[s.dp_rank == e], s.response_len[s.dp_rank == e])
                              for e in engines]))
        seconds.append(np.array([times[st][e] for e in engines]))
        longest.append(float(s.response_len.max()))
    return EngineSeries(np.array(order, dtype=np.int64), rows, seconds, np.array(longest))


def fit_engines(e: EngineSeries, k: int | None = None, source: str = "log") -> CostModel:
    """CostModel(a, b, c, p0, p1) fitted to the engine times of the first k steps (all by default)."""
    k = len(e) if k is None else k
    X = np.concatenate(e.rows[:k])
    p0, p1, a, b, c = robust_fit(X, np.concatenate(e.seconds[:k]))
    return CostModel(a=float(a), b=float(b), c=float(c), p0=float(p0), p1=float(p1), source=source)


def engine_predict(model: CostModel, features: np.ndarray) -> np.ndarray:
    return features @ np.array([model.p0, model.p1, model.a, model.b, model.c])


def forward_engines(e: EngineSeries) -> list[dict]:
    """Forward-validation rows of the per-engine model: the step's slowest engine, measured and predicted."""
    def predict(model: CostModel, i: int) -> float:
        return float(engine_predict(model, e.rows[i]).max())

    return [{"step": int(e.step[i]), "stage": "gen", "measured_s": float(e.seconds[i].max()),
             "predicted_s": p, "fit_steps": k, "model": ENGINE_MODEL}
            for i, p, k in forward(len(e), lambda k: fit_engines(e, k), predict)]


def describe_engines(m: CostModel) -> str:
    return (f"engine_s = {m.p0:.3g} + {m.p1:.3g}*sum(p) + {m.a:.3g}*max(l) + {m.b:.3g}*sum(l) "
            f"+ {m.c:.3g}*sum(l*p + l*(l+1)/2)")


# ---------------------------------------------------------------- one entry point


@dataclass
class LogCalibration:
    """What `--calibration log` found in a run: the model, its forward validation and the baseline."""

    kind: str                        # "engine" or "step"
    forecast: list[dict]             # forward-validation rows
    baseline_mape: float             # naive line on response_length/max, first half -> second half
    describe: str
    engines: EngineSeries | None = None
    cost_model: CostModel | None = None
    steps: StepSeries | None = None
    step_model: StepModel | None = None

    @property
    def forward_mape(self) -> float:
        return mape([r["measured_s"] for r in self.forecast], [r["predicted_s"] for r in self.forecast])


def calibrate(con, run_id: str) -> LogCalibration:
    """Fit the finest model the run supports, and validate it forward."""
    if not con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone():
        raise WorkloadError(f"no run {run_id!r} in the database")
    engines = load_engine_series(con, run_id)
    if engines is not None and len(engines) >= 2:
        model = fit_engines(engines)
        return LogCalibration("engine", forward_engines(engines), naive_baseline(engines.gen, engines.longest),
                              describe_engines(model), engines=engines, cost_model=model)
    steps = load_step_series(con, run_id)
    if len(steps) < 2:
        raise WorkloadError(NO_GEN_TIME.format(run=run_id) if len(steps) == 0 else
                            f"run {run_id!r} has one step with a generation time and lengths: "
                            "--calibration log needs at least two")
    model = fit_steps(steps)
    naive = naive_baseline(steps.gen, steps.longest if steps.resp_max is None else steps.resp_max)
    return LogCalibration("step", forward_steps(steps), naive,
                          model.describe(), steps=steps, step_model=model)
