"""The server's number formatter against the vectors it shares with the charts' (format.js, whose
side is tests/test_charts.py): one number, one fmt tag, one text on every page."""
from __future__ import annotations

import json

import pytest

from polytrace.queries.catalog import FMT_KINDS
from polytrace.server.headlines import fmt
from tests.conftest import FIXTURES

VECTORS = json.loads((FIXTURES / "fmt_vectors.json").read_text())["vectors"]


@pytest.mark.parametrize("v", VECTORS, ids=lambda v: f"{v['fmt']}-{v['value']}")
def test_headlines_write_each_vector(v):
    assert fmt(v["fmt"], v["value"]) == v["text"]


def test_the_vectors_cover_every_fmt_tag_and_none():
    assert {v["fmt"] for v in VECTORS} == {*FMT_KINDS, None}
