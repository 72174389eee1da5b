"""Bearer tokens: made once, stored only as SHA-256, compared in constant time; and scopes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from typing import Literal

from jobcore.errors import InvalidPayload
from jobcore_http.store import HubStore, TokenRecord

Scope = Literal["read", "produce", "agent", "admin"]
SCOPES: tuple[Scope, ...] = ("read", "produce", "agent", "admin")

TOKEN_PREFIX = "jch_"

# which granted scope satisfies which required one (agent routes also check the agent id)
_GRANTS: dict[str, frozenset[str]] = {
    "read": frozenset({"read"}),
    "produce": frozenset({"read", "produce"}),
    "agent": frozenset({"agent"}),
    "admin": frozenset(SCOPES),
}


def new_token() -> str:
    """A fresh random token (256 bits), shown to the operator once."""
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def token_hash(token: str) -> str:
    """What is stored and looked up: the SHA-256 of the token, hex."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def same_hash(a: str, b: str) -> bool:
    """Constant-time equality of two hex digests."""
    return hmac.compare_digest(a.encode(), b.encode())


@dataclass(frozen=True, slots=True)
class Principal:
    """Who is calling: the token's name, its scope and, for agent tokens, the agent id."""

    name: str
    scope: Scope
    agent_id: str | None = None

    def allows(self, required: Scope) -> bool:
        return required in _GRANTS[self.scope]

    def may_act_as(self, worker_id: str) -> bool:
        """An agent token acts only for its own agent id; admin for any."""
        if self.scope == "admin":
            return True
        return self.scope == "agent" and self.agent_id == worker_id


ANONYMOUS_ADMIN = Principal(name="(no auth)", scope="admin", agent_id=None)


def create_token(
    store: HubStore, name: str, scope: str, agent_id: str | None, now: int
) -> tuple[str, TokenRecord]:
    """Make and store a new token; returns it (to show once) and what was stored."""
    if scope not in SCOPES:
        raise InvalidPayload(f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
    if agent_id is not None and scope != "agent":
        raise InvalidPayload("an agent id goes only with scope 'agent'")
    if scope == "agent" and agent_id is None:
        agent_id = name  # an agent token acts for the agent named like it
    token = new_token()
    record = TokenRecord(
        name=name, hash=token_hash(token), scope=scope, agent_id=agent_id, created_at=now
    )
    store.add_token(record)
    return token, record
