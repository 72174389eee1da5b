"""The sweep's side of start slots (`jobcore.start_slots`): which claims had begun."""

from __future__ import annotations

from collections.abc import Sequence
from types import TracebackType

import apsw

from jobcore import start_slots
from jobcore.storage.base import Claim
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_statements import MARK_STARTED_SQL

UNMARKED_SQL = (
    "SELECT id, lease_id, locked_by FROM jobs INDEXED BY jobs_leases"
    " WHERE status = 'claimed' AND started_at IS NULL"
)
"""Claims not marked started (a start slot may say they began)."""

UNMARKED_EXPIRED_SQL = UNMARKED_SQL + " AND lease_expires_at < :now"
"""Claims the sweep would release as never started, unless a start slot names them."""


class Adoption:
    """One sweep's look at the start slots. Files of processes that are gone stay locked
    by it, and are deleted once the sweep's transaction committed what they named (kept
    if it rolled back, for the next sweep).

        with Adoption(path) as adoption, storage._write() as conn:
            adoption.adopt(conn, now, only)
    """

    def __init__(self, db_path: str) -> None:
        self.db_path = db_path
        self.dead: list[start_slots.DeadFile] = []

    def __enter__(self) -> Adoption:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        dead, self.dead = self.dead, []
        for gone in dead:
            if exc_type is None:
                gone.remove()  # what cannot be deleted is logged, and let go of all the same
            else:
                gone.release()

    def adopt(self, conn: apsw.Connection, now: int, only: Sequence[Claim] | None) -> None:
        """Mark started every claim a dead process's file names (its handler began: the
        sweep charges it once its lease expires, whenever that is), and the expired claims
        a live worker's file names (its lease ran out while it ran), so the sweep that
        follows charges them; the rest never began."""
        self.dead = start_slots.dead_files(self.db_path)
        if self.dead:
            begun: dict[str, int] = {}
            for gone in self.dead:
                begun.update(gone.begun)
            for job_id, lease_id, worker in rows_of(conn, UNMARKED_SQL):
                if lease_id in begun:
                    _mark(conn, job_id, lease_id, worker, min(begun[lease_id], now))
        unmarked = rows_of(conn, UNMARKED_EXPIRED_SQL, {"now": now})
        if only is not None:
            listed = {(claim.job_id, claim.lease_id) for claim in only}
            unmarked = [row for row in unmarked if (row[0], row[1]) in listed]
        workers: dict[str, list[tuple[str, str]]] = {}
        for job_id, lease_id, worker in unmarked:
            workers.setdefault(worker, []).append((job_id, lease_id))
        for worker, claims in workers.items():
            noted = start_slots.read(self.db_path, worker)  # every process with its id
            for job_id, lease_id in claims:
                if lease_id in noted:
                    _mark(conn, job_id, lease_id, worker, min(noted[lease_id], now))


def _mark(conn: apsw.Connection, job_id: str, lease_id: str, worker: str, at: int) -> None:
    params = {"id": job_id, "lease_id": lease_id, "worker": worker, "now": at}
    rows_of(conn, MARK_STARTED_SQL, params)
