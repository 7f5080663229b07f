"""The corpus: for each format, designed-invalid cases plus seeded random mutations of its seeds.

A case is either designed to be invalid (`must_reject`: a negative length, a bomb, a
traversal name...) or a random mutation that may happen to stay valid. Everything is
derived from `random.Random(f"{format}:{i}")`, so a case is the same on every run.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, replace
from functools import lru_cache

from tests.corpus import mutations as m
from tests.corpus.seeds import Seed, jsonl, seeds_of, tar_gz, zip_of

CASES_PER_FORMAT = 200


@dataclass(frozen=True)
class Case:
    format: str
    kind: str
    files: dict[str, bytes]
    paths: tuple[str, ...]
    forced: str | None
    must_reject: bool

    @property
    def size(self) -> int:
        return sum(len(v) for v in self.files.values())

    def uploads(self) -> list[tuple[str, bytes]]:
        """(client file name, bytes): a directory argument uploads its files relative to it."""
        if len(self.paths) == 1 and not any(k == self.paths[0] for k in self.files):
            root = self.paths[0] + "/"
            return [(k[len(root):], v) for k, v in self.files.items()]
        return list(self.files.items())


def _case(fmt: str, seed: Seed, kind: str, data: bytes, must_reject: bool, forced: bool = True,
          name: str | None = None) -> Case:
    files = dict(seed.files)
    paths = list(seed.paths)
    if name and name != seed.target:
        del files[seed.target]
        paths = [name if p == seed.target else p for p in paths]
        seed_target = name
    else:
        seed_target = seed.target
    files[seed_target] = data
    return Case(fmt, kind, files, tuple(paths), fmt if forced and seed.forced else None, must_reject)


# --- typed fields per JSON format: (record index, path...) -> kinds that must be rejected -------

INT = ("string", "null", "object", "fraction", "huge", "int32_overflow", "deep", "huge_float")
OPT_INT = ("string", "object", "fraction", "huge", "int32_overflow", "deep")
LENGTH = INT + ("negative",)
SECONDS = ("negative", "string", "null", "object", "huge_float", "deep")
LIST = ("string", "object", "null", "fraction")
# a megabyte-long string where a number belongs: once per format, to keep the corpus small
MEGA = ("megastring",)
TEXT = ("object", "list", "fraction", "deep")

TYPED: dict[str, list[tuple[tuple, tuple[str, ...]]]] = {
    "polytrace-packed": [
        ((0, "step"), INT), ((1, "input"), LENGTH + MEGA), ((0, "output"), LIST),
        ((1, "output", 0), LENGTH), ((2, "rank"), OPT_INT), ((0, "validate"), ("string", "object", "list")),
    ],
    "polytrace-reward-timings": [
        ((0, "step"), INT), ((1, "reward_time_s"), SECONDS + MEGA),
        ((0, "batch_size"), OPT_INT + ("negative",)), ((1, "response_sum"), ("negative", "string", "huge")),
        ((0, "validate"), ("string", "list")),
    ],
    "polytrace-filter": [
        ((0, "workload_step"), INT + MEGA), ((0, "prompt_count"), LENGTH),
        ((0, "kept_prompt_indices"), LIST), ((0, "kept_prompt_indices", 1), LENGTH),
        ((0, "used_prompt_indices", 0), LENGTH),
    ],
    "polytrace-multiturn": [
        ((0, "step"), INT), ((1, "prompt_group_id"), INT), ((0, "sample_id"), INT),
        ((1, "final_response_len"), LENGTH + MEGA), ((0, "turns"), LIST), ((0, "turns", 1), ("string", "list")),
        ((0, "turns", 0, "prompt_tokens"), OPT_INT + ("negative",)),
        ((0, "turns", 1, "engine_latency_s"), ("negative", "string", "huge_float", "deep")),
        ((0, "tool_calls", 0, "latency_s"), ("negative", "string")),
        ((0, "tool_calls", 0, "response_token_len"), ("negative", "huge")),
        ((1, "finish_reason"), TEXT), ((0, "max_response_len"), ("negative", "string", "huge")),
    ],
    "polytrace-2025": [
        ((0, "0", "input", 0), LENGTH), ((0, "0", "output", 1, 0), LENGTH),
        ((0, "1", "output", 0), LENGTH), ((0, "0", "output"), ("string", "object", "null", "deep")),
        ((0, "1"), ("string", "null", "fraction") + MEGA),
        ((0, "0", "input"), ("string", "object", "null")),
    ],
    "verl-jsonl": [
        ((0, "step"), INT), ((1, "data"), ("string", "list", "null", "fraction", "deep") + MEGA),
        ((0, "data", "timing_s/gen"), ("deep",)),  # 1e999 is read as inf, like Python's Infinity
    ],
    "kineto": [
        ((0, "traceEvents"), ("string", "object", "null", "fraction") + MEGA),
        ((0, "traceEvents", 2, "ts"), ("string", "object", "huge_float", "list")),
        ((0, "traceEvents", 2, "name"), ("object", "list", "fraction")),
        ((0, "traceEvents", 2, "args"), ("string", "list", "fraction")),
        ((0, "traceEvents", 3, "args", "extra"), ("deep",)),
        ((0, "distributedInfo", "rank"), ("huge", "int32_overflow", "negative")),
        ((0, "distributedInfo", "world_size"), ("huge", "int32_overflow", "negative")),
    ],
}


def _typed_cases(fmt: str, seed: Seed) -> list[Case]:
    """Every (field, kind) of TYPED, spliced into the seed's records."""
    cases = []
    for (index, *path), kinds in TYPED.get(fmt, []):
        for kind in kinds:
            rng = random.Random(f"{fmt}:{index}:{path}:{kind}")
            line = m.dumps_with(seed.records[index], tuple(path), kind, rng)
            data = m.replace_record(seed.records, index, line) if len(seed.records) > 1 or \
                seed.target.endswith(".jsonl") else line
            cases.append(_case(fmt, seed, f"typed:{'.'.join(map(str, path))}={kind}", data, True))
    return cases


def _raw_lines(fmt: str, seed: Seed, lines: list[tuple[str, bytes]], must_reject: bool = True) -> list[Case]:
    """Whole replacement files, each designed to be invalid."""
    return [_case(fmt, seed, kind, data, must_reject) for kind, data in lines]


def _format_specific(fmt: str, seed: Seed) -> list[Case]:
    big = b"1" + b"0" * 400
    if fmt == "polytrace-2025":
        doc = json.dumps(seed.records[0])
        return _raw_lines(fmt, seed, [
            ("step key not an integer", doc.replace('"1"', '"one"').encode()),
            ("step key out of range", doc.replace('"1"', '"99999999999"').encode()),
            ("step key huge", doc.replace('"1"', '"' + "9" * 5000 + '"').encode()),
            ("mixed single and multi turn", b'{"0": {"input": [1], "output": [2]}, "1": [{"input": [1], "output": [2]}]}'),
            ("mixed lists and numbers", b'{"0": {"input": [1, 2], "output": [[1], 2]}}'),
            ("no samples", b'{"0": {"input": [1], "output": []}}'),
            ("top level list", b"[1, 2, 3]"),
        ])
    if fmt == "verl-jsonl":
        line = jsonl(seed.records)
        return _raw_lines(fmt, seed, [
            ("metric beyond float", line.replace(b"6.0", big)),
            ("step beyond float", b'{"step": ' + big + b', "data": {"a": 1}}\n'),
            ("unknown top-level key", b'{"step": 1, "data": {"a": 1}, "extra": 1}\n' + line),
            ("no step", b'{"data": {"a": 1}}\n' + line),
        ])
    if fmt == "verl-console":
        return _raw_lines(fmt, seed, [
            ("step beyond int32", b"step:99999999999 - timing_s/gen:1.0 - timing_s/step:2.0\n"),
            ("step with 5000 digits", b"step:" + b"9" * 5000 + b" - timing_s/gen:1.0 - a:2\n"),
            ("no step line", b"INFO starting\nINFO actor_rollout_ref.model.path=/x\nnothing here\n"),
        ])
    if fmt == "wandb-csv":
        return _raw_lines(fmt, seed, [
            ("step beyond int32", b"_step,timing_s/gen\n99999999999,1.0\n"),
            ("step beyond int64", b"_step,timing_s/gen\n1e30,1.0\n"),
            ("no whole-number step", b"_step,timing_s/gen\nabc,1.0\n1.5,2.0\n"),
            ("no step column", b"_stepx,timing_s/gen\n1,1.0\n"),
            ("ragged row", b"_step,timing_s/gen\n1,1.0,3,4\n"),
            ("header only", b"_step,timing_s/gen\n"),
        ])
    if fmt == "kineto" and seed.target == "rank0.json":
        doc = json.dumps(seed.records[0])
        return _raw_lines(fmt, seed, [
            ("profiler step beyond int32", doc.replace("ProfilerStep#1", "ProfilerStep#99999999999").encode()),
            ("empty traceEvents", b'{"traceEvents": []}'),
            ("no traceEvents", b'{"schemaVersion": 1, "traceEvent": []}'),
            ("traceEvents array never closed", doc.encode()[:-3]),
            ("trailing garbage", doc.encode() + b"garbage"),
            ("stream beyond int64", doc.replace('"stream": 7', '"stream": ' + big.decode(), 1).encode()),
        ])
    if fmt == "samples-table" and seed.target.endswith(".csv"):
        return _csv_cases(fmt, seed) + _parquet_cases(fmt, _as_parquet(seed))
    return []


def _as_parquet(seed: Seed) -> Seed:
    """A samples CSV seed as the same table in Parquet."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(pacsv.read_csv(pa.py_buffer(seed.files[seed.target])), buf)
    name = seed.target.removesuffix(".csv") + ".parquet"
    return Seed({name: buf.getvalue().to_pybytes()}, name, [name], seed.forced)


def _csv_cases(fmt: str, seed: Seed) -> list[Case]:
    header, *rows = seed.files[seed.target].decode().splitlines()
    cols = header.split(",")

    def with_cell(row: int, col: str, value: str) -> bytes:
        cells = rows[row].split(",")
        cells[cols.index(col)] = value
        return "\n".join([header, *rows[:row], ",".join(cells), *rows[row + 1:]]).encode() + b"\n"

    bad = [(f"cell {c}={v}", with_cell(1, c, v)) for c, vs in {
        "response_len": ["-5", "99999999999", "abc", "", "1.5", "1e999", "9" * 400],
        "step": ["abc", "", "2147483648", "-99999999999"],
        "prompt_len": ["-1"], "truncated": ["maybe", "2"], "sample_id": ["x" * m.MEGABYTE],
    }.items() for v in vs]
    body = "\n".join(rows).encode() + b"\n"
    bad += [
        ("no step column", header.replace("step,", "stepx,", 1).encode() + b"\n" + body),
        ("duplicate column", header.replace("prompt_id", "step").encode() + b"\n" + body),
        ("unknown column", (header + ",secret").encode() + b"\n" + body),
        ("ragged row", header.encode() + b"\n" + body + b"1,2,3,4,5,6,7,8,9,10\n"),
        ("header only", header.encode() + b"\n"),
    ]
    return _raw_lines(fmt, seed, bad)


def _parquet_cases(fmt: str, seed: Seed) -> list[Case]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    def parquet(table: pa.Table) -> bytes:
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        return buf.getvalue().to_pybytes()

    good = pq.read_table(pa.BufferReader(seed.files[seed.target]))
    n = good.num_rows

    def with_column(name: str, values) -> bytes:
        return parquet(good.set_column(good.column_names.index(name), name, values))

    bad = [
        ("response_len strings", with_column("response_len", pa.array(["abc"] * n))),
        ("response_len negative", with_column("response_len", pa.array([-1] * n, pa.int64()))),
        ("response_len beyond int32", with_column("response_len", pa.array([2**40] * n, pa.int64()))),
        ("response_len null", with_column("response_len", pa.array([None] * n, pa.int64()))),
        ("step as list", with_column("step", pa.array([[1]] * n))),
        ("step as struct", with_column("step", pa.array([{"a": 1}] * n))),
        ("step as float", with_column("step", pa.array([1.5] * n))),
        ("no step column", parquet(good.drop_columns(["step"]))),
        ("unknown column", parquet(good.append_column("secret", pa.array([1] * n)))),
        ("no rows", parquet(good.slice(0, 0))),
        ("magic only", b"PAR1"),
        ("magic then garbage", b"PAR1" + b"\x00" * 100 + b"PAR1"),
    ]
    return _raw_lines(fmt, seed, bad)


def _archive_cases(fmt: str, seed: Seed) -> list[Case]:
    """Hostile or broken archives of the seed's files; the first member is the target."""
    pack = tar_gz if seed.target.endswith(".tar.gz") else zip_of
    (target, data), *rest = seed.members.items()
    others = dict(rest)
    traversal = ["../escape.json", "/abs/rank1.json", "a/../../b.json", "..\\..\\win.json", "C:/x/rank1.json"]
    bad = [(f"member name {name!r}", pack({**seed.members, name: data})) for name in traversal]
    bad += [
        ("no recognisable member", pack({"readme.txt": b"hello", "data.bin": b"\x00" * 10})),
        ("nested archive", pack({"inner.zip": zip_of(seed.members)})),
        ("member gzip bomb", pack({**others, target + ".gz": m.gzip_bomb(data, 64 * m.MEGABYTE)})),
    ]
    if pack is tar_gz:
        bad += [("only a symlink member", tar_gz({}, {target: b"2"})),
                ("only a hardlink member", tar_gz({}, {target: b"1"}))]
    # A broken member no format recognises is skipped; only under --format, or alone, is it refused.
    first_line = data.split(b"\n", 1)[0]
    broken = [
        ("member not UTF-8 text", pack({**others, target: b"\xff\xfe not json"})),
        ("member cut inside its first line", pack({**others, target: first_line[:len(first_line) // 2]})),
        ("member deep nesting", pack({**others, target: m.deep().encode()})),
    ]
    return _raw_lines(fmt, seed, bad) + _raw_lines(fmt, seed, broken, seed.forced or not others)


def _generic(fmt: str, seed: Seed) -> list[Case]:
    """Designed-invalid bytes any format must reject (a console log tolerates stray bytes)."""
    data = seed.files[seed.target]
    rng = random.Random(f"{fmt}:{seed.target}:generic")
    tolerant = fmt in ("verl-console", "nemo-rl-console", "areal-console")
    binary_seed = not data[:1].isascii() or data.startswith(b"PAR1") or seed.target.endswith((".gz", ".zip"))
    cases = [
        _case(fmt, seed, "empty file", b"", True),
        _case(fmt, seed, "whitespace only", b" \n\t\r\n" * 3, True),
        _case(fmt, seed, "gzip bomb", m.gzip_bomb(data), True),
        _case(fmt, seed, "gzip bomb, detected", m.gzip_bomb(data), True, forced=False),
        _case(fmt, seed, "gzip truncated", m.gzip_truncated(data, rng), True),
        _case(fmt, seed, "zip bomb", m.zip_bomb(), True),
        _case(fmt, seed, "zip bomb named .zip", m.zip_bomb(), True, name="traces.zip"),
    ]
    cases += [_case(fmt, seed, "garbage", m.garbage(rng), True) for _ in range(3)]
    if not binary_seed:
        cases += [
            _case(fmt, seed, "non-UTF-8", m.non_utf8(data, rng), not tolerant),
            _case(fmt, seed, "non-UTF-8, detected", m.non_utf8(data, rng), not tolerant, forced=False),
            _case(fmt, seed, "NUL bytes", m.nul_bytes(data, rng), not seed.target.endswith(".csv")),
            _case(fmt, seed, "megabyte garbage line", data + m.mega_string(rng).encode() + b"\n", not tolerant),
            _case(fmt, seed, "megabyte line of digits", data + b"9" * m.MEGABYTE + b"\n", not tolerant),
        ]
    return cases


def _lake_cases(fmt: str, seed: Seed) -> list[Case]:
    """A lake is a directory: break its layout, its runs table, or one of its Parquet files."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = seed.files
    runs_key = next(k for k in files if k.startswith("lake/table=runs/"))
    samples_key = next(k for k in files if k.startswith("lake/table=samples/"))
    run_id = samples_key.split("run_id=")[1].split("/")[0]
    samples = pq.read_table(pa.BufferReader(files[samples_key]))
    runs = pq.read_table(pa.BufferReader(files[runs_key]))

    def parquet(table) -> bytes:
        buf = pa.BufferOutputStream()
        pq.write_table(table, buf)
        return buf.getvalue().to_pybytes()

    def variant(kind: str, changes: dict[str, bytes | None]) -> Case:
        new = {k: v for k, v in {**files, **changes}.items() if v is not None}
        return Case(fmt, kind, new, ("lake",), fmt, True)

    col = samples.column_names.index("response_len")
    other = "0" * len(run_id)
    cases = [
        variant("no runs table", {k: None for k in files if k.startswith("lake/table=runs/")}),
        variant("runs part empty", {runs_key: b""}),
        variant("runs part garbage", {runs_key: b"PAR1 garbage PAR1"}),
        variant("runs part truncated", {runs_key: files[runs_key][:len(files[runs_key]) // 2]}),
        variant("runs with two rows", {runs_key: parquet(pa.concat_tables([runs, runs]))}),
        variant("runs with no rows", {runs_key: parquet(runs.slice(0, 0))}),
        variant("orphan partition", {samples_key.replace(run_id, other): files[samples_key]}),
        variant("partition without parquet", {samples_key: None,
                                              samples_key.replace("part-0.parquet", "notes.txt"): b"x"}),
        variant("samples part garbage", {samples_key: b"\x00" * 64}),
        variant("samples part truncated", {samples_key: files[samples_key][:-20]}),
        variant("samples lengths as text", {samples_key: parquet(samples.set_column(
            col, "response_len", pa.array(["abc"] * samples.num_rows)))}),
        variant("samples lengths beyond int32", {samples_key: parquet(samples.set_column(
            col, "response_len", pa.array([2**40] * samples.num_rows, pa.int64())))}),
        variant("samples gzip bomb", {samples_key: m.gzip_bomb(files[samples_key])}),
    ]
    return cases


def _random(fmt: str, seeds_: list[Seed], count: int) -> list[Case]:
    """Random mutation chains of the seeds; each may or may not stay valid."""
    cases = []
    for i in range(count):
        rng = random.Random(f"{fmt}:{i}")
        seed = seeds_[i % len(seeds_)]
        target = seed.target
        if seed.directory:
            target = rng.choice(sorted(seed.files))
        data = seed.files[target]
        kinds = []
        for _ in range(rng.randint(1, 3)):
            mutate = rng.choice(m.RANDOM)
            data = mutate(data, rng)
            kinds.append(mutate.__name__)
        case = _case(fmt, replace(seed, target=target), "random:" + "+".join(kinds), data, False,
                     forced=i % 4 != 3)
        cases.append(case)
    return cases


@lru_cache(maxsize=None)
def build(fmt: str, per_format: int = CASES_PER_FORMAT) -> tuple[Case, ...]:
    """At least `per_format` cases for one format: every designed case, then random ones."""
    format_seeds = seeds_of(fmt)
    designed: list[Case] = []
    sample, *containers = format_seeds
    if fmt == "parquet-lake":
        designed += _lake_cases(fmt, sample)
    else:
        designed += _generic(fmt, sample) + _typed_cases(fmt, sample) + _format_specific(fmt, sample)
    for seed in containers:
        designed += _generic(fmt, seed) + (_archive_cases(fmt, seed) if seed.members else [])
    return tuple(designed + _random(fmt, format_seeds, max(per_format - len(designed), per_format // 2)))


def dump(case: Case, root) -> list:
    """Write a case's files under `root`; return its CLI path arguments."""
    for rel, data in case.files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return [root / p for p in case.paths]


if __name__ == "__main__":
    import sys

    from polytrace.ingest.registry import FORMATS

    for f in FORMATS:
        built = build(f.name)
        print(f.name, len(built), sum(c.must_reject for c in built), sum(c.size for c in built) >> 20, "MiB",
              file=sys.stderr)
