"""What protects a server a browser can reach: the Host check (DNS rebinding), same-origin writes
(CSRF) and the security headers (a CSP that runs only the served scripts)."""
from __future__ import annotations

import hmac
import secrets
from typing import Any, Awaitable, Callable
from urllib.parse import urlsplit

from polytrace.server.errors import ApiError, error_response
from polytrace.settings import Settings

LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "::1", "[::1]"}
CSRF_HEADER = "x-polytrace-csrf"
# Browsers label every request with where it came from; these may write.
SAME_SITE = {"same-origin", "none"}


def allowed_hosts(settings: Settings) -> set[str] | None:
    """Host names a request may name (without port); None lets any through ("*")."""
    if "*" in settings.allowed_hosts:
        return None
    hosts = LOOPBACK_HOSTS | {h.lower() for h in settings.allowed_hosts}
    if settings.host not in ("0.0.0.0", "::"):
        hosts.add(settings.host.lower())
    return hosts


def _host_name(host: str) -> str:
    """'example.org:8000' -> 'example.org', '[::1]:8000' -> '[::1]'."""
    if host.startswith("["):
        return host[:host.find("]") + 1].lower()
    return host.rsplit(":", 1)[0].lower() if host.count(":") == 1 else host.lower()


Scope = dict[str, Any]
ASGIApp = Callable[[Scope, Callable, Callable], Awaitable[None]]


class HostCheck:
    """Refuse a request whose Host names this server by a name it was not given: a page on
    another site that re-points its DNS name at 127.0.0.1 sends its own name."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app, self.hosts = app, allowed_hosts(settings)

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] == "http" and self.hosts is not None:
            host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
            if _host_name(host) not in self.hosts:
                shown = host if host.isprintable() and len(host) < 100 else "(unprintable)"
                response = error_response(400, f"host {shown!r} is not one this server answers to "
                                               "(set POLYTRACE_ALLOWED_HOSTS)")
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)


def csp(nonce: str) -> str:
    return ("default-src 'self'; "
            f"script-src 'self' 'nonce-{nonce}'; "
            # plotly.js sets inline styles on the elements it draws
            "style-src 'self' 'unsafe-inline'; "
            "img-src 'self' data: blob:; font-src 'self' data:; connect-src 'self'; "
            "object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")


class SecurityHeaders:
    """Give each response a fresh script nonce (request.state.csp_nonce, used by the pages'
    inline scripts) and the headers that keep the pages from being framed or sniffed."""

    def __init__(self, app: ASGIApp):
        self.app = app

    async def __call__(self, scope: Scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["csp_nonce"] = nonce
        headers = [
            (b"content-security-policy", csp(nonce).encode()),
            (b"x-frame-options", b"DENY"),
            (b"x-content-type-options", b"nosniff"),
            (b"referrer-policy", b"same-origin"),
        ]

        async def with_headers(message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *headers]
            await send(message)

        await self.app(scope, receive, with_headers)


def csrf_token(secret: bytes) -> str:
    """The token the dashboard's scripts send with writes; a page on another origin cannot read it."""
    return hmac.new(secret, b"polytrace-csrf", "sha256").hexdigest()


def check_same_origin(headers, host: str, settings: Settings, secret: bytes) -> None:
    """Without a bearer token, a write from a browser must come from this server's own pages.

    Browsers send Origin and Sec-Fetch-Site with every cross-origin POST, even `no-cors`
    ones; scripts and curl send neither, and have no browser session to abuse.
    """
    site = headers.get("sec-fetch-site")
    origin = headers.get("origin")
    if site is None and origin is None:
        return
    if origin is not None and origin in settings.cors_origins:
        return
    if site is not None and site not in SAME_SITE:
        raise ApiError(403, f"cross-site write refused (Sec-Fetch-Site: {site})")
    if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
        raise ApiError(403, "cross-origin write refused (Origin does not match this server)")
    sent = headers.get(CSRF_HEADER, "")
    if not hmac.compare_digest(sent.encode(), csrf_token(secret).encode()):
        raise ApiError(403, "write refused: the dashboard's CSRF token is missing or wrong "
                            "(reload the page)")
