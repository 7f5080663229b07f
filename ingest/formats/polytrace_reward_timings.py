"""PolyTrace reward timings: reward_timings_step_N.jsonl, one line per rank with its reward (sandbox) seconds."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pyarrow as pa

from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, Parsed
from polytrace.ingest.formats.polytrace_packed import Length, SmallInt, decode_lines
from polytrace.ingest.sniffing import first_line_keys

Seconds = Annotated[float, msgspec.Meta(ge=0)]
Tokens = Annotated[int, msgspec.Meta(ge=0)]


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

TYPES = {
    "step": pa.int32(), "rank": pa.int32(), "dp_rank": pa.int32(), "tp_rank": pa.int32(),
    "stage": pa.string(), "seconds": pa.float64(), "batch_size": pa.int32(), "tokens": pa.int64(),
}


def sniff(head: bytes, name: str) -> bool:
    return {"step", "reward_time_s"} <= first_line_keys(head)


def stage(line: RewardLine) -> str:
    # A validation pass is a different workload from training; keep it out of the `reward` stage.
    return "val_reward" if line.validate else "reward"


def parse(path: Path) -> Parsed:
    lines = decode_lines(_decoder, path)
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
    return Parsed(tables={"rank_stage": pa.table({k: from_list(v, TYPES[k]) for k, v in cols.items()})})


FORMAT = Format(
    name="polytrace-reward-timings",
    priority=50,
    sniff=sniff,
    parse=parse,
    description="PolyTrace reward_timings_step_N.jsonl: per-rank reward seconds, batch size and "
                "response tokens -> rank_stage (stage 'reward'; validation lines 'val_reward')",
)
