"""Reads that need the token (POLYTRACE_READ_TOKEN): every page, query, export, live part and
/docs answers only a request that shows POLYTRACE_TOKEN, as `Authorization: Bearer` (scripts,
`polytrace watch --server`) or as the cookie a browser gets by signing in once at /login.

Open to anyone: /api/health (a container's health check), the static assets (the served code,
no data) and /login itself."""
from __future__ import annotations

import hmac
from html import escape
from urllib.parse import parse_qs

from starlette.responses import HTMLResponse, RedirectResponse

from polytrace.server.errors import error_response
from polytrace.server.security import ASGIApp, Scope
from polytrace.settings import Settings

COOKIE = "polytrace_read"
OPEN = ("/api/health", "/static/", "/docs-static/", "/login")
# A sign-in form is a token and a path: anything longer is not one
LOGIN_MAX_BYTES = 4096


def cookie_value(token: str) -> str:
    """What the cookie holds: a digest of the token, never the token itself."""
    return hmac.new(token.encode(), b"polytrace-read", "sha256").hexdigest()


class ReadGate:
    """Answer only requests that show the token, when reads need it (Settings.reads_need_token)."""

    def __init__(self, app: ASGIApp, settings: Settings):
        self.app = app
        self.token = settings.token if settings.reads_need_token else None

    async def __call__(self, scope: Scope, receive, send) -> None:
        path = scope.get("path", "")
        if self.token is None or scope["type"] != "http" or path.startswith(OPEN) and path != "/login":
            await self.app(scope, receive, send)
            return
        if path == "/login":
            response = await self._login(scope, receive)
        elif self._shown(scope):
            await self.app(scope, receive, send)
            return
        elif path.startswith("/api/") or path == "/openapi.json":
            response = error_response(401, "this server needs 'Authorization: Bearer <POLYTRACE_TOKEN>' "
                                           "for reads too (POLYTRACE_READ_TOKEN)", {"WWW-Authenticate": "Bearer"})
        else:
            response = _sign_in_page(_here(scope), status=401)
        await response(scope, receive, send)

    def _shown(self, scope: Scope) -> bool:
        headers = dict(scope["headers"])
        bearer = headers.get(b"authorization", b"").decode("latin-1")
        if bearer[:7].lower() == "bearer " and hmac.compare_digest(bearer[7:].encode(), self.token.encode()):
            return True
        cookies = headers.get(b"cookie", b"").decode("latin-1")
        sent = [c.split("=", 1)[1] for c in cookies.split("; ") if c.startswith(COOKIE + "=")]
        return any(hmac.compare_digest(s.encode(), cookie_value(self.token).encode()) for s in sent)

    async def _login(self, scope: Scope, receive):
        """GET: the sign-in form. POST (token, next): the cookie, and back to `next`."""
        if scope["method"] != "POST":
            return _sign_in_page(_next(parse_qs(scope.get("query_string", b"").decode("latin-1"))), status=200)
        body = await _body(receive)
        if body is None:
            return error_response(413, f"a sign-in form is at most {LOGIN_MAX_BYTES} bytes")
        form = parse_qs(body.decode("utf-8", errors="replace"))
        target = _next(form)
        sent = (form.get("token") or [""])[0]
        if not hmac.compare_digest(sent.encode(), self.token.encode()):
            return _sign_in_page(target, status=401, wrong=True)
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(COOKIE, cookie_value(self.token), httponly=True, samesite="strict", path="/")
        return response


async def _body(receive) -> bytes | None:
    """The request's body, or None past LOGIN_MAX_BYTES."""
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if len(body) > LOGIN_MAX_BYTES:
            return None
        if not message.get("more_body"):
            return body


def _here(scope: Scope) -> str:
    query = scope.get("query_string", b"").decode("latin-1")
    return scope.get("path", "/") + (f"?{query}" if query else "")


def _next(form: dict[str, list[str]]) -> str:
    """Where to go after signing in: a path on this server, never another site."""
    target = (form.get("next") or ["/"])[0]
    return target if target.startswith("/") and not target.startswith(("//", "/\\")) else "/"


def _sign_in_page(target: str, *, status: int, wrong: bool = False) -> HTMLResponse:
    said = '<p class="error-line" role="alert">That is not this server\'s token.</p>' if wrong else ""
    return HTMLResponse(
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · PolyTrace</title>'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="stylesheet" href="/static/style.css"></head><body><main>'
        '<h1>PolyTrace</h1><p>This server shows its runs to those who have its token '
        '(<code>POLYTRACE_TOKEN</code>).</p>' + said +
        '<form method="post" action="/login" class="sign-in">'
        f'<input type="hidden" name="next" value="{escape(target)}">'
        '<label>Token <input type="password" name="token" autocomplete="current-password" required autofocus>'
        '</label> <button type="submit">Sign in</button></form></main></body></html>',
        status_code=status)
