"""Reads that need the token (POLYTRACE_READ_TOKEN): refused without it on every read route,
answered with the bearer header or the cookie /login sets; a real browser signs in."""
from __future__ import annotations

import httpx
import pytest

from polytrace import settings
from polytrace.settings import SettingsError
from tests.test_api import PACKED, upload
from tests.test_browser import browser, console_errors, page  # noqa: F401  (Chromium as the other browser tests have it)

TOKEN = "s3cret-token"
READS = ["/", "/compare", "/queries", "/docs", "/openapi.json", "/api/runs", "/api/queries/runs",
         "/api/queries/runs?format=csv", "/runs/{run}", "/runs/{run}/live-parts", "/api/runs/{run}",
         "/api/runs/{run}/findings", "/api/runs/{run}/live"]


@pytest.fixture
def guarded(make_server):
    srv = make_server(token=TOKEN, read_token="required")
    run = upload(srv, [("packed_lengths_step_0.jsonl", PACKED)], token=TOKEN).json()["run_id"]
    return srv, run


def test_every_read_needs_the_token_and_the_bearer_header_opens_it(guarded):
    srv, run = guarded
    for path in (p.format(run=run) for p in READS):
        refused = httpx.get(srv.url + path)
        assert refused.status_code == 401, path
        assert "Sign in" in refused.text or refused.json()["error"].startswith("this server needs"), path
        assert refused.text.count(run) <= 1, path  # nothing of the run's data, at most its id echoed back
        wrong = httpx.get(srv.url + path, headers={"Authorization": "Bearer nope"})
        assert wrong.status_code == 401, path
        shown = httpx.get(srv.url + path, headers={"Authorization": f"Bearer {TOKEN}"})
        assert shown.status_code in (200, 304), (path, shown.status_code)
    # open to all: the health check (it says reads are guarded) and the served code
    assert httpx.get(f"{srv.url}/api/health").json()["reads_need_token"] is True
    assert httpx.get(f"{srv.url}/static/style.css").status_code == 200


def test_sign_in_sets_a_cookie_that_opens_the_pages_and_never_holds_the_token(guarded):
    srv, run = guarded
    with httpx.Client(base_url=srv.url) as client:
        wrong = client.post("/login", data={"token": "nope", "next": f"/runs/{run}"})
        assert wrong.status_code == 401 and "not this server" in wrong.text and not client.cookies
        signed = client.post("/login", data={"token": TOKEN, "next": f"/runs/{run}"})
        assert signed.status_code == 303 and signed.headers["location"] == f"/runs/{run}"
        cookie = signed.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN not in cookie
        assert client.get(f"/runs/{run}").status_code == 200
        assert client.get("/api/runs").json()["runs"][0]["run_id"] == run
    # a sign-in never sends the browser to another site
    away = httpx.post(f"{srv.url}/login", data={"token": TOKEN, "next": "//evil.example/x"})
    assert away.status_code == 303 and away.headers["location"] == "/"
    assert httpx.post(f"{srv.url}/login", content=b"token=" + b"x" * 5000,
                      headers={"Content-Type": "application/x-www-form-urlencoded"}).status_code == 413


def test_reads_are_guarded_by_default_off_loopback_and_open_on_it(monkeypatch):
    for name in settings.FIELDS:
        monkeypatch.delenv(f"POLYTRACE_{name.upper()}", raising=False)
    assert settings.Settings(host="0.0.0.0", token="t").reads_need_token is True
    assert settings.Settings(host="0.0.0.0", token="t", read_token="open").reads_need_token is False
    assert settings.Settings(host="127.0.0.1", token="t").reads_need_token is False
    assert settings.Settings(host="127.0.0.1", token="t", read_token="required").reads_need_token is True
    with pytest.raises(SettingsError, match="POLYTRACE_READ_TOKEN: required needs a token to show"):
        settings.Settings(read_token="required")
    with pytest.raises(SettingsError, match="POLYTRACE_READ_TOKEN: must be one of required, open"):
        settings.Settings(read_token="yes")


@pytest.mark.browser
def test_a_browser_signs_in_and_lands_on_the_page_it_asked_for(guarded, page):  # noqa: F811
    srv, run = guarded
    page.goto(f"{srv.url}/runs/{run}")
    page.fill("input[name=token]", TOKEN)
    page.click("button[type=submit]")
    page.wait_for_url(f"{srv.url}/runs/{run}")
    page.wait_for_selector("body[data-charts-ready]")
    assert page.locator("h1").first.inner_text() != "PolyTrace"
    assert page.locator(".chart-card").count() > 0
    # the sign-in page's own 401 is the only console error
    assert all("401" in text for text, _ in console_errors(page))
