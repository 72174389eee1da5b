"""The sweep's side of start slots (`jobcore.start_slots`): which expired claims had begun."""

from __future__ import annotations

from collections.abc import Sequence

import apsw

from jobcore import start_slots
from jobcore.storage.base import Claim
from jobcore.storage.rows import rows_of
from jobcore.storage.sqlite_statements import MARK_STARTED_SQL

UNMARKED_EXPIRED_SQL = (
    "SELECT id, lease_id, locked_by FROM jobs INDEXED BY jobs_leases"
    " WHERE status = 'claimed' AND lease_expires_at < :now AND started_at IS NULL"
)
"""Claims the sweep would release as never started, unless a start slot names them."""


def adopt_starts(
    conn: apsw.Connection, db_path: str, now: int, only: Sequence[Claim] | None
) -> None:
    """Mark started the expired claims whose worker's start slot names them (it died in
    their handler), so the sweep that follows charges them; the rest never began."""
    unmarked = rows_of(conn, UNMARKED_EXPIRED_SQL, {"now": now})
    if only is not None:
        listed = {(claim.job_id, claim.lease_id) for claim in only}
        unmarked = [row for row in unmarked if (row[0], row[1]) in listed]
    workers: dict[str, list[tuple[str, str]]] = {}
    for job_id, lease_id, worker in unmarked:
        workers.setdefault(worker, []).append((job_id, lease_id))
    for worker, claims in workers.items():
        begun = start_slots.read(db_path, worker)
        for job_id, lease_id in claims:
            if lease_id in begun:
                params = {
                    "id": job_id,
                    "lease_id": lease_id,
                    "worker": worker,
                    "now": min(begun[lease_id], now),
                }
                rows_of(conn, MARK_STARTED_SQL, params)
        start_slots.remove_if_dead(db_path, worker)
