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

from polytrace.ingest.columns import from_list

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
    name: array = field(default_factory=lambda: array("l"))
    thread: array = field(default_factory=lambda: array("l"))
    ts: array = field(default_factory=lambda: array("d"))
    dur: array = field(default_factory=lambda: array("d"))
    stream: array = field(default_factory=lambda: array("q"))
    corr: array = field(default_factory=lambda: array("q"))
    wait_stream: array = field(default_factory=lambda: array("q"))
    wait_record: array = field(default_factory=lambda: array("q"))
    names: dict[str, int] = field(default_factory=dict)
    threads: dict[tuple, int] = field(default_factory=dict)

    def add(self, kind: int, name: str, pid, tid, ts: float, dur: float, stream: int = -1, corr: int = -1,
            wait_stream: int = -1, wait_record: int = -1) -> None:
        self.kind.append(kind)
        self.name.append(self.names.setdefault(name, len(self.names)))
        self.thread.append(self.threads.setdefault((pid, tid), len(self.threads)))
        self.ts.append(ts)
        self.dur.append(dur)
        self.stream.append(stream)
        self.corr.append(corr)
        self.wait_stream.append(wait_stream)
        self.wait_record.append(wait_record)

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
    """One window's critical path: its edges in order as (type, bound, event name or None, track,
    start us, weight us), the track being the CPU thread or GPU stream the edge's event ran on."""

    window: Window
    edges: list[tuple[int, int, str | None, str, float, float]]
    events: int
    span: float  # from the path's first node to its last (us): its length plus the time it waited

    @property
    def length(self) -> float:
        return sum(e[5] for e in self.edges)

    def by_bound(self, bound: int) -> float:
        return sum(e[5] for e in self.edges if e[1] == bound)


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
        self.gpu_sync = np.isin(self.text, list(GPU_SIDE_SYNCS))
        self.partner = self._partners()
        self.kept = self._last_step_dropped()
        self.queue = self._queue_lengths()
        self.previous_launch = self._record_previous_launch()
        self.next_launch = self._wait_next_launch()
        self.node_kind = np.isin(self.kind, NODE_KINDS) | ((self.stream != -1) & (self.partner >= 0))
        self.cpu_kept = self.kept & (self.stream == -1) & (self.dur > 0)
        self.gpu_kept = np.flatnonzero(self.kept & (self.stream != -1) & (self.partner >= 0))
        self.stream_waits = self.kept & (self.text == "Stream Wait Event")
        # The graph's loops look events up one at a time, where a list costs a tenth of numpy's
        # scalar indexing: node 2i is event i's start, 2i+1 its end.
        self.times = np.column_stack((self.ts, self.ts + self.dur)).ravel().tolist()
        self.durs, self.texts = self.dur.tolist(), self.text.tolist()
        self.kinds, self.streams = self.kind.tolist(), self.stream.tolist()
        self.partners, self.queues = self.partner.tolist(), self.queue.tolist()

    def track(self, i: int) -> str:
        """Where event i ran: its GPU stream, or its CPU thread."""
        if self.streams[i] >= 0:
            return f"stream {self.streams[i]}"
        return f"thread {self.tids[self.thread[i]]}"

    def _partners(self) -> np.ndarray:
        n = len(self.kind)
        partner = np.full(n, -1, dtype=np.int64)
        gpu_side = ((self.stream >= 0) & (self.corr >= 0)) | self.gpu_sync
        cpu_rows = {}
        for i in np.flatnonzero((self.corr != -1) & ~gpu_side).tolist():
            cpu_rows[int(self.corr[i])] = i
        for i in np.flatnonzero((self.corr != -1) & gpu_side).tolist():
            j = cpu_rows.get(int(self.corr[i]))
            if j is not None:
                partner[i], partner[j] = j, i
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
        mask = self.kept & np.isin(self.text, list(LAUNCHES)) & (self.partner > 0)
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
        records = np.flatnonzero(self.kept & (self.text == "cudaEventRecord"))
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
        waits = np.flatnonzero(self.kept & (self.text == "cudaStreamWaitEvent") & (self.partner > 0))
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


class Graph:
    """HTA's CPGraph for one window: nodes 2i (start of event i) and 2i+1 (its end); edges in
    insertion order, a second edge between the same nodes replacing the first (networkx)."""

    def __init__(self, p: Prepared, nodes: np.ndarray):
        self.p = p
        self.nodes = set(np.flatnonzero(nodes).tolist())  # the events that have nodes
        self.edges: dict[tuple[int, int], tuple[float, int, int]] = {}
        self.succ: dict[int, list[int]] = {}
        self.pred: dict[int, list[int]] = {}

    def time(self, node: int) -> float:
        return self.p.times[node]

    def add(self, u: int, v: int, kind: int, attributed: int = -1, zero: bool = False) -> None:
        times = self.p.times
        weight = 0.0 if zero or kind in (DEPENDENCY, SYNC_DEPENDENCY) else times[v] - times[u]
        edge = (u, v)
        if edge not in self.edges:
            succ, pred = self.succ, self.pred
            if u in succ:
                succ[u].append(v)
            else:
                succ[u], pred[u] = [v], []
            if v in pred:
                pred[v].append(u)
            else:
                succ[v], pred[v] = [], [u]
        self.edges[edge] = (weight, kind, attributed)

    def longest_path(self) -> list[int]:
        """networkx dag_longest_path: Kahn's order by generations, the first best predecessor,
        negative sums restarting at 0, the first node with the greatest sum as the end."""
        indegree = {v: len(us) for v, us in self.pred.items()}
        generation = [v for v in self.succ if indegree[v] == 0]
        order = []
        while generation:
            order += generation
            following = []
            for u in generation:
                for v in self.succ[u]:
                    indegree[v] -= 1
                    if indegree[v] == 0:
                        following.append(v)
            generation = following
        if len(order) != len(self.succ):
            raise ValueError("the critical-path graph has a cycle")
        edges, pred = self.edges, self.pred
        length: dict[int, float] = {}  # of the longest path that ends at the node
        came_from: dict[int, int] = {}  # its last edge's first node; the node itself where it starts
        for v in order:
            best, best_u, first = 0.0, v, True
            for u in pred[v]:
                w = edges[u, v][0]
                value = length[u] + (0.0 if w <= -1 else w)
                if first or value > best:
                    best, best_u, first = value, u, False
            length[v], came_from[v] = (best, best_u) if best >= 0 else (0.0, v)
        if not length:
            return []
        path = [max(length, key=length.__getitem__)]
        while came_from[path[-1]] != path[-1]:
            path.append(came_from[path[-1]])
        return path[::-1]


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
    """HTA's event set of a window: CPU events that start inside it, the GPU events their launches
    made (wherever they ran), and every Stream Wait Event."""
    cpu = p.cpu_kept & (p.ts >= w.start) & (p.ts <= w.end)
    launched = np.zeros(len(cpu), dtype=bool)
    launched[p.gpu_kept] = cpu[p.partner[p.gpu_kept]]
    return cpu | launched | p.stream_waits


def _cpu_edges(g: Graph, clipped: np.ndarray) -> None:
    """Each CPU thread's call tree as a chain of operator edges, top-level operators joined by
    dependency edges (_construct_graph_from_call_stack)."""
    p = g.p
    rows = np.flatnonzero(clipped)
    for thread in np.unique(p.thread[rows]).tolist():
        mine = rows[p.thread[rows] == thread]
        if (p.stream[mine] > 0).any():
            continue
        _thread_edges(g, _call_tree(p, mine.tolist()))


def _call_tree(p: Prepared, rows: list[int]) -> tuple[dict[int, list[int]], dict[int, int]]:
    """Children and parent of each event by HTA's ordering of starts and ends: by time; at one
    time ends before starts, longer events start first and shorter ones end first, then by order
    in the trace. An end pops the top of the stack, whatever it is."""
    marks = []
    times, durs = p.times, p.durs
    for i in rows:
        ts, dur = times[2 * i], durs[i]
        marks.append((ts, 1, -dur, i, i))
        marks.append((ts + dur, 0, dur, -i, i))
    marks.sort()
    children: dict[int, list[int]] = {-1: []}
    parent, stack = {}, []
    for _, is_start, _, _, i in marks:
        if is_start:
            top = stack[-1] if stack else -1
            parent[i] = top
            children.setdefault(top, []).append(i)
            children.setdefault(i, [])
            stack.append(i)
        elif stack:
            stack.pop()
    return children, parent


def _thread_edges(g: Graph, tree: tuple[dict[int, list[int]], dict[int, int]]) -> None:
    children, parent = tree
    p = g.p
    last = last_top = None
    last_parent, depth = -1, 0
    todo = [(c, True) for c in reversed(children[-1])]
    while todo:
        e, entering = todo.pop()
        node = e in g.nodes
        if entering:
            todo.append((e, False))
            todo += [(c, True) for c in reversed(children[e])]
            if not node:
                continue
            if depth == 0 and last_top is not None:
                g.add(last_top, 2 * e, DEPENDENCY)
            depth += 1
            if last is not None:
                g.add(last, 2 * e, OPERATOR, (last >> 1) if not last & 1 else last_parent)
            last, last_parent = 2 * e, parent[e]
        elif node:
            depth -= 1
            blocking = p.texts[e] in BLOCKING
            attributed = (last >> 1) if not last & 1 else e
            g.add(last, 2 * e + 1, OPERATOR, attributed, zero=blocking)
            if depth == 0:
                last, last_top = None, 2 * e + 1
            else:
                last, last_parent = 2 * e + 1, parent[e]


def _gpu_edges(g: Graph, clipped: np.ndarray) -> None:
    """Kernel spans, launch delays, kernel-to-kernel gaps and syncs, in the order the GPU events
    ran (a sync at its end) (_construct_graph_from_kernels)."""
    p = g.p
    rows = np.flatnonzero(clipped & ((p.stream != -1) | p.gpu_sync) & (p.partner >= 0))
    key = np.where(p.kind[rows] == SYNC, p.ts[rows] + p.dur[rows], p.ts[rows])
    last_node: dict[int, int] = {}
    waits_for: dict[int, int] = {}
    for k in rows[np.argsort(key, kind="stable")].tolist():
        if p.kinds[k] == SYNC:
            _sync_edges(g, k, last_node, waits_for)
            continue
        stream = p.streams[k]
        g.add(2 * k, 2 * k + 1, OPERATOR, k)
        src = waits_for.pop(k, None)
        if src is not None and src in g.nodes:
            g.add(2 * src + 1, 2 * k, SYNC_DEPENDENCY)
        else:
            src = None
        runtime = p.partners[k]
        launched_at = g.time(2 * runtime)
        prev = last_node.get(stream)
        if p.queues[runtime] == 1 and p.queues[k] == 0 and (prev is None or g.time(prev) < launched_at) \
                and (src is None or g.time(2 * src + 1) < launched_at) and runtime in g.nodes:
            g.add(2 * runtime, 2 * k, LAUNCH_DELAY)
        elif prev is not None and (src is None or g.time(2 * src + 1) < g.time(prev)):
            g.add(prev, 2 * k, KERNEL_KERNEL, prev >> 1)
        last_node[stream] = 2 * k + 1


def _sync_edges(g: Graph, y: int, last_node: dict[int, int], waits_for: dict[int, int]) -> None:
    p = g.p
    caller = p.partners[y]
    if caller not in g.nodes:
        return
    kind = p.texts[y]
    if kind == "Context Sync":
        for node in list(last_node.values()):
            g.add(node, 2 * caller + 1, SYNC_DEPENDENCY)
    elif kind == "Stream Sync":
        node = last_node.get(p.streams[y])
        if node is not None:
            g.add(node, 2 * caller + 1, SYNC_DEPENDENCY)
    elif kind in ("Event Sync", "Stream Wait Event"):
        launch = p.previous_launch.get(int(p.wait_record[y]))
        if launch is None:
            return
        src = p.partners[launch]
        if kind == "Event Sync":
            if src in g.nodes:
                g.add(2 * src + 1, 2 * caller + 1, SYNC_DEPENDENCY)
        elif caller in p.next_launch:
            waits_for[p.partners[p.next_launch[caller]]] = src


def _bound(p: Prepared, kind: int, attributed: int) -> int:
    if kind == KERNEL_KERNEL:
        return KERNEL_OVERHEAD
    if kind == LAUNCH_DELAY:
        return LAUNCH_OVERHEAD
    if kind != OPERATOR:
        return NO_BOUND
    if attributed < 0 or p.streams[attributed] < 0:
        return CPU
    return GPU_COMMUNICATION if _NCCL_KERNEL.match(p.texts[attributed]) else GPU_COMPUTE


def critical_path(p: Prepared, w: Window) -> Path:
    clipped = _clipped(p, w)
    nodes = clipped & p.node_kind
    g = Graph(p, nodes)
    _cpu_edges(g, clipped)
    _gpu_edges(g, clipped)
    path = g.longest_path()
    edges = []
    for u, v in zip(path, path[1:]):
        weight, kind, attributed = g.edges[(u, v)]
        event = attributed if attributed >= 0 else (v >> 1 if kind == LAUNCH_DELAY else u >> 1)
        edges.append((kind, _bound(p, kind, attributed), p.texts[event] if attributed >= 0 or kind == LAUNCH_DELAY
                      else None, p.track(event), g.time(u), weight))
    span = g.time(path[-1]) - g.time(path[0]) if path else 0.0
    return Path(w, edges, len({n >> 1 for n in path}), span)


def critical_paths(timeline: Timeline, limit: int = 64) -> list[Path]:
    """The critical path of each window of the trace (see windows) that has one."""
    if not len(timeline):
        return []
    p = Prepared(timeline)
    return [path for path in (critical_path(p, w) for w in windows(p, limit)) if path.edges]


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
    rows, edges = [], []
    for rank, path in paths:
        w = path.window
        rows.append((rank, w.name, w.instance, w.step, w.start, w.end - w.start, path.length, path.span,
                     *(path.by_bound(b) for b in (CPU, GPU_COMPUTE, GPU_COMMUNICATION, LAUNCH_OVERHEAD,
                                                  KERNEL_OVERHEAD)),
                     path.events, len(path.edges)))
        edges += [(rank, w.name, w.instance, seq, EDGE_TYPES[kind], BOUNDS[bound] or None, name, track, ts, weight)
                  for seq, (kind, bound, name, track, ts, weight) in enumerate(path.edges)]
    return {"critical_paths": _table(PATH_COLUMNS, rows), "critical_path_edges": _table(EDGE_COLUMNS, edges)}


def _table(columns: dict[str, pa.DataType], rows: list[tuple]) -> pa.Table:
    return pa.table({name: from_list([r[i] for r in rows], kind) for i, (name, kind) in enumerate(columns.items())})
