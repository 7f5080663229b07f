"""slime console output: the `perf N: {...}`, `rollout N: {...}` and `step N: {...}` dicts each rollout prints.

Where the lines come from (slime@624b824, slime/observability/ and backends/megatron_utils/):
every dict slime hands its trackers is also printed as a Python repr with the rollout id in front:
`perf {rollout_id}: {log_dict}` by the rollout manager (rollout_metrics.py:268) and by the trainer's
timers (train_metric_utils.py:401), `rollout|multi_turn|passrate {rollout_id}: {...}`
(train_metric_utils.py:135), `eval {rollout_id}: {...}` (rollout_metrics.py:247) and each optimizer
step's `step {accumulated_step_id}: {...}` (model.py:918; `critic-step` for the critic). The logger
prefixes `[2025-07-20 17:53:16] rollout.py:1303 - ` (logging_utils.py configure_logger) and Ray
`(RolloutManager pid=N)` or `(MegatronTrainRayActor pid=N)`.

The keys are printed as the trackers log them (logging_utils.log adds no prefix), so they are
stored as they are, every dict of one id merged into that step's row. `step N` is the optimizer
step, rollout id x steps per rollout + step (model.py:879): the same number as the rollout id when
each rollout makes one optimizer step (slime's default), as in W&B's train/step.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.logged_dicts import clean, parse_log, repr_pairs
from polytrace.ingest.sniffing import looks_binary

LINE = re.compile(r"(?:^| - )(?:perf|rollout|multi_turn|passrate|eval|(?:critic-)?step) (\d+): \{")
IN_HEAD = re.compile(rb"(?m)(?:^|\) | - )(?:perf|rollout|step) \d+: \{'(?:perf|rollout|train)/")


def metric_lines(text: str):
    """(step, values) for every printed tracker dict of a batch of whole log lines."""
    for line in text.split("\n"):
        if ": {" not in line:
            continue
        for piece in line.split("\r"):
            piece = clean(piece)
            m = LINE.search(piece)
            if m:
                values = repr_pairs(piece, m.end() - 1)
                if values is not None:
                    yield int(m.group(1)), values


def parse(path: Path) -> Parsed:
    return parse_log(path, "slime", "slime", "metrics line",
                     "slime metrics line ('perf N: {...}', 'rollout N: {...}' or 'step N: {...}')",
                     metric_lines)


def sniff(head: bytes, name: str) -> bool:
    return not looks_binary(head) and bool(IN_HEAD.search(head))


def sample() -> Sample:
    """Rollout 0 as the rollout manager, the trainer's rollout data, an optimizer step and the
    timers print it, amid Ray prefixes."""
    stamp = b"[2025-07-20 17:53:16] "
    return Sample.file("slime.log", (
        b"(RolloutManager pid=6809) " + stamp + b"rollout.py:1303 - perf 0: {'rollout/response_len/mean': "
        b"1877.5, 'rollout/truncated_ratio': 0.0, 'perf/rollout_time': np.float64(262.5)}\n"
        b"(MegatronTrainRayActor pid=10122) " + stamp + b"data.py:193 - rollout 0: {'rollout/raw_reward': 0.25}\n"
        b"(MegatronTrainRayActor pid=10122) " + stamp + b"model.py:918 - step 0: {'train/loss': -5e-09, "
        b"'train/grad_norm': 1.0, 'train/step': 0}\n"
        b"(MegatronTrainRayActor pid=10122) " + stamp + b"train_metric_utils.py:401 - perf 0: "
        b"{'perf/train_wait_time': 280.0, 'perf/train_time': 20.0, 'perf/step_time': 300.0}\n"))


FORMAT = Format(
    name="slime-console",
    priority=41,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="slime console output: the perf/rollout/step metric dicts printed per rollout",
)
