"""Large Kineto traces for benchmarks: a shared trace's events replicated into more profiler steps."""
from __future__ import annotations

import argparse
import gzip
import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINETO = ROOT.parent / "shared" / "data" / "kineto"
SOURCES = [KINETO / "trace_filter" / "sampled_rank-0.json.gz", KINETO / "trace_filter" / "sampled_rank-1.json.gz"]
_STEP = re.compile(r"^ProfilerStep#(\d+)$")


def _timed(events: list[dict]) -> list[dict]:
    return [e for e in events if isinstance(e.get("ts"), (int, float))]


def replicate(source: Path, out: Path, target_bytes: int) -> int:
    """Write `source` with its events copied `k` times back to back until the file has target_bytes.

    Copy i is shifted by i trace spans, its ProfilerStep numbers by i * steps, and its
    correlation ids by i * (max id + 1), so launches still pair with their kernels.
    Metadata events (ph M) and the Trace span are written once.
    """
    doc = json.loads(gzip.open(source).read())
    events = doc.pop("traceEvents")
    once = [e for e in events if e.get("ph") == "M" or e.get("cat") == "Trace"]
    body = [e for e in events if e.get("ph") != "M" and e.get("cat") != "Trace"]
    timed = _timed(body)
    start = min(e["ts"] for e in timed)
    span = max(e["ts"] + e.get("dur", 0) for e in timed) - start
    steps = [int(m.group(1)) for e in body if (m := _STEP.match(str(e.get("name", ""))))]
    n_steps = len(set(steps))
    corr_step = 1 + max((e.get("args") or {}).get("correlation", 0) for e in body)
    head = json.dumps(doc)[:-1] + ', "traceEvents": [\n'
    written = 0
    with open(out, "w") as f:
        f.write(head)
        f.write(",\n".join(json.dumps(e) for e in once) or "{}")
        copy = 0
        while written < target_bytes:
            shift = copy * (span + 1000.0)
            for e in body:
                e2 = dict(e)
                if "ts" in e2:
                    e2["ts"] = e["ts"] + shift
                m = _STEP.match(str(e.get("name", "")))
                if m:
                    e2["name"] = f"ProfilerStep#{int(m.group(1)) + copy * n_steps}"
                args = e.get("args")
                if args and "correlation" in args:
                    e2["args"] = {**args, "correlation": args["correlation"] + copy * corr_step}
                text = ",\n" + json.dumps(e2)
                f.write(text)
                written += len(text)
            copy += 1
        f.write("\n]}\n")
    return out.stat().st_size


def generate(out_dir: Path, mb_per_rank: float, ranks: int = 2) -> list[Path]:
    """`ranks` rank traces of at least mb_per_rank MB each: the shared trace_filter ranks
    replicated, then copied under new ranks (distributedInfo.rank and the file name), so that
    a 64-rank job takes two replications and 62 file copies rather than 64 replications."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for rank in range(ranks):
        src = SOURCES[rank % len(SOURCES)]
        dest = out_dir / f"sampled_rank-{rank}.json"
        if dest.exists() and dest.stat().st_size >= mb_per_rank * 1e6:
            paths.append(dest)
            continue
        if rank < len(SOURCES):
            replicate(src, dest, int(mb_per_rank * 1e6))
        else:
            renumber(paths[rank % len(SOURCES)], dest, rank)
        paths.append(dest)
    return paths


_RANK = re.compile(rb'("distributedInfo": \{[^}]*"rank": )(\d+)')


def renumber(template: Path, dest: Path, rank: int) -> None:
    """A copy of a rank trace under another rank: its header rewritten, the events copied as bytes."""
    with open(template, "rb") as src, open(dest, "wb") as out:
        head = src.read(1 << 16)
        out.write(_RANK.sub(lambda m: m.group(1) + str(rank).encode(), head, count=1))
        shutil.copyfileobj(src, out, 16 << 20)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("out", type=Path)
    ap.add_argument("--mb", type=float, default=60, help="uncompressed MB per rank file")
    ap.add_argument("--ranks", type=int, default=2, help="rank files (default 2)")
    args = ap.parse_args()
    for p in generate(args.out, args.mb, args.ranks):
        print(p, p.stat().st_size)


if __name__ == "__main__":
    main()
