"""networkx's dag_longest_path (networkx/algorithms/dag.py) over a graph given as edge arrays, as
HTA's critical path calls it: nodes taken in Kahn's order by generations (roots in node order;
then each generation in the order its nodes became ready), a node's sum the greatest over its
predecessors in their order (the first of equal ones), a negative sum restarting the path at the
node, and the first node with the greatest sum in that order as the path's end. A weight of -1 or
less counts 0.

Nodes are 0..n-1; edges u[i] -> v[i] weigh w[i], in the order their neighbour lists keep. The
answer is the path's edge indices in order.

Two ways give that path. When every weight is a whole number below 2**52 (a trace's times in whole
microseconds, as HTA rounds them), sums are exact in any order, nothing is negative, and the graph is
mostly chains (a node whose only successor has it as its only predecessor: 94% of the edges of a
training step's graph); each chain is then summed in numpy and only the graph of chains walked in
Python. Otherwise, node by node.
"""
from __future__ import annotations

import numpy as np

EXACT_BELOW = 2.0**52


def longest_path(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> list[int]:
    if not n:
        return []
    w = np.where(w <= -1, 0.0, w)
    whole = bool((w >= 0).all() and (w == np.floor(w)).all()) and w.sum() < EXACT_BELOW
    return Chains(n, u, v, w).path() if whole else _node_by_node(n, u, v, w)


class _Lists:
    """Each node's successors and predecessors in edge order, as flat Python lists."""

    def __init__(self, n: int, u: np.ndarray, v: np.ndarray):
        by_u, by_v = np.argsort(u, kind="stable"), np.argsort(v, kind="stable")
        self.indegree = np.bincount(v, minlength=n)
        self.outdegree = np.bincount(u, minlength=n)
        self.succ_at = np.concatenate(([0], np.cumsum(self.outdegree))).tolist()
        self.pred_at = np.concatenate(([0], np.cumsum(self.indegree))).tolist()
        self.by_u, self.by_v = by_u, by_v
        self.succ, self.pred = v[by_u].tolist(), u[by_v].tolist()


def _node_by_node(n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray) -> list[int]:
    """Kahn's order and the sums in one loop: a node's sum is taken when its last predecessor is done."""
    g = _Lists(n, u, v)
    succ, succ_at, pred, pred_at = g.succ, g.succ_at, g.pred, g.pred_at
    succ_weight, succ_edge = w[g.by_u].tolist(), g.by_u.tolist()
    pred_weight, pred_edge = w[g.by_v].tolist(), g.by_v.tolist()
    generation = np.flatnonzero(g.indegree == 0).tolist()
    single = (g.indegree == 1).tolist()
    indegree = g.indegree.tolist()
    length = [0.0] * n  # of the longest path that ends at the node
    came_by = [-1] * n  # its last edge; -1 where the path starts at the node
    order: list[int] = []
    while generation:
        order += generation
        following = []
        for a in generation:
            from_a = length[a]
            for j in range(succ_at[a], succ_at[a + 1]):
                b = succ[j]
                indegree[b] -= 1
                if indegree[b]:
                    continue
                following.append(b)
                if single[b]:
                    best, best_edge = from_a + succ_weight[j], succ_edge[j]
                else:
                    lo = pred_at[b]
                    best, best_edge = length[pred[lo]] + pred_weight[lo], pred_edge[lo]
                    for k in range(lo + 1, pred_at[b + 1]):
                        value = length[pred[k]] + pred_weight[k]
                        if value > best:
                            best, best_edge = value, pred_edge[k]
                if best >= 0:
                    length[b], came_by[b] = best, best_edge
        generation = following
    if len(order) != n:
        raise ValueError("the critical-path graph has a cycle")
    end = order[int(np.argmax(np.array(length)[order]))]
    return _back_from(end, came_by, u.tolist())


def _back_from(end: int, came_by: list[int], u: list[int]) -> list[int]:
    path = []
    while came_by[end] >= 0:
        path.append(came_by[end])
        end = u[came_by[end]]
    return path[::-1]


class Chains:
    """The graph as chains: a link is an edge whose tail has no other successor and whose head no
    other predecessor; a chain is a maximal run of links (a lone node is a chain of one), so every
    other edge runs from a chain's last node to another chain's first."""

    def __init__(self, n: int, u: np.ndarray, v: np.ndarray, w: np.ndarray):
        self.n, self.u, self.v, self.w = n, u, v, w
        self.g = _Lists(n, u, v)
        link = (self.g.outdegree[u] == 1) & (self.g.indegree[v] == 1)
        self.link_into = np.full(n, -1, np.int64)
        self.link_into[v[link]] = np.flatnonzero(link)
        self.head, self.depth, self.along = self._ranked()
        last = np.ones(n, dtype=bool)
        last[u[link]] = False
        self.last = np.zeros(n, np.int64)  # each chain's last node, by its head
        self.last[self.head[last]] = np.flatnonzero(last)

    def _ranked(self) -> tuple[np.ndarray, ...]:
        """Each node's chain head, its distance from it and the sum of the links between them, by
        pointer doubling (the sums exact: whole numbers)."""
        inside = self.link_into >= 0
        back = np.arange(self.n)
        back[inside] = self.u[self.link_into[inside]]
        depth = inside.astype(np.int64)
        along = np.zeros(self.n)
        along[inside] = self.w[self.link_into[inside]]
        for _ in range(int(np.log2(self.n)) + 2):
            depth, along, back = depth + depth[back], along + along[back], back[back]
        if (back[back] != back).any():  # a ring of links: no node starts it
            raise ValueError("the critical-path graph has a cycle")
        return back, depth, along

    def path(self) -> list[int]:
        g, head, along, depth = self.g, self.head, self.along.tolist(), self.depth.tolist()
        pred, pred_at, succ, succ_at = g.pred, g.pred_at, g.succ, g.succ_at
        pred_weight, pred_edge = self.w[g.by_v].tolist(), g.by_v.tolist()
        head_of, last = head.tolist(), self.last.tolist()
        waiting = g.indegree.tolist()
        ready = np.flatnonzero((head == np.arange(self.n)) & (g.indegree == 0)).tolist()
        start = [0.0] * self.n  # the path's sum at each chain's head
        start_gen = [0] * self.n  # the head's generation in Kahn's order
        came_by = self.link_into.tolist()  # a head's best edge in, -1 where the path starts at it
        chains = 0
        while ready:
            h = ready.pop()
            chains += 1
            lo, hi = pred_at[h], pred_at[h + 1]
            if lo < hi:
                best, best_edge, gen = -1.0, -1, 0
                for k in range(lo, hi):
                    a = pred[k]
                    value = start[head_of[a]] + along[a] + pred_weight[k]
                    if value > best:
                        best, best_edge = value, pred_edge[k]
                    gen = max(gen, start_gen[head_of[a]] + depth[a] + 1)
                start[h], came_by[h], start_gen[h] = best, best_edge, gen
            end = last[h]
            for b in succ[succ_at[end]:succ_at[end + 1]]:
                waiting[b] -= 1
                if not waiting[b]:
                    ready.append(b)
        if chains != int((head == np.arange(self.n)).sum()):
            raise ValueError("the critical-path graph has a cycle")
        self.gen = np.array(start_gen)[head] + self.depth
        length = np.array(start)[head] + self.along
        ends = np.flatnonzero(length == length.max())
        ends = ends[self.gen[ends] == self.gen[ends].min()]
        end, kahn = int(ends[0]), _Kahn(self)
        try:
            for other in ends[1:].tolist():
                if kahn.before(other, end):
                    end = other
        except RecursionError:  # deciders nested past Python's stack: Kahn's order node by node
            return _node_by_node(self.n, self.u, self.v, self.w)
        return _back_from(end, came_by, self.u.tolist())


class _Kahn:
    """Which of two nodes of one generation comes first in Kahn's order: the one whose deciding
    predecessor (the last of the previous generation's to finish) came first, or, for one
    predecessor, the one earlier in its successors; roots by number."""

    def __init__(self, chains: Chains):
        self.g, self.gen = chains.g, chains.gen.tolist()
        self.deciders: dict[int, int] = {}

    def before(self, a: int, b: int) -> bool:
        while a != b:
            if self.gen[a] == 0:
                return a < b
            da, db = self.decider(a), self.decider(b)
            if da == db:
                return self._place(da, a) < self._place(da, b)
            a, b = da, db
        return False

    def decider(self, v: int) -> int:
        if v not in self.deciders:
            g = self.g
            pred = [a for a in g.pred[g.pred_at[v]:g.pred_at[v + 1]] if self.gen[a] == self.gen[v] - 1]
            last = pred[0]
            for a in pred[1:]:
                if self.before(last, a):
                    last = a
            self.deciders[v] = last
        return self.deciders[v]

    def _place(self, a: int, b: int) -> int:
        return self.g.succ[self.g.succ_at[a]:self.g.succ_at[a + 1]].index(b)
