"""PolyTrace DAPO filter indices: dapo_filter_indices.jsonl, which prompts of each step were kept and used."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated

import msgspec
import pyarrow as pa

from polytrace.ingest.columns import from_list
from polytrace.ingest.contract import Format, IngestError, Parsed
from polytrace.ingest.formats.polytrace_packed import SmallInt, decode_lines
from polytrace.ingest.sniffing import first_line_keys

# a step's generation batch; the bound keeps a corrupt count from expanding into billions of rows
Count = Annotated[int, msgspec.Meta(ge=0, le=10_000_000)]


class FilterLine(msgspec.Struct):
    workload_step: SmallInt
    prompt_count: Count
    kept_prompt_indices: list[int]
    used_prompt_indices: list[int]


_decoder = msgspec.json.Decoder(FilterLine)


def sniff(head: bytes, name: str) -> bool:
    return {"workload_step", "kept_prompt_indices"} <= first_line_keys(head)


def _index_set(indices: list[int], line: FilterLine, what: str, where: str) -> set[int]:
    bad = [i for i in indices if not 0 <= i < line.prompt_count]
    if bad:
        raise IngestError(f"{where}: {what} index {bad[0]} of step {line.workload_step} is outside "
                          f"0..{line.prompt_count - 1} (prompt_count {line.prompt_count})")
    return set(indices)


def parse(path: Path) -> Parsed:
    lines = decode_lines(_decoder, path)
    steps, prompts, kept, used = [], [], [], []
    warnings = []
    seen = set()
    for n, line in enumerate(lines, 1):
        where = f"{path.name} record {n}"
        if line.workload_step in seen:
            raise IngestError(f"{where}: step {line.workload_step} appears twice")
        seen.add(line.workload_step)
        kept_set = _index_set(line.kept_prompt_indices, line, "kept", where)
        used_set = _index_set(line.used_prompt_indices, line, "used", where)
        if not used_set <= kept_set:
            warnings.append(f"step {line.workload_step}: {len(used_set - kept_set)} used prompt(s) "
                            "were not kept by the filter")
        steps.extend([line.workload_step] * line.prompt_count)
        prompts.extend(range(line.prompt_count))
        kept.extend(i in kept_set for i in range(line.prompt_count))
        used.extend(i in used_set for i in range(line.prompt_count))
    table = pa.table({
        "step": from_list(steps, pa.int32()), "prompt_id": from_list(prompts, pa.int32()),
        "kept": from_list(kept, pa.bool_()), "used": from_list(used, pa.bool_()),
    })
    return Parsed(tables={"sample_filter": table}, warnings=warnings)


FORMAT = Format(
    name="polytrace-filter",
    priority=50,
    sniff=sniff,
    parse=parse,
    description="PolyTrace dapo_filter_indices.jsonl: sets samples.kept/used per prompt of each "
                "workload_step (ingest together with that step's packed lengths)",
)
