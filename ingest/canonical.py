"""Arrow types of the canonical columns (see store/schema.sql), and tables built from Python columns."""
from __future__ import annotations

import pyarrow as pa

from polytrace.columns import from_list

KEY_TYPES = {"step": pa.int32(), "prompt_id": pa.int32(), "sample_id": pa.int32()}
SAMPLE_TYPES = {
    **KEY_TYPES,
    "rank": pa.int32(), "dp_rank": pa.int32(), "tp_rank": pa.int32(),
    "prompt_len": pa.int32(), "response_len": pa.int32(), "truncated": pa.bool_(),
    "validate": pa.bool_(), "kept": pa.bool_(), "used": pa.bool_(),
    "turn_count": pa.int32(), "tool_call_count": pa.int32(),
    "finish_reason": pa.string(), "reward": pa.float64(),
}
TURN_TYPES = {
    **KEY_TYPES,
    "turn": pa.int32(), "prompt_tokens": pa.int32(), "cached_tokens": pa.int32(),
    "completion_tokens": pa.int32(), "engine_latency_s": pa.float64(),
    "finish_reason": pa.string(), "tool_call_count": pa.int32(),
}
TOOL_TYPES = {
    **KEY_TYPES,
    "turn": pa.int32(), "tool_name": pa.string(), "latency_s": pa.float64(),
    "status": pa.string(), "response_tokens": pa.int32(), "query_count": pa.int32(),
}
RANK_STAGE_TYPES = {
    "step": pa.int32(), "rank": pa.int32(), "dp_rank": pa.int32(), "tp_rank": pa.int32(),
    "stage": pa.string(), "seconds": pa.float64(), "batch_size": pa.int32(), "tokens": pa.int64(),
}


def table(cols: dict[str, list], types: dict[str, pa.DataType]) -> pa.Table:
    """Columns (lists or numpy arrays) as an Arrow table of their canonical types."""
    return pa.table({k: from_list(v, types[k]) for k, v in cols.items()})


def samples_table(cols: dict[str, list]) -> pa.Table:
    return table(cols, SAMPLE_TYPES)
