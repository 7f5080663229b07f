"""Fit a run's per-step length distributions and their drift, and generate a look-alike workload.

Per step, prompt and response lengths get a lognormal fit and a Gaussian mixture on log
length chosen by BIC (one component is the lognormal itself). The lognormal's location
and scale are fitted as straight lines over steps (the drift: responses grow during RL),
and the shape is a mixture fitted, by BIC, to the log lengths standardized by that drift,
pooled over steps. A Gaussian copula keeps the correlation among a prompt's samples.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy import stats
from sklearn.mixture import GaussianMixture

from polytrace.workload import WorkloadError
from polytrace.workload.synth import clip_lengths

MAX_COMPONENTS = 5


@dataclass
class Drift:
    """mu(t) and sigma(t) of log length, straight lines over steps."""

    mu: tuple[float, float]     # slope, intercept
    sigma: tuple[float, float]

    def at(self, step: float) -> tuple[float, float]:
        return (self.mu[0] * step + self.mu[1], max(self.sigma[0] * step + self.sigma[1], 1e-3))


@dataclass
class LengthModel:
    """One length (prompt or response): drift of its lognormal, and the pooled standardized shape."""

    drift: Drift
    shape: GaussianMixture
    per_step: dict[int, dict] = field(default_factory=dict)  # step -> lognormal mu, sigma, gmm_k
    cap: int | None = None


@dataclass
class RunModel:
    steps: list[int]
    prompts: dict[int, int]         # step -> prompt groups
    n: int                          # samples per prompt group
    dp: int                         # rollout engines
    prompt: LengthModel
    response: LengthModel
    group_corr: float               # correlation of a group's responses on the normal-score scale
    source: dict[int, tuple[np.ndarray, np.ndarray]] = field(default_factory=dict)  # step -> prompts, responses


def fit_lognormal(x: np.ndarray) -> tuple[float, float]:
    """Maximum-likelihood lognormal (loc 0): mean and standard deviation of log x."""
    logs = np.log(np.maximum(np.asarray(x, float), 1.0))
    return float(logs.mean()), float(logs.std())


def fit_gmm(values: np.ndarray, seed: int) -> GaussianMixture:
    """A 1-D Gaussian mixture with the number of components (1..5) of lowest BIC."""
    x = np.asarray(values, float).reshape(-1, 1)
    best = None
    for k in range(1, min(MAX_COMPONENTS, len(np.unique(x))) + 1):
        gmm = GaussianMixture(k, random_state=seed, reg_covar=1e-6, init_params="k-means++").fit(x)
        if best is None or gmm.bic(x) < best.bic(x):
            best = gmm
    return best


def _length_model(by_step: dict[int, np.ndarray], seed: int, cap: int | None,
                  drifts: bool = True) -> LengthModel:
    steps = sorted(by_step)
    per_step = {}
    for s in steps:
        mu, sigma = fit_lognormal(by_step[s])
        gmm = fit_gmm(np.log(np.maximum(by_step[s], 1)), seed)
        per_step[s] = {"mu": mu, "sigma": sigma, "gmm_k": int(gmm.n_components)}
    t = np.array(steps, float)
    mus = np.array([per_step[s]["mu"] for s in steps])
    sigmas = np.array([max(per_step[s]["sigma"], 1e-3) for s in steps])
    if not drifts:
        pooled = np.log(np.maximum(np.concatenate(list(by_step.values())), 1))
        drift = Drift((0.0, float(pooled.mean())), (0.0, max(float(pooled.std()), 1e-3)))
    elif len(steps) > 1:
        drift = Drift(tuple(np.polyfit(t, mus, 1)), tuple(np.polyfit(t, sigmas, 1)))
    else:
        drift = Drift((0.0, float(mus[0])), (0.0, float(sigmas[0])))
    z = np.concatenate([(np.log(np.maximum(by_step[s], 1)) - drift.at(s)[0]) / drift.at(s)[1]
                        for s in steps])
    return LengthModel(drift, fit_gmm(z, seed), per_step, cap)


def _group_corr(groups: list[np.ndarray]) -> float:
    """Share of the normal-score variance of responses that is shared within prompt groups."""
    flat = np.concatenate(groups)
    scores = stats.norm.ppf(stats.rankdata(flat) / (len(flat) + 1))
    bounds = np.cumsum([0] + [len(g) for g in groups])
    within = np.mean([scores[a:b].var() for a, b in zip(bounds[:-1], bounds[1:]) if b - a > 1])
    return float(np.clip(1 - within / scores.var(), 0.0, 0.95)) if scores.var() > 0 else 0.0


def fit_run(con, run_id: str, seed: int = 0) -> RunModel:
    """Fit a RunModel to an ingested run's training samples."""
    t = con.execute(
        "SELECT step, prompt_id, coalesce(dp_rank, 0) AS dp_rank, prompt_len, response_len FROM samples"
        " WHERE run_id = ? AND NOT coalesce(validate, false) AND response_len IS NOT NULL"
        " AND prompt_len IS NOT NULL ORDER BY step, prompt_id, sample_id", [run_id]).fetchnumpy()
    if len(t["step"]) == 0:
        raise WorkloadError(f"run {run_id!r} has no training samples with prompt and response lengths")
    cap_row = con.execute("SELECT max_response_len FROM runs WHERE run_id = ?", [run_id]).fetchone()
    steps = sorted(set(int(s) for s in t["step"]))
    responses, prompts, groups, n_prompts, sizes = {}, {}, [], {}, []
    for s in steps:
        m = t["step"] == s
        pid, plen, rlen = t["prompt_id"][m], t["prompt_len"][m], t["response_len"][m]
        responses[s] = rlen.astype(float)
        _, first, counts = np.unique(pid, return_index=True, return_counts=True)
        prompts[s] = plen[first].astype(float)
        n_prompts[s] = len(first)
        sizes.extend(counts.tolist())
        groups.extend(np.split(rlen.astype(float), np.cumsum(counts)[:-1]))
    cap = int(cap_row[0]) if cap_row and cap_row[0] else int(t["response_len"].max())
    return RunModel(
        steps=steps, prompts=n_prompts, n=int(np.bincount(sizes).argmax()),
        dp=int(t["dp_rank"].max()) + 1,
        prompt=_length_model(prompts, seed, None, drifts=False), response=_length_model(responses, seed, cap),
        group_corr=_group_corr(groups),
        source={s: (prompts[s], responses[s]) for s in steps},
    )


def _inverse_cdf(gmm: GaussianMixture, u: np.ndarray) -> np.ndarray:
    """Quantiles of a 1-D mixture by interpolating its CDF on a fine grid."""
    means, sds = gmm.means_.ravel(), np.sqrt(gmm.covariances_.ravel())
    grid = np.linspace((means - 8 * sds).min(), (means + 8 * sds).max(), 20001)
    cdf = (gmm.weights_ * stats.norm.cdf((grid[:, None] - means) / sds)).sum(axis=1)
    return np.interp(u, cdf, grid)


def generate(model: RunModel, rng: np.random.Generator, step: int) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths (P,) and response lengths (P, n) for a step, on the fitted drift."""
    p, n = model.prompts.get(step, model.prompts[model.steps[-1]]), model.n
    mu, sigma = model.prompt.drift.at(step)
    prompts = clip_lengths(np.exp(mu + sigma * _inverse_cdf(model.prompt.shape, rng.uniform(size=p))))
    rho = model.group_corr
    normal = np.sqrt(rho) * rng.standard_normal((p, 1)) + np.sqrt(1 - rho) * rng.standard_normal((p, n))
    mu, sigma = model.response.drift.at(step)
    z = _inverse_cdf(model.response.shape, stats.norm.cdf(normal))
    return prompts, clip_lengths(np.exp(mu + sigma * z), model.response.cap)


def ks(a: np.ndarray, b: np.ndarray) -> float:
    """Two-sample Kolmogorov-Smirnov statistic."""
    return float(stats.ks_2samp(np.ravel(a), np.ravel(b)).statistic)
