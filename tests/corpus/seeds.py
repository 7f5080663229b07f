"""The corpus seeds: each registered format's own sample (Format.sample), and the same sample
in each container the source layer opens (gzip, .tar.gz, .zip).

A seed is a set of files (relative path -> bytes), the file that mutations target, and the
CLI arguments that ingest it. Nothing here names a format: a new format brings its sample.
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

from polytrace.ingest import registry
from polytrace.ingest.contract import Format

# The folder an archive seed keeps the sample's files in.
ARCHIVE_FOLDER = "run"


@dataclass
class Seed:
    files: dict[str, bytes]
    target: str                       # the file mutations rewrite
    paths: list[str]                  # CLI arguments, relative to the case directory
    forced: bool = True               # pass --format (False: let detection choose)
    records: list = field(default_factory=list)  # JSON records of `target`, for typed mutations
    members: dict[str, bytes] = field(default_factory=dict)  # an archive seed's files, target first

    @property
    def directory(self) -> bool:
        """Its argument is a directory (a format that takes one whole), not files."""
        return not all(p in self.files for p in self.paths)


def jsonl(records: list) -> bytes:
    return "".join(json.dumps(r) + "\n" for r in records).encode()


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


def _records(name: str, data: bytes) -> list:
    """The JSON records of a JSON-lines or JSON file; [] for anything else."""
    try:
        if name.endswith(".jsonl"):
            return [json.loads(line) for line in data.splitlines() if line.strip()]
        if name.endswith(".json"):
            return [json.loads(data)]
    except ValueError:
        pass
    return []


def sample_seed(fmt: Format) -> Seed:
    """The format's sample as a seed: mutations target its first file the format detects as
    its own, and --format is passed when every argument detects as the format anyway."""
    sample = fmt.sample()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel, data in sample.files.items():
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_bytes(data)
        mine = [rel for rel in sample.files if registry.detect(root / rel) is fmt]
        args = [root / a for a in sample.args]
        claims = [registry.claiming(p) if p.is_dir() else registry.detect(p) for p in args]
        forced = all(f is fmt for f in claims)
    target = mine[0] if mine else sorted(sample.files)[0]
    return Seed(dict(sample.files), target, list(sample.args), forced,
                _records(target, sample.files[target]))


def container_seeds(seed: Seed) -> list[Seed]:
    """The seed's files gzipped one by one, and packed into a .tar.gz and a .zip."""
    if seed.directory:
        return []
    gz = {f"{k}.gz": gzip.compress(v, mtime=0) for k, v in seed.files.items()}
    # the target first: designed archive cases rewrite the first member
    ordered = [seed.target, *(k for k in seed.files if k != seed.target)]
    members = {f"{ARCHIVE_FOLDER}/{k}": seed.files[k] for k in ordered}
    return [
        Seed(gz, f"{seed.target}.gz", [f"{p}.gz" for p in seed.paths], seed.forced),
        Seed({"sample.tar.gz": tar_gz(members)}, "sample.tar.gz", ["sample.tar.gz"], seed.forced,
             members=members),
        Seed({"sample.zip": zip_of(members)}, "sample.zip", ["sample.zip"], seed.forced, members=members),
    ]


@lru_cache(maxsize=None)
def seeds_of(name: str) -> tuple[Seed, ...]:
    """A registered format's seeds: its sample, then the sample in containers."""
    seed = sample_seed(registry.get(name))
    return (seed, *container_seeds(seed))


def seeds() -> dict[str, tuple[Seed, ...]]:
    """Format name -> its seeds, for every registered format."""
    return {f.name: seeds_of(f.name) for f in registry.FORMATS}
