"""networkx's dag_longest_path over edge arrays (ingest/longest_path.py): by hand where Kahn's
order decides between equal sums, and its two ways (chains summed in numpy, node by node) against
each other and against networkx itself on random graphs full of equal sums."""
from __future__ import annotations

import random

import networkx as nx
import numpy as np
import pytest

from polytrace.ingest.longest_path import Chains, _node_by_node, longest_path


def _path(n, edges):
    u, v, w = (np.array(c, dtype=dt) for c, dt in zip(zip(*edges), (np.int64, np.int64, np.float64)))
    return longest_path(n, u, v, w)


@pytest.mark.parametrize("weight", [5.0, 5.5])
def test_equal_sums_in_one_generation_go_to_the_earlier_root(weight):
    # roots 0 and 1 (by number), 1 -> 3 added first: 2 and 3 both sum to `weight` in generation 1;
    # Kahn's order readies 2 (from root 0) before 3, so the path is 0 -> 2, the second edge
    assert _path(4, [(1, 3, weight), (0, 2, weight)]) == [1]


@pytest.mark.parametrize("weight", [5.0, 5.5])
def test_equal_sums_from_one_node_go_to_its_earlier_successor(weight):
    # 0's successors in edge order: 2, then 1; both end a path of `weight`
    assert _path(3, [(0, 2, weight), (0, 1, weight)]) == [0]


def test_a_later_generation_loses_a_tie_and_a_negative_sum_restarts():
    # 0 -> 1 (4) -> 2 (0): 1 and 2 both sum to 4, and 1 comes a generation earlier;
    # 3 -> 4 weighs -0.5: the sum at 4 would be negative, so a path would start at 4 instead
    assert _path(5, [(0, 1, 4.0), (1, 2, 0.0), (3, 4, -0.5)]) == [0]
    # a weight of -1 or less counts 0
    assert _path(3, [(0, 1, -3.0), (1, 2, 2.0)]) == [0, 1]


def test_a_cycle_is_refused_both_ways():
    for weight in (1.0, 1.5):
        with pytest.raises(ValueError, match="cycle"):
            _path(3, [(0, 1, weight), (1, 2, weight), (2, 1, weight)])
    with pytest.raises(ValueError, match="cycle"):
        _path(2, [(0, 1, 1.0), (1, 0, 1.0)])


def _random_dag(rng, n):
    """Chains and branches over a shuffled node order, weights mostly 0-3 so that sums tie."""
    rank = list(range(n))
    rng.shuffle(rank)
    pairs = set()
    for i in range(1, n):
        pairs.add((rng.randrange(i), i))
        if rng.random() < 0.3:
            pairs.add((rng.randrange(i), i))
    edges = [(rank[a], rank[b], float(rng.choice([0, 0, 1, 2, 3]))) for a, b in pairs]
    rng.shuffle(edges)
    return edges


def _networkx(n, edges):
    g = nx.DiGraph()
    g.add_nodes_from(sorted({x for e in edges for x in e[:2]}, key=[x for e in edges for x in e[:2]].index))
    for a, b, w in edges:
        g.add_edge(a, b, weight=w)
    nodes = nx.dag_longest_path(g, weight="weight")
    index = {(a, b): i for i, (a, b, _) in enumerate(edges)}
    return [index[pair] for pair in zip(nodes, nodes[1:])]


def test_both_ways_and_networkx_agree_on_random_graphs():
    rng = random.Random(7)
    for trial in range(300):
        n = rng.randrange(2, 40)
        edges = _random_dag(rng, n)
        used = sorted({x for e in edges for x in e[:2]}, key=[x for e in edges for x in e[:2]].index)
        # renumber nodes by first appearance, as the critical path's graph does
        number = {x: i for i, x in enumerate(used)}
        edges = [(number[a], number[b], w) for a, b, w in edges]
        u, v, w = (np.array(c) for c in zip(*edges))
        u, v, w = u.astype(np.int64), v.astype(np.int64), w.astype(np.float64)
        chains = Chains(len(used), u, v, w).path()
        assert chains == _node_by_node(len(used), u, v, w) == _networkx(len(used), edges), trial


def test_deciders_nested_too_deep_fall_back_to_kahn_node_by_node(monkeypatch):
    def too_deep(self, a, b):
        raise RecursionError

    monkeypatch.setattr("polytrace.ingest.longest_path._Kahn.before", too_deep)
    assert _path(4, [(1, 3, 5.0), (0, 2, 5.0)]) == [1]
