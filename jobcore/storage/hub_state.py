"""The hub's own state: what a backend stores for `jobcore serve` besides jobs.

A hub keeps API tokens (only their SHA-256), the workers registry (agents, their
capabilities, last-seen times, lost and drain marks), and reads the job listing it
serves (filters, search, keyset pages). A backend provides this state through the
optional power `hub_store() -> HubStore` of its storage (`jobcore.storage.powers`);
what each method must do is below, checked for every backend by the conformance suite
(`jobcore.testing.contract.hub_state`). docs/storage-backends.md says what a backend
implements in all.

SQLite keeps it in the jobs database itself (`jobcore.storage.sqlite_hub`); PostgreSQL
in its schema (`jobcore_postgres.hub_store`).
"""

from __future__ import annotations

import hmac
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

from jobcore.grants import Limits
from jobcore.models import Job

LIMITED_HASH = "limited:"
"""Prefix of a limited token's stored hash. A hub older than limits looks a token up by its
bare SHA-256, so it finds no limited token (401) instead of granting it every type and
queue: the case of an old hub still running, or started again, on an upgraded store."""


def stored_hash(digest: str, limits: Limits) -> str:
    """The hash column of a new token whose SHA-256 is `digest`."""
    return LIMITED_HASH + digest if limits.limited else digest


@dataclass(frozen=True, slots=True)
class TokenRecord:
    """A stored token: never the token itself, only its SHA-256 (`stored_hash`)."""

    name: str
    hash: str
    scope: str
    agent_id: str | None
    created_at: int
    revoked_at: int | None = None
    types: tuple[str, ...] | None = None  # job types it may use; None: any
    queues: tuple[str, ...] | None = None  # queues it may use; None: any

    @property
    def limits(self) -> Limits:
        return Limits(self.types, self.queues)

    @classmethod
    def from_row(cls, row: Sequence[Any]) -> TokenRecord:
        """From `TOKEN_COLUMNS` as stored (limits as JSON text or decoded lists)."""
        limits = Limits.from_stored(row[6], row[7])
        name, digest, scope, agent_id, created_at, revoked_at = row[:6]
        if str(digest).startswith(LIMITED_HASH) and not limits.limited:
            limits = Limits((), ())  # marked limited, its limits lost: nothing, never any
        return cls(
            name, digest, scope, agent_id, created_at, revoked_at, limits.types, limits.queues
        )

    def matches(self, digest: str) -> bool:
        """Whether this is the token whose SHA-256 hex is `digest` (constant time)."""
        return hmac.compare_digest(self.hash.removeprefix(LIMITED_HASH).encode(), digest.encode())

    def to_json(self) -> dict[str, Any]:
        from jobcore.timeutil import iso

        return {
            "name": self.name,
            "scope": self.scope,
            "agent_id": self.agent_id,
            "types": None if self.types is None else list(self.types),
            "queues": None if self.queues is None else list(self.queues),
            "created_at": iso(self.created_at),
            "revoked_at": iso(self.revoked_at),
        }


TOKEN_COLUMNS = "name, hash, scope, agent_id, created_at, revoked_at, types, queues"


@dataclass(frozen=True, slots=True)
class WorkerRecord:
    """A registered agent: its capabilities and when the hub last heard from it."""

    worker_id: str
    name: str | None = None
    cores: int | None = None
    ram_gb: float | None = None
    tags: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    registered_at: int = 0
    last_seen: int = 0
    lost_at: int | None = None
    drain: bool = False


@dataclass(frozen=True, slots=True)
class JobFilter:
    """The filters of `GET /api/jobs` and the bulk routes; empty means any."""

    statuses: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    queues: tuple[str, ...] = ()
    worker: str | None = None
    q: str | None = None  # substring of the payload or the errors


@dataclass(frozen=True, slots=True)
class Page:
    """Jobs newest first, and where the next page starts (None: nothing further)."""

    jobs: list[Job]
    next_cursor: str | None


MAX_QUERY_CHARS = 200
"""Longest search text `q`: a LIKE compares it at every position of each payload (up to
`max_payload_bytes`), one row at a time, so its length bounds the cost of a row."""


@runtime_checkable
class HubStore(Protocol):
    """What the hub persists besides jobs. Every method is safe from any thread."""

    def migrate(self) -> None:
        """Create the hub's tables if missing (idempotent; writes only when there is work)."""

    def close(self) -> None: ...

    def ping(self) -> None:
        """Raise `StorageError` unless the store answers a trivial read."""

    # tokens
    def add_token(self, record: TokenRecord) -> None:
        """Store a new token; `IllegalTransition` if an active token has that name."""

    def token_by_hash(self, digest: str) -> TokenRecord | None:
        """The active (not revoked) token with this SHA-256 (bare or `LIMITED_HASH`), or None."""

    def list_tokens(self) -> list[TokenRecord]: ...

    def revoke_token(self, name: str, now: int) -> bool:
        """Revoke the active token `name`; False if there is none."""

    # workers
    def upsert_worker(self, record: WorkerRecord) -> bool:
        """Insert or update a worker's capabilities; True if it was not known before."""

    def touch_workers(self, seen: dict[str, int]) -> list[str]:
        """Record last-seen times (creating unknown workers); returns ids that were lost."""

    def set_drain(self, worker_id: str, drain: bool) -> bool:
        """Ask a worker to drain (or not); False if the worker is unknown."""

    def mark_lost(self, before: int, now: int) -> list[str]:
        """Mark workers silent since before `before` lost; returns those newly marked."""

    def list_workers(self) -> list[WorkerRecord]: ...

    # jobs (read only)
    def search_jobs(
        self, where: JobFilter, *, before: str | None, limit: int, budget_ms: int = 200
    ) -> Page:
        """Up to `limit` matching jobs newest first (by id), ids below `before` only.

        Keyset pages: `next_cursor` continues below the last job, or below the last id
        examined when `budget_ms` ran out first (a page may then hold fewer jobs).
        """

    def jobs_by_id(self, ids: Sequence[str]) -> dict[str, Job]: ...

    def claims_by_worker(self) -> dict[str, list[str]]:
        """Ids of claimed jobs, by the worker holding them."""

    def overdue_claims(self, now: int) -> list[Job]:
        """Claimed jobs whose attempt (from start, else claim) has run past `timeout`."""
