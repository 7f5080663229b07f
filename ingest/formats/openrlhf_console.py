"""OpenRLHF console output: one `Global step N: {...}` line per PPO/GRPO step, amid Ray and tqdm noise.

Where the lines come from (OpenRLHF@3c3be62, openrlhf/trainer/): the trainer prints each step's
status dict as a Python repr, `logger.info(f"✨ Global step {global_step}: {log_status}")`
(ppo_trainer.py:547; ppo_trainer_async.py:244 without the sparkle), and evaluation as
`✨ Evaluation completed in H:MM:SS, global_step N, eval_metrics: {...}` (ppo_trainer.py:594) or
`Eval at step N: {...}` (ppo_trainer_async.py:214). Its logger prefixes
`INFO 08-13 12:00:00 ppo_trainer.py:547] ` (openrlhf/utils/logging_utils.py), and Ray prefixes
`(PPOTrainer pid=N)` when the trainer runs as an actor.

Stored as the trackers log the same dicts (logging_utils.py WandbLogger.log_train/log_eval):
the step's keys under `train/`, evaluation keys under `eval/`, at global_step; so the rows match
a W&B export or TensorBoard file of the same run and store/vocabulary/openrlhf.toml maps both.
ANSI colours and Ray prefixes are stripped; tqdm redraws (`\\r`) are split off and ignored.
A step printed again (a resumed run) overrides earlier values key by key.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.logged_dicts import clean, parse_log, repr_pairs
from polytrace.ingest.sniffing import looks_binary

# (pattern ending at the dict's opening brace, the prefix the tracker puts on its keys)
LINES = (
    (re.compile(r"Global step (\d+): \{"), "train/"),
    (re.compile(r"Evaluation completed in [^,]*, global_step (\d+), eval_metrics: \{"), "eval/"),
    (re.compile(r"Eval at step (\d+): \{"), "eval/"),
)
STEP_IN_HEAD = re.compile(rb"Global step \d+: \{'")
MARKERS = (b"openrlhf", b"OpenRLHF")
VERL_STEP_LINE = re.compile(rb"step:\d+ - ")  # a verl log naming OpenRLHF stays verl's


def metric_lines(text: str):
    """(step, {tracker key: value}) for every metric line of a batch of whole log lines; a dict
    cut short (a crashed run's last line) is skipped."""
    for line in text.split("\n"):
        if "step" not in line:
            continue
        for piece in line.split("\r"):
            piece = clean(piece)
            for pattern, prefix in LINES:
                m = pattern.search(piece)
                if m:
                    values = repr_pairs(piece, m.end() - 1)
                    if values is not None:
                        yield int(m.group(1)), {prefix + k: v for k, v in values.items()}
                    break


def parse(path: Path) -> Parsed:
    return parse_log(path, "openrlhf", "OpenRLHF", "step line",
                     "OpenRLHF step line ('Global step N: {...}')", metric_lines)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    if STEP_IN_HEAD.search(head):
        return True
    # the first step line comes after model loading and vLLM start-up, often past the head
    return (name.endswith((".log", ".out", ".txt")) and any(m in head for m in MARKERS)
            and not VERL_STEP_LINE.search(head))


def sample() -> Sample:
    """Two steps and an evaluation amid Ray prefixes, ANSI colours and a tqdm redraw."""
    return Sample.file("openrlhf.log", (
        b"(PPOTrainer pid=7) INFO 08-13 12:00:00 ppo_trainer.py:547] \xe2\x9c\xa8 Global step 1: "
        b"{'policy_loss': 0.25, 'actor_lr': 1e-06, 'timing/generation': 30.0, 'timing/step_total': 50.0}\n"
        b"Episode [1/1]:  50%|#####     | 1/2 [00:50<00:50]\r(PPOTrainer pid=7) INFO 08-13 12:01:00 "
        b"ppo_trainer.py:547] \xe2\x9c\xa8 Global step 2: {'policy_loss': nan, 'timing/generation': 20.0}\n"
        b"\x1b[36m(PPOTrainer pid=7)\x1b[0m INFO 08-13 12:01:30 ppo_trainer.py:594] \xe2\x9c\xa8 Evaluation "
        b"completed in 0:00:30, global_step 2, eval_metrics: {'eval_math_pass1': 0.5}\n"))


FORMAT = Format(
    name="openrlhf-console",
    priority=41,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="OpenRLHF console output: one 'Global step N: {...}' line per PPO/GRPO step",
)
