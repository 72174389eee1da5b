"""Dashboard sessions: a signed cookie naming the token it was opened with, and CSRF tokens.

The cookie carries `{token hash, issued at, nonce}` signed with HMAC-SHA256. Every
request checks the signature, the age, and asks the hub whether the token still
exists (`app.state.token_lookup`), so revoking a token ends its sessions at once.
The signing key survives restarts: `JOBCORE_HTTP_SESSION_SECRET`, else a 0600 key
file in `$XDG_STATE_HOME/jobcore/` (default `~/.local/state/jobcore/`).
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import logging
import os
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from starlette.requests import Request

from jobcore_http.grants import UNLIMITED, Limits

log = logging.getLogger("jobcore.http.dashboard")

COOKIE = "jobcore_session"
MAX_AGE_S = 12 * 3600
ACTION_SCOPES = frozenset({"produce", "admin"})
VIEW_SCOPES = frozenset({"read", "produce", "admin"})

TokenLookup = Callable[[str], "tuple[str, str] | tuple[str, str, Limits] | None"]


@dataclass(frozen=True, slots=True)
class Session:
    """Who is signed in: the token's name and scope, this session's CSRF token and nonce,
    and the job types and queues the token may act on."""

    name: str
    scope: str
    csrf: str
    nonce: str = ""
    limits: Limits = UNLIMITED

    @property
    def can_act(self) -> bool:
        return self.scope in ACTION_SCOPES


def token_hash(token: str) -> str:
    """SHA-256 hex of a token, as the hub stores it."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _key_file() -> Path:
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "jobcore" / "session.key"


def load_key() -> bytes:
    """The signing key: from the environment, else a key file made once with mode 0600."""
    secret = os.environ.get("JOBCORE_HTTP_SESSION_SECRET")
    if secret:
        return hashlib.sha256(secret.encode()).digest()
    path = _key_file()
    try:
        return bytes.fromhex(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        pass
    except OSError as exc:
        log.warning("cannot read %s (%s); sessions end when the hub restarts", path, exc)
        return secrets.token_bytes(32)
    key = secrets.token_bytes(32)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(key.hex())
    except FileExistsError:  # another hub made it first
        return bytes.fromhex(path.read_text().strip())
    except OSError as exc:
        log.warning(
            "cannot write %s (%s); set JOBCORE_HTTP_SESSION_SECRET to keep sessions "
            "across restarts",
            path,
            exc,
        )
    return key


def app_key(request: Request) -> bytes:
    """The app's signing key, loaded on first use."""
    state = request.app.state
    key: bytes | None = getattr(state, "dashboard_session_key", None)
    if key is None:
        key = load_key()
        state.dashboard_session_key = key
    return key


def _sign(key: bytes, body: str) -> str:
    return _b64(hmac.new(key, body.encode(), hashlib.sha256).digest())


def make_cookie(key: bytes, hashed_token: str, *, now: float | None = None) -> str:
    """A new session cookie value for the token with this hash."""
    issued = int(now if now is not None else time.time())
    body = _b64(json.dumps({"h": hashed_token, "iat": issued, "n": secrets.token_hex(16)}).encode())
    return f"{body}.{_sign(key, body)}"


def _decode(key: bytes, value: str, now: float) -> dict[str, Any] | None:
    body, _, signature = value.partition(".")
    # compare_digest refuses non-ASCII text (a TypeError): such a cookie is simply not ours
    if not body or not value.isascii() or not hmac.compare_digest(signature, _sign(key, body)):
        return None
    try:
        data = json.loads(_unb64(body))
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("iat"), int):
        return None
    if not 0 <= now - data["iat"] <= MAX_AGE_S:
        return None
    return data


def _csrf(key: bytes, nonce: str) -> str:
    return hmac.new(key, f"csrf:{nonce}".encode(), hashlib.sha256).hexdigest()[:40]


def auth_disabled(request: Request) -> bool:
    return bool(getattr(request.app.state, "auth_disabled", False))


def lookup(request: Request, hashed_token: str) -> tuple[str, str] | tuple[str, str, Limits] | None:
    """`(name, scope[, limits])` of a live token with this hash, asked of the hub."""
    find: TokenLookup | None = getattr(request.app.state, "token_lookup", None)
    if find is None:
        return None
    return find(hashed_token)


def read_session(request: Request) -> Session | None:
    """The request's valid session, or None (no cookie, bad signature, expired, revoked)."""
    value = request.cookies.get(COOKIE)
    if not value:
        return None
    key = app_key(request)
    data = _decode(key, value, time.time())
    if data is None:
        return None
    nonce = str(data.get("n", ""))
    if nonce in _signed_out(request):
        return None
    if auth_disabled(request):
        return Session(name="(no auth)", scope="admin", csrf=_csrf(key, nonce), nonce=nonce)
    found = lookup(request, str(data.get("h", "")))
    if found is None:
        return None
    name, scope = found[0], found[1]
    limits = found[2] if len(found) > 2 else UNLIMITED
    if scope not in VIEW_SCOPES:
        return None
    return Session(name=name, scope=scope, csrf=_csrf(key, nonce), nonce=nonce, limits=limits)


def _signed_out(request: Request) -> set[str]:
    found: set[str] | None = getattr(request.app.state, "dashboard_signed_out", None)
    if found is None:
        found = request.app.state.dashboard_signed_out = set()
    return found


def sign_out(request: Request, session: Session) -> None:
    """End this session on this hub even if its cookie was copied (until the hub restarts;
    the cookie expires after `MAX_AGE_S` anyway)."""
    _signed_out(request).add(session.nonce)


def scope_from_cookie(request: Request) -> str | None:
    """For the hub's auth dependency: the scope of the session cookie, for GET/HEAD only."""
    if request.method not in ("GET", "HEAD"):
        return None
    session = read_session(request)
    return None if session is None else session.scope


def csrf_ok(session: Session, supplied: str | None) -> bool:
    if not supplied or not supplied.isascii():  # compare_digest refuses non-ASCII text
        return False
    return hmac.compare_digest(session.csrf, supplied)
