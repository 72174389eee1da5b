"""Session cookies and CSRF tokens: signed, expiring, revocable."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from jobcore_http.dashboard import session
from starlette.requests import Request


class _State:
    pass


class _App:
    def __init__(self, tokens: dict[str, tuple[str, str]]) -> None:
        self.state = _State()
        self.state.token_lookup = tokens.get  # type: ignore[attr-defined]


def request(app: _App, cookie: str | None, method: str = "GET") -> Request:
    headers = [(b"cookie", f"{session.COOKIE}={cookie}".encode())] if cookie else []
    return Request({"type": "http", "method": method, "headers": headers, "app": app, "path": "/"})


@pytest.fixture(autouse=True)
def state_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    monkeypatch.delenv("JOBCORE_HTTP_SESSION_SECRET", raising=False)
    return tmp_path


def test_a_signed_cookie_names_the_token_until_it_is_revoked() -> None:
    digest = session.token_hash("secret-token")
    tokens = {digest: ("ops", "produce")}
    app = _App(tokens)
    cookie = session.make_cookie(session.app_key(request(app, None)), digest)
    found = session.read_session(request(app, cookie))
    assert found is not None and (found.name, found.scope, found.can_act) == (
        "ops",
        "produce",
        True,
    )
    assert session.csrf_ok(found, found.csrf) and not session.csrf_ok(found, "x" * 40)
    assert session.scope_from_cookie(request(app, cookie)) == "produce"
    assert session.scope_from_cookie(request(app, cookie, "POST")) is None
    del tokens[digest]
    assert session.read_session(request(app, cookie)) is None


def test_tampered_expired_and_agent_cookies_are_refused() -> None:
    digest = session.token_hash("t")
    app = _App({digest: ("bot", "agent"), session.token_hash("r"): ("viewer", "read")})
    key = session.app_key(request(app, None))
    assert session.read_session(request(app, session.make_cookie(key, digest))) is None  # agent
    good = session.make_cookie(key, session.token_hash("r"))
    body, _, signature = good.partition(".")
    assert session.read_session(request(app, f"{body}x.{signature}")) is None
    assert session.read_session(request(app, f"{body}.{signature[:-2]}AA")) is None
    old = session.make_cookie(key, session.token_hash("r"), now=0)
    assert session.read_session(request(app, old)) is None
    viewer = session.read_session(request(app, good))
    assert viewer is not None and not viewer.can_act


def test_the_signing_key_is_kept_private_and_survives_a_restart(state_home: Path) -> None:
    first = session.load_key()
    path = state_home / "jobcore" / "session.key"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert session.load_key() == first


def test_the_environment_secret_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JOBCORE_HTTP_SESSION_SECRET", "shared by two hubs")
    assert session.load_key() == session.load_key() != b""
