"""The critical path of a profiled window of one rank's trace, as HTA 0.5 defines it
(hta/analyzers/critical_path_analysis.py, critical_path_analysis): the chain of CPU operators,
kernel launches, GPU kernels and synchronisations whose weights add up to the most time.

The graph, in HTA's terms: every CPU operator and runtime call (cpu_op, cuda_runtime,
cuda_driver) and every GPU event launched inside the window has a start and an end node. On each
CPU thread, operators are chained in call-tree order, each edge weighing the time between its
two ends (a blocking call such as cudaStreamSynchronize weighs nothing: its time is waiting),
top-level operators joined by weightless edges. On the GPU, a kernel's own span is an edge; it
is reached from its launch (the launch delay) when the launch found the stream empty, else from
the previous kernel on its stream (the kernel-to-kernel gap). Context, stream and event syncs
join the GPU work they wait for to the end of the CPU call that waited, and cudaStreamWaitEvent
joins a kernel to the one the event recorded. The path is the longest one through this graph;
its length is the sum of its edges' weights, which leaves out the time the CPU spent waiting.

Where HTA's order is undefined (pandas' unstable sorts) the trace's own order decides. HTA's
input preparation is reproduced too: timestamps rounded inward to whole microseconds, and with
two or more ProfilerStep names, the last step and everything after it dropped.
"""
from __future__ import annotations

import re
from array import array
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

from polytrace.columns import from_list
from polytrace.ingest.longest_path import longest_path

# What a trace event is to the critical path (HTA gives nodes to the first two only)
CPU_OP, RUNTIME, ANNOTATION, OTHER_CPU, GPU, SYNC = range(6)
NODE_KINDS = (CPU_OP, RUNTIME)
# hta/common/trace_symbol_table.py get_runtime_launch_events_query (0.5)
LAUNCHES = frozenset({"cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cudaMemcpyAsync", "cudaMemsetAsync",
                      "runFunction - job_prep_and_submit_for_execution", "hipLaunchKernel", "hipExtModuleLaunchKernel",
                      "hipMemsetAsync", "hipMemcpyAsync", "hipMemcpyWithStream"})
# calls whose time is waiting, not work (critical_path_analysis.py BLOCKING_SYNC_CALLS)
BLOCKING = frozenset({"cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventQuery", "cudaEventSynchronize",
                      "cudaMemcpy", "cudaMemcpyAsync"})
GPU_SIDE_SYNCS = frozenset({"Event Sync", "Context Sync"})
OPERATOR, DEPENDENCY, LAUNCH_DELAY, KERNEL_KERNEL, SYNC_DEPENDENCY = range(5)
EDGE_TYPES = ("operator", "dependency", "launch_delay", "kernel_kernel_delay", "sync_dependency")
# what bounds each edge of the path (HTA's bound_by, without its _bound suffixes)
BOUNDS = ("cpu", "gpu_compute", "gpu_communication", "launch_overhead", "kernel_kernel_overhead", "")
CPU, GPU_COMPUTE, GPU_COMMUNICATION, LAUNCH_OVERHEAD, KERNEL_OVERHEAD, NO_BOUND = range(6)
_NCCL_KERNEL = re.compile(r"^nccl.*Kernel")
_STEP_NAME = re.compile(r"ProfilerStep")


@dataclass
class Timeline:
    """Every event with a duration of one rank's trace that the critical path can use, in the
    trace's order, as compact columns."""

    kind: array = field(default_factory=lambda: array("b"))
    name: array = field(default_factory=lambda: array("q"))
    thread: array = field(default_factory=lambda: array("q"))
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    stream: array = field(default_factory=lambda: array("q"))
    corr: array = field(default_factory=lambda: array("q"))
    wait_stream: array = field(default_factory=lambda: array("q"))
    wait_record: array = field(default_factory=lambda: array("q"))
    names: dict[str, int] = field(default_factory=dict)
    threads: dict[tuple, int] = field(default_factory=dict)

    def extend(self, kind: list[int], name: list[str], pid: list, tid: list, ts: list[float], dur: list[float],
               stream: list[int], corr: list[int], wait_stream: list[int], wait_record: list[int]) -> None:
        """Add events column by column (-1 for a stream or id an event does not have)."""
        names, threads = self.names, self.threads
        self.kind.fromlist(kind)
        # numbered in order of first appearance, through Arrow's dictionary (one lookup a distinct
        # name); its int32 indices read from their buffer (to_numpy would import pandas)
        encoded = from_list(name, pa.string()).dictionary_encode()
        ids = np.array([names.setdefault(s, len(names)) for s in encoded.dictionary.to_pylist()], np.int64)
        at = np.frombuffer(encoded.indices.buffers()[1], np.int32, len(name), 4 * encoded.indices.offset)
        self.name.frombytes(ids[at].tobytes())
        self.thread.fromlist([threads.setdefault(t, len(threads)) for t in zip(pid, tid)])
        self.ts.fromlist(ts)
        self.dur.fromlist(dur)
        self.stream.fromlist(stream)
        self.corr.fromlist(corr)
        self.wait_stream.fromlist(wait_stream)
        self.wait_record.fromlist(wait_record)

    def __len__(self) -> int:
        return len(self.kind)


@dataclass
class Window:
    name: str
    instance: int
    start: float
    end: float
    step: int | None = None


@dataclass
class Path:
    """One window's critical path: its edges in order as columns (EDGE_FIELDS): type and bound (as
    indices of EDGE_TYPES and BOUNDS), the event's name (None for a dependency), its track (the
    CPU thread or GPU stream the event ran on), start and weight in us."""

    window: Window
    edges: dict[str, np.ndarray]
    events: int
    span: float  # from the path's first node to its last (us): its length plus the time it waited

    def __len__(self) -> int:
        return len(self.edges["weight"])

    @property
    def length(self) -> float:
        return sum(self.edges["weight"].tolist())

    def by_bound(self, bound: int) -> float:
        return sum(self.edges["weight"][self.edges["bound"] == bound].tolist())


EDGE_FIELDS = ("type", "bound", "name", "track", "ts", "weight")


class Prepared:
    """The rank's events as HTA reads them, and what it looks up across the whole trace: each
    event's partner (runtime call <-> GPU event, by correlation id), launch queue lengths, the
    launch an event record follows and the launch a stream wait precedes."""

    def __init__(self, timeline: Timeline):
        names = np.array(list(timeline.names), dtype=object)
        self.names = names
        self.kind = np.frombuffer(timeline.kind, dtype=np.int8)
        self.name = np.frombuffer(timeline.name, dtype=np.int64)
        self.thread = np.frombuffer(timeline.thread, dtype=np.int64)
        self.pid = np.array([pid for pid, _ in timeline.threads], dtype=object)
        self.tids = [tid for _, tid in timeline.threads]
        raw_ts = np.frombuffer(timeline.ts, dtype=np.float64)
        raw_end = raw_ts + np.frombuffer(timeline.dur, dtype=np.float64)
        # HTA rounds a nanosecond trace inward to whole microseconds (round_down_time_stamps)
        self.ts, end = np.ceil(raw_ts), np.floor(raw_end)
        self.dur = np.maximum(end - self.ts, 0) if (raw_ts != np.floor(raw_ts)).any() else raw_end - raw_ts
        self.stream = np.frombuffer(timeline.stream, dtype=np.int64)
        self.corr = np.frombuffer(timeline.corr, dtype=np.int64)
        self.wait_stream = np.frombuffer(timeline.wait_stream, dtype=np.int64)
        self.wait_record = np.frombuffer(timeline.wait_record, dtype=np.int64)
        self.text = names[self.name] if len(names) else np.zeros(0, dtype=object)
        self.gpu_sync = self.named(GPU_SIDE_SYNCS)
        self.partner = self._partners()
        self.kept = self._last_step_dropped()
        self.queue = self._queue_lengths()
        self.previous_launch = self._record_previous_launch()
        self.next_launch = self._wait_next_launch()
        self.node_kind = np.isin(self.kind, NODE_KINDS) | ((self.stream != -1) & (self.partner >= 0))
        # a window's events are looked up by start: CPU events by their own, GPU events by their launch's
        cpu = np.flatnonzero(self.kept & (self.stream == -1) & (self.dur > 0))
        self.cpu_by_start = cpu[np.argsort(self.ts[cpu], kind="stable")]
        gpu = np.flatnonzero(self.kept & (self.stream != -1) & (self.partner >= 0))
        gpu = gpu[np.isin(self.partner[gpu], cpu)]
        self.gpu_by_launch = gpu[np.argsort(self.ts[self.partner[gpu]], kind="stable")]
        self.stream_waits = np.flatnonzero(self.kept & self.named({"Stream Wait Event"}))
        # The graph's loops look events up one at a time, where a list costs a tenth of numpy's
        # scalar indexing: node 2i is event i's start, 2i+1 its end.
        self.node_time = np.column_stack((self.ts, self.ts + self.dur)).ravel()
        self.times = self.node_time.tolist()
        self.blocking = self.named(BLOCKING)
        self.nccl = np.array([bool(_NCCL_KERNEL.match(s)) for s in names], dtype=bool)[self.name]
        self.texts = self.text.tolist()
        self.kinds, self.streams = self.kind.tolist(), self.stream.tolist()
        self.partners, self.queues = self.partner.tolist(), self.queue.tolist()

    def tracks(self, events: np.ndarray) -> np.ndarray:
        """Where each event ran: its GPU stream, or its CPU thread."""
        where = np.where(self.stream[events] >= 0, self.stream[events], -1 - self.thread[events])
        unique, at = np.unique(where, return_inverse=True)
        labels = [f"stream {s}" if s >= 0 else f"thread {self.tids[-1 - s]}" for s in unique.tolist()]
        return np.array(labels, dtype=object)[at]

    def named(self, names: set[str] | frozenset[str]) -> np.ndarray:
        """Whether each event's name is one of `names`."""
        return np.array([s in names for s in self.names.tolist()], dtype=bool)[self.name]

    def _partners(self) -> np.ndarray:
        """GPU event -> the runtime call with its correlation id (the last such call), and that
        call -> the last GPU event that names it."""
        partner = np.full(len(self.kind), -1, dtype=np.int64)
        gpu_side = ((self.stream >= 0) & (self.corr >= 0)) | self.gpu_sync
        cpu = np.flatnonzero((self.corr != -1) & ~gpu_side)
        gpu = np.flatnonzero((self.corr != -1) & gpu_side)
        corr, last = np.unique(self.corr[cpu][::-1], return_index=True)
        cpu = cpu[::-1][last]  # the last call with each correlation id, by id
        at = np.minimum(np.searchsorted(corr, self.corr[gpu]), max(len(corr) - 1, 0))
        found = (corr[at] == self.corr[gpu]) if len(corr) else np.zeros(len(gpu), dtype=bool)
        gpu, call = gpu[found], cpu[at[found]]
        partner[gpu] = call
        calls, last = np.unique(call[::-1], return_index=True)
        partner[calls] = gpu[::-1][last]
        return partner

    def _last_step_dropped(self) -> np.ndarray:
        """HTA's iteration filter: with two or more ProfilerStep names, CPU events from the last
        step's start on are dropped, and the GPU events they launched."""
        n = len(self.kind)
        steps = [i for i, s in enumerate(self.names) if _STEP_NAME.search(s)]
        if len(steps) < 2:
            return np.ones(n, dtype=bool)
        starts = self.ts[np.isin(self.name, steps) & (self.kind == ANNOTATION)]
        if not len(starts):
            return np.ones(n, dtype=bool)
        gpu_side = ((self.stream >= 0) & (self.corr >= 0)) | self.gpu_sync
        kept = ~gpu_side & (self.ts < starts.max())
        kept_corr = np.unique(self.corr[kept & (self.corr != -1)])
        return kept | (gpu_side & np.isin(self.corr, kept_corr))

    def _launches(self) -> np.ndarray:
        """Launch calls whose GPU event is in the trace, in the trace's order."""
        mask = self.kept & self.named(LAUNCHES) & (self.partner > 0)
        return np.flatnonzero(mask)

    def _queue_lengths(self) -> np.ndarray:
        """Per launch call and GPU event, the number of launched events queued on its stream just
        after it (TraceCounters._get_queue_length_time_series_for_rank); -1 for other events."""
        queue = np.full(len(self.kind), -1, dtype=np.int64)
        launches = self._launches()
        if not len(launches):
            return queue
        gpu = self.partner[launches]
        rows = np.concatenate([launches, gpu])
        streams = np.concatenate([self.stream[gpu], self.stream[gpu]])
        times = np.concatenate([self.ts[launches], self.ts[gpu]])
        signs = np.concatenate([np.ones(len(launches), np.int64), -np.ones(len(gpu), np.int64)])
        order = np.lexsort((times, streams))
        running = {}
        for row, stream, sign in zip(rows[order].tolist(), streams[order].tolist(), signs[order].tolist()):
            running[stream] = running.get(stream, 0) + sign
            queue[row] = running[stream]
        return queue

    def _record_previous_launch(self) -> dict[int, int]:
        """cudaEventRecord's correlation id -> the last launch call onto the recorded stream (of the
        same GPU) that started at or before it (_get_cuda_event_record_df)."""
        records = np.flatnonzero(self.kept & self.named({"cudaEventRecord"}))
        if not len(records):
            return {}
        waits = np.flatnonzero(self.kept & (self.wait_stream > -1) & (self.wait_record != -1))
        target = {int(self.wait_record[w]): (self.pid[self.thread[w]], int(self.wait_stream[w])) for w in waits}
        launches = self._launches()
        launches = launches[np.argsort(self.ts[launches], kind="stable")]
        by_stream: dict[tuple, tuple[list, list]] = {}
        for i in launches.tolist():
            g = self.partner[i]
            times, rows = by_stream.setdefault((self.pid[self.thread[g]], int(self.stream[g])), ([], []))
            times.append(self.ts[i])
            rows.append(i)
        out = {}
        for r in records.tolist():
            key = target.get(int(self.corr[r]))
            if key is None or key not in by_stream:
                continue
            times, rows = by_stream[key]
            at = int(np.searchsorted(times, self.ts[r], side="right")) - 1
            if at >= 0:
                out[int(self.corr[r])] = rows[at]
        return out

    def _wait_next_launch(self) -> dict[int, int]:
        """cudaStreamWaitEvent row -> the first launch call at or after it, from the same CPU
        thread, onto the waiting stream (_get_cuda_stream_wait_event_df)."""
        waits = np.flatnonzero(self.kept & self.named({"cudaStreamWaitEvent"}) & (self.partner > 0))
        if not len(waits):
            return {}
        launches = self._launches()
        launches = launches[np.argsort(self.ts[launches], kind="stable")]
        by_stream: dict[tuple, tuple[list, list]] = {}
        for i in launches.tolist():
            times, rows = by_stream.setdefault((int(self.thread[i]), int(self.stream[self.partner[i]])), ([], []))
            times.append(self.ts[i])
            rows.append(i)
        out = {}
        for w in waits.tolist():
            times, rows = by_stream.get((int(self.thread[w]), int(self.stream[self.partner[w]])), ([], []))
            at = int(np.searchsorted(times, self.ts[w], side="left"))
            if at < len(rows):
                out[w] = rows[at]
        return out


class Edges:
    """The graph's edges in the order they are added: CPU threads' chains as arrays, GPU edges one
    at a time. Node 2i is event i's start, 2i+1 its end."""

    def __init__(self, p: Prepared, nodes: np.ndarray):
        self.times = p.times
        self.node_rows = nodes  # the events that have nodes, in order
        self.nodes = set(nodes.tolist())
        self.chunks: list[tuple[np.ndarray, ...]] = []
        self.u: list[int] = []
        self.v: list[int] = []
        self.w: list[float] = []
        self.kind: list[int] = []
        self.attributed: list[int] = []

    def add(self, u: int, v: int, kind: int, attributed: int = -1) -> None:
        self.u.append(u)
        self.v.append(v)
        self.w.append(0.0 if kind in (DEPENDENCY, SYNC_DEPENDENCY) else self.times[v] - self.times[u])
        self.kind.append(kind)
        self.attributed.append(attributed)

    def columns(self) -> tuple[np.ndarray, ...]:
        one = (np.array(self.u, np.int64), np.array(self.v, np.int64), np.array(self.w, np.float64),
               np.array(self.kind, np.int64), np.array(self.attributed, np.int64))
        return tuple(np.concatenate(c) for c in zip(*self.chunks, one))


class Graph:
    """HTA's CPGraph for one window, a networkx DiGraph: a second edge between the same nodes
    replaces the first's attributes and keeps its place; nodes and each node's neighbours in the
    order their edges were first added. Nodes are renumbered 0..N-1 in that order."""

    def __init__(self, edges: Edges):
        u, v, w, kind, attributed = edges.columns()
        key = u * (max(len(edges.times), 1) + 1) + v
        _, first = np.unique(key, return_index=True)
        _, last = np.unique(key[::-1], return_index=True)
        by_first = np.argsort(first)
        first, last = first[by_first], (len(key) - 1 - last)[by_first]
        u, v = u[first], v[first]
        self.w, self.kind, self.attributed = w[last], kind[last], attributed[last]
        ends = np.column_stack((u, v)).ravel()
        ids, seen = np.unique(ends, return_index=True)
        rank = np.empty(len(ids), np.int64)
        rank[np.argsort(seen)] = np.arange(len(ids))
        self.node = ids[np.argsort(seen)]  # the original node of each renumbered one
        self.u, self.v = rank[np.searchsorted(ids, u)], rank[np.searchsorted(ids, v)]

    def longest_path(self) -> list[int]:
        """The edges of networkx's dag_longest_path, in order (ingest/longest_path.py)."""
        return longest_path(len(self.node), self.u, self.v, self.w)


WHOLE_TRACE = "(whole trace)"


def windows(p: Prepared, limit: int) -> list[Window]:
    """ProfilerStep windows; in a trace without them, the whole trace and each record_function
    range (the first `limit` by start). Instances count per name in the trace's order."""
    annotations = np.flatnonzero((p.kind == ANNOTATION) & p.kept)
    out, seen = [], {}
    steps = [i for i in annotations.tolist() if p.text[i].startswith("ProfilerStep")]
    if not steps and len(p.ts):
        out.append(Window(WHOLE_TRACE, 0, float(p.ts.min()), float((p.ts + p.dur).max())))
    for i in steps or annotations.tolist():
        name = p.text[i]
        step = None
        if steps:
            digits = re.search(r"(\d+)$", name)
            step, name = (int(digits.group(1)) if digits else None), "ProfilerStep"
        out.append(Window(name, seen.setdefault(name, 0), float(p.ts[i]), float(p.ts[i] + p.dur[i]), step))
        seen[name] += 1
    return sorted(out, key=lambda w: w.start)[:limit]


def _clipped(p: Prepared, w: Window) -> np.ndarray:
    """HTA's event set of a window, in the trace's order: CPU events that start inside it, the GPU
    events their launches made (wherever they ran), and every Stream Wait Event."""
    def starting_inside(rows: np.ndarray, starts: np.ndarray) -> np.ndarray:
        return rows[np.searchsorted(starts, w.start, "left"):np.searchsorted(starts, w.end, "right")]

    cpu = starting_inside(p.cpu_by_start, p.ts[p.cpu_by_start])
    launched = starting_inside(p.gpu_by_launch, p.ts[p.partner[p.gpu_by_launch]])
    return np.union1d(np.union1d(cpu, launched), p.stream_waits)


def _cpu_edges(p: Prepared, clipped: np.ndarray, edges: Edges) -> None:
    """Each CPU thread's call tree as a chain of operator edges, top-level operators joined by
    dependency edges (_construct_graph_from_call_stack)."""
    threads = p.thread[clipped]
    for thread in np.unique(threads).tolist():
        mine = clipped[threads == thread]
        if (p.stream[mine] > 0).any():
            continue
        chain = _thread_chain(p, mine, edges.node_rows)
        if chain.shape[1] > 1:
            edges.chunks.append(_chain_edges(p, chain))


def _thread_chain(p: Prepared, rows: np.ndarray, nodes: np.ndarray) -> np.ndarray:
    """A thread's events in HTA's walk of its call tree, events without nodes left out: rows of
    the event, whether the walk enters (1) or leaves (0) it, and its call-tree parent (-1 at the top).

    The tree comes from HTA's ordering of starts and ends: by time; at one time ends before starts,
    longer events start first and shorter ones end first, then by order in the trace. A start
    pushes its event; an end pops the top of the stack, whatever it is, or nothing from an empty
    one. The depth-first walk of that tree is the pushes and pops in this order (a pop leaving the
    event it popped), then the events never popped, the deepest first."""
    dur = p.dur[rows]
    time = np.concatenate((p.ts[rows], p.ts[rows] + dur))
    starts = np.arange(2 * len(rows)) < len(rows)
    marks = np.lexsort((np.concatenate((rows, -rows)), np.concatenate((-dur, dur)), starts, time))
    event, push = np.concatenate((rows, rows))[marks], starts[marks]
    walked = np.cumsum(np.where(push, 1, -1))
    depth = walked - np.minimum(np.minimum.accumulate(walked), 0)  # a pop from an empty stack does nothing
    before = np.concatenate(([0], depth[:-1]))
    done = push | (before > 0)
    position, event, push = np.flatnonzero(done), event[done], push[done]
    level = np.where(push, depth[done], before[done])
    by_level = np.lexsort((position, level))  # at each level: a push, its pop, the next push, ...
    popped = ~push[by_level]
    event[by_level[popped]] = event[by_level[np.flatnonzero(popped) - 1]]
    parent = _parents(event[push], level[push], position[push])
    unpopped = np.ones(len(by_level), dtype=bool)
    unpopped[np.flatnonzero(popped) - 1] = False
    unpopped &= push[by_level]
    never = by_level[unpopped]
    never = never[np.argsort(-level[never], kind="stable")]
    walk = np.concatenate((event, event[never]))
    enter = np.concatenate((push, np.zeros(len(never), dtype=bool)))
    keep = np.isin(walk, nodes)
    walk, enter = walk[keep], enter[keep]
    return np.stack((walk, enter, parent[walk]))


def _parents(event: np.ndarray, level: np.ndarray, position: np.ndarray) -> np.ndarray:
    """Per event (indexed by event number), the event on top of the stack when it was pushed:
    the latest push one level up before it."""
    span = int(position.max(initial=0)) + 1
    key = level * span + position
    order = np.argsort(key)
    at = np.searchsorted(key[order], key - span) - 1
    above = order[np.maximum(at, 0)]
    parent = np.full(int(event.max(initial=-1)) + 1, -1, np.int64)
    parent[event] = np.where((at >= 0) & (level[above] == level - 1), event[above], -1)
    return parent


def _chain_edges(p: Prepared, chain: np.ndarray) -> tuple[np.ndarray, ...]:
    """Consecutive nodes of the walk joined: by a dependency edge after a top-level operator's end,
    else by an operator edge weighing the time between them (nothing into the end of a blocking
    call), attributed to the operator it runs inside of."""
    event, enter, parent = chain
    enter = enter.astype(bool)
    node = 2 * event + ~enter
    depth = np.cumsum(np.where(enter, 1, -1))
    prev, cur = slice(None, -1), slice(1, None)
    top_end = ~enter[prev] & (depth[prev] == 0)
    weight = p.node_time[node[cur]] - p.node_time[node[prev]]
    weight[top_end | (~enter[cur] & p.blocking[event[cur]])] = 0.0
    attributed = np.where(enter[prev], event[prev], np.where(enter[cur], parent[prev], event[cur]))
    return (node[prev], node[cur], weight, np.where(top_end, DEPENDENCY, OPERATOR),
            np.where(top_end, -1, attributed))


def _gpu_edges(p: Prepared, clipped: np.ndarray, edges: Edges) -> None:
    """Kernel spans, launch delays, kernel-to-kernel gaps and syncs, in the order the GPU events
    ran (a sync at its end) (_construct_graph_from_kernels)."""
    rows = clipped[((p.stream[clipped] != -1) | p.gpu_sync[clipped]) & (p.partner[clipped] >= 0)]
    key = np.where(p.kind[rows] == SYNC, p.ts[rows] + p.dur[rows], p.ts[rows])
    last_node: dict[int, int] = {}
    waits_for: dict[int, int] = {}
    times, nodes = p.times, edges.nodes
    for k in rows[np.argsort(key, kind="stable")].tolist():
        if p.kinds[k] == SYNC:
            _sync_edges(p, edges, k, last_node, waits_for)
            continue
        stream = p.streams[k]
        edges.add(2 * k, 2 * k + 1, OPERATOR, k)
        src = waits_for.pop(k, None)
        if src is not None and src in nodes:
            edges.add(2 * src + 1, 2 * k, SYNC_DEPENDENCY)
        else:
            src = None
        runtime = p.partners[k]
        launched_at = times[2 * runtime]
        prev = last_node.get(stream)
        if p.queues[runtime] == 1 and p.queues[k] == 0 and (prev is None or times[prev] < launched_at) \
                and (src is None or times[2 * src + 1] < launched_at) and runtime in nodes:
            edges.add(2 * runtime, 2 * k, LAUNCH_DELAY)
        elif prev is not None and (src is None or times[2 * src + 1] < times[prev]):
            edges.add(prev, 2 * k, KERNEL_KERNEL, prev >> 1)
        last_node[stream] = 2 * k + 1


def _sync_edges(p: Prepared, edges: Edges, y: int, last_node: dict[int, int], waits_for: dict[int, int]) -> None:
    caller = p.partners[y]
    if caller not in edges.nodes:
        return
    kind = p.texts[y]
    if kind == "Context Sync":
        for node in list(last_node.values()):
            edges.add(node, 2 * caller + 1, SYNC_DEPENDENCY)
    elif kind == "Stream Sync":
        node = last_node.get(p.streams[y])
        if node is not None:
            edges.add(node, 2 * caller + 1, SYNC_DEPENDENCY)
    elif kind in ("Event Sync", "Stream Wait Event"):
        launch = p.previous_launch.get(int(p.wait_record[y]))
        if launch is None:
            return
        src = p.partners[launch]
        if kind == "Event Sync":
            if src in edges.nodes:
                edges.add(2 * src + 1, 2 * caller + 1, SYNC_DEPENDENCY)
        elif caller in p.next_launch:
            waits_for[p.partners[p.next_launch[caller]]] = src


def _bounds(p: Prepared, kind: np.ndarray, attributed: np.ndarray) -> np.ndarray:
    """What bounds each edge: the CPU, a GPU's compute or communication kernel (by the operator
    it is attributed to), or the overhead of a launch or between two kernels."""
    on_gpu = (attributed >= 0) & (p.stream[attributed] >= 0)
    operator = np.where(on_gpu, np.where(p.nccl[attributed], GPU_COMMUNICATION, GPU_COMPUTE), CPU)
    return np.select([kind == KERNEL_KERNEL, kind == LAUNCH_DELAY, kind == OPERATOR],
                     [KERNEL_OVERHEAD, LAUNCH_OVERHEAD, operator], NO_BOUND)


def critical_path(p: Prepared, w: Window) -> Path:
    clipped = _clipped(p, w)
    edges = Edges(p, clipped[p.node_kind[clipped]])
    _cpu_edges(p, clipped, edges)
    _gpu_edges(p, clipped, edges)
    g = Graph(edges)
    on_path = np.array(g.longest_path(), dtype=np.int64)
    u, v = g.node[g.u[on_path]], g.node[g.v[on_path]]
    kind, attributed = g.kind[on_path], g.attributed[on_path]
    event = np.where(attributed >= 0, attributed, np.where(kind == LAUNCH_DELAY, v >> 1, u >> 1))
    named = (attributed >= 0) | (kind == LAUNCH_DELAY)
    columns = dict(zip(EDGE_FIELDS, (kind, _bounds(p, kind, attributed), np.where(named, p.text[event], None),
                                     p.tracks(event), p.node_time[u], g.w[on_path])))
    if not len(on_path):
        return Path(w, columns, 0, 0.0)
    events = len(np.union1d(u >> 1, v[-1:] >> 1))
    return Path(w, columns, events, p.times[int(v[-1])] - p.times[int(u[0])])


def critical_paths(timeline: Timeline, limit: int = 64) -> list[Path]:
    """The critical path of each window of the trace (see windows) that has one."""
    if not len(timeline):
        return []
    p = Prepared(timeline)
    return [path for path in (critical_path(p, w) for w in windows(p, limit)) if len(path)]


PATH_COLUMNS = {"rank": pa.int32(), "annotation": pa.string(), "instance": pa.int32(), "step": pa.int32(),
                "ts_us": pa.float64(), "dur_us": pa.float64(), "length_us": pa.float64(), "span_us": pa.float64(),
                "cpu_us": pa.float64(), "gpu_compute_us": pa.float64(), "gpu_communication_us": pa.float64(),
                "launch_overhead_us": pa.float64(), "kernel_kernel_overhead_us": pa.float64(),
                "events": pa.int64(), "edges": pa.int64()}
EDGE_COLUMNS = {"rank": pa.int32(), "annotation": pa.string(), "instance": pa.int32(), "seq": pa.int32(),
                "type": pa.string(), "bound": pa.string(), "name": pa.string(), "track": pa.string(),
                "ts_us": pa.float64(), "dur_us": pa.float64()}


def tables(paths: list[tuple[int, Path]]) -> dict[str, pa.Table]:
    """critical_paths (one row per rank and window) and critical_path_edges (its edges in order)."""
    rows = []
    for rank, path in paths:
        w = path.window
        rows.append((rank, w.name, w.instance, w.step, w.start, w.end - w.start, path.length, path.span,
                     *(path.by_bound(b) for b in (CPU, GPU_COMPUTE, GPU_COMMUNICATION, LAUNCH_OVERHEAD,
                                                  KERNEL_OVERHEAD)),
                     path.events, len(path)))
    return {"critical_paths": _table(PATH_COLUMNS, rows), "critical_path_edges": _edge_table(paths)}


def _edge_table(paths: list[tuple[int, Path]]) -> pa.Table:
    sizes = [len(path) for _, path in paths]

    def each(values: list) -> np.ndarray:
        return np.repeat(np.array(values, dtype=object), sizes) if paths else np.zeros(0, dtype=object)

    def joined(field: str) -> np.ndarray:
        return np.concatenate([path.edges[field] for _, path in paths]) if paths else np.zeros(0)

    kinds = EDGE_COLUMNS
    columns = {
        "rank": np.repeat(np.array([r for r, _ in paths], np.int32), sizes),
        "annotation": each([p.window.name for _, p in paths]).tolist(),
        "instance": np.repeat(np.array([p.window.instance for _, p in paths], np.int32), sizes),
        "seq": np.concatenate([np.arange(n, dtype=np.int32) for n in sizes]) if paths else np.zeros(0, np.int32),
        "type": np.array(EDGE_TYPES, dtype=object)[joined("type").astype(np.int64)].tolist(),
        "bound": np.array([b or None for b in BOUNDS], dtype=object)[joined("bound").astype(np.int64)].tolist(),
        "name": joined("name").tolist(), "track": joined("track").tolist(),
        "ts_us": joined("ts").astype(np.float64), "dur_us": joined("weight").astype(np.float64)}
    return pa.table({name: from_list(columns[name], kind) for name, kind in kinds.items()})


def _table(columns: dict[str, pa.DataType], rows: list[tuple]) -> pa.Table:
    return pa.table({name: from_list([r[i] for r in rows], kind) for i, (name, kind) in enumerate(columns.items())})
