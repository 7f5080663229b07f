"""The Host check, same-origin writes and security headers, against a real uvicorn server."""
from __future__ import annotations

import httpx

PACKED = b'{"step": 0, "rank": 0, "dp_rank": 0, "tp_rank": 0, "input": 10, "output": [1, 3]}\n'
FILE = {"file": ("packed_lengths_step_0.jsonl", PACKED)}


def runs(srv) -> list[str]:
    return [r["run_id"] for r in httpx.get(f"{srv.url}/api/runs").json()["runs"]]


def test_a_foreign_host_name_is_refused_in_the_error_shape(make_server):
    srv = make_server()
    r = httpx.get(f"{srv.url}/api/runs", headers={"Host": "rebind.attacker.example"})
    assert r.status_code == 400 and r.json() == {
        "ok": False, "status": 400,
        "error": "host 'rebind.attacker.example' is not one this server answers to (set POLYTRACE_ALLOWED_HOSTS)"}
    assert httpx.delete(f"{srv.url}/api/runs/x", headers={"Host": "rebind.attacker.example"}).status_code == 400
    assert httpx.get(f"{srv.url}/api/runs", headers={"Host": f"localhost:{srv.port}"}).status_code == 200
    listed = make_server(allowed_hosts=["polytrace.lab"])
    assert httpx.get(f"{listed.url}/api/runs", headers={"Host": "polytrace.lab:8000"}).status_code == 200
    anyone = make_server(allowed_hosts=["*"])
    assert httpx.get(f"{anyone.url}/api/runs", headers={"Host": "whatever.example"}).status_code == 200


def test_browser_writes_need_this_server_origin_and_its_csrf_token(make_server):
    srv = make_server()
    cross = {"Origin": "http://127.0.0.2:9999", "Sec-Fetch-Site": "cross-site"}
    r = httpx.post(f"{srv.url}/api/runs", files=FILE, headers=cross)
    assert r.status_code == 403 and r.json()["error"] == "cross-site write refused (Sec-Fetch-Site: cross-site)"
    r = httpx.post(f"{srv.url}/api/runs", files=FILE, headers={"Origin": "http://evil.example"})
    assert r.status_code == 403 and "Origin does not match" in r.json()["error"]
    same = {"Origin": srv.url, "Sec-Fetch-Site": "same-origin"}
    r = httpx.post(f"{srv.url}/api/runs", files=FILE, headers=same)
    assert r.status_code == 403 and "CSRF token is missing" in r.json()["error"]
    assert runs(srv) == []
    page = httpx.get(f"{srv.url}/").text
    token = page.split('name="polytrace-csrf" content="')[1].split('"')[0]
    r = httpx.post(f"{srv.url}/api/runs", files=FILE, headers={**same, "X-PolyTrace-CSRF": token})
    assert r.status_code == 201
    # scripts and curl send no Origin: they have no browser session to abuse
    assert httpx.delete(f"{srv.url}/api/runs/{r.json()['run_id']}").status_code == 200


def test_pages_carry_a_csp_that_runs_only_served_and_nonced_scripts(make_server):
    srv = make_server()
    r = httpx.get(f"{srv.url}/queries")
    csp = r.headers["content-security-policy"]
    nonce = csp.split("'nonce-")[1].split("'")[0]
    assert "script-src 'self' 'nonce-" in csp and "frame-ancestors 'none'" in csp
    assert r.headers["x-frame-options"] == "DENY" and r.headers["x-content-type-options"] == "nosniff"
    assert r.headers["referrer-policy"] == "same-origin"
    again = httpx.get(f"{srv.url}/queries").headers["content-security-policy"]
    assert nonce not in again  # a fresh nonce per response
    docs = httpx.get(f"{srv.url}/docs")
    docs_nonce = docs.headers["content-security-policy"].split("'nonce-")[1].split("'")[0]
    assert f'<script nonce="{docs_nonce}">' in docs.text and "<script>" not in docs.text


def test_accept_q_values_choose_the_format():
    from polytrace.server.responses import negotiate

    assert negotiate("text/csv;q=0") == "json"
    assert negotiate("text/csv;q=0.5, application/vnd.apache.parquet;q=0.9") == "parquet"
    assert negotiate("text/csv, application/json") == "csv"
    assert negotiate("text/html, */*;q=0.8") == "json"
    assert negotiate("text/csv;q=bogus") == "json"
