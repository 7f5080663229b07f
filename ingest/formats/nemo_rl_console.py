"""NeMo-RL console output: the GRPO driver's per-step blocks (`===== Step N/M =====`, then
Training Results, Timing and Performance Metrics, validation results between them).

The shape and labels are read from NVIDIA-NeMo/RL@7ea279a (Apache-2.0):
nemo_rl/algorithms/grpo.py grpo_train (:2803-2823 the Epoch and Step banners, :3703-3745 the
Training Results and Timing sections, :3842 and :4004-4013 validation) and
nemo_rl/algorithms/utils.py print_performance_metrics (:568-884).

Each printed value is stored under the key NeMo-RL's Logger writes for it to W&B and
TensorBoard (`train/...`, `timing/train/...`, `performance/...`, `validation/...`), so one
mapping (store/vocabulary/nemo-rl.toml) serves the console, TB and W&B alike. The console's
labels differ from those keys and are translated here (LABELS); a percentage printed for a
logged ratio is divided by 100. Printed values are rounded (timings to 0.01 s).

The step is the logged one, total_steps + 1: the banner's N counts within an epoch, so after an
`Epoch E/M` banner with E > 1 the steps of the earlier epochs are added. A banner repeated with
the same N (dynamic sampling drawing another batch) continues the same step. Lines prefixed by
Ray (`(pid=...)`, `(DTensorPolicyWorker pid=...)`), ANSI colours and progress bars are noise;
any other line does not end a section, so worker logs interleaved with a block are harmless.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.logged_dicts import clean
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import line_blocks
from polytrace.ingest.step_metrics import StepMetrics

STEP = re.compile(r"^=+ Step (\d+)/(\d+) =+$")
EPOCH = re.compile(r"^=+ Epoch (\d+)/(\d+) =+$")
VALIDATION_AT = re.compile(r"Starting validation at step (\d+)")
BULLET = re.compile(r"^[•\-]\s+(.+?):\s+(.+)$")
NUMBER = re.compile(r"^[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf)", re.IGNORECASE)
MODEL = re.compile(r"""['"]model_name['"]\s*:\s*['"]([^'"]+)['"]""")
SECTIONS = [  # (header text the stripped line ends with, section); the longer ones first
    ("Validation Timing:", "validation_timing"),
    ("Validation Results:", "validation"),
    ("Training Results:", "train"),
    ("Timing:", "timing"),
    ("Performance Metrics:", "performance"),
]
# (section, printed label) -> (logged key, divisor of the printed value)
LABELS = {
    ("train", "Loss"): ("train/loss", 1),
    ("train", "Draft Loss"): ("train/draft_loss", 1),
    ("train", "Generation KL Error"): ("train/gen_kl_error", 1),
    ("train", "Avg Reward"): ("train/reward", 1),
    ("train", "Avg Total Reward"): ("train/reward", 1),
    ("train", "Avg Filtered Reward"): ("train/filtered_reward", 1),
    ("train", "Mean Generation Length"): ("train/mean_gen_tokens_per_sample", 1),
    ("train", "Buffer Size"): ("train/buffer_size", 1),
    ("train", "Avg Trajectory Age"): ("train/avg_trajectory_age", 1),
    ("timing", "Total step time"): ("timing/train/total_step_time", 1),
    ("performance", "Average Token Imbalance"): ("performance/average_token_imbalance", 100),
    ("performance", "Mean Total Tokens per Sample"): ("train/mean_total_tokens_per_sample", 1),
    ("performance", "Training Worker Idle Time Ratio"): ("performance/training_worker_idle_time_ratio", 100),
    ("performance", "E2E (Samples/sec/gpu)"): ("performance/samples_per_sec_per_gpu", 1),
    ("performance", "E2E (Tokens/sec/gpu)"): ("performance/tokens_per_sec_per_gpu", 1),
    ("performance", "Policy Training (Tokens/sec/gpu)"): ("performance/policy_training_tokens_per_sec_per_gpu", 1),
    ("performance", "Policy and Reference Logprobs (Tokens/sec/gpu)"):
        ("performance/policy_and_reference_logprobs_tokens_per_sec_per_gpu", 1),
    ("performance", "Training Worker Group (Tokens/sec/gpu)"):
        ("performance/training_worker_group_tokens_per_sec_per_gpu", 1),
    ("performance", "Generation Worker Group (Tokens/sec/gpu)"): ("performance/generation_tokens_per_sec_per_gpu", 1),
    ("performance", "E2E (Samples/sec)"): ("performance/samples_per_sec", 1),
    ("performance", "E2E (Tokens/sec)"): ("performance/tokens_per_sec", 1),
    ("performance", "Training Worker Group (Tokens/sec)"): ("performance/training_worker_group_tokens_per_sec", 1),
    ("performance", "Generation Worker Group (Tokens/sec)"): ("performance/generation_tokens_per_sec", 1),
    ("performance", "Training Model Floating Point Utilization"): ("performance/train_fp_utilization", 100),
    ("validation", "Accuracy"): ("validation/accuracy", 1),
    ("validation", "Average response length"): ("validation/avg_length", 1),
    ("validation_timing", "Total validation time"): ("timing/validation/total_validation_time", 1),
}


def leading_number(text: str) -> float | None:
    m = NUMBER.match(text.strip())
    return float(m.group(0)) if m else None


class Blocks:
    """Reads a NeMo-RL log line by line; `values` collects what it prints by logged step."""

    def __init__(self) -> None:
        self.values: dict[int, dict[str, float]] = {}  # by logged step, in the order printed
        self.step: int | None = None     # the logged step of the current block
        self.val_step: int | None = None
        self.section: str | None = None
        self.epoch, self.offset, self.last_banner, self.new_epoch = 1, 0, 0, False
        self.orphans = 0

    def feed(self, raw: str) -> None:
        if "\r" in raw:  # a progress bar redraws its line; the last state is the line
            raw = raw.rsplit("\r", 1)[-1] or raw.rstrip("\r")
        line = clean(raw).strip()
        if not line:
            return
        if line.startswith("="):
            self.banner(line)
        elif line.startswith("▶"):
            self.section = None
            at = VALIDATION_AT.search(line)
            if at:
                self.val_step = int(at.group(1))
        elif line.endswith(":") and not line.startswith(("•", "-")):
            for header, section in SECTIONS:
                if line.endswith(header):
                    self.section = section
                    break
        elif self.section:
            self.bullet(line)

    def banner(self, line: str) -> None:
        if m := EPOCH.match(line):
            epoch = int(m.group(1))
            self.new_epoch = epoch > self.epoch
            self.epoch = epoch
        elif m := STEP.match(line):
            n = int(m.group(1))
            if self.new_epoch and n <= self.last_banner:
                self.offset += self.last_banner
            self.new_epoch = False
            self.last_banner = n
            self.step, self.section = self.offset + n, None

    def bullet(self, line: str) -> None:
        m = BULLET.match(line)
        if not m:
            return
        label, text = m.group(1).strip(), m.group(2)
        section = self.section
        step = self.val_step if section.startswith("validation") else self.step
        if section == "timing" and (section, label) not in LABELS:
            key, divisor = f"timing/train/{label}", 1  # every timer label of the step
        elif section == "performance" and label == "Training FLOPS":
            per_rank = re.search(r"\(([-+\d.eE]+) TFLOPS per rank\)", text)
            key, divisor = "performance/train_flops_per_gpu", 1
            text = per_rank.group(1) if per_rank else ""
        elif (section, label) in LABELS:
            key, divisor = LABELS[(section, label)]
        else:
            return
        value = leading_number(text)
        if value is None:
            return
        if step is None:
            self.orphans += 1
            return
        self.values.setdefault(step, {})[key] = value / divisor


def parse(path: Path) -> Parsed:
    reader = Blocks()
    run: dict = {"framework": "nemo-rl"}
    for offset, block in line_blocks(path):
        if not offset and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not a NeMo-RL console log")
        text = block.decode("utf-8", errors="replace")
        if "model" not in run and (model := MODEL.search(text)):
            run["model"] = model.group(1).rstrip("/").rsplit("/", 1)[-1]
        try:
            for raw in text.split("\n"):
                reader.feed(raw)
        except IngestError as e:
            raise IngestError(path, e.reason) from None
    metrics = StepMetrics(verl_timing=False)
    for step, values in reader.values.items():
        metrics.add(step, values)
    if not metrics.steps:
        raise IngestError(path, "no NeMo-RL step block ('===== Step N/M =====' with Training Results "
                                "or Timing) found")
    warnings = [f"{reader.orphans} value(s) printed before any 'Step N/M' banner were skipped"] \
        if reader.orphans else []
    return metrics.parsed("step block", run=run, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    has_banner = re.search(rb"(?m)=+ Step \d+/\d+ =+\s*$", head) is not None
    sections = sum(m in head for m in (b"Training Results:", b"Total step time:", b"Performance Metrics:",
                                       b"Validation Results:", b"Starting validation at step"))
    if has_banner and sections:
        return True
    # a log that is still setting up: NeMo-RL's setup banners and logger lines name it
    return name.endswith((".log", ".out", ".txt")) and (
        b"SETUP COMPLETE" in head or b"nemo_rl" in head) and (has_banner or b"Setting up compute cluster" in head)


def sample() -> Sample:
    """One step block with Ray worker noise, and a validation inside it."""
    return Sample.file("nemo_rl.log", (
        "\n========================= Step 1/2 =========================\n"
        "▶ Preparing batch...\n"
        "(DTensorPolicyWorker pid=7) INFO training\n"
        "▶ Starting validation at step 1...\n"
        "\n📊 Validation Results:\n    • Accuracy: 0.2500\n\n"
        "  ⏱️  Validation Timing:\n    • Total validation time: 2.00s\n"
        "\n📊 Training Results:\n  • Loss: 0.0100\n  • Avg Reward: 0.5000\n"
        "  • Mean Generation Length: 300.0000\n"
        "\n⏱️  Timing:\n  • Total step time: 10.00s\n  • generation: 6.00s (60.0%)\n"
        "\n🔍 Performance Metrics:\n  • Throughputs (per GPU):\n    - E2E (Tokens/sec/gpu): 100.00\n"
    ).encode())


FORMAT = Format(
    name="nemo-rl-console",
    priority=40,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="NeMo-RL console output: '===== Step N/M =====' blocks with Training Results, Timing "
                "and Performance Metrics",
)
