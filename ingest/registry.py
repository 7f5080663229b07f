"""The list of trace formats, and detection of a file's format from its first bytes."""
from __future__ import annotations

from pathlib import Path

from polytrace.ingest.contract import Format, IngestError
from polytrace.ingest.formats import (
    areal_console,
    areal_sessions,
    kineto,
    memory_snapshot,
    memory_timeline,
    nemo_rl_console,
    nsys,
    openrlhf_console,
    parquet_lake,
    polytrace_2025,
    polytrace_filter,
    polytrace_multiturn,
    polytrace_packed,
    polytrace_reward_timings,
    ray_timeline,
    roll_console,
    samples_table,
    slime_console,
    tensorboard_events,
    verl_console,
    verl_jsonl,
    verl_rollout_dump,
    wandb_csv,
    wandb_offline,
)
from polytrace.ingest.sources import read_head

FORMATS: list[Format] = [
    polytrace_packed.FORMAT,
    polytrace_reward_timings.FORMAT,
    polytrace_filter.FORMAT,
    polytrace_multiturn.FORMAT,
    polytrace_2025.FORMAT,
    samples_table.FORMAT,
    parquet_lake.FORMAT,
    verl_console.FORMAT,
    verl_jsonl.FORMAT,
    wandb_csv.FORMAT,
    kineto.FORMAT,
    verl_rollout_dump.FORMAT,
    ray_timeline.FORMAT,
    wandb_offline.FORMAT,
    openrlhf_console.FORMAT,
    roll_console.FORMAT,
    slime_console.FORMAT,
    nemo_rl_console.FORMAT,
    areal_console.FORMAT,
    tensorboard_events.FORMAT,
    areal_sessions.FORMAT,
    nsys.FORMAT,
    memory_timeline.FORMAT,
    memory_snapshot.FORMAT,
]


def known() -> str:
    return ", ".join(f.name for f in FORMATS)


def get(name: str) -> Format:
    for fmt in FORMATS:
        if fmt.name == name:
            return fmt
    raise IngestError(None, f"unknown format {name!r}; known formats: {known()}")


def detect(path: Path) -> Format | None:
    """The highest-priority format whose sniff claims the file, or None."""
    head = read_head(path)
    claims = [f for f in FORMATS if f.sniff(head, path.name)]
    return max(claims, key=lambda f: f.priority) if claims else None


def claiming(path: Path) -> Format | None:
    """The highest-priority format that takes this directory whole, or None."""
    claims = [f for f in FORMATS if f.claims_directory and f.claims_directory(path)]
    return max(claims, key=lambda f: f.priority) if claims else None
