"""Synthetic RLVR workloads from the published PolyTrace parameters, written as PolyTrace JSONL files."""
from __future__ import annotations

from pathlib import Path

import numpy as np

from polytrace.workload import WorkloadError
from polytrace.workload.published import MathModel, ToolUseModel
from polytrace.workload.traces import packed_lines, write_jsonl


def clip_lengths(x: np.ndarray, cap: int | None = None) -> np.ndarray:
    """Token counts: rounded, at least 1, at most the cap."""
    return np.clip(np.rint(x), 1, cap if cap else None).astype(np.int64)


def sample_math(model: MathModel, rng: np.random.Generator, prompts: int, n: int,
                cap: int | None) -> tuple[np.ndarray, np.ndarray]:
    """Prompt lengths (P,) and response lengths (P, n) from the joint (input, output) mixture.

    A prompt draws its component and its length once; its n responses come from the
    component's response distribution conditioned on that prompt length, so a group
    shares its difficulty as GRPO groups do, and the pooled pairs follow the mixture.
    """
    comp = rng.choice(len(model.weights), size=prompts, p=model.weights)
    mu, cov = model.means[comp], model.covariances[comp]
    var_in, cov_io, var_out = cov[:, 0, 0], cov[:, 1, 0], cov[:, 1, 1]
    x = mu[:, 0] + np.sqrt(var_in) * rng.standard_normal(prompts)
    cond_mean = mu[:, 1] + cov_io / var_in * (x - mu[:, 0])
    cond_sd = np.sqrt(np.maximum(var_out - cov_io ** 2 / var_in, 0.0))
    y = cond_mean[:, None] + cond_sd[:, None] * rng.standard_normal((prompts, n))
    return clip_lengths(x), clip_lengths(y, cap)


def sample_prompt_lengths(model: MathModel, rng: np.random.Generator, prompts: int) -> np.ndarray:
    """Prompt lengths from the input marginal of the joint mixture."""
    comp = rng.choice(len(model.weights), size=prompts, p=model.weights)
    return clip_lengths(model.means[comp, 0] + np.sqrt(model.covariances[comp, 0, 0])
                        * rng.standard_normal(prompts))


def lognormal_groups(rng: np.random.Generator, prompts: int, n: int, s: float, loc: float,
                     scale: float, group_share: float, cap: int | None) -> np.ndarray:
    """Response lengths (P, n) with a lognormal(s, loc, scale) marginal; `group_share` of the
    log-variance is shared by a prompt's n samples (its difficulty), the rest is per sample."""
    shared = np.sqrt(group_share) * rng.standard_normal((prompts, 1))
    own = np.sqrt(1.0 - group_share) * rng.standard_normal((prompts, n))
    return clip_lengths(loc + scale * np.exp(s * (shared + own)), cap)


def sample_tool_use(model: ToolUseModel, rng: np.random.Generator, rollouts: int
                    ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per rollout: new input tokens and generated tokens of each engine call.

    The call count comes from the published count frequencies, then the lengths from
    that count's Gaussian (the published model has one component per count).
    """
    counts = np.array(sorted(model.call_counts))
    freq = np.array([model.call_counts[k] for k in counts], float)
    drawn = rng.choice(counts, size=rollouts, p=freq / freq.sum())
    out = []
    for k in drawn:
        mean, cov = model.sequences[int(k)]
        v = rng.multivariate_normal(mean, cov, method="eigh")
        out.append((clip_lengths(v[:k]), clip_lengths(v[k:])))
    return out


def contiguous_dp(prompts: int, dp: int) -> np.ndarray:
    """verl's dispatch: the batch is cut into dp contiguous chunks, prompt groups kept whole."""
    return np.minimum(np.arange(prompts) * dp // max(prompts, 1), dp - 1)


def write_math_steps(model: MathModel, out: Path, steps: int, prompts: int, n: int, cap: int,
                     seed: int, dp: int = 2, tp: int = 4) -> list[Path]:
    """packed_lengths_step_N.jsonl for steps 0..S-1 from the joint mixture."""
    _check_sizes(steps, prompts, n, cap)
    rng = np.random.default_rng(seed)
    paths = []
    for step in range(steps):
        inputs, outputs = sample_math(model, rng, prompts, n, cap)
        path = out / f"packed_lengths_step_{step}.jsonl"
        write_jsonl(path, packed_lines(step, inputs, outputs, contiguous_dp(prompts, dp), tp))
        paths.append(path)
    return paths


def write_tool_use_steps(model: ToolUseModel, out: Path, steps: int, prompts: int, n: int,
                         cap: int, seed: int) -> list[Path]:
    """multiturn_workload_step_N.jsonl for steps 0..S-1: n rollouts per prompt group."""
    from polytrace.workload.multiturn import rollout_line

    _check_sizes(steps, prompts, n, cap)
    rng = np.random.default_rng(seed)
    paths = []
    for step in range(steps):
        rollouts = sample_tool_use(model, rng, prompts * n)
        lines = []
        for i, (inputs, outputs) in enumerate(rollouts):
            group, sample = divmod(i, n)
            # The group shares its prompt: every rollout of a group starts from the first one's.
            prompt_len = int(rollouts[group * n][0][0])
            lines.append(rollout_line(step, group, sample, prompt_len, inputs[1:], outputs, cap, rng))
        path = out / f"multiturn_workload_step_{step}.jsonl"
        write_jsonl(path, lines)
        paths.append(path)
    return paths


def _check_sizes(steps: int, prompts: int, n: int, cap: int) -> None:
    for name, v in (("--steps", steps), ("--prompts", prompts), ("--n", n), ("--max-response-len", cap)):
        if v < 1:
            raise WorkloadError(f"{name} must be at least 1, got {v}")


def write_from_run(con, run_id: str, out: Path, seed: int, tp: int = 1) -> list[dict]:
    """A look-alike of an ingested run, one packed file per source step; per-step fit and KS report.

    The last report row (step None) compares the union of all steps.
    """
    from polytrace.workload.fit import fit_run, generate, ks

    model = fit_run(con, run_id, seed)
    rng = np.random.default_rng(seed)
    report, synth_r, synth_p = [], [], []
    for step in model.steps:
        prompts, responses = generate(model, rng, step)
        write_jsonl(out / f"packed_lengths_step_{step}.jsonl",
                    packed_lines(step, prompts, responses, contiguous_dp(len(prompts), model.dp), tp))
        src_p, src_r = model.source[step]
        fit = model.response.per_step[step]
        report.append({"step": step, "prompts": len(prompts), "n": model.n,
                       "lognormal_mu": fit["mu"], "lognormal_sigma": fit["sigma"], "gmm_k": fit["gmm_k"],
                       "prompt_gmm_k": model.prompt.per_step[step]["gmm_k"],
                       "ks_response": ks(responses, src_r), "ks_prompt": ks(prompts, src_p)})
        synth_r.append(responses.ravel())
        synth_p.append(prompts)
    all_src = [model.source[s] for s in model.steps]
    report.append({"step": None, "prompts": sum(len(p) for p in synth_p), "n": model.n,
                   "lognormal_mu": None, "lognormal_sigma": None,
                   "gmm_k": int(model.response.shape.n_components),
                   "prompt_gmm_k": int(model.prompt.shape.n_components),
                   "ks_response": ks(np.concatenate(synth_r), np.concatenate([r for _, r in all_src])),
                   "ks_prompt": ks(np.concatenate(synth_p), np.concatenate([p for p, _ in all_src]))})
    return report
