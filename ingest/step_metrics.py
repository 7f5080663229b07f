"""Per-step metrics shared by the verl formats: key normalisation, last-wins merging, the step_metrics table."""
from __future__ import annotations

import pyarrow as pa

from polytrace.columns import from_list
from polytrace.ingest.contract import IngestError, Parsed

OLD_TIMING = "timing/"
TIMING = "timing_s/"
TRUNCATED_KEY = "log/truncated"
# NeMo-RL logs its timers as timing/train/<...> and timing/validation/<...> (nemo_rl/utils/logger.py
# prefixes; store/vocabulary/nemo-rl.toml): never old verl's, whose stages sit right under timing/.
NOT_VERL_TIMING = ("timing/train/", "timing/validation/")


def canonical_key(key: str) -> str:
    """Old verl wrote `timing/<stage>` (seconds); newer verl writes `timing_s/<stage>`.

    Both are stored as `timing_s/<stage>` so one name serves every query; the rename
    is reported in the parse warnings. NeMo-RL's timing/train/ and timing/validation/ keys, which
    a W&B export of its runs holds, stay as logged for its mapping to name.
    """
    if key.startswith(OLD_TIMING) and not key.startswith(NOT_VERL_TIMING):
        return TIMING + key[len(OLD_TIMING):]
    return key


class StepMetrics:
    """Collects metrics step by step; a step logged again overrides earlier values key by key."""

    def __init__(self, verl_timing: bool = True) -> None:
        # verl_timing=False keeps `timing/...` as logged: other frameworks (NeMo-RL's
        # `timing/train/...`) use that prefix for keys of their own, which their mapping names.
        self.verl_timing = verl_timing
        self.steps: dict[int, dict[str, float]] = {}
        self.times_logged: dict[int, int] = {}
        self.truncated: list[int] = []
        self.renamed = 0

    def add(self, step: int, metrics: dict[str, float], truncated: bool = False) -> None:
        if not -(2**31) <= step < 2**31:
            raise IngestError(None, f"step {step} is out of range")
        self.times_logged[step] = self.times_logged.get(step, 0) + 1
        values = self.steps.setdefault(step, {})
        for key, value in metrics.items():
            if self.verl_timing and canonical_key(key) != key:
                self.renamed += 1
                key = canonical_key(key)
            values[key] = value
        if truncated:
            self.truncated.append(step)
            values[TRUNCATED_KEY] = 1.0

    def warnings(self, unit: str) -> list[str]:
        notes = []
        repeated = sorted(s for s, n in self.times_logged.items() if n > 1)
        if repeated:
            notes.append(f"{len(repeated)} step(s) logged more than once, later values win key by key: "
                         f"{some(repeated)}")
        if self.truncated:
            notes.append(f"{len(self.truncated)} {unit}(s) cut short, their unfinished last pair dropped "
                         f"and {TRUNCATED_KEY}=1 set: step(s) {some(sorted(set(self.truncated)))}")
        if self.renamed:
            notes.append(f"{self.renamed} old-style timing/<stage> value(s) stored as timing_s/<stage>")
        return notes

    def table(self) -> pa.Table:
        ordered = [(step, self.steps[step]) for step in sorted(self.steps)]
        return pa.table({
            "step": from_list([s for s, values in ordered for _ in values], pa.int32()),
            "key": from_list([k for _, values in ordered for k in values], pa.string()),
            "value": from_list([v for _, values in ordered for v in values.values()], pa.float64()),
        })

    def parsed(self, unit: str, run: dict | None = None, warnings: list[str] | None = None) -> Parsed:
        return Parsed(tables={"step_metrics": self.table()}, run=run or {},
                      warnings=(warnings or []) + self.warnings(unit))


def some(items: list, n: int = 8) -> str:
    shown = ", ".join(str(i) for i in items[:n])
    return shown + (f" (+{len(items) - n} more)" if len(items) > n else "")
