"""The published PolyTrace length distributions: read from the JSON file as it is, or the embedded copy."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from polytrace.workload import WorkloadError


@dataclass(frozen=True)
class MathModel:
    """Math task: a joint (prompt, response) Gaussian mixture plus lognormal marginals (scipy order s, loc, scale)."""

    weights: np.ndarray      # (K,)
    means: np.ndarray        # (K, 2): prompt, response
    covariances: np.ndarray  # (K, 2, 2)
    input_lognorm: tuple[float, float, float]
    output_lognorm: tuple[float, float, float]


@dataclass(frozen=True)
class ToolUseModel:
    """Tool use: how many engine calls a rollout makes, then a Gaussian over that count's per-call lengths.

    For a count k the vector is (input_1..input_k, output_1..output_k): the new input
    tokens of each call (the prompt, then each tool's answer) and the tokens it generated.
    """

    call_counts: dict[int, int]
    sequences: dict[int, tuple[np.ndarray, np.ndarray]]  # k -> (mean (2k,), covariance (2k, 2k))


# Published numbers from ../shared/data/polytrace/dataset/workloads/
# enhanced_task_distribution_parameters.json (PolyTrace suite, Zhou-jiecheng/PolyTrace),
# key math_task: gmm_parameters, input_distribution, output_distribution.
PUBLISHED_MATH = MathModel(
    weights=np.array([0.358504752818907, 0.07434340269703671, 0.3728319533326389, 0.19431989115141732]),
    means=np.array([[112.88734597117671, 4959.099111112346], [266.35306111535584, 12719.633617453097],
                    [145.42284338344732, 9174.831640824232], [138.15927257466163, 17654.857156495706]]),
    covariances=np.array([
        [[558.2999299271327, -782.5312200494068], [-782.531220049407, 4804084.907877425]],
        [[16547.580856641747, -156139.9610795663], [-156139.9610795663, 36813304.20752768]],
        [[1624.4403293840078, -54104.33635034268], [-54104.33635034268, 11669296.498556865]],
        [[1164.0896772425463, 14184.836846326074], [14184.836846326072, 27740124.670528445]]]),
    input_lognorm=(0.21286157406385864, -1908.36690259044, 3488.4470703882016),
    output_lognorm=(0.8221578425518301, 4.861523115832697, 767.2288034083723),
)

# Same file, key tool_calling_task: call_count_distribution, and for each count the
# means and standard deviations of input_i / output_i from sequence_models[k]
# (mean_vector, sqrt of the covariance_matrix diagonal), rounded to 0.1 token. The
# embedded copy keeps only the diagonal; read the file for the full covariance.
_TOOL_USE_DIAGONAL = {
    1: ([294.8], [32.6], [1305.6], [1393.8]),
    2: ([279.4, 293.3], [39.5, 327.9], [326.3, 353.7], [433.0, 627.7]),
    3: ([245.9, 476.3, 467.4], [30.2, 55.1, 84.0], [112.5, 166.6, 276.3], [102.5, 83.5, 564.3]),
    4: ([240.5, 464.3, 437.0, 451.0], [28.2, 87.3, 122.9, 222.7],
        [120.4, 154.0, 192.2, 288.7], [170.4, 110.9, 214.4, 575.8]),
    5: ([251.5, 480.8, 469.9, 470.0, 473.0], [20.8, 37.1, 55.9, 55.0, 68.4],
        [118.8, 81.9, 238.6, 203.7, 1127.1], [82.5, 47.7, 145.6, 137.4, 766.2]),
    6: ([252.6, 481.1, 472.6, 472.7, 472.7, 473.4], [17.1, 32.5, 44.5, 43.2, 43.5, 40.5],
        [119.0, 79.4, 192.2, 208.8, 171.2, 1047.7], [68.4, 49.8, 120.2, 120.2, 124.0, 722.8]),
    7: ([254.6, 476.2, 467.9, 468.4, 468.3, 467.9, 468.7], [16.7, 49.9, 60.8, 59.1, 59.2, 60.1, 59.1],
        [124.8, 83.8, 171.9, 198.6, 165.2, 159.7, 971.2], [99.3, 72.2, 148.7, 139.6, 162.3, 165.8, 860.1]),
    8: ([254.8, 468.6, 456.6, 457.8, 457.5, 458.0, 457.5, 458.6],
        [16.8, 69.6, 90.2, 87.1, 87.9, 86.2, 88.2, 86.6],
        [126.1, 89.8, 198.2, 203.7, 175.5, 162.9, 161.4, 1061.9],
        [106.1, 92.1, 204.9, 177.6, 163.2, 167.6, 153.3, 1021.7]),
    9: ([257.5, 461.7, 442.3, 445.4, 445.0, 447.0, 447.3, 447.4, 445.4],
        [19.0, 82.3, 114.8, 109.5, 111.5, 106.7, 105.6, 108.5, 112.1],
        [155.3, 94.6, 229.0, 224.5, 209.3, 178.6, 174.4, 173.4, 1175.5],
        [303.4, 82.4, 270.4, 204.3, 237.1, 192.2, 178.4, 170.9, 1144.6]),
    10: ([258.3, 427.0, 383.7, 385.5, 384.2, 384.4, 382.6, 387.3, 384.0, 385.0],
         [22.5, 122.7, 172.7, 171.3, 172.1, 171.2, 175.4, 169.8, 172.7, 171.5],
         [189.7, 120.7, 267.1, 250.4, 266.6, 219.5, 204.2, 192.1, 195.1, 559.7],
         [375.3, 188.3, 295.6, 260.2, 341.1, 265.9, 233.3, 192.4, 209.5, 927.2]),
}

PUBLISHED_TOOL_USE = ToolUseModel(
    call_counts={3: 104344, 2: 18785, 5: 48933, 4: 17533, 1: 4640, 7: 9189, 6: 34629,
                 8: 1820, 9: 652, 10: 1021},
    sequences={k: (np.array(im + om), np.diag(np.square(isd + osd)))
               for k, (im, isd, om, osd) in _TOOL_USE_DIAGONAL.items()},
)


def _get(d: dict, *keys: str):
    for i, k in enumerate(keys):
        if not isinstance(d, dict) or k not in d:
            raise WorkloadError(f"parameters file lacks {'.'.join(keys[:i + 1])}")
        d = d[k]
    return d


def read_params(path: Path) -> tuple[MathModel, ToolUseModel]:
    """Both task models from enhanced_task_distribution_parameters.json, with its own key names."""
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, UnicodeError, ValueError) as e:
        raise WorkloadError(f"{path}: cannot read parameters ({str(e).splitlines()[0]})") from None
    try:
        return _math(doc), _tool_use(doc)
    except (TypeError, ValueError, IndexError) as e:
        raise WorkloadError(f"{path}: malformed parameters ({e})") from None


def _math(doc: dict) -> MathModel:
    gmm = _get(doc, "math_task", "gmm_parameters")
    weights = np.asarray(gmm["weights"], float)
    means = np.asarray(gmm["means"], float)
    covs = np.asarray(gmm["covariances"], float)
    k = len(weights)
    if means.shape != (k, 2) or covs.shape != (k, 2, 2):
        raise WorkloadError("math_task.gmm_parameters: expected K (input, output) means and 2x2 covariances")
    return MathModel(
        weights=weights / weights.sum(), means=means, covariances=covs,
        input_lognorm=tuple(_get(doc, "math_task", "input_distribution", "parameters")),
        output_lognorm=tuple(_get(doc, "math_task", "output_distribution", "parameters")),
    )


def _tool_use(doc: dict) -> ToolUseModel:
    counts = {int(k): int(v) for k, v in _get(doc, "tool_calling_task", "call_count_distribution").items()}
    sequences = {}
    for key, model in _get(doc, "tool_calling_task", "sequence_models").items():
        k = int(key)
        names = list(model["feature_names"])
        wanted = [f"input_{i}" for i in range(1, k + 1)] + [f"output_{i}" for i in range(1, k + 1)]
        missing = [w for w in wanted if w not in names]
        if missing:
            raise WorkloadError(f"tool_calling_task.sequence_models.{key} lacks features {missing[:3]}")
        idx = [names.index(w) for w in wanted]
        mean = np.asarray(model["mean_vector"], float)[idx]
        cov = np.asarray(model["covariance_matrix"], float)[np.ix_(idx, idx)]
        sequences[k] = (mean, cov)
    usable = {k: v for k, v in counts.items() if k in sequences and v > 0}
    if not usable:
        raise WorkloadError("tool_calling_task: no call count has both a frequency and a sequence model")
    return ToolUseModel(call_counts=usable, sequences=sequences)
