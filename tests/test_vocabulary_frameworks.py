"""The OpenRLHF, slime and ROLL mapping files: every canonical name mapped or said not logged, in the form docs/frameworks.md documents."""
from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

VOCABULARY = Path(__file__).resolve().parents[1] / "store" / "vocabulary"
FRAMEWORKS = ["openrlhf", "slime", "roll"]
CANONICAL = tomllib.loads((VOCABULARY / "canonical.toml").read_text())


def mapping(framework: str) -> dict:
    return tomllib.loads((VOCABULARY / f"{framework}.toml").read_text())


def covered(name: str, not_logged: dict) -> bool:
    return name in not_logged or any(
        key.endswith("*") and name.startswith(key[:-1]) for key in not_logged)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_every_canonical_name_is_mapped_or_not_logged(framework):
    m = mapping(framework)
    metrics, not_logged = m.get("metric", {}), m.get("not_logged", {})
    assert [n for n in CANONICAL if n not in metrics and not covered(n, not_logged)] == []
    # a name is one or the other, and nothing outside the vocabulary is mapped
    assert [n for n in metrics if covered(n, not_logged)] == []
    assert [n for n in metrics if n not in CANONICAL] == []
    assert all(not key.endswith("*") or any(n.startswith(key[:-1]) for n in CANONICAL)
               for key in not_logged)


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_mapping_file_form(framework):
    m = mapping(framework)
    assert m["framework"] == framework
    assert {"display", "repo", "commit", "license", "signature"} <= m.keys()
    assert len(m["commit"]) == 40 and m["signature"]
    for name, entry in m["metric"].items():
        assert set(entry) <= {"keys", "scale", "aggregation", "source", "combine"}, name
        assert entry["keys"] and all(isinstance(k, str) for k in entry["keys"]), name
        assert isinstance(entry["scale"], float) and entry["aggregation"] and entry["source"], name
        assert entry.get("combine", "sum") == "sum", name
    assert all(isinstance(why, str) and why for why in m["not_logged"].values())


def test_signatures_tell_the_three_apart():
    """No framework's signature key is one another framework maps: detection by the most
    signature keys present cannot pick the wrong one of these three."""
    for framework in FRAMEWORKS:
        others = {k for f in FRAMEWORKS if f != framework
                  for entry in mapping(f)["metric"].values() for k in entry["keys"]}
        signature = mapping(framework)["signature"]
        assert [s for s in signature if any(o == s or (s.endswith("/") and o.startswith(s))
                                            for o in others)] == []
