"""Hypothesis fuzzing of every parser: arbitrary bytes and mutated seeds through the source layer
(gzip, archives) into FORMAT.parse; only IngestError may escape."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from polytrace.ingest import load, registry
from polytrace.ingest.contract import IngestError, Parsed
from tests.corpus.seeds import Seed, seeds

FORMATS = [f.name for f in registry.FORMATS]
# About 20-40 s for the whole file on a busy 2-core machine; raise POLYTRACE_FUZZ_EXAMPLES to dig deeper.
FUZZ = settings(max_examples=int(os.environ.get("POLYTRACE_FUZZ_EXAMPLES", "25")), deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
edits = st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["flip", "cut", "insert", "drop"]),
                           st.binary(min_size=1, max_size=8)), min_size=1, max_size=4)


def parse_files(fmt: str, seed: Seed, target: str, data: bytes) -> None:
    """Write the seed with `target` replaced by `data`, open its path arguments as an ingest
    does, and parse every input."""
    root = Path(tempfile.mkdtemp(prefix="polytrace-fuzz-"))
    try:
        for rel, body in {**seed.files, target: data}.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(body)
        try:
            with load.collected([root / p for p in seed.paths], fmt if seed.forced else None) as inputs:
                for f in inputs:
                    parsed, _ = load.parse_input(f.path, f.format.name, f.label)
                    assert isinstance(parsed, Parsed)
        except IngestError as e:
            assert str(e) and "\n" not in str(e)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def apply(data: bytes, ops) -> bytes:
    for at, op, chunk in ops:
        i = int(at * len(data))
        if op == "flip" and data:
            i = min(i, len(data) - 1)
            data = data[:i] + bytes([data[i] ^ chunk[0]]) + data[i + 1:]
        elif op == "cut":
            data = data[:i]
        elif op == "insert":
            data = data[:i] + chunk + data[i:]
        else:
            data = data[:i] + data[i + len(chunk):]
    return data


def leaf_paths(value, path=()):
    """Every path (keys and indices) inside a JSON value, containers included."""
    yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaf_paths(v, path + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaf_paths(v, path + (i,))


def replaced(record, path, value):
    if not path:
        return value
    copy = json.loads(json.dumps(record))
    node = copy
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return copy


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_arbitrary_bytes(fmt, data):
    seed = data.draw(st.sampled_from(seeds()[fmt]))
    target = data.draw(st.sampled_from(sorted(k for k in seed.files if not k.endswith(".txt"))))
    parse_files(fmt, seed, target, data.draw(st.binary(max_size=2048)))


@pytest.mark.parametrize("fmt", FORMATS)
@FUZZ
@given(data=st.data())
def test_mutated_seed_bytes(fmt, data):
    seed = data.draw(st.sampled_from(seeds()[fmt]))
    target = data.draw(st.sampled_from(sorted(seed.files)))
    parse_files(fmt, seed, target, apply(seed.files[target], data.draw(edits)))


RECORD_FORMATS = [f for f in FORMATS if any(s.records for s in seeds()[f])]


@pytest.mark.parametrize("fmt", RECORD_FORMATS)
@FUZZ
@given(data=st.data())
def test_mutated_seed_fields(fmt, data):
    """Any JSON value at any place of a record (numbers of any size, wrong types, nesting)."""
    seed = next(s for s in seeds()[fmt] if s.records)
    index = data.draw(st.integers(0, len(seed.records) - 1))
    record = seed.records[index]
    path = data.draw(st.sampled_from(list(leaf_paths(record))))
    new = replaced(record, path, data.draw(json_values))
    records = [new if i == index else r for i, r in enumerate(seed.records)]
    body = "".join(json.dumps(r) + "\n" for r in records) if seed.target.endswith(".jsonl") \
        else json.dumps(records[0])
    parse_files(fmt, seed, seed.target, body.encode())
