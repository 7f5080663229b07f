"""Every stored answer and finding of the shared real runs, as one JSON file: the before/after
check of a change that must not change behaviour.

    python -m tests.snapshot OUT.json [--data ../shared/data]
    diff <(python -m json.tool A.json) <(python -m json.tool B.json)

Each run is ingested into a fresh database with the installed PolyTrace, then every catalog
query that needs only the run's id is run through the one runner, and the findings listed.
"""
from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

RUNS = {
    "dapo": ("polytrace/verl/profile/packed_length_log/20260614_023133", {"max_response_len": 20480}),
    "dapo-r2": ("polytrace/verl/profile/packed_length_log/20260610_092349", {}),
    "video": ("polytrace/verl-video/profile/packed_length_log/20260609_033329", {}),
    "rllm": ("polytrace/rllm/profile/packed_length_log/20260616_024512", {}),
    "search-r1": ("polytrace/search_r1/profile/multiturn_workload_log/0617_0223", {}),
    "verl-i80": ("verl-logs/qwen3-4b-agent-run-i80f2v90.output.log", {"n_gpus": 8}),
    "verl-ry3": ("verl-logs/qwen3-4b-agent-run-ry3hgbx5.output.log", {}),
    "trace-filter": ("kineto/trace_filter", {}),
    "h200": ("gpu-replay-h200", {}),
}


def plain(value):
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 9)
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    return value if isinstance(value, (int, str, bool, type(None))) else str(value)


def snapshot(data: Path) -> dict:
    from polytrace import connect, store
    from polytrace.ingest.load import ingest_paths
    from polytrace.queries.catalog import load_catalog

    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        for label, (path, facts) in RUNS.items():
            db = Path(tmp) / f"{label}.duckdb"
            with store.open(db, "w") as con:
                run_id = ingest_paths(con, [data / path], run_overrides=facts).run_id
            with connect(db) as client:
                answers = {}
                for q in load_catalog().values():
                    if [p.name for p in q.params if p.default is None] != ["run_id"]:
                        continue
                    frame = client.query(q.name, run_id=run_id)
                    answers[q.name] = {"columns": frame.columns, "rows": plain(frame.rows())}
                out[label] = answers
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path)
    ap.add_argument("--data", type=Path, default=Path(__file__).resolve().parents[2] / "shared" / "data")
    args = ap.parse_args()
    args.out.write_text(json.dumps(snapshot(args.data), indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
