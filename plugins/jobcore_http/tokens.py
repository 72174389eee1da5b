"""Bearer tokens: made once, stored only as SHA-256, compared in constant time; and scopes."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from jobcore.errors import InvalidPayload, UnknownJobType
from jobcore_http.grants import UNLIMITED, Limits, parse_names
from jobcore_http.store import HubStore, TokenRecord, stored_hash

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
    """Who is calling: the token's name, its scope, for agent tokens the agent id, and the
    job types and queues it is limited to (`grants.Limits`)."""

    name: str
    scope: Scope
    agent_id: str | None = None
    limits: Limits = UNLIMITED

    def allows(self, required: Scope) -> bool:
        return required in _GRANTS[self.scope]

    def may_act_as(self, worker_id: str) -> bool:
        """An agent token acts only for its own agent id; admin for any."""
        if self.scope == "admin":
            return True
        return self.scope == "agent" and self.agent_id == worker_id


ANONYMOUS_ADMIN = Principal(name="(no auth)", scope="admin", agent_id=None)


LIMITED_SCOPES = ("produce", "agent")


def token_limits(
    scope: str,
    types: str | Sequence[str] | None,
    queues: str | Sequence[str] | None,
    job_type: Callable[[str], Any] | None = None,
    *,
    prefix: str = "",
) -> Limits:
    """Validated limits of a new token. `job_type` (e.g. `Queue.job_type`) refuses a type
    the hub would refuse to enqueue (any well-formed name when unregistered types are on).
    `prefix` goes before the field names in messages (`--` for the CLI's options)."""
    limits = Limits(parse_names(types, prefix + "types"), parse_names(queues, prefix + "queues"))
    if limits.limited and scope not in LIMITED_SCOPES:
        raise InvalidPayload(
            f"{prefix}types and {prefix}queues limit what a produce or agent token may enqueue, "
            f"change or claim; a {scope!r} token "
            + ("changes no job" if scope == "read" else "could make itself an unlimited one")
        )
    for type in limits.types or ():
        if job_type is None:
            break
        try:
            job_type(type)
        except UnknownJobType as exc:
            raise InvalidPayload(f"{prefix}types: {exc}") from None
    return limits


def create_token(
    store: HubStore,
    name: str,
    scope: str,
    agent_id: str | None,
    now: int,
    limits: Limits = UNLIMITED,
) -> tuple[str, TokenRecord]:
    """Make and store a new token; returns it (to show once) and what was stored."""
    if scope not in SCOPES:
        raise InvalidPayload(f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
    if agent_id is not None and scope != "agent":
        raise InvalidPayload("an agent id goes only with scope 'agent'")
    if limits.limited and scope not in LIMITED_SCOPES:
        raise InvalidPayload(f"a {scope!r} token cannot be limited to types or queues")
    if scope == "agent" and agent_id is None:
        agent_id = name  # an agent token acts for the agent named like it
    token = new_token()
    record = TokenRecord(
        name=name,
        hash=stored_hash(token_hash(token), limits),
        scope=scope,
        agent_id=agent_id,
        created_at=now,
        types=limits.types,
        queues=limits.queues,
    )
    store.add_token(record)
    return token, record
