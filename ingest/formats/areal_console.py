"""AReaL console output: the StatsLogger's per-step stats tables (`│ key │ value │ ...`).

The shape is read from inclusionAI/AReaL@4aef98d (Apache-2.0): StatsLogger.commit
(areal/utils/stats_logger.py:133-159) logs `Epoch e/E Step s/S Train step N/T done.`, then for
each dict of the step `Stats (i/n):` and the dict as a table (print_stats, :161-162), which
areal/utils/printing.py tabulate_stats draws with tabulate's fancy_grid: four key/value pairs a
row, column-major, values as `.4e`; `__count` keys are dropped first (:148). Every line is
prefixed by AReaL's logger (`(AReaL) <time> StatsLogger INFO: `, coloured on a terminal:
areal/utils/logging.py:13-21); the table's own lines follow the message's first line bare.

The keys in the table are exactly the keys sent to W&B and TensorBoard, so they are stored as
they are. The step is the one W&B and TensorBoard get: log_step + i, where log_step is the
0-based global_step (the printed `Train step N` is global_step + 1) and i counts the dicts of
one commit (`Stats (i/n)`). Values are printed to 5 significant digits.

Noise (other loggers' lines, Ray prefixes, ANSI colours, progress bars, tables that no
`Stats (i/n):` line announced) is skipped.
"""
from __future__ import annotations

import re
from pathlib import Path

from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.logged_dicts import clean, number
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import line_blocks
from polytrace.ingest.step_metrics import StepMetrics

TRAIN_STEP = re.compile(r"Train step (\d+)/\d+ done\.")
STATS = re.compile(r"StatsLogger \w+: Stats \((\d+)/(\d+)\):")
TOP, BOTTOM, CELL = "╒", "╘", "│"


class Tables:
    """Reads an AReaL log line by line; `metrics` collects each announced table's pairs."""

    def __init__(self) -> None:
        self.metrics = StepMetrics(verl_timing=False)
        self.global_step: int | None = None  # 0-based, from the last 'Train step N/T done.'
        self.pending: int | None = None      # the step of the table a 'Stats (i/n):' announced
        self.step: int | None = None         # the step of the table being read
        self.unplaced = 0

    def feed(self, raw: str) -> None:
        line = clean(raw).strip()
        if not line:
            return
        if self.step is not None:
            if line.startswith(CELL) and line.endswith(CELL):
                self.row(line)
                return
            if line.startswith(BOTTOM) or not line.startswith(("├", "╞")):
                self.step = None
            if line.startswith(BOTTOM):
                return
        if m := TRAIN_STEP.search(line):
            self.global_step = int(m.group(1)) - 1
        elif m := STATS.search(line):
            if self.global_step is None:
                self.unplaced += 1
                self.pending = None
            else:
                self.pending = self.global_step + int(m.group(1)) - 1
        elif line.startswith(TOP) and self.pending is not None:
            self.step, self.pending = self.pending, None
            self.metrics.add(self.step, {})

    def row(self, line: str) -> None:
        cells = [c.strip() for c in line.strip(CELL).split(CELL)]
        values = {}
        for key, text in zip(cells[0::2], cells[1::2]):
            value = number(text)
            if key and value is not None:
                values[key] = value
        self.metrics.steps[self.step].update(values)


def parse(path: Path) -> Parsed:
    reader = Tables()
    for offset, block in line_blocks(path):
        if not offset and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not an AReaL console log")
        for raw in block.decode("utf-8", errors="replace").split("\n"):
            reader.feed(raw)
    steps = {s: v for s, v in reader.metrics.steps.items() if v}
    if not steps:
        raise IngestError(path, "no AReaL stats table ('Stats (i/n):' then '│ key │ value │' rows) found")
    reader.metrics.steps = steps
    warnings = [f"{reader.unplaced} stats table(s) before any 'Train step N/T done.' line were skipped"] \
        if reader.unplaced else []
    return reader.metrics.parsed("stats table", run={"framework": "areal"}, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    if b"StatsLogger" in head and (b"Train step " in head or b"Stats (" in head):
        return True
    return name.endswith((".log", ".out", ".txt")) and b"(AReaL)" in head


def sample() -> Sample:
    """One step's table between AReaL's logger lines, with colour codes on the header."""
    return Sample.file("areal.log", (
        "\x1b[1;38;2;180;140;80m(AReaL)\x1b[0m 20261205-09:00:00.000 StatsLogger INFO: "
        "Epoch 1/1 Step 1/2 Train step 1/2 done.\n"
        "(AReaL) 20261205-09:00:00.001 StatsLogger INFO: Stats (1/1):\n"
        "(AReaL) 20261205-09:00:00.002 StatsLogger INFO: \n"
        "╒══════════════════╤════════════╤═══════════════════════════╤════════════╕\n"
        "│ timeperf/rollout │ 6.0000e+00 │ ppo_actor/update/grad_norm │ 2.5000e-01 │\n"
        "├──────────────────┼────────────┼───────────────────────────┼────────────┤\n"
        "│ timeperf/train_step │ 2.0000e+00 │                           │            │\n"
        "╘══════════════════╧════════════╧═══════════════════════════╧════════════╛\n"
    ).encode())


FORMAT = Format(
    name="areal-console",
    priority=40,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="AReaL console output: StatsLogger's per-step '│ key │ value │' tables",
)
