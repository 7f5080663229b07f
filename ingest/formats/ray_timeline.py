"""A Ray timeline (`ray.timeline(filename=...)`, verl's timeline_json_file): Chrome-trace events of every Ray worker.

verl's main_ppo writes it at the end of a run when ray_init.timeline_json_file (verl 0.4.1, 0.5.0)
or ray_kwargs.timeline_json_file (0.6.1 to 0.9.1) is set.

Ray writes a JSON array of complete ("X") events, ts and dur in microseconds. Two layouts exist
(ray 2.60 checked): ray.timeline() from GCS profile events names the node and the worker in
pid and tid themselves ("10.0.0.1", "worker:50fab4e8..."); the dashboard's task-event dump
numbers them and names them in process_name/thread_name metadata ("M") events ("Node
10.0.0.1", "worker:..."). Either way one span per task execution has cat `task::<Class>.<method>`
(an actor method) or `task::<function>` (a task); its phases (task:deserialize_arguments,
task:execute, task:store_outputs) and the driver's submit_task events are not kept. A
{"traceEvents": [...]} document is read too.

verl calls its workers' methods through a colocated WorkerDict as `<role>_<method>`
(actor_rollout_generate_sequences, ref_compute_ref_log_prob, critic_update_critic ...), and the
async rollout as AgentLoopWorker.generate_sequences; the method gives the stage under verl's
timing_s/<stage> name (ingest/rl_stages.py). The file is streamed in chunks of events (trace_events.EventStream)
and only task spans are kept, each in a few shared strings and two floats; Ray's GCS keeps 100,000
task events by default (RAY_task_events_max_num_task_in_gcs), so a timeline of more than
MAX_SPANS task spans is refused rather than held.

Steps are inferred from the trainer's own calls: verl's step k ends with its update round
(update_actor, or update_critic during critic warmup) and starts with the last rollout round
(generate_sequences) before that update; calls that start together on several workers are one
round. Step k is every span from its rollout round's start to the next step's, so a validation
rollout and a checkpoint save after step k's update belong to step k, and the setup and a
validation before the first step have no step (NULL). Steps are numbered 1, 2, ... in trace
order (a resumed run's steps start at 1 again). Without both kinds of round no step is inferred.
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import re
import zlib
from bisect import bisect_right
from pathlib import Path
from typing import Any, BinaryIO

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.rl_stages import stage_of
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import Budget, max_inflate_bytes, open_stream
from polytrace.ingest.trace_events import EventStream

TASK = "task::"
ROLLOUT, UPDATES = "gen", ("update_actor", "update_critic")
SPAN_TYPES = {"step": pa.int32(), "node": pa.string(), "worker": pa.string(), "actor": pa.string(),
              "name": pa.string(), "stage": pa.string(), "ts_us": pa.float64(), "dur_us": pa.float64()}
# Ten times what Ray's GCS keeps by default: more is no timeline Ray wrote, and is not held
MAX_SPANS = 1_000_000
RAY_MARKERS = re.compile(rb'"cat"\s*:\s*"(?:task:|submit_task)|"tid"\s*:\s*"(?:worker|driver):'
                         rb'|"name"\s*:\s*"(?:worker|driver):')


class Event(msgspec.Struct):
    ph: str = ""
    cat: str = ""
    name: str = ""
    pid: str | int | None = None
    tid: str | int | None = None
    ts: float | None = None
    dur: float | None = None
    args: dict[str, Any] | None = None


class _Meta(msgspec.Struct):
    """The keys of a {"traceEvents": [...]} document besides its events: none is read."""


class _Document(io.RawIOBase):
    """A top-level JSON array of events read as the document {"traceEvents": [...]}."""

    def __init__(self, inner: BinaryIO):
        self._parts = [io.BytesIO(b'{"traceEvents":'), inner, io.BytesIO(b"}")]

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        while self._parts:
            got = self._parts[0].readinto(buffer)
            if got:
                return got
            self._parts.pop(0)
        return 0


class _Spans:
    """The task spans of a stream of event chunks, with the names the metadata events give."""

    def __init__(self, path: Path):
        self.path, self.seen = path, 0
        self.nodes: dict = {}
        self.workers: dict = {}
        self.cols: dict[str, list] = {k: [] for k in ("pid", "tid", "actor", "name", "stage", "ts_us", "dur_us")}
        self._shared: dict = {}

    def add(self, chunk: list[Event]) -> None:
        cols, share = self.cols, self._share
        for e in chunk:
            self.seen += 1
            if e.ph == "M" and e.args and isinstance(e.args.get("name"), str):
                if e.name == "process_name":
                    self.nodes[e.pid] = e.args["name"].removeprefix("Node ")
                elif e.name == "thread_name":
                    self.workers[(e.pid, e.tid)] = e.args["name"]
            if e.ph != "X" or not e.cat.startswith(TASK):
                continue
            if e.ts is None or e.dur is None or not (math.isfinite(e.ts) and math.isfinite(e.dur)) or e.dur < 0:
                raise IngestError(self.path, f"event {self.seen} ({e.cat}): ts and dur must be finite, dur >= 0")
            if len(cols["name"]) >= MAX_SPANS:
                raise IngestError(self.path, f"more than {MAX_SPANS:,} task spans: more than ten times what "
                                             "Ray keeps (100,000 task events by default), not a Ray timeline")
            actor, _, method = e.cat[len(TASK):].rpartition(".")
            cols["pid"].append(share(e.pid))
            cols["tid"].append(share(e.tid))
            cols["actor"].append(share(actor or None))
            cols["name"].append(share(method))
            cols["stage"].append(stage_of(method))
            cols["ts_us"].append(e.ts)
            cols["dur_us"].append(e.dur)

    def _share(self, value):
        """One object for each distinct name: a million spans of a few workers hold a few strings."""
        return self._shared.setdefault(value, value)

    def columns(self) -> dict[str, list]:
        """The ray_spans columns but step: pids and tids named as the metadata events name them."""
        cols = self.cols
        pids, tids = cols.pop("pid"), cols.pop("tid")
        cols["node"] = [self.nodes.get(p, None if p is None else str(p)) for p in pids]
        cols["worker"] = [self.workers.get((p, t), None if t is None else str(t)) for p, t in zip(pids, tids)]
        return cols


def spans(path: Path) -> dict[str, list]:
    """The timeline's task spans, streamed: a JSON array of events or a {"traceEvents": [...]}."""
    found = _Spans(path)
    try:
        with open_stream(path) as raw:
            head = raw.peek(4096)[:4096].lstrip()
            if not head:
                raise IngestError(path, "empty file")
            if looks_binary(head):
                raise IngestError(path, "binary data, not a Ray timeline")
            stream = _Document(raw) if head.startswith(b"[") else raw
            for chunk in EventStream(stream, path, (Event,), _Meta, Budget(max_inflate_bytes())):
                found.add(chunk)
    except (OSError, EOFError, zlib.error) as e:
        raise IngestError(path, f"corrupt or truncated data ({e})") from None
    except UnicodeDecodeError:
        raise IngestError(path, "not UTF-8 text") from None
    return found.columns()


def rounds(starts_ends: list[tuple[float, float]]) -> list[float]:
    """Start of each round: calls that start before the previous ones have all ended run together."""
    found, end = [], -math.inf
    for start, stop in sorted(starts_ends):
        if start >= end:
            found.append(start)
        end = max(end, stop) if start < end else stop
    return found


def step_starts(cols: dict[str, list]) -> list[float]:
    """Where each training step starts: the last rollout round before each update round."""
    def of(stages) -> list[float]:
        return rounds([(t, t + d) for t, d, s in zip(cols["ts_us"], cols["dur_us"], cols["stage"])
                       if s in stages])

    rollouts, updates = of((ROLLOUT,)), of(UPDATES)
    starts, after = [], -math.inf
    for update in updates:
        before = [r for r in rollouts if after <= r < update]
        if before:
            starts.append(before[-1])
        after = update
    return starts


def steps(cols: dict[str, list]) -> list[int | None]:
    """Each span's step: how many step starts are at or before its start (None: before the first)."""
    starts = step_starts(cols)
    return [bisect_right(starts, ts) or None for ts in cols["ts_us"]]


def parse(path: Path) -> Parsed:
    cols = spans(path)
    if not cols["name"]:
        raise IngestError(path, "no task span (cat task::...) in the Ray timeline")
    cols["step"] = steps(cols)
    warnings = [] if any(s is not None for s in cols["step"]) else [
        "no training step inferred (no rollout round followed by an update round): calls have no step"]
    return Parsed(tables={"ray_spans": table(cols, SPAN_TYPES)}, warnings=warnings)


def sniff(head: bytes, name: str) -> bool:
    text = head.lstrip()
    return text.startswith((b"[", b"{")) and not looks_binary(head) and bool(RAY_MARKERS.search(head))


def sample() -> Sample:
    """Two verl steps on two workers of one node, as ray.timeline() writes them: a setup call,
    each step's rollout, log-prob and update rounds, and the phases Ray records inside a call."""
    def span(tid: int, method: str, ts: float, dur: float) -> list[dict]:
        worker = "worker:" + hashlib.sha224(str(tid).encode()).hexdigest()  # a 56-hex worker id
        cat = f"{TASK}WorkerDict.actor_rollout_{method}"
        name = f"actor_rollout_{method}"
        return [{"cat": cat, "name": name, "pid": "10.0.0.1", "tid": worker, "ts": ts, "dur": dur,
                 "ph": "X", "cname": "generic_work", "args": {"name": name, "task_id": f"{tid}{ts:.0f}"}},
                {"cat": "task:execute", "name": "task:execute", "pid": "10.0.0.1", "tid": worker,
                 "ts": ts + 1, "dur": dur - 2, "ph": "X", "cname": "rail_animation", "args": {}}]

    trace = [e for tid in (1, 2) for method, ts, dur in (
        ("init_model", 0, 500), ("generate_sequences", 1000, 3000 + 1000 * tid),
        ("compute_log_prob", 6000, 800), ("update_actor", 7000, 1500),
        ("generate_sequences", 10000, 2000 * tid), ("compute_log_prob", 15000, 700),
        ("update_actor", 16000, 1500)) for e in span(tid, method, ts, dur)]
    return Sample.file("timeline.json", json.dumps(trace).encode())


FORMAT = Format(
    name="ray-timeline",
    priority=65,
    sniff=sniff,
    parse=parse,
    sample=sample,
    description="Ray timeline (ray.timeline(), verl's ray_init.timeline_json_file): one span per task "
                "or actor-method call",
)
