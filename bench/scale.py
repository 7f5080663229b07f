"""Scale benchmark: build runs of 1M, 10M and 50M samples, then time ingest and every dashboard query.

    python bench/scale.py [--sizes 1M,10M,50M] [--work DIR] [--repeat 10]

Each run is a DAPO-style math run written as PolyTrace packed_lengths_step_N.jsonl files
(response lengths from the published lognormal, growing over the run, with a shared
per-prompt difficulty, via workload.synth) plus, for MULTITURN_SHARE of its samples,
multiturn_workload_step_N.jsonl rollouts with turns and tool calls. Ingest runs in a
child process (`python -m polytrace ingest`) so its peak RSS is measured alone (os.wait4).
Printed per size: generation and ingest time, ingest time per million samples (and its
ratio to the smallest size: linear growth keeps it near 1), database size, peak RSS, and
the p95 latency of every dashboard query (catalog queries taking only run_id).
Targets: peak RSS < 4 GiB and per-step dashboard queries < 100 ms p95 at 50M.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from polytrace.queries.catalog import bind, load_catalog  # noqa: E402
from polytrace.queries.runner import run_bound  # noqa: E402
from polytrace.workload.published import PUBLISHED_MATH  # noqa: E402
from polytrace.workload.synth import lognormal_groups, sample_prompt_lengths  # noqa: E402

N_SAMPLING, DP, TP, CAP = 8, 8, 2, 8192
MULTITURN_SHARE = 0.10
GROWTH, GROUP_SHARE = 1.6, 0.35
STEPS = {1_000_000: 100, 10_000_000: 250, 50_000_000: 500}
GIB = 1024**3


def size_arg(text: str) -> int:
    return int(float(text.upper().rstrip("M")) * 1_000_000)


def steps_for(samples: int) -> int:
    return STEPS.get(samples, max(10, samples // 100_000))


def write_run(out: Path, samples: int, seed: int = 0) -> None:
    """Packed lengths for (1 - MULTITURN_SHARE) of the samples and multi-turn rollouts for the rest."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    steps = steps_for(samples)
    per_step = samples // steps
    prompts = int(per_step * (1 - MULTITURN_SHARE)) // N_SAMPLING
    rollouts = per_step - prompts * N_SAMPLING
    s, loc, scale = PUBLISHED_MATH.output_lognorm
    for step in range(steps):
        drift = 1 + (GROWTH - 1) * step / max(steps - 1, 1)
        inputs = sample_prompt_lengths(PUBLISHED_MATH, rng, prompts)
        outputs = lognormal_groups(rng, prompts, N_SAMPLING, s, loc, scale * drift, GROUP_SHARE, CAP)
        dp = np.arange(prompts) * DP // prompts
        with open(out / f"packed_lengths_step_{step}.jsonl", "w") as f:
            f.writelines(
                f'{{"step": {step}, "rank": {d * TP}, "dp_rank": {d}, "tp_rank": 0, "input": {i}, '
                f'"output": [{", ".join(map(str, o))}], "n_sampling": {N_SAMPLING}, "validate": false}}\n'
                for d, i, o in zip(dp.tolist(), inputs.tolist(), outputs.tolist()))
        write_rollouts(out / f"multiturn_workload_step_{step}.jsonl", rng, step, rollouts, prompts, drift)


def write_rollouts(path: Path, rng: np.random.Generator, step: int, n: int, first_group: int,
                   drift: float) -> None:
    """Tool-use rollouts: 1 + Poisson(2) turns, one tool call between turns, prefix-cached prompts."""
    turns = 1 + rng.poisson(2.0, n)
    prompt = rng.integers(200, 1500, n)
    lines = []
    for r in range(n):
        k = int(turns[r])
        completion = np.clip(rng.lognormal(5.0, 0.9, k) * drift, 1, CAP).astype(int).tolist()
        answers = rng.integers(50, 800, k).tolist()
        latency = np.round(rng.lognormal(-0.5, 0.6, k), 4).tolist()
        context, turn_rows, calls = int(prompt[r]), [], []
        for t in range(k):
            turn_rows.append(f'{{"turn": {t}, "prompt_tokens": {context}, "cached_tokens": '
                             f'{context - (answers[t - 1] if t else context)}, "completion_tokens": '
                             f'{completion[t]}, "engine_latency_s": {completion[t] * 0.012:.4f}, '
                             f'"finish_reason": "{"tool_calls" if t < k - 1 else "stop"}"}}')
            context += completion[t]
            if t < k - 1:
                calls.append(f'{{"turn": {t}, "tool_name": "search", "latency_s": {latency[t]}, '
                             f'"status": "success", "response_token_len": {answers[t]}}}')
                context += answers[t]
        lines.append(
            f'{{"step": {step}, "prompt_group_id": {first_group + r // N_SAMPLING}, '
            f'"sample_id": {r % N_SAMPLING}, "prompt_len": {int(prompt[r])}, '
            f'"final_response_len": {sum(completion)}, "max_response_len": {CAP}, '
            f'"finish_reason": "stop", "turns": [{", ".join(turn_rows)}], '
            f'"tool_calls": [{", ".join(calls)}]}}\n')
    path.write_text("".join(lines))


def ingest(src: Path, db: Path) -> tuple[float, int, str]:
    """(seconds, peak RSS bytes, run_id) of `polytrace ingest` in a child process."""
    started = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "polytrace", "ingest", str(src), "--db", str(db),
                             "--name", src.name], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            cwd=ROOT)
    out = proc.stdout.read()
    err = proc.stderr.read()
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    seconds = time.perf_counter() - started
    if proc.returncode:
        raise SystemExit(f"ingest failed ({proc.returncode}): {err.decode()[-500:]}")
    return seconds, usage.ru_maxrss * 1024, out.decode().split()[0]


def dashboard_queries():
    return [q for q in load_catalog().values()
            if any(p.name == "run_id" for p in q.params)
            and all(p.name == "run_id" or not p.required for p in q.params)]


def query_p95(db: Path, run_id: str, repeat: int) -> dict[str, tuple[float, int]]:
    """p95 latency (ms) and row count of each dashboard query, after one warm-up run."""
    con = duckdb.connect(str(db), read_only=True)
    out = {}
    try:
        for q in dashboard_queries():
            bound = bind(q, {"run_id": run_id})
            rows = len(run_bound(con.cursor(), q, bound).rows)
            times = []
            for _ in range(repeat):
                t = time.perf_counter()
                run_bound(con.cursor(), q, bound)
                times.append((time.perf_counter() - t) * 1000)
            out[q.name] = (float(np.percentile(times, 95)), rows)
    finally:
        con.close()
    return out


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1M,10M,50M")
    ap.add_argument("--work", default="/tmp/polytrace-scale")
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--keep", action="store_true", help="keep the generated files and databases")
    args = ap.parse_args()
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    base_rate = None
    for size in [size_arg(s) for s in args.sizes.split(",")]:
        label = f"{size / 1e6:g}M"
        src, db = work / f"run-{label}", work / f"scale-{label}.duckdb"
        db.unlink(missing_ok=True)
        db.with_suffix(".duckdb.wal").unlink(missing_ok=True)
        done = src / ".complete"  # hidden: ingest skips it; files kept with --keep are reused
        if not done.exists():
            shutil.rmtree(src, ignore_errors=True)
            t = time.perf_counter()
            write_run(src, size)
            done.touch()
            print(f"[{label}] generated {dir_bytes(src) / GIB:.2f} GiB of JSONL in "
                  f"{time.perf_counter() - t:.0f}s", flush=True)
        seconds, rss, run_id = ingest(src, db)
        rate = seconds / (size / 1e6)
        base_rate = base_rate or rate
        db_bytes = db.stat().st_size + (db.with_suffix(".duckdb.wal").stat().st_size
                                        if db.with_suffix(".duckdb.wal").exists() else 0)
        print(f"[{label}] ingest {seconds:.1f}s ({rate:.2f} s per 1M samples, {rate / base_rate:.2f}x "
              f"the smallest size), db {db_bytes / GIB:.2f} GiB, peak RSS {rss / GIB:.2f} GiB "
              f"({'under' if rss < 4 * GIB else 'OVER'} the 4 GiB target)", flush=True)
        latencies = query_p95(db, run_id, args.repeat)
        slow = [n for n, (ms, _) in latencies.items() if ms >= 100]
        for name, (ms, rows) in sorted(latencies.items(), key=lambda kv: -kv[1][0]):
            print(f"[{label}]   {name:<20} p95 {ms:8.1f} ms  ({rows} rows)", flush=True)
        print(f"[{label}] queries at or over 100 ms p95: {', '.join(slow) or 'none'}", flush=True)
        if not args.keep:
            shutil.rmtree(src, ignore_errors=True)


if __name__ == "__main__":
    main()
