"""One tiny hand-made valid input per ingest format: the starting point of every mutation.

Each seed is a set of files (relative path -> bytes), the file that mutations target,
and the CLI arguments that ingest it. The numbers are made up; the keys copy the real
files in ../shared/data (see tests/fixtures/formats/README.md).
"""
from __future__ import annotations

import gzip
import io
import json
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from polytrace import store


@dataclass
class Seed:
    files: dict[str, bytes]
    target: str                       # the file mutations rewrite
    paths: list[str]                  # CLI arguments, relative to the case directory
    forced: bool = True               # pass --format (False: let detection choose)
    records: list = field(default_factory=list)  # JSON records of `target`, for typed mutations


def jsonl(records: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


def _single(name: str, records: list) -> Seed:
    return Seed({name: jsonl(records)}, name, [name], records=records)


PACKED = [
    {"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "local_index": 0, "input": 10,
     "output": [1, 3], "n_sampling": 2, "validate": False},
    {"step": 0, "rank": 2, "dp_rank": 1, "tp_rank": 0, "local_index": 0, "input": 20,
     "output": [5, 7], "n_sampling": 2, "validate": False},
    {"step": 0, "rank": 2, "dp_rank": 1, "tp_rank": 0, "local_index": 1, "input": 30,
     "output": [9, 11], "n_sampling": 2, "validate": False},
]
REWARD = [
    {"step": 3, "rank": 0, "tp_rank": 0, "dp_rank": 0, "batch_size": 4, "reward_time_s": 12.5,
     "response_sum": 4000, "response_mean": 1000.0, "response_max": 1600, "validate": False},
    {"step": 3, "rank": 4, "tp_rank": 0, "dp_rank": 1, "batch_size": 4, "reward_time_s": 20.25,
     "response_sum": 6400, "response_mean": 1600.0, "response_max": 3000, "validate": False},
]
FILTER = [
    {"workload_step": 0, "trainer_step": 1, "gen_batch_index": 1, "prompt_count": 3, "n_sampling": 2,
     "train_batch_size": 2, "kept_prompt_count": 2, "used_prompt_count": 1,
     "kept_prompt_indices": [0, 2], "used_prompt_indices": [2]},
]
TURN = {"turn": 0, "prompt_tokens": 50, "cached_tokens": 0, "completion_tokens": 10,
        "finish_reason": "tool_calls", "tool_call_count": 1, "engine_latency_s": 0.5}
CALL = {"turn": 0, "tool_name": "search", "latency_s": 1.25, "status": "success",
        "response_token_len": 30, "query_count": 2}
MULTITURN = [
    {"step": 7, "prompt_group_id": 0, "sample_id": 0, "prompt_len": 50, "max_response_len": 100,
     "final_response_len": 40, "finish_reason": "stop", "turn_count": 2, "tool_call_count": 1,
     "validate": False, "turns": [TURN, {**TURN, "turn": 1, "cached_tokens": 40}], "tool_calls": [CALL]},
    {"step": 7, "prompt_group_id": 0, "sample_id": 1, "prompt_len": 50, "max_response_len": 100,
     "final_response_len": 100, "finish_reason": "length", "turn_count": 1, "tool_call_count": 0,
     "validate": False, "turns": [{**TURN, "finish_reason": "length"}], "tool_calls": []},
]
P2025 = {"0": {"input": [10, 20], "output": [[1, 2], [3, 4]]}, "1": {"input": [5], "output": [6, 7]}}
SAMPLES_CSV = (b"step,prompt_id,sample_id,dp_rank,prompt_len,response_len,finish_reason,truncated\n"
               b"0,0,0,0,10,100,stop,false\n0,0,1,1,10,2048,length,true\n1,0,0,0,12,50,stop,false\n")
VERL_LOG = (b"INFO actor_rollout_ref.model.path=/models/Qwen2.5-7B\n"
            b"step:1 - timing_s/gen:6.0 - timing_s/reward:1.0 - timing_s/step:10.0 - "
            b"response_length/mean:np.float64(512.5) - actor/lr:1e-06\n"
            b"(TaskRunner pid=42) step:2 - timing_s/gen:4.5 - timing_s/step:8.0 - critic/score/mean:nan\n")
VERL_JSONL = [{"step": 1, "data": {"timing_s/gen": 6.0, "timing_s/step": 10, "actor/lr": 1e-06}},
              {"step": 2, "data": {"timing_s/gen": 4.0, "timing_s/step": 8.5, "note": "x"}}]
WANDB_CSV = b"_step,_runtime,timing_s/gen,response_length/mean\n1,10.5,6.0,1000\n2,20.5,4.0,1200\n"


def kineto_trace(rank: int) -> dict:
    return {
        "schemaVersion": 1, "distributedInfo": {"rank": rank, "world_size": 2},
        "deviceProperties": [{"name": "H100"}],
        "traceEvents": [
            {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 100, "dur": 1000},
            {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 110, "dur": 5,
             "args": {"correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "gemm", "ts": 120, "dur": 50,
             "args": {"stream": 7, "correlation": 7}},
            {"ph": "X", "cat": "kernel", "name": "ncclAllReduce", "ts": 200, "dur": 30,
             "args": {"stream": 13, "correlation": 8}},
            {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 300, "dur": 10,
             "args": {"stream": 7, "correlation": 9}},
        ],
    }


def tar_gz(members: dict[str, bytes], kinds: dict[str, bytes] | None = None) -> bytes:
    """A .tar.gz of regular files; `kinds` maps extra names to a tar type (symlinks etc.)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for name, kind in (kinds or {}).items():
            info = tarfile.TarInfo(name)
            info.type, info.linkname = kind, "/etc/passwd"
            tar.addfile(info)
    return buf.getvalue()


def zip_of(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def kineto_members() -> dict[str, bytes]:
    return {f"traces/rank{r}.json": json.dumps(kineto_trace(r)).encode() for r in (0, 1)}


def lake_files() -> dict[str, bytes]:
    """A Parquet lake exported from one tiny packed run: every file of it by relative path."""
    from polytrace.ingest.load import ingest_paths
    from polytrace.store.lake import export_runs

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "packed_lengths_step_0.jsonl"
        src.write_bytes(jsonl(PACKED))
        con = store.open(Path(tmp) / "lake.duckdb")
        try:
            run_id = ingest_paths(con, [src]).run_id
            export_runs(con, [run_id], Path(tmp) / "lake")
        finally:
            con.close()
        root = Path(tmp) / "lake"
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@lru_cache(maxsize=None)
def seeds() -> dict[str, list[Seed]]:
    """Format name -> its seeds (several where a format has several containers)."""
    packed = _single("packed_lengths_step_0.jsonl", PACKED)
    # Alone, even a valid filter file is refused at load (its packed lengths are missing);
    # the tests tell that refusal apart from the parser's (see LOAD_ONLY in test_corpus.py).
    filter_seed = _single("dapo_filter_indices.jsonl", FILTER)
    lake = lake_files()
    lake_seed = Seed({f"lake/{k}": v for k, v in lake.items()},
                     next(f"lake/{k}" for k in lake if k.startswith("table=samples/")), ["lake"])
    members = kineto_members()
    return {
        "polytrace-packed": [packed],
        "polytrace-reward-timings": [_single("reward_timings_step_3.jsonl", REWARD)],
        "polytrace-filter": [filter_seed],
        "polytrace-multiturn": [_single("multiturn_workload_step_7.jsonl", MULTITURN)],
        "polytrace-2025": [Seed({"polytrace_2025.json": json.dumps(P2025).encode()}, "polytrace_2025.json",
                                ["polytrace_2025.json"], records=[P2025])],
        "samples-table": [Seed({"samples.csv": SAMPLES_CSV}, "samples.csv", ["samples.csv"]),
                          Seed({"samples.parquet": _samples_parquet()}, "samples.parquet", ["samples.parquet"])],
        "verl-console": [Seed({"output.log": VERL_LOG}, "output.log", ["output.log"])],
        "verl-jsonl": [_single("metrics.jsonl", VERL_JSONL)],
        "wandb-csv": [Seed({"history.csv": WANDB_CSV}, "history.csv", ["history.csv"])],
        "kineto": [
            Seed({"rank0.json": json.dumps(kineto_trace(0)).encode()}, "rank0.json", ["rank0.json"],
                 records=[kineto_trace(0)]),
            Seed({"rank0.json.gz": gzip.compress(json.dumps(kineto_trace(0)).encode(), mtime=0)},
                 "rank0.json.gz", ["rank0.json.gz"]),
            Seed({"traces.tar.gz": tar_gz(members)}, "traces.tar.gz", ["traces.tar.gz"]),
            Seed({"traces.zip": zip_of(members)}, "traces.zip", ["traces.zip"]),
        ],
        "parquet-lake": [lake_seed],
    }


def _samples_parquet() -> bytes:
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    buf = pa.BufferOutputStream()
    pq.write_table(pacsv.read_csv(pa.py_buffer(SAMPLES_CSV)), buf)
    return buf.getvalue().to_pybytes()
