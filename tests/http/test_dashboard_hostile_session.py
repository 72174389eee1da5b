"""Hostile session input against a real hub: before the fix a session cookie holding a
non-ASCII character (no token needed) was a 500 on every GET route, `/ui/jobs?limit=²`
was a 500, and so was a non-ASCII `csrf_token` on a dashboard action."""

from __future__ import annotations

import httpx
from hubproc import Hub, Tokens

# a header is Latin-1 on the wire: "é" arrives as the character U+00E9
ODD_COOKIE = "jobcore_session=abc\xe9.d\xe9f".encode("latin-1")


def test_a_non_ascii_session_cookie_is_no_session(hub: Hub, tokens: Tokens) -> None:
    with httpx.Client(base_url=hub.url, timeout=30) as anonymous:
        for path in ("/api/jobs", "/api/stats", "/api/workers", "/ui/jobs", "/"):
            answer = anonymous.get(path, headers={"cookie": ODD_COOKIE}, follow_redirects=False)
            assert answer.status_code in (401, 303), (path, answer.status_code, answer.text)
        # with a valid token beside it, the token decides
        answer = anonymous.get(
            "/api/jobs",
            headers={"cookie": ODD_COOKIE, "authorization": f"Bearer {tokens.read}"},
        )
        assert answer.status_code == 200, answer.text


def test_odd_limits_and_csrf_tokens_are_defaults_or_4xx(hub: Hub, tokens: Tokens) -> None:
    with hub.client() as browser:
        signed = browser.post("/ui/login", data={"token": tokens.produce}, follow_redirects=False)
        assert signed.status_code == 303, signed.text
        for limit in ("²", "٣", "1e3", "-5", ""):
            answer = browser.get("/ui/jobs", params={"limit": limit})
            assert answer.status_code == 200, (limit, answer.text[:200])
        answer = browser.get("/ui/jobs", params={"done": "retry", "n": "²"})
        assert answer.status_code == 200
        answer = browser.post(
            "/ui/bulk",
            content=b"action=cancel&csrf_token=%C3%A9t%C3%A9",
            headers={"content-type": "application/x-www-form-urlencoded"},
            follow_redirects=False,
        )
        assert 400 <= answer.status_code < 500, (answer.status_code, answer.text[:200])
