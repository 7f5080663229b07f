"""AReaL's session tracer (perf_tracer.session_tracer.enabled): `sessions-r{rank}.jsonl`, one line per rollout session.

Read from the writer in inclusionAI/AReaL@4aef98d8d818af55b43621aaadba047ae10f4e77 (Apache-2.0),
areal/utils/perf_tracer.py SessionRecord.default_field_specs and docs/en/best_practices/
perf_profiling.md: each line has task_id (a dataset item), session_id (one generated sample),
rank, status (accepted, rejected, failed, dropped), reason (omitted when None), submit_ts and
finalized_ts (time.time() seconds), total_s / generate_s / reward_s / toolcall_s, and phases
{"generate": [{"start_ts", "end_ts"}, ...], "reward": [...], "toolcall": [...]}. The workflow
executor marks a session rejected with reason "returned_none" or "rejected" (should_accept) and
failed with "workflow_exception" (areal/infra/workflow_executor.py).

Each line becomes a `trajectories` row: enqueue_ts = submit_ts, gen_start_ts / gen_end_ts = the
first generate phase's start and the last one's end (a multi-turn session has one per turn, so
they are not resumes), ready_ts = finalized_ts. The tracer records no policy version and no
training step: step and versions stay NULL (the rollout dump's head_version/tail_version hold
versions), so these rows feed async_lifecycle, not the per-step staleness. Status: rejected ->
filtered, failed and dropped -> failed, with AReaL's reason.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sniffing import first_line, looks_binary
from polytrace.ingest.sources import check_utf8, line_blocks

TYPES = {"trajectory_id": pa.string(), "enqueue_ts": pa.float64(), "gen_start_ts": pa.float64(),
         "gen_end_ts": pa.float64(), "ready_ts": pa.float64(), "status": pa.string(),
         "reason": pa.string()}
STATUS = {"accepted": "accepted", "rejected": "filtered", "failed": "failed", "dropped": "failed"}


class Span(msgspec.Struct):
    start_ts: float | None = None
    end_ts: float | None = None


class Session(msgspec.Struct):
    task_id: int
    session_id: int
    status: str
    submit_ts: float | None = None
    finalized_ts: float | None = None
    reason: str | None = None
    phases: dict[str, list[Span]] = {}


_decoder = msgspec.json.Decoder(Session)


def reason(s: Session) -> str | None:
    """AReaL's reason; a dropped session (failed here) says it was dropped."""
    if s.status != "dropped":
        return s.reason
    return f"dropped: {s.reason}" if s.reason else "dropped"


def parse(path: Path) -> Parsed:
    cols: dict[str, list] = {k: [] for k in TYPES}
    pending = 0
    for offset, block in line_blocks(path):
        if offset == 0 and looks_binary(block[:4096]):
            raise IngestError(path, "binary data, not an AReaL session trace")
        check_utf8(block, path, offset)
        try:
            sessions = _decoder.decode_lines(block)
        except msgspec.DecodeError as e:
            raise IngestError(path, f"not an AReaL session line ({e})") from None
        for s in sessions:
            if s.status not in STATUS:  # still pending when the tracer flushed
                pending += 1
                continue
            gen = [p for p in s.phases.get("generate", []) if p.start_ts is not None]
            ends = [p.end_ts for p in gen if p.end_ts is not None]
            values = (f"{s.task_id}:{s.session_id}", s.submit_ts, gen[0].start_ts if gen else None,
                      max(ends) if ends else None, s.finalized_ts, STATUS[s.status], reason(s))
            for col, v in zip(TYPES, values):
                cols[col].append(v)
    if not cols["status"]:
        raise IngestError(path, "no finished session line")
    warnings = [f"{pending} session(s) still pending left out"] if pending else []
    return Parsed(tables={"trajectories": table(cols, TYPES)}, run={"framework": "areal"}, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    if looks_binary(head):
        return False
    try:
        obj: Any = json.loads(first_line(head))
    except (ValueError, RecursionError):
        return False
    return isinstance(obj, dict) and {"task_id", "session_id", "status", "submit_ts"} <= set(obj)


def sample() -> Sample:
    """Three sessions of one task in the writer's field order: accepted (two generate phases, a
    multi-turn sample), rejected by should_accept, and failed in the workflow."""
    rows = [
        {"task_id": 23, "session_id": 93, "rank": 0, "status": "accepted", "submit_ts": 100.0,
         "finalized_ts": 104.0, "total_s": 4.0, "generate_s": 3.0, "reward_s": 0.5, "toolcall_s": 0.0,
         "phases": {"generate": [{"start_ts": 100.5, "end_ts": 102.0}, {"start_ts": 102.0, "end_ts": 103.5}],
                    "reward": [{"start_ts": 103.5, "end_ts": 104.0}], "toolcall": []}},
        {"task_id": 23, "session_id": 94, "rank": 0, "status": "rejected", "reason": "rejected",
         "submit_ts": 100.0, "finalized_ts": 103.0, "total_s": 3.0, "generate_s": 2.0, "reward_s": 0.5,
         "toolcall_s": 0.0, "phases": {"generate": [{"start_ts": 100.5, "end_ts": 102.5}],
                                       "reward": [{"start_ts": 102.5, "end_ts": 103.0}], "toolcall": []}},
        {"task_id": 23, "session_id": 95, "rank": 0, "status": "failed", "reason": "workflow_exception",
         "submit_ts": 100.0, "finalized_ts": 101.0, "total_s": 1.0, "generate_s": 0.0, "reward_s": 0.0,
         "toolcall_s": 0.0, "phases": {"generate": [], "reward": [], "toolcall": []}},
    ]
    return Sample.file("sessions-r0.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode())


FORMAT = Format(
    name="areal-sessions",
    priority=50,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="AReaL session tracer sessions-r{rank}.jsonl: one {task_id, session_id, status, submit_ts, "
                "finalized_ts, phases} line per rollout session",
)
