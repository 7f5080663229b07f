"""ROLL console output: each RLVR step's metrics as one JSON line, amid Ray and tqdm noise.

Where the lines come from (ROLL@8eb27cc): ROLL's stdout tracker prints
`metrics_tag: {"step": N, "metrics": {...}}` (roll/utils/tracking.py:161, StdoutTracker, with the
"@reducer" tags already stripped from the keys), and the RLVR pipeline itself prints the step's
whole metrics dict every logging_steps, `logger.info(json.dumps(metrics, ensure_ascii=False))`
(roll/pipeline/rlvr/rlvr_pipeline.py:838), keys still tagged ("actor/pg_loss@sum") and the step
inside as "system/step" (base_pipeline.py do_checkpoint) and "system/global_step"
(metrics_manager.py:57). ROLL's logger prefixes
`[2025-06-01 10:00:00] [rlvr_pipeline.py (838)] [INFO] [DRIVER 0 / 1][PID 42] `
(roll/utils/logging.py get_logger).

Stored as ROLL's trackers log the dict (tracking.py `_strip_metric_tag`: the text after the last
"@" dropped, no prefix added) at the step they are given, global_step, so the rows match a W&B
export or TensorBoard file of the same run and store/vocabulary/roll.toml maps both. When both
lines are printed for a step they carry the same values and merge into one row. Non-numeric
values (strings, bools, add_scalars dicts) are skipped; NaN stays NaN.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.logged_dicts import clean, json_pairs, numeric, parse_log
from polytrace.ingest.sniffing import looks_binary

TRACKER = "metrics_tag: "
STEP_KEYS = ("system/step", "system/global_step")
IN_HEAD = re.compile(rb'metrics_tag: \{"step": |"system/global_step": ')
LOGGER_PREFIX = re.compile(rb"\[(?:DRIVER|[\w-]+) \d+ / \d+\]\[PID \d+\]")


def untagged(key: str) -> str:
    return key.rsplit("@", 1)[0] if "@" in key else key


def metric_line(line: str) -> tuple[int, dict[str, float]] | None:
    """(step, {tracker key: value}) when the line is one of ROLL's metric lines, else None."""
    at = line.find(TRACKER)
    if at >= 0:
        obj = json_pairs(line[at + len(TRACKER):].strip())
        if obj is None or not isinstance(obj.get("metrics"), dict) or not isinstance(obj.get("step"), int):
            return None
        return obj["step"], numeric(obj["metrics"])
    at = line.find('{"')
    if at < 0 or '"system/global_step"' not in line:
        return None
    obj = json_pairs(line[at:].strip())
    if obj is None:
        return None
    step = next((obj[k] for k in STEP_KEYS if isinstance(obj.get(k), int)), None)
    if step is None:
        return None
    return step, {untagged(k): v for k, v in numeric(obj).items()}


def metric_lines(text: str):
    """(step, {tracker key: value}) for every metric line of a batch of whole log lines."""
    for line in text.split("\n"):
        if "metrics_tag" not in line and "system/global_step" not in line:
            continue
        for piece in line.split("\r"):
            found = metric_line(clean(piece))
            if found:
                yield found


def parse(path: Path) -> Parsed:
    return parse_log(path, "roll", "ROLL", "metrics line",
                     "ROLL metrics line ('metrics_tag: {...}' or the pipeline's JSON dict with "
                     "system/global_step)", metric_lines)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    if IN_HEAD.search(head):
        return True
    # model loading and vLLM start-up come first; ROLL's logger prefix names the worker and rank
    return name.endswith((".log", ".out", ".txt")) and bool(LOGGER_PREFIX.search(head))


def sample() -> Sample:
    """Step 0 as the pipeline prints it (tagged keys) and as the stdout tracker does, then step 1."""
    prefix = b"[2025-06-01 10:00:00] [rlvr_pipeline.py (838)] [INFO] [DRIVER 0 / 1][PID 42] "
    return Sample.file("roll.log", (
        prefix + b'{"system/global_step": 0, "system/step": 0, "time/step_generate": 30.5, '
                 b'"actor/pg_loss@sum": 0.25, "critic/score/mean": 0.5, "domain": "math"}\n'
        b"[2025-06-01 10:00:00] [tracking.py (161)] [INFO] [DRIVER 0 / 1][PID 42] metrics_tag: "
        b'{"step": 0, "metrics": {"time/step_generate": 30.5, "actor/pg_loss": 0.25}}\n'
        b"actor_train train global step 1: 100%|##########| 4/4\r"
        + prefix + b'{"system/global_step": 1, "system/step": 1, "time/step_generate": NaN}\n'))


FORMAT = Format(
    name="roll-console",
    priority=41,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="ROLL console output: each RLVR step's metrics as a JSON line (pipeline print or stdout tracker)",
)
