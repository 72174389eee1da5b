"""A hub with an admin client and two agents whose tokens are bound to their names."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import httpx
from hubproc import Hub, jobcore

AGENTS = ("agent-a", "agent-b")
F = TypeVar("F", bound="Fleet")


class Fleet:
    """`admin` (admin scope), `a` and `b` (agent scope, bound to `agent-a` and `agent-b`)."""

    def __init__(self, hub: Hub, db: Path | str) -> None:
        admin = jobcore(db, "tokens", "create", "--name", "admin", "--scope", "admin")
        self.admin = hub.client(admin.stdout.strip())
        self.a = hub.client(self._agent(AGENTS[0]))
        self.b = hub.client(self._agent(AGENTS[1]))

    def _agent(self, name: str) -> str:
        made = self.admin.post(
            "/api/tokens", json={"name": name, "scope": "agent", "agent_id": name}
        )
        assert made.status_code == 201, made.text
        return str(made.json()["token"])

    def worker_of(self, client: httpx.Client) -> str:
        return AGENTS[0] if client is self.a else AGENTS[1]

    def enqueue_and_claim(
        self, jobs: list[dict[str, Any]], client: httpx.Client | None = None, **claim: Any
    ) -> list[dict[str, Any]]:
        """Enqueue `jobs` in one batch, then claim as many as one claim of `client` (agent a)."""
        client = client or self.a
        made = self.admin.post("/api/jobs/batch", json={"jobs": jobs})
        assert made.status_code in (200, 201), made.text
        body = {"worker_id": self.worker_of(client), "max_jobs": len(jobs), **claim}
        got = client.post("/api/jobs/claim", json=body)
        assert got.status_code == 200, got.text
        claimed: list[dict[str, Any]] = got.json()
        assert len(claimed) == len(jobs)
        return claimed

    def job(self, job_id: str) -> dict[str, Any]:
        answer: dict[str, Any] = self.admin.get(f"/api/jobs/{job_id}").json()
        return answer

    def close(self) -> None:
        for client in (self.admin, self.a, self.b):
            client.close()


@contextmanager
def running_fleet(db: Path | str, logs: Path, lease: str, kind: type[F]) -> Iterator[F]:
    """A hub on `db` with this lease and its fleet of `kind`; the hub must exit cleanly."""
    hub = Hub(db, "--lease", lease, logs=logs)
    made = kind(hub, db)
    try:
        yield made
    finally:
        made.close()
        assert hub.terminate() == 0, hub.output()
