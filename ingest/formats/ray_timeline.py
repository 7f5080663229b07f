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
timing_s/<stage> name (STAGES). The file is read whole: Ray keeps a bounded number of task
events, so a timeline stays small next to the other traces.

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
import json
import math
import re
from bisect import bisect_right
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa

from polytrace.ingest.canonical import table
from polytrace.ingest.contract import Format, IngestError, Parsed, Sample
from polytrace.ingest.sniffing import looks_binary
from polytrace.ingest.sources import check_utf8, read_bytes

TASK = "task::"
# verl worker method (after its role prefix) -> the verl stage (timing_s/<stage>) it serves
STAGES = {
    "generate_sequences": "gen",
    "compute_rm_score": "reward",
    "compute_reward_async": "reward",
    "compute_log_prob": "old_log_prob",
    "compute_ref_log_prob": "ref",
    "compute_values": "values",
    "update_critic": "update_critic",
    "update_actor": "update_actor",
    "save_checkpoint": "save_checkpoint",
    "update_weights": "update_weights",
}
ROLLOUT, UPDATES = "gen", ("update_actor", "update_critic")
SPAN_TYPES = {"step": pa.int32(), "node": pa.string(), "worker": pa.string(), "actor": pa.string(),
              "name": pa.string(), "stage": pa.string(), "ts_us": pa.float64(), "dur_us": pa.float64()}
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


class Trace(msgspec.Struct):
    traceEvents: list[Event]


_decoder = msgspec.json.Decoder(list[Event] | Trace)


def events(data: bytes, path: Path) -> list[Event]:
    try:
        doc = _decoder.decode(data)
    except msgspec.ValidationError as e:
        raise IngestError(path, f"not a Ray timeline ({e})") from None
    except msgspec.DecodeError as e:
        raise IngestError(path, f"malformed JSON ({e})") from None
    except RecursionError:
        raise IngestError(path, "JSON nested too deeply") from None
    return doc.traceEvents if isinstance(doc, Trace) else doc


def stage_of(method: str) -> str | None:
    """The verl stage of a method, with or without its WorkerDict role prefix."""
    for name in sorted(STAGES, key=len, reverse=True):
        if method == name or method.endswith("_" + name):
            return STAGES[name]
    return None


def labels(evs: list[Event]) -> tuple[dict, dict]:
    """Node and worker names the metadata events give numbered pids and tids."""
    nodes, workers = {}, {}
    for e in evs:
        if e.ph == "M" and e.args and isinstance(e.args.get("name"), str):
            if e.name == "process_name":
                nodes[e.pid] = e.args["name"].removeprefix("Node ")
            elif e.name == "thread_name":
                workers[(e.pid, e.tid)] = e.args["name"]
    return nodes, workers


def spans(evs: list[Event], path: Path) -> dict[str, list]:
    nodes, workers = labels(evs)
    cols: dict[str, list] = {k: [] for k in SPAN_TYPES if k != "step"}
    for i, e in enumerate(evs):
        if e.ph != "X" or not e.cat.startswith(TASK):
            continue
        if e.ts is None or e.dur is None or not (math.isfinite(e.ts) and math.isfinite(e.dur)) or e.dur < 0:
            raise IngestError(path, f"event {i + 1} ({e.cat}): ts and dur must be finite, dur >= 0")
        actor, _, method = e.cat[len(TASK):].rpartition(".")
        cols["node"].append(nodes.get(e.pid, None if e.pid is None else str(e.pid)))
        cols["worker"].append(workers.get((e.pid, e.tid), None if e.tid is None else str(e.tid)))
        cols["actor"].append(actor or None)
        cols["name"].append(method)
        cols["stage"].append(stage_of(method))
        cols["ts_us"].append(e.ts)
        cols["dur_us"].append(e.dur)
    return cols


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
    data = read_bytes(path)
    if not data or data.isspace():
        raise IngestError(path, "empty file")
    if looks_binary(data[:4096]):
        raise IngestError(path, "binary data, not a Ray timeline")
    check_utf8(data, path)
    cols = spans(events(data, path), path)
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
