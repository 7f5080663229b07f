"""PolyTrace DAPO filter indices: dapo_filter_indices.jsonl, which prompts of each step were kept and used.

The flags land on `samples` once every input's samples are in (the after_load hook), so
the filter file is ingested together with its steps' packed_lengths_step_N.jsonl files.
"""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.jsonl import Count, SmallInt, decode_batches, encode_lines
from polytrace.ingest.layout import run_facts
from polytrace.ingest.sniffing import first_line_keys

FILTER_TYPES = {"step": pa.int32(), "prompt_id": pa.int32(), "kept": pa.bool_(), "used": pa.bool_()}


class FilterLine(msgspec.Struct):
    workload_step: SmallInt
    prompt_count: Count
    kept_prompt_indices: list[int]
    used_prompt_indices: list[int]


_decoder = msgspec.json.Decoder(FilterLine)


def sniff(head: bytes, name: str) -> bool:
    return {"workload_step", "kept_prompt_indices"} <= first_line_keys(head)


def _index_set(indices: list[int], line: FilterLine, what: str, path: Path, n: int) -> set[int]:
    bad = [i for i in indices if not 0 <= i < line.prompt_count]
    if bad:
        raise IngestError(path, f"record {n}: {what} index {bad[0]} of step {line.workload_step} is outside "
                                f"0..{line.prompt_count - 1} (prompt_count {line.prompt_count})")
    return set(indices)


def parse(path: Path) -> Parsed:
    cols: dict[str, list] = {k: [] for k in FILTER_TYPES}
    warnings = []
    seen = set()
    n = 0
    for lines in decode_batches(_decoder, path):
        for line in lines:
            n += 1
            if line.workload_step in seen:
                raise IngestError(path, f"record {n}: step {line.workload_step} appears twice")
            seen.add(line.workload_step)
            kept_set = _index_set(line.kept_prompt_indices, line, "kept", path, n)
            used_set = _index_set(line.used_prompt_indices, line, "used", path, n)
            if not used_set <= kept_set:
                warnings.append(f"step {line.workload_step}: {len(used_set - kept_set)} used prompt(s) "
                                "were not kept by the filter")
            cols["step"].extend([line.workload_step] * line.prompt_count)
            cols["prompt_id"].extend(range(line.prompt_count))
            cols["kept"].extend(i in kept_set for i in range(line.prompt_count))
            cols["used"].extend(i in used_set for i in range(line.prompt_count))
    return Parsed(deferred=table(cols, FILTER_TYPES), warnings=warnings)


def after_load(con, run_id: str, deferred: list[pa.Table]) -> Parsed:
    """Set samples.kept/used of the prompts each filter table names, by position in the step."""
    from polytrace import store  # where used: parse workers import every format, not DuckDB

    for data in deferred:
        _check_prompts(con, run_id, data)
        with store.registered(con, "_filter", data):
            con.execute(
                "UPDATE samples SET kept = f.kept, used = f.used FROM _filter f "
                "WHERE samples.run_id = ? AND samples.step = f.step AND samples.prompt_id = f.prompt_id",
                [run_id])
    return Parsed()


def _check_prompts(con, run_id: str, data: pa.Table) -> None:
    want = Counter(data.column("step").to_pylist())
    have = dict(con.execute(
        "SELECT step, count(DISTINCT prompt_id) FROM samples WHERE run_id = ? GROUP BY step",
        [run_id]).fetchall())
    missing = sorted(s for s in want if s not in have)
    if missing:
        raise IngestError(None, f"filter indices name step(s) {missing[:5]} with no packed lengths in the "
                                "same ingest (ingest the filter file together with its "
                                "packed_lengths_step_N.jsonl files)")
    # indices address prompts by file position, so a count mismatch would mark the wrong prompts
    for step in sorted(want):
        if want[step] != have[step]:
            raise IngestError(None, f"filter indices give step {step} prompt_count {want[step]} but its "
                                    f"packed lengths hold {have[step]} prompts")


def sample() -> Sample:
    """Step 0's filter (3 prompts: kept 0 and 2, used 2) with the step's packed lengths."""
    flt = {"workload_step": 0, "trainer_step": 1, "gen_batch_index": 1, "prompt_count": 3,
           "n_sampling": 2, "train_batch_size": 2, "kept_prompt_count": 2, "used_prompt_count": 1,
           "kept_prompt_indices": [0, 2], "used_prompt_indices": [2]}
    packed = [{"step": 0, "input": 8 + i, "output": [2 * i + 1, 2 * i + 2]} for i in range(3)]
    files = {"dapo_filter_indices.jsonl": encode_lines([flt]),
             "packed_lengths_step_0.jsonl": encode_lines(packed)}
    return Sample(files, tuple(files))


FORMAT = Format(
    name="polytrace-filter",
    priority=50,
    sniff=sniff,
    parse=parse,
    sample=sample,
    run_facts=run_facts,
    after_load=after_load,
    description="PolyTrace dapo_filter_indices.jsonl: sets samples.kept/used per prompt of each "
                "workload_step (ingest together with that step's packed lengths)",
)
