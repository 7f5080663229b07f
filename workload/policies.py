"""Dispatch policies: which rollout engine generates each sample of a step."""
from __future__ import annotations

import numpy as np

from polytrace.workload.costmodel import CostModel

ORACLE = {"length-balanced"}
POLICY_NOTES = {
    "as-recorded": "the dp_rank in the trace",
    "round-robin": "prompt groups dealt to engines in turn",
    "length-balanced": "oracle bound: longest-first on the true lengths, then moves off the slowest engine",
    "predicted-balanced": "longest-first on lengths predicted from the previous step (by prompt-length decile)",
    "partial-rollout": "as recorded, generation stops at the q-quantile length; the rest continues next step",
    "cap": "as recorded, every response cut at C tokens (a lower max_response_length)",
}


class EngineLoads:
    """Closed-form engine times under the linear cost model, for O(1) what-if moves.

    An engine's time is prefill + factor * (a * L + b * sum(len) + c * sum(len * prompt
    + len * (len + 1) / 2)), L its longest response: the sum over its decode iterations
    of a + b * live + c * live context, as the batch shrinks.
    """

    def __init__(self, model: CostModel, engines: int):
        self.m, self.e = model, engines
        self.f = np.array([model.factor(e) for e in range(engines)])
        self.n = np.zeros(engines)
        self.prompt = np.zeros(engines)
        self.work = np.zeros(engines)  # b * sum(len) + c * sum(context tokens), per engine
        self.top = np.zeros((engines, 2))  # two longest responses, for removals

    def sample_work(self, lengths: np.ndarray, prompts: np.ndarray) -> np.ndarray:
        return self.m.b * lengths + self.m.c * (lengths * prompts + lengths * (lengths + 1) / 2)

    def time(self, n, prompt, work, longest, engine) -> np.ndarray:
        prefill = np.where(n > 0, self.m.p0 + self.m.p1 * prompt, 0.0)
        return prefill + self.f[engine] * (self.m.a * longest + work)

    def times(self) -> np.ndarray:
        return self.time(self.n, self.prompt, self.work, self.top[:, 0], np.arange(self.e))

    def add(self, engine: int, length: float, prompt: float) -> None:
        self.n[engine] += 1
        self.prompt[engine] += prompt
        self.work[engine] += self.sample_work(np.array(length), np.array(prompt))
        self.top[engine] = sorted([*self.top[engine], length], reverse=True)[:2]


def lpt(lengths: np.ndarray, prompts: np.ndarray, engines: int, model: CostModel) -> np.ndarray:
    """Longest first, each to the engine that would finish it earliest."""
    loads = EngineLoads(model, engines)
    out = np.zeros(len(lengths), dtype=np.int64)
    work = loads.sample_work(lengths.astype(float), prompts.astype(float))
    for s in np.argsort(-lengths, kind="stable"):
        n1, p1 = loads.n + 1, loads.prompt + prompts[s]
        after = loads.time(n1, p1, loads.work + work[s], np.maximum(loads.top[:, 0], lengths[s]),
                           np.arange(engines))
        e = int(np.argmin(after))
        out[s] = e
        loads.add(e, float(lengths[s]), float(prompts[s]))
    return out


def improve(assign: np.ndarray, lengths: np.ndarray, prompts: np.ndarray, engines: int,
            model: CostModel, max_moves: int = 2000) -> np.ndarray:
    """Move single samples off the slowest engine while that lowers its finish time."""
    assign = assign.copy()
    lengths, prompts = lengths.astype(float), prompts.astype(float)
    loads = EngineLoads(model, engines)
    work = loads.sample_work(lengths, prompts)
    for _ in range(max_moves):
        stats = _engine_stats(assign, lengths, prompts, work, engines)
        t = loads.time(*stats, np.arange(engines))
        m = int(np.argmax(t))
        on_m = np.flatnonzero(assign == m)
        if len(on_m) == 0:
            break
        n, prompt, w, top1 = (x[m] for x in stats)
        longest_left = _longest_without(lengths[on_m])
        t_m = loads.time(np.full(len(on_m), n - 1), prompt - prompts[on_m], w - work[on_m],
                         longest_left, m)
        best = (t[m] * (1 - 1e-12), None, None)
        for e in range(engines):
            if e == m:
                continue
            t_e = loads.time(np.full(len(on_m), stats[0][e] + 1), stats[1][e] + prompts[on_m],
                             stats[2][e] + work[on_m], np.maximum(stats[3][e], lengths[on_m]), e)
            worst = np.maximum(t_m, t_e)
            i = int(np.argmin(worst))
            if worst[i] < best[0]:
                best = (worst[i], on_m[i], e)
        if best[1] is None:
            break
        assign[best[1]] = best[2]
    return assign


def _engine_stats(assign, lengths, prompts, work, engines):
    n = np.bincount(assign, minlength=engines).astype(float)
    prompt = np.bincount(assign, weights=prompts, minlength=engines)
    w = np.bincount(assign, weights=work, minlength=engines)
    longest = np.zeros(engines)
    np.maximum.at(longest, assign, lengths)
    return n, prompt, w, longest


def _longest_without(lengths: np.ndarray) -> np.ndarray:
    """For each sample, the longest of the others (the engine's L once it leaves)."""
    if len(lengths) == 1:
        return np.zeros(1)
    order = np.sort(lengths)
    first, second = order[-1], order[-2]
    return np.where(lengths == first, second, first)


def length_balanced(recorded: np.ndarray, lengths: np.ndarray, prompts: np.ndarray, engines: int,
                    model: CostModel) -> np.ndarray:
    """Oracle: the better of LPT and the recorded layout, each improved by moves (never worse than either)."""
    candidates = [improve(lpt(lengths, prompts, engines, model), lengths, prompts, engines, model)]
    if recorded.max(initial=0) < engines:
        candidates.append(improve(recorded, lengths, prompts, engines, model))
    loads = EngineLoads(model, engines)
    work = loads.sample_work(lengths.astype(float), prompts.astype(float))

    def makespan(a):
        return loads.time(*_engine_stats(a, lengths.astype(float), prompts.astype(float), work, engines),
                          np.arange(engines)).max()

    return min(candidates, key=makespan)


def round_robin(prompt_ids: np.ndarray, engines: int) -> np.ndarray:
    _, group = np.unique(prompt_ids, return_inverse=True)
    return group % engines


def predict_lengths(prompts: np.ndarray, previous: tuple[np.ndarray, np.ndarray] | None) -> np.ndarray:
    """Each sample's expected response length from the previous step, by prompt-length decile."""
    if previous is None or len(previous[0]) == 0:
        return np.ones(len(prompts))
    prev_prompts, prev_lengths = previous
    edges = np.unique(np.quantile(prev_prompts, np.linspace(0, 1, 11)[1:-1]))
    prev_bin, bins = np.searchsorted(edges, prev_prompts), np.searchsorted(edges, prompts)
    means = np.full(len(edges) + 1, prev_lengths.mean())
    for b in np.unique(prev_bin):
        means[b] = prev_lengths[prev_bin == b].mean()
    return means[bins]
