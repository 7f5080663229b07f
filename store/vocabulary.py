"""The metric vocabulary: each RL framework's logged keys mapped to the canonical names the catalog
reads (store/vocabulary/*.toml), kept in the `metric_vocabulary` table that the
`canonical_metrics` aggregate translates a run's step_metrics through."""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources

import duckdb

# A run whose framework no file maps reads its keys as verl's: the canonical names are verl's.
DEFAULT_FRAMEWORK = "verl"
COMBINE = ("first", "sum", "difference")
JOINS = {"first": " or ", "sum": " + ", "difference": " − "}  # how docs/frameworks.md's table joins keys


class VocabularyError(ValueError):
    """A vocabulary file that breaks the form store/vocabulary/README.md gives."""


@dataclass(frozen=True)
class Name:
    name: str
    unit: str
    means: str
    reads: str


@dataclass(frozen=True)
class Metric:
    name: str
    keys: tuple[str, ...]
    scale: float
    combine: str
    aggregation: str
    source: str


@dataclass
class Framework:
    framework: str
    display: str = ""
    repo: str = ""
    commit: str = ""
    license: str = ""
    signature: list[str] = field(default_factory=list)
    metrics: dict[str, Metric] = field(default_factory=dict)
    not_logged: dict[str, str] = field(default_factory=dict)
    stages: tuple[str, float] | None = None
    files: list[str] = field(default_factory=list)

    def covers(self, name: str) -> str | None:
        """'mapped', 'not logged', or None: what this framework's files say of a canonical name."""
        if name in self.metrics:
            return "mapped"
        for pattern in self.not_logged:
            if pattern == name or (pattern.endswith("*") and name.startswith(pattern[:-1])):
                return "not logged"
        return None


def _files() -> list:
    folder = resources.files("polytrace.store").joinpath("vocabulary")
    return sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)


def _toml(f) -> dict:
    import tomllib  # where used: a command that only opens a database parses no mapping

    try:
        return tomllib.loads(f.read_text())
    except tomllib.TOMLDecodeError as e:
        raise VocabularyError(f"store/vocabulary/{f.name}: {e}") from None


@lru_cache(maxsize=1)
def names() -> dict[str, Name]:
    """Every canonical name (canonical*.toml), in file order."""
    out: dict[str, Name] = {}
    for f in _files():
        if f.name.startswith("canonical"):
            for name, spec in _toml(f).items():
                out[name] = Name(name, spec["unit"], spec["means"], spec.get("reads", ""))
    return out


@lru_cache(maxsize=1)
def frameworks() -> dict[str, Framework]:
    """Each framework's mapping; files with the same `framework` value are merged."""
    known = names()
    out: dict[str, Framework] = {}
    for f in _files():
        if f.name.startswith("canonical"):
            continue
        data = _toml(f)
        where = f"store/vocabulary/{f.name}"
        if "framework" not in data:
            raise VocabularyError(f"{where}: no `framework` value")
        fw = out.setdefault(data["framework"], Framework(data["framework"]))
        fw.files.append(f.name)
        for key in ("display", "repo", "commit", "license"):
            if data.get(key):
                setattr(fw, key, data[key])
        fw.signature += data.get("signature", [])
        for name, spec in data.get("metric", {}).items():
            fw.metrics[name] = _metric(name, spec, known, where)
        for name, why in data.get("not_logged", {}).items():
            if not name.endswith("*") and name not in known:
                raise VocabularyError(f"{where}: not_logged names {name!r}, which is no canonical name")
            fw.not_logged[name] = why
        if "stages" in data:
            fw.stages = (data["stages"]["prefix"], float(data["stages"].get("scale", 1.0)))
    return out


def framework_named(value: str) -> str:
    """The framework a user names (any case), checked against the mapping files."""
    name = value.strip().lower()
    if name not in frameworks():
        raise VocabularyError(f"unknown framework {value[:40]!r}: expected one of {', '.join(sorted(frameworks()))}")
    return name


def _metric(name: str, spec: dict, known: dict[str, Name], where: str) -> Metric:
    if name not in known:
        raise VocabularyError(f"{where}: [metric.{name!r}] is no canonical name (canonical*.toml)")
    keys = spec.get("keys")
    if not keys or not all(isinstance(k, str) and k for k in keys):
        raise VocabularyError(f"{where}: [metric.{name!r}] needs keys, a list of logged keys")
    combine = spec.get("combine", "first")
    if combine not in COMBINE:
        raise VocabularyError(f"{where}: [metric.{name!r}] combine must be one of {', '.join(COMBINE)}")
    if combine == "difference" and len(keys) < 2:
        raise VocabularyError(f"{where}: [metric.{name!r}] combine = \"difference\" needs two keys or more")
    return Metric(name, tuple(keys), float(spec.get("scale", 1.0)), combine,
                  spec.get("aggregation", ""), spec.get("source", ""))


COLUMNS = ("framework", "kind", "key", "name", "scale", "combine", "position")


def rows() -> list[tuple]:
    """The metric_vocabulary table's rows, in COLUMNS."""
    out = []
    for fw in frameworks().values():
        for m in fw.metrics.values():
            out += [(fw.framework, "metric", k, m.name, m.scale, m.combine, i) for i, k in enumerate(m.keys)]
        if fw.stages:
            out.append((fw.framework, "stage", fw.stages[0], "timing_s/", fw.stages[1], "first", None))
        out += [(fw.framework, "signature", k, None, None, None, None) for k in fw.signature]
    return out


@lru_cache(maxsize=1)
def digest() -> str:
    """Changes whenever a mapping file does: stored runs then translate their metrics again. Taken
    from the files' text, unparsed, as the catalog's digest is: every command that opens a
    database checks it, and parsing the files costs a light command a fifth of its time."""
    return hashlib.sha256(repr([(f.name, f.read_text()) for f in _files()]).encode()).hexdigest()[:16]


def fill(con: duckdb.DuckDBPyConnection) -> None:
    """Put the files' mappings in the metric_vocabulary table, inside the caller's transaction."""
    con.execute("DELETE FROM metric_vocabulary")
    # one statement over a list of structs: executemany runs one INSERT per row, and this runs
    # whenever a database is created
    con.execute("INSERT INTO metric_vocabulary BY NAME SELECT unnest($rows, recursive := true)",
                {"rows": [dict(zip(COLUMNS, r)) for r in rows()]})


def detected(con: duckdb.DuckDBPyConnection, run_id: str) -> str | None:
    """The framework whose signature keys the run's step_metrics log most, or None."""
    found = con.execute(
        "SELECT v.framework, count(DISTINCT m.key) AS hits FROM step_metrics m JOIN metric_vocabulary v "
        "ON v.kind = 'signature' AND (m.key = v.key OR (ends_with(v.key, '/') AND starts_with(m.key, v.key))) "
        "WHERE m.run_id = ? GROUP BY v.framework ORDER BY hits DESC, v.framework LIMIT 1",
        [run_id]).fetchall()
    return found[0][0] if found else None


def markdown() -> str:
    """docs/frameworks.md's table: each canonical name and, per framework, the key its runs log it under
    (a `+` joins keys summed, a `−` keys subtracted from the first; `—` not logged), so a user can check it against their own logs."""
    fws = sorted(frameworks().values(), key=lambda f: (f.framework != "verl", f.framework))
    head = ["name", "unit", *(f.display or f.framework for f in fws)]
    lines = ["| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for name, spec in sorted(names().items(), key=lambda item: item[0].startswith("async/")):
        lines.append("| " + " | ".join([f"`{name}`", spec.unit, *(_cell(f, name) for f in fws)]) + " |")
    return "\n".join(lines)


def _cell(fw: Framework, name: str) -> str:
    if name in fw.metrics:
        m = fw.metrics[name]
        keys = JOINS[m.combine].join(f"`{k}`" for k in m.keys[:3])
        more = f" (+{len(m.keys) - 3})" if len(m.keys) > 3 else ""
        return keys + more + (f" ×{m.scale:g}" if m.scale != 1 else "")
    return "—"


if __name__ == "__main__":
    print(markdown())
