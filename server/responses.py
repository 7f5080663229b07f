"""HTTP responses: a query Answer as JSON (non-finite floats as null), CSV and Parquet, and
static files compressed for the clients that accept it."""
from __future__ import annotations

import gzip
import mimetypes
import os
import re
import stat
import threading
from typing import Any
from urllib.parse import quote

import msgspec
from fastapi.responses import JSONResponse
from starlette.datastructures import Headers
from starlette.responses import FileResponse, Response
from starlette.staticfiles import NotModifiedResponse, StaticFiles

from polytrace.queries import render
from polytrace.queries.runner import Answer

# Accept header type -> the format it asks for (queries/render.py RENDERERS)
_ACCEPT = {kind: name for name in render.HTTP_FORMATS for kind in render.RENDERERS[name].accepts}
# msgspec writes NaN and infinities as null, which is what JSON clients can read.
_encoder = msgspec.json.Encoder(decimal_format="number", enc_hook=str)


class Json(JSONResponse):
    """JSONResponse that never fails on NaN, Decimal or dates."""

    def render(self, content: Any) -> bytes:
        return _encoder.encode(content)


def negotiate(accept: str | None) -> str:
    """The format the Accept header prefers most (highest q, then first named) among those we
    serve; a type with q=0 is refused; JSON otherwise."""
    offers = []
    for i, item in enumerate((accept or "").split(",")):
        kind, *params = (part.strip() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip().lower() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if kind.lower() in _ACCEPT and q > 0:
            offers.append((-q, i, _ACCEPT[kind.lower()]))
    return min(offers)[2] if offers else "json"


def attachment(filename: str) -> dict[str, str]:
    """A download's Content-Disposition for any name (a run id or query name of HTML or emoji
    included): an ASCII stand-in, and the name itself percent-encoded (RFC 6266)."""
    plain = re.sub(r"[^A-Za-z0-9._-]", "_", filename)
    return {"Content-Disposition": f"attachment; filename=\"{plain}\"; filename*=UTF-8''{quote(filename, safe='')}"}


def _disposition(name: str, fmt: str) -> dict[str, str]:
    return attachment(f"{name}.{fmt}")


def _truncated_header(truncated: bool) -> dict[str, str]:
    return {"X-PolyTrace-Truncated": "true" if truncated else "false"}


def download(answer: Answer, name: str, fmt: str) -> Response:
    """A query's answer as a file of format `fmt` (any HTTP format of RENDERERS but JSON's body)."""
    renderer = render.RENDERERS[fmt]
    return Response(renderer.render(answer), media_type=renderer.media_type,
                    headers={**_disposition(name, fmt), **_truncated_header(answer.truncated)})


# ---- static files ---------------------------------------------------------------------------

# Text worth compressing; images other than SVG and fonts already are.
COMPRESSIBLE = (".js", ".css", ".svg", ".json", ".html", ".txt", ".map")
# application/javascript, as the dashboard always served its scripts (mimetypes says text/javascript).
_MEDIA_TYPES = {".js": "application/javascript"}
# Encodings by preference, and the suffix of a file precompressed with each.
_ENCODINGS = (("br", ".br"), ("gzip", ".gz"))


def accepted_encodings(header: str | None) -> set[str]:
    """Content codings an Accept-Encoding header accepts (q > 0); `*` accepts gzip and br."""
    out: set[str] = set()
    for item in (header or "").split(","):
        coding, *params = (part.strip().lower() for part in item.split(";"))
        q = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    q = float(value)
                except ValueError:
                    q = 0.0
        if coding and q > 0:
            out |= {"gzip", "br"} if coding == "*" else {coding}
    return out


class CompressedStaticFiles(StaticFiles):
    """StaticFiles that answer text files compressed when the client accepts it, with
    Content-Encoding, Vary: Accept-Encoding, an ETag per encoding and Cache-Control.

    A file precompressed beside it (NAME.br, NAME.gz) is sent as it is, but only while NAME.gz
    inflates to NAME's bytes (checked once per version of the file: both are made together, so
    a replaced file without new siblings is never answered with stale ones). A file kept only
    precompressed (the vendored plotly bundle: its plain copy would pass the 1 MiB a tracked
    file may weigh) is served from NAME.gz, inflated in memory for a client that takes no
    coding. Any other compressible file is gzipped in memory once per version (size and mtime)
    of it, so an edited file is never served stale either.

    `cache_control` maps a file name to its Cache-Control; the rest get `default_cache`
    (revalidate every time: the URLs carry no version)."""

    def __init__(self, *args, cache_control: dict[str, str] | None = None,
                 default_cache: str = "no-cache", **kwargs):
        super().__init__(*args, **kwargs)
        self.cache_control = cache_control or {}
        self.default_cache = default_cache
        self._variants: dict[str, tuple[tuple, dict[str, str | bytes]]] = {}
        self._lock = threading.Lock()

    def lookup_path(self, path: str) -> tuple[str, os.stat_result | None]:
        """Find the file (StaticFiles runs this in a worker thread) and make its compressed
        variants there, off the event loop."""
        full_path, st = super().lookup_path(path)
        if st is None and path.endswith(COMPRESSIBLE):
            packed, st = super().lookup_path(path + ".gz")
            full_path = packed[:-len(".gz")] if st is not None else full_path
        if st is not None and stat.S_ISREG(st.st_mode) and full_path.endswith(COMPRESSIBLE):
            self._variants_of(full_path, st)
        return full_path, st

    def file_response(self, full_path, stat_result: os.stat_result, scope, status_code: int = 200) -> Response:
        request_headers = Headers(scope=scope)
        name = os.path.basename(full_path)
        headers = {"cache-control": self.cache_control.get(name, self.default_cache)}
        media_type = _media_type(name)
        if not name.endswith(COMPRESSIBLE) or status_code != 200:
            response = FileResponse(full_path, status_code=status_code, stat_result=stat_result,
                                    headers=headers, media_type=media_type)
        else:
            headers["vary"] = "Accept-Encoding"
            accepted = accepted_encodings(request_headers.get("accept-encoding"))
            variants = self._variants_of(str(full_path), stat_result)
            coding = next((c for c, _ in _ENCODINGS if c in accepted and c in variants), None)
            if coding is None and "identity" not in variants:
                response = FileResponse(full_path, stat_result=stat_result, headers=headers, media_type=media_type)
            else:
                coding = coding or "identity"
                response = self._encoded(full_path, stat_result, media_type, coding, variants[coding],
                                         headers, scope)
        if self.is_not_modified(response.headers, request_headers):
            return NotModifiedResponse(response.headers)
        return response

    def _encoded(self, full_path, stat_result, media_type: str, coding: str, body: str | bytes,
                 headers: dict, scope) -> Response:
        """The file in one content coding (identity: a file kept only precompressed, inflated):
        a precompressed sibling's path, or bytes."""
        probe = FileResponse(full_path, stat_result=stat_result)  # the identity ETag and dates
        etag = probe.headers["etag"] if coding == "identity" else probe.headers["etag"][:-1] + f'-{coding}"'
        headers = {**headers, "last-modified": probe.headers["last-modified"], "etag": etag}
        if coding != "identity":
            headers["content-encoding"] = coding
        if isinstance(body, str):
            return FileResponse(body, media_type=media_type, headers=headers)
        headers["content-length"] = str(len(body))
        head = scope.get("method") == "HEAD"
        return Response(b"" if head else body, media_type=media_type, headers=headers)

    def _variants_of(self, path: str, st: os.stat_result) -> dict[str, str | bytes]:
        """coding -> a precompressed file's path or the compressed bytes, for this version of path."""
        version = (st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._variants.get(path)
            if known and known[0] == version:
                return known[1]
            variants = _precompressed(path) or _gzipped(path, st.st_size)
            self._variants[path] = (version, variants)
            return variants


def _media_type(name: str) -> str:
    return _MEDIA_TYPES.get(os.path.splitext(name)[1]) or mimetypes.guess_type(name)[0] or "text/plain"


def _precompressed(path: str) -> dict[str, str | bytes]:
    """The siblings NAME.br and NAME.gz when NAME.gz inflates to NAME, or when NAME is kept only
    precompressed (then with "identity": NAME.gz inflated); else none."""
    if not os.path.isfile(path + ".gz"):
        return {}
    if not os.path.isfile(path):
        with gzip.open(path + ".gz", "rb") as z:
            identity = z.read()
        return {"identity": identity, **_siblings(path)}
    with open(path, "rb") as f, gzip.open(path + ".gz", "rb") as z:
        try:
            if z.read() != f.read():
                return {}
        except (OSError, EOFError):
            return {}
    return _siblings(path)


def _siblings(path: str) -> dict[str, str]:
    return {coding: path + suffix for coding, suffix in _ENCODINGS if os.path.isfile(path + suffix)}


def _gzipped(path: str, size: int) -> dict[str, bytes]:
    """{"gzip": the file gzipped}, or nothing for a file too small to gain from it."""
    with open(path, "rb") as f:
        packed = gzip.compress(f.read(), compresslevel=9, mtime=0)
    return {"gzip": packed} if len(packed) < size else {}
