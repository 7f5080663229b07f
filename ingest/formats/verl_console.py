"""verl console output (`output.log`): one `step:N - key:value - ...` line per training step, amid log noise.

What the parser tolerates, and why:
- ANSI colour codes and Ray's `(TaskRunner pid=...)` prefix are stripped before matching.
- Values may be `np.float64(0.03)`, `np.int32(2)`, `nan`, `inf`, negative or scientific.
- Non-numeric values are skipped; every numeric one lands in step_metrics.
- W&B's console capture cuts lines at exactly 4096 characters, and a crashed run can
  leave its last line without a newline. Such a line is *cut*: a pair counts only when
  ` - ` follows it, so the unfinished last pair is dropped (a cut can land inside a number,
  leaving a wrong but parseable value), and the step gets `log/truncated = 1`.
- A step logged again (resumed runs re-log steps) overrides earlier values key by key;
  steps need not start at 0 or 1. A validation-only step line (verl's initial validation)
  is stored like any other; having no timings, it drops out of the stage queries.
- `timing/<stage>` (old verl) is stored as `timing_s/<stage>`.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.logged_dicts import clean, number
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import line_blocks
from polytrace.ingest.step_metrics import StepMetrics, some

WANDB_LINE_CAP = 4096
SEPARATOR = " - "
STEP = re.compile(r"\s*step:(-?\d+)(?= - )")
STEP_LINE_IN_HEAD = re.compile(
    rb"(?m)^(?:\x1b\[[0-9;?]*[A-Za-z]|\(\w+ pid=\d+[^)\n]*\)|\s)*step:\d+ - [^\n:]+:")
VERL_MARKERS = (b"actor_rollout_ref", b"TaskRunner pid=", b"timing_s/", b"val-core/", b"global_steps")
MODEL_PATH = re.compile(r"""model[._]path['"]?\s*[=:]\s*['"]?([^\s'",}]+)""")
MAX_RESPONSE = re.compile(r"""max_response_length['"]?\s*[=:]\s*(\d+)""")


def pairs(body: str, cut: bool) -> tuple[dict[str, float], list[str]]:
    """`key:value` pairs of a step line after `step:N`, and the keys whose value is no number
    (skipped); on a cut line the last piece is unfinished and left out."""
    pieces = body.split(SEPARATOR)[1:]
    if cut and pieces:
        pieces.pop()
    metrics, unread = {}, []
    for piece in pieces:
        key, sep, raw = piece.partition(":")
        value = number(raw) if sep else None
        if value is not None and key.strip():
            metrics[key.strip()] = value
        elif sep and key.strip():
            unread.append(key.strip())
    return metrics, unread


def step_lines(text: str):
    """(step, metrics, keys whose value is no number, cut) for every step line of a console log,
    or of a batch of its whole lines (only the log's last line can end without a newline)."""
    lines = text.split("\n")
    ends_open = not text.endswith("\n")
    if not ends_open:
        lines.pop()
    last = len(lines) - 1
    for i, raw in enumerate(lines):
        if "step:" not in raw:
            continue
        raw = raw.rstrip("\r")
        line = clean(raw)
        m = STEP.match(line)
        if not m:
            continue
        cut = len(raw) == WANDB_LINE_CAP or (ends_open and i == last)
        yield int(m.group(1)), *pairs(line[m.end():], cut), cut


def run_facts(text: str, run: dict | None = None) -> dict:
    """The run facts a log (or a batch of it) names; those already in `run` are kept, so the
    first mention in the file wins."""
    run = run or {"framework": "verl"}
    if "model" not in run:
        model = MODEL_PATH.search(text)
        if model:
            run["model"] = model.group(1).rstrip("/").rsplit("/", 1)[-1]
    if "max_response_len" not in run:
        cap = MAX_RESPONSE.search(text)
        if cap:
            run["max_response_len"] = int(cap.group(1))
    return run


def parse(path: Path) -> Parsed:
    metrics = StepMetrics()
    run: dict = {"framework": "verl"}
    unread: dict[int, list[str]] = {}
    for offset, block in line_blocks(path):
        if not offset and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not a verl console log")
        # blocks end at a newline, so no UTF-8 sequence is split between two of them
        text = block.decode("utf-8", errors="replace")
        run = run_facts(text, run)
        try:
            for step, values, keys, cut in step_lines(text):
                metrics.add(step, values, truncated=cut)
                if keys:
                    unread.setdefault(step, []).extend(keys)
        except IngestError as e:
            raise IngestError(path, e.reason) from None
    if not metrics.steps:
        raise IngestError(path, "no verl step line ('step:N - key:value - ...') found")
    return metrics.parsed("step line", run=run, warnings=_unread(unread))


def _unread(unread: dict[int, list[str]]) -> list[str]:
    """A warning counting the values that are no number (skipped), with their steps and a key."""
    if not unread:
        return []
    steps = sorted(unread)
    n = sum(map(len, unread.values()))
    return [f"{n} value(s) that are not numbers skipped: step(s) {some(steps)}, e.g. {unread[steps[0]][0]}"]


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    if b"step:" in head and STEP_LINE_IN_HEAD.search(head):
        return True
    # verl prints its config and worker logs first; a long preamble can push step 1 past the head.
    return name.endswith((".log", ".out", ".txt")) and any(m in head for m in VERL_MARKERS)


def sample() -> Sample:
    """Two steps amid log noise: a model path, np.float64(...) values, Ray's prefix, a nan."""
    return Sample.file("output.log", (
        b"INFO actor_rollout_ref.model.path=/models/Qwen2.5-7B\n"
        b"step:1 - timing_s/gen:6.0 - timing_s/reward:1.0 - timing_s/step:10.0 - "
        b"response_length/mean:np.float64(512.5) - actor/lr:1e-06\n"
        b"(TaskRunner pid=42) step:2 - timing_s/gen:4.5 - timing_s/step:8.0 - critic/score/mean:nan\n"))


FORMAT = Format(
    name="verl-console",
    priority=40,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="verl console output: one 'step:N - key:value - ...' line per step (W&B output.log too)",
)
