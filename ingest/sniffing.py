"""Cheap checks on a file's first bytes that formats use to claim it."""
from __future__ import annotations

import json
import re

_KEY = re.compile(rb'"([A-Za-z_][A-Za-z0-9_/]*)"\s*:')


def first_line(head: bytes) -> bytes:
    return head.lstrip().split(b"\n", 1)[0].strip()


def first_line_keys(head: bytes) -> set[str]:
    """Keys of the JSON object on the first line; quoted keys seen so far if it is cut."""
    line = first_line(head)
    if not line.startswith(b"{"):
        return set()
    try:
        obj = json.loads(line)
        return set(obj) if isinstance(obj, dict) else set()
    except (ValueError, RecursionError):  # deep nesting is a bad file, not a crash
        return {m.decode() for m in _KEY.findall(line)}


def looks_binary(head: bytes) -> bool:
    return b"\x00" in head[:4096]
