"""A local SQLite outbox of outcomes not yet delivered to the hub.

Outcomes are written here a batch at a time (one transaction for all the
outcomes that finished while the previous report was in flight) before the
first attempt to deliver them, and deleted a batch at a time once the hub
accepted them or said they are stale. So an agent that loses the hub, or is
restarted, delivers them later.

Durability: WAL with synchronous=NORMAL. A committed batch is in the WAL file
before the commit returns, so it survives what the outbox is for: a hub
outage and an agent that exits, crashes or is killed (the OS writes the file
out). Only a power loss or kernel crash can lose the last batches, and an
outcome lost that way costs what a crash before the write costs anyway: the
job's lease expires and it runs again (at-least-once). FULL would add an
fsync per batch for no case the hub does not already cover. Rows are keyed by the claim's `lease_id`: the first outcome of a
claim wins, and the hub recognises a repeated delivery by it.
Several agents may share one outbox file (a shared cache dir); each delivers
only the rows of its own worker id.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import apsw

from jobcore.errors import JobcoreError
from jobcore.storage.sqlite_connect import into_wal
from jobcore.timeutil import now_ms

LOCK_TIMEOUT_MS = 30_000
"""How long a statement waits for another agent's lock on a shared outbox file."""

SCHEMA = """
CREATE TABLE IF NOT EXISTS outcomes (
    lease_id TEXT PRIMARY KEY,
    job_id TEXT NOT NULL,
    worker_id TEXT NOT NULL,
    kind TEXT NOT NULL,           -- result | fail | release
    body TEXT NOT NULL,           -- the JSON body of the hub route
    recorded_at INTEGER NOT NULL,
    tries INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS outcomes_by_worker ON outcomes(worker_id, recorded_at);
"""


@dataclass(frozen=True)
class Pending:
    lease_id: str
    job_id: str
    worker_id: str
    kind: str
    body: dict[str, Any]
    recorded_at: int
    tries: int


class Outbox:
    """The outbox file `outbox.db` in a cache dir."""

    def __init__(self, directory: str | Path) -> None:
        path = Path(directory)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise JobcoreError(
                f"cannot use the cache dir {path}: {exc.strerror or exc}; "
                "pass --cache-dir (or JOBCORE_AGENT_CACHE_DIR) a writable folder"
            ) from None
        self.path = path / "outbox.db"
        self._lock = threading.Lock()
        try:
            self._db = apsw.Connection(str(self.path))
        except apsw.Error as exc:
            raise self._unusable(exc) from None
        try:
            # agents sharing a cache dir may create the file at once: `into_wal` copes
            into_wal(self._db, LOCK_TIMEOUT_MS)
            self._db.execute("PRAGMA synchronous=NORMAL")
            with self._db:
                self._db.execute(SCHEMA)
        except apsw.Error as exc:
            self._db.close()
            raise self._unusable(exc) from None
        except BaseException:  # a signal's exception while it waited for the lock
            self._db.close()
            raise

    def _unusable(self, exc: apsw.Error) -> JobcoreError:
        if isinstance(exc, apsw.BusyError):
            return JobcoreError(
                f"the agent's outbox {self.path} stayed locked by another process for "
                f"{LOCK_TIMEOUT_MS / 1000:g} s (agents sharing --cache-dir); start the agent "
                "again, or give each agent its own --cache-dir"
            )
        if isinstance(exc, (apsw.NotADBError, apsw.CorruptError)):
            return JobcoreError(
                f"the agent's outbox {self.path} is not a usable SQLite database ({exc}); "
                "move it aside and start the agent again (outcomes it held are lost: "
                "their jobs run again once their leases expire)"
            )
        return JobcoreError(
            f"cannot open the agent's outbox {self.path}: {exc}; check that its folder "
            "is writable and its disk has room, or pass another --cache-dir"
        )

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add(
        self, *, lease_id: str, job_id: str, worker_id: str, kind: str, body: dict[str, Any]
    ) -> bool:
        """Record an outcome durably; False when this claim already has one (the first wins)."""
        with self._lock, self._db:
            self._db.execute(
                "INSERT OR IGNORE INTO outcomes(lease_id, job_id, worker_id, kind, body, recorded_at)"
                " VALUES (?, ?, ?, ?, ?, ?)",
                (lease_id, job_id, worker_id, kind, json.dumps(body), now_ms()),
            )
            added = bool(self._db.changes())
        return added

    def add_many(self, rows: list[Pending]) -> set[str]:
        """Record many outcomes in one transaction; returns the keys newly added (for a claim
        that already has an outcome here, the first one wins)."""
        added: set[str] = set()
        with self._lock, self._db:
            for row in rows:
                self._db.execute(
                    "INSERT OR IGNORE INTO outcomes(lease_id, job_id, worker_id, kind, body,"
                    " recorded_at) VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        row.lease_id,
                        row.job_id,
                        row.worker_id,
                        row.kind,
                        json.dumps(row.body),
                        row.recorded_at,
                    ),
                )
                if self._db.changes():
                    added.add(row.lease_id)
        return added

    def delete_many(self, lease_ids: list[str]) -> None:
        """Forget many delivered (or stale) outcomes in one transaction."""
        with self._lock, self._db:
            self._db.executemany(
                "DELETE FROM outcomes WHERE lease_id = ?", [(key,) for key in lease_ids]
            )

    def tried_many(self, lease_ids: list[str]) -> None:
        with self._lock, self._db:
            self._db.executemany(
                "UPDATE outcomes SET tries = tries + 1 WHERE lease_id = ?",
                [(key,) for key in lease_ids],
            )

    def pending(self, worker_id: str, limit: int = 100) -> list[Pending]:
        """This worker's undelivered outcomes, oldest first."""
        with self._lock:
            rows = self._db.execute(
                "SELECT lease_id, job_id, worker_id, kind, body, recorded_at, tries FROM outcomes"
                " WHERE worker_id = ? ORDER BY recorded_at, rowid LIMIT ?",
                (worker_id, limit),
            ).fetchall()
        return [
            Pending(
                lease_id=str(row[0]),
                job_id=str(row[1]),
                worker_id=str(row[2]),
                kind=str(row[3]),
                body=json.loads(str(row[4])),
                recorded_at=int(row[5]),  # type: ignore[arg-type]
                tries=int(row[6]),  # type: ignore[arg-type]
            )
            for row in rows
        ]

    def count(self, worker_id: str | None = None) -> int:
        with self._lock:
            if worker_id is None:
                row = self._db.execute("SELECT count(*) FROM outcomes").fetchone()
            else:
                row = self._db.execute(
                    "SELECT count(*) FROM outcomes WHERE worker_id = ?", (worker_id,)
                ).fetchone()
        assert row is not None
        return int(row[0])

    def tried(self, lease_id: str) -> None:
        with self._lock, self._db:
            self._db.execute(
                "UPDATE outcomes SET tries = tries + 1 WHERE lease_id = ?", (lease_id,)
            )

    def replace(self, lease_id: str, *, kind: str, body: dict[str, Any]) -> None:
        """Swap an outcome the hub cannot accept for another (a result it rejected -> a fail)."""
        with self._lock, self._db:
            self._db.execute(
                "UPDATE outcomes SET kind = ?, body = ? WHERE lease_id = ?",
                (kind, json.dumps(body), lease_id),
            )

    def delete(self, lease_id: str) -> None:
        """Forget a delivered (or stale) outcome."""
        with self._lock, self._db:
            self._db.execute("DELETE FROM outcomes WHERE lease_id = ?", (lease_id,))
