"""PolyTrace reward timings: reward_timings_step_N.jsonl, one line per rank with its reward (sandbox) seconds."""
from __future__ import annotations

from pathlib import Path

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import RANK_STAGE_TYPES, table
from polytrace.ingest.contract import Format, Parsed, Sample
from polytrace.ingest.jsonl import Length, Seconds, SmallInt, Tokens, decode_batches, encode_lines
from polytrace.ingest.layout import run_facts
from polytrace.ingest.sniffing import first_line_keys


class RewardLine(msgspec.Struct):
    step: SmallInt
    reward_time_s: Seconds
    rank: SmallInt | None = None
    dp_rank: SmallInt | None = None
    tp_rank: SmallInt | None = None
    batch_size: Length | None = None
    response_sum: Tokens | None = None
    validate: bool | None = None


_decoder = msgspec.json.Decoder(RewardLine)


def sniff(head: bytes, name: str) -> bool:
    return {"step", "reward_time_s"} <= first_line_keys(head)


def stage(line: RewardLine) -> str:
    # A validation pass is a different workload from training; keep it out of the `reward` stage.
    return "val_reward" if line.validate else "reward"


def parse(path: Path) -> Parsed:
    batches = [_rank_stage(lines) for lines in decode_batches(_decoder, path)]
    return Parsed(tables={"rank_stage": pa.concat_tables(batches)})


def _rank_stage(lines: list[RewardLine]) -> pa.Table:
    cols = {
        "step": [x.step for x in lines],
        "rank": [x.rank for x in lines],
        "dp_rank": [x.dp_rank for x in lines],
        "tp_rank": [x.tp_rank for x in lines],
        "stage": [stage(x) for x in lines],
        "seconds": [x.reward_time_s for x in lines],
        "batch_size": [x.batch_size for x in lines],
        "tokens": [x.response_sum for x in lines],
    }
    return table(cols, RANK_STAGE_TYPES)


def sample() -> Sample:
    """Step 3's reward seconds on two ranks of two dp groups."""
    lines = [
        {"step": 3, "rank": 0, "tp_rank": 0, "dp_rank": 0, "batch_size": 4, "reward_time_s": 12.5,
         "response_sum": 4000, "response_mean": 1000.0, "response_max": 1600, "validate": False},
        {"step": 3, "rank": 4, "tp_rank": 0, "dp_rank": 1, "batch_size": 4, "reward_time_s": 20.25,
         "response_sum": 6400, "response_mean": 1600.0, "response_max": 3000, "validate": False},
    ]
    return Sample.file("reward_timings_step_3.jsonl", encode_lines(lines))


FORMAT = Format(
    name="polytrace-reward-timings",
    priority=50,
    sniff=sniff,
    parse=parse,
    sample=sample,
    run_facts=run_facts,
    description="PolyTrace reward_timings_step_N.jsonl: per-rank reward seconds, batch size and "
                "response tokens -> rank_stage (stage 'reward'; validation lines 'val_reward')",
)
