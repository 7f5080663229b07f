"""AReaL and NeMo-RL: their vocabulary files cover every canonical name, and their console
output (AReaL's stats tables, NeMo-RL's per-step blocks) lands in step_metrics under the keys
their trackers log to W&B and TensorBoard."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
VOCABULARY = ROOT / "store" / "vocabulary"
FIXTURES = Path(__file__).resolve().parent / "fixtures" / "frameworks"
FRAMEWORKS = ["areal", "nemo-rl"]


def load(name: str) -> dict:
    with open(VOCABULARY / f"{name}.toml", "rb") as f:
        return tomllib.load(f)


def covered(name: str, not_logged: dict) -> bool:
    return name in not_logged or any(
        k.endswith("*") and name.startswith(k[:-1]) for k in not_logged)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_canonical_name_is_mapped_or_said_not_logged(framework):
    canonical = load("canonical")
    mapping = load(framework)
    assert mapping["framework"] == framework
    metric, not_logged = mapping.get("metric", {}), mapping.get("not_logged", {})
    missing = [n for n in canonical if n not in metric and not covered(n, not_logged)]
    assert missing == []
    assert set(metric) <= set(canonical)
    assert not set(metric) & set(not_logged)
    for name, entry in metric.items():
        assert entry["keys"] and entry["source"] and entry["aggregation"], name
        assert isinstance(entry["scale"], float), name
        assert entry.get("combine", "first") in ("first", "sum"), name
    for field in ("display", "repo", "commit", "license", "signature"):
        assert mapping[field], field
    assert len(mapping["commit"]) == 40
