"""The catalog's digest: what a stored result was computed by, and which answers a run's last
refresh kept. Taken from the catalog files' text, unparsed, and kept apart from the catalog package
(whose import parses nothing but costs a light command a tenth of its time), so that a command
served by a kept answer or findings list imports no more than this."""
from __future__ import annotations

import hashlib
from functools import lru_cache
from importlib import resources
from pathlib import Path

from polytrace import settings


def sql_files(folder) -> list:
    return sorted((e for e in folder.iterdir() if e.name.endswith(".sql")), key=lambda e: e.name)


def extra_queries() -> str | None:
    """$POLYTRACE_EXTRA_QUERIES: a folder of a site's own queries, or None."""
    extra = settings.get().extra_queries
    return str(extra) if extra else None


def digest() -> str:
    """Changes whenever any query or view of the catalog does, or which are stored."""
    return _digest(extra_queries())


@lru_cache(maxsize=4)
def _digest(extra: str | None) -> str:
    return digest_of(catalog_texts(extra))


def catalog_texts(extra: str | None) -> list[tuple[str, str]]:
    """Each catalog file's name and text, views and a site's own queries included."""
    bundled = resources.files("polytrace.queries")
    folders = {"": bundled, "views/": bundled.joinpath("views")}
    if extra and Path(extra).is_dir():
        folders["extra/"] = Path(extra)
    return [(prefix + e.name, e.read_text()) for prefix, folder in folders.items() for e in sql_files(folder)]


def digest_of(texts: list[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    for name, text in sorted(texts):  # each text as it is: a repr of them all took 9 ms
        h.update(f"{name}\0{len(text)}\0".encode())
        h.update(text.encode())
    return h.hexdigest()[:16]
