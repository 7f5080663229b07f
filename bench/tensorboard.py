"""TensorBoard event-file parse speed: polytrace's parse against a decode-only loop over the same bytes.

Writes an events file of about --mb MB with tensorboardX's SummaryWriter, as an RL trainer logs:
--tags scalars per step, one add_scalar (one Event) each. Then times, best of --repeat, in CPU
seconds of this process:
(a) decode only: the file read a batch at a time, each record framed and both its checksums
    checked (google-crc32c), each Event decoded with the same protobuf classes (tensorboardX's,
    upb backend), and each value's tag, kind and number read: no Arrow, nothing kept;
(b) polytrace's parse (ingest.formats.tensorboard_events.parse): the same, plus keeping the last
    value per (step, tag) and the Arrow table.
Cyclic GC is paused for both, as ingest.workers pauses it around every parse.
Prints MB per CPU-second of each and the ratio (b)/(a); issue 42 asks for >= 0.85.
Needs the tensorboard extra: pip install 'polytrace[tensorboard]'.
"""
from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[0] = str(ROOT)

BATCH = 8 << 20
HEADER = struct.Struct("<QI")
U32 = struct.Struct("<I")


def write(folder: Path, mb: int, tags: int) -> Path:
    from tensorboardX import SummaryWriter

    writer = SummaryWriter(str(folder), max_queue=1000, flush_secs=3600)
    names = [f"{('timing', 'rollout', 'actor', 'perf')[k % 4]}/metric_{k}" for k in range(tags)]
    step = 0
    path = next(folder.glob("events.out.tfevents.*"))
    while path.stat().st_size < mb * 10**6:
        for _ in range(100):
            step += 1
            for k, name in enumerate(names):
                writer.add_scalar(name, (step * 31 + k) % 1000 / 7.0, step)
        writer.flush()
    writer.close()
    return path


def masked(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def decode_only(path: Path) -> int:
    """Records framed and checked, Events decoded, every value's fields read; the values read."""
    from google_crc32c import value as crc
    from tensorboardX.proto.event_pb2 import Event

    decode, n, buf, pos = Event.FromString, 0, b"", 0
    with open(path, "rb") as f:
        while block := f.read(BATCH):
            buf, pos = buf[pos:] + block, 0
            end = len(buf)
            while end - pos >= 12:
                length, header_crc = HEADER.unpack_from(buf, pos)
                if masked(crc(buf[pos:pos + 8])) != header_crc:
                    raise ValueError("bad header")
                stop = pos + 12 + length
                if stop + 4 > end:
                    break
                payload = buf[pos + 12:stop]
                if masked(crc(payload)) != U32.unpack_from(buf, stop)[0]:
                    raise ValueError("bad payload")
                event = decode(payload)
                step, wall = event.step, event.wall_time  # noqa: F841
                for v in event.summary.value:
                    if v.WhichOneof("value") == "simple_value":
                        tag, x = v.tag, v.simple_value  # noqa: F841
                        n += 1
                pos = stop + 4
    return n


def cpu_best(fn, repeat: int) -> float:
    """Best CPU time of `repeat` calls, cyclic GC paused as an ingest pauses it around a parse."""
    from polytrace.ingest.workers import gc_paused

    best = float("inf")
    for _ in range(repeat):
        with gc_paused():
            start = time.process_time()
            fn()
            best = min(best, time.process_time() - start)
    return best


def main() -> None:
    from polytrace.ingest.formats import tensorboard_events

    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--mb", type=int, default=50, help="size of the events file to write (MB)")
    ap.add_argument("--tags", type=int, default=150, help="scalars per step")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="polytrace-bench-tb-") as tmp:
        start = time.perf_counter()
        path = write(Path(tmp), args.mb, args.tags)
        size = path.stat().st_size / 1e6
        print(f"wrote {size:.1f} MB with tensorboardX in {time.perf_counter() - start:.0f} s")
        values = decode_only(path)
        rows = tensorboard_events.parse(path).deferred.num_rows
        assert rows == values, (rows, values)  # every value is a distinct (step, tag)
        floor = cpu_best(lambda: decode_only(path), args.repeat)
        ours = cpu_best(lambda: tensorboard_events.parse(path), args.repeat)
    print(f"{values:,} scalars")
    print(f"(a) decode only     {size / floor:7.1f} MB/CPU-s  ({floor:.2f} s)")
    print(f"(b) polytrace parse {size / ours:7.1f} MB/CPU-s  ({ours:.2f} s)")
    print(f"ratio (b)/(a): {floor / ours:.3f}  (issue 42 asks >= 0.85)")


if __name__ == "__main__":
    main()
