"""Byte-level and JSON-level mutations, and hostile containers (bombs, path traversal)."""
from __future__ import annotations

import copy
import gzip
import io
import json
import random
import zipfile
from functools import lru_cache

MEGABYTE = 1 << 20
# The corpus runs with POLYTRACE_MAX_INFLATE_BYTES at this value, so bombs fail fast.
INFLATE_LIMIT = 16 * MEGABYTE
DEEP = 100_000


# --- random byte mutations: the result may happen to be valid -----------------------------

def truncate(data: bytes, rng: random.Random) -> bytes:
    return data[:rng.randrange(len(data))] if data else data


def flip(data: bytes, rng: random.Random) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 8)):
        if out:
            out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
    return bytes(out)


def insert_random(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(len(data) + 1)
    return data[:at] + rng.randbytes(rng.randint(1, 16)) + data[at:]


def insert_token(data: bytes, rng: random.Random) -> bytes:
    """A JSON/CSV-significant token at a random place."""
    token = rng.choice([b"{", b"}", b"[", b"]", b",", b":", b'"', b"\n", b"-", b"null", b"1e999",
                        b"-0", b"\\", b"\r\n", b"\t", b"NaN", b"\"\\ud800\""])
    at = rng.randrange(len(data) + 1)
    return data[:at] + token + data[at:]


def delete_chunk(data: bytes, rng: random.Random) -> bytes:
    if len(data) < 2:
        return b""
    a = rng.randrange(len(data))
    return data[:a] + data[a + rng.randint(1, min(64, len(data) - a)):]


def duplicate_chunk(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    a = rng.randrange(len(data))
    b = min(len(data), a + rng.randint(1, 64))
    return data[:b] + data[a:b] + data[b:]


def shuffle_lines(data: bytes, rng: random.Random) -> bytes:
    lines = data.split(b"\n")
    rng.shuffle(lines)
    return b"\n".join(lines)


RANDOM = [truncate, flip, insert_random, insert_token, delete_chunk, duplicate_chunk, shuffle_lines]


# --- designed-invalid bytes: always a bad input -------------------------------------------

def garbage(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randint(1, 2048)) + b"\x00"


def non_utf8(data: bytes, rng: random.Random) -> bytes:
    """Invalid UTF-8 inside the first line (inside a string value where there is one)."""
    quote = data.find(b'"', 1)
    at = quote + 1 if 0 < quote < data.find(b"\n") else rng.randrange(1, max(2, data.find(b"\n")))
    return data[:at] + rng.choice([b"\xff\xfe", b"\xc3\x28", b"\xed\xa0\x80", b"\x80"]) + data[at:]


def nul_bytes(data: bytes, rng: random.Random) -> bytes:
    at = rng.randrange(1, max(2, len(data) // 2))
    return data[:at] + b"\x00" * rng.randint(1, 4) + data[at:]


def gzip_truncated(data: bytes, rng: random.Random) -> bytes:
    packed = gzip.compress(data, mtime=0)
    return packed[:rng.randrange(2, len(packed) - 8)]


@lru_cache(maxsize=None)
def _zeros_member(size: int = MEGABYTE) -> bytes:
    return gzip.compress(b"\0" * size, compresslevel=9, mtime=0)


def gzip_bomb(head: bytes, inflated: int = 256 * MEGABYTE) -> bytes:
    """Valid data, then ~`inflated` bytes of NULs in 1 MiB gzip members (~1 KiB each on disk)."""
    return gzip.compress(head, mtime=0) + _zeros_member() * (inflated // MEGABYTE)


@lru_cache(maxsize=None)
def zip_bomb(member: str = "traces/rank0.json", inflated: int = 4 * INFLATE_LIMIT) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        with zf.open(member, "w", force_zip64=True) as f:
            f.write(b'{"traceEvents": [')
            block = b" " * MEGABYTE
            for _ in range(inflated // MEGABYTE):
                f.write(block)
    return buf.getvalue()


def deep(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def mega_string(rng: random.Random) -> str:
    return rng.choice("ab\u00e9\u4e2d") * MEGABYTE


# --- typed JSON mutations: set one field of one record to a bad value ----------------------

BAD_VALUES = {
    "negative": -1,
    "huge": 2**64 + 1,
    "huge_float": "1e999",          # a literal, spliced in raw: out of range for a float
    "string": "12",
    "null": None,
    "object": {"x": 1},
    "list": [1],
    "fraction": 1.5,
    "bool": True,
    "int32_overflow": 2**31,
}


def set_path(obj, path: tuple, value):
    """A copy of `obj` with `value` at `path` (keys and list indices)."""
    out = copy.deepcopy(obj)
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out


def dumps_with(obj, path: tuple, kind: str, rng: random.Random) -> bytes:
    """`obj` as JSON with a bad value of `kind` at `path`; raw kinds are spliced as text."""
    raw = {"huge_float": "1e999", "deep": deep(), "nan": "NaN"}.get(kind)
    if kind == "megastring":
        return json.dumps(set_path(obj, path, mega_string(rng))).encode()
    if raw is None:
        return json.dumps(set_path(obj, path, BAD_VALUES[kind])).encode()
    marker = "__polytrace_corpus_marker__"
    return json.dumps(set_path(obj, path, marker)).replace(f'"{marker}"', raw).encode()


def replace_record(records: list, index: int, line: bytes) -> bytes:
    lines = [json.dumps(r).encode() for r in records]
    lines[index] = line
    return b"\n".join(lines) + b"\n"

