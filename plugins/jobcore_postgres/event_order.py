"""The order PostgreSQL delivers events in, so that a reader's cursor never skips one.

The problem. `events.seq` is an identity column: a writer takes its number at
INSERT, and other sessions see the row at COMMIT. Transaction A takes seq 1, B
takes seq 2 and commits first; a reader sees 2, hands out `id: 2`, and a
stream resuming after 2 skips 1 for ever (DESIGN §11 promises no loss).

The choice: a stable horizon on the reader's side. Each event stores its
writer's transaction id (`xid xid8 DEFAULT pg_current_xact_id()`, migration 4)
and readers deliver in `(xid, seq)` order, only events whose transaction is
older than every transaction that may still commit events here (`HORIZON`).
A transaction id is taken before its transaction's first write, so every
event committed later has an id at or above the horizon of any earlier read:
it sorts after everything already delivered, and a cursor never skips.

- `HORIZON` is the oldest transaction id running in this statement's snapshot,
  leaving out those `pg_stat_activity` (or, prepared, `pg_prepared_xacts`) shows
  belonging to another database (they cannot write this table; an id neither
  shows, e.g. one that ended meanwhile, counts), else the snapshot's `xmax`;
  and never past the reader's own transaction, whose events are not committed.
  It comes from the same snapshot as the rows read: a horizon from a later
  snapshot could pass a transaction whose rows this read cannot see.
- The cursor stays the integer `seq` of the last event delivered (SSE `id:`,
  `Last-Event-ID`, `last_event_seq()`): resuming looks its row up for its
  transaction id and reads on from `(xid, seq)`. The sweep prunes only a
  prefix of the delivery order (deliverable events past the retention, never
  the newest) and notes the greatest seq it deleted (`events_pruned.upto`,
  migration 7): a cursor with no row at or below that was pruned, and every
  event left comes after it in delivery order, so it reads them all from the
  start. A cursor with no row above it was never handed out (0, or a number a
  client made up): it reads the events with a greater seq.
- Cost: an event waits for the oldest write transaction still running in this
  database (an application's long outbox transaction delays events, loses
  none); one `xid8` column and one index per event row (about 0.8 µs more per
  appended event, server side; the index by time it replaced is gone); a
  reader looks up the other running transactions' databases only while there
  are some; the sweep reads at most one batch of the delivery index.
- The order is commit-safe, not numeric: a later event may have a smaller
  seq. Callers compare cursors by identity (the hub's ring does).

Rejected. (b) numbering at commit under an advisory lock (a deferred trigger)
holds the lock across the commit's WAL flush, so every committing writer of
the store waits for the previous one's flush (group commit lost: the cost
grows with commit latency and the number of writers), and renumbering rewrites
every event row. (c) a gap
time-out (Marten's high-water mark) skips for ever an event whose transaction
outlives the time-out: a long outbox transaction loses its events.

`wait_for_change` needs "did anything commit since I last looked", which
`max(seq)` misses when a smaller seq commits late: a change mark is the
reader's snapshot, and something changed when an event is now visible whose
transaction was running at the mark or began after it.
"""

from __future__ import annotations

from typing import Any

import psycopg

from jobcore_postgres.statements import Dialect

Conn = psycopg.Connection[tuple[Any, ...]]

HORIZON = (
    "(SELECT least(coalesce("
    "(SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x "
    "WHERE NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.backend_xid = xid(x) "
    "AND a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database())) "
    "AND NOT EXISTS (SELECT FROM pg_prepared_xacts p WHERE p.transaction = xid(x) "
    "AND p.database <> current_database())), "
    "pg_snapshot_xmax(pg_current_snapshot())), pg_current_xact_id_if_assigned()))"
)
"""The transaction id below which every event is committed (or gone) and delivered in order."""


def events_after_sql(d: Dialect) -> str:
    """Events after cursor `%(seq)s` in delivery order, each with its job's type and queue.

    Three cases, one statement (each branch gated so only one reads): the cursor's row
    exists (read on from its `(xid, seq)`); it was pruned (`seq <= events_pruned.upto`:
    pruning removes a prefix of the delivery order, so every event left comes after
    it); or it never was an event (a number a client made up: read on by seq).
    """
    events = d.table("events")
    found = f"EXISTS (SELECT FROM {events} c WHERE c.seq = %(seq)s)"
    pruned = f"%(seq)s <= (SELECT upto FROM {d.table('events_pruned')})"
    cols = "e.seq, e.at, e.kind, e.job_id, e.worker_id, e.data, e.xid"
    order = "ORDER BY e.xid, e.seq LIMIT %(limit)s"
    after_row = (
        f"SELECT {cols} FROM {events} e WHERE {found} AND (e.xid, e.seq) > "
        f"((SELECT c.xid FROM {events} c WHERE c.seq = %(seq)s), %(seq)s) "
        f"AND e.xid < {HORIZON} {order}"
    )
    after_pruned = (
        f"SELECT {cols} FROM {events} e WHERE NOT {found} AND {pruned} "
        f"AND e.xid < {HORIZON} {order}"
    )
    # a number past every seq reads nothing: the primary key finds no greater seq
    by_seq = (
        f"SELECT {cols} FROM {events} e WHERE NOT {found} AND NOT {pruned} "
        f"AND e.seq > %(seq)s AND e.xid < {HORIZON} {order}"
    )
    return (
        "SELECT e.seq, e.at, e.kind, e.job_id, e.worker_id, e.data, j.type, j.queue "
        f"FROM (({after_row}) UNION ALL ({after_pruned}) UNION ALL ({by_seq})) e "
        f"LEFT JOIN {d.table('jobs')} j ON j.id = e.job_id {order}"
    )


def newest_delivered_sql(d: Dialect) -> str:
    """The seq of the last event in delivery order that readers may deliver now."""
    return (
        f"SELECT seq FROM {d.table('events')} WHERE xid < {HORIZON} "
        "ORDER BY xid DESC, seq DESC LIMIT 1"
    )


def prune_sql(d: Dialect, batch: int) -> str:
    """Delete the longest prefix, in delivery order, of the first `batch` events that are
    all deliverable, older than `%(keep)s` ms and not the newest delivered; remember the
    greatest seq deleted (`events_pruned.upto`). Answers how many were deleted.

    Only a prefix: a cursor whose row is gone then comes before every event left."""
    events = d.table("events")
    old = (
        f"at < {d.now} - %(keep)s::bigint AND xid < {HORIZON} "
        f"AND seq <> coalesce(({newest_delivered_sql(d)}), 0)"
    )
    return (
        f"WITH first AS (SELECT seq, xid, at FROM {events} ORDER BY xid, seq LIMIT {batch}), "
        f"marked AS (SELECT seq, bool_and({old}) OVER (ORDER BY xid, seq) AS old FROM first), "
        f"gone AS (DELETE FROM {events} WHERE seq IN (SELECT seq FROM marked WHERE old) "
        "RETURNING seq), "
        f"noted AS (UPDATE {d.table('events_pruned')} SET upto = greatest(upto, "
        "(SELECT max(seq) FROM gone)) WHERE EXISTS (SELECT FROM gone)) "
        "SELECT count(*) FROM gone"
    )


def change_mark(conn: Conn) -> str:
    """A mark to ask `changed_since` about: this moment's snapshot."""
    row = conn.execute("SELECT pg_current_snapshot()::text").fetchone()
    assert row is not None
    return str(row[0])


def changed_since(conn: Conn, d: Dialect, mark: str) -> tuple[bool, str]:
    """Whether an event committed after `mark` is visible now, and the mark of now."""
    events = d.table("events")
    row = conn.execute(
        "SELECT pg_current_snapshot()::text, "
        f"EXISTS (SELECT FROM {events} WHERE xid >= pg_snapshot_xmax(%(m)s::pg_snapshot)) "
        f"OR EXISTS (SELECT FROM {events} WHERE xid = ANY "
        "(ARRAY(SELECT pg_snapshot_xip(%(m)s::pg_snapshot))))",
        {"m": mark},
    ).fetchone()
    assert row is not None
    return bool(row[1]), str(row[0])
