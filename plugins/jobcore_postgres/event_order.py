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
  belonging to another database or to an autovacuum worker (they cannot write
  this table; an ANALYZE takes a transaction id and held back every event
  committed after it began); an id neither shows, e.g. one that ended
  meanwhile, counts), else the snapshot's `xmax`;
  and never past the reader's own transaction, whose events are not committed.
  It comes from the same snapshot as the rows read: a horizon from a later
  snapshot could pass a transaction whose rows this read cannot see.
- The cursor stays the integer id of the last event delivered (SSE `id:`,
  `Last-Event-ID`, `last_event_seq()`): resuming looks its row up for its
  transaction id and reads on from `(xid, seq)`. A row is one event, its id
  the row's `seq`, or (migration 8) a batch enqueue's `job:enqueued` row
  listing up to `EVENT_IDS_PER_ROW` jobs in `job_ids`: one event per job, ids
  `seq`, `seq + 1`, ...; rows are that many ids apart (the sequence's
  increment), so the row holding a cursor is the one with the greatest seq at
  or below it, and resuming inside a batch gives the rest of its jobs first.
  The sweep prunes only a prefix of the delivery order (deliverable events
  past the retention; the newest stays when it is a row of one event) and
  notes the greatest id it deleted (`events_pruned.upto`, migration 7): a
  cursor with no row at or below that was pruned, and every event left comes
  after it in delivery order, so it reads them all from the start; with every
  row pruned, `last_event_seq()` is that id. A cursor with no row above it was
  never handed out (0, or a number a client made up): it reads the events
  with a greater seq.
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

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

from jobcore_postgres.schema import EVENT_IDS_PER_ROW
from jobcore_postgres.statements import Dialect

Conn = psycopg.Connection[tuple[Any, ...]]

HORIZON = (
    "(SELECT least(coalesce("
    "(SELECT min(x) FROM pg_snapshot_xip(pg_current_snapshot()) AS x "
    "WHERE NOT EXISTS (SELECT FROM pg_stat_activity a WHERE a.backend_xid = xid(x) "
    "AND (a.datid <> (SELECT oid FROM pg_database WHERE datname = current_database()) "
    "OR a.backend_type = 'autovacuum worker')) "
    "AND NOT EXISTS (SELECT FROM pg_prepared_xacts p WHERE p.transaction = xid(x) "
    "AND p.database <> current_database())), "
    "pg_snapshot_xmax(pg_current_snapshot())), pg_current_xact_id_if_assigned()))"
)
"""The transaction id below which every event is committed (or gone) and delivered in order."""


SPAN = "coalesce(cardinality({a}.job_ids), 1)"
"""How many events row `{a}` holds: one, or one per job of a batch row (migration 8)."""


def _span(alias: str) -> str:
    return SPAN.format(a=alias)


def events_after_sql(d: Dialect) -> str:
    """Rows holding the events after cursor `%(seq)s`, in delivery order, for `expand`.

    The cursor's row holds it: the row with the greatest seq at or below it, when
    its events reach it (a batch row's events are seq, seq + 1, ...; rows are
    `EVENT_IDS_PER_ROW` apart). Three cases, one statement (each branch gated so
    only one reads): the cursor's row exists (read on from its `(xid, seq)`, that
    row included: its later events come first); it was pruned (`seq <=
    events_pruned.upto`: pruning removes a prefix of the delivery order, so every
    row left comes after it); or it never was an event (a number a client made up:
    read on by seq). Rows stop once `%(limit)s` events are surely reached; each
    answers its job's type and queue, or a batch row its jobs' (`types`, `queues`).
    """
    events = d.table("events")
    holder = (
        f"SELECT h.seq, h.xid FROM (SELECT c.seq, c.xid, c.job_ids FROM {events} c "
        "WHERE c.seq <= %(seq)s ORDER BY c.seq DESC LIMIT 1) h "
        f"WHERE %(seq)s < h.seq + {_span('h')}"
    )
    found = "EXISTS (SELECT FROM holder)"
    pruned = f"%(seq)s <= (SELECT upto FROM {d.table('events_pruned')})"
    cols = "e.seq, e.at, e.kind, e.job_id, e.job_ids, e.worker_id, e.data, e.xid"
    order = "ORDER BY e.xid, e.seq LIMIT %(limit)s + 1"
    after_row = (
        f"SELECT {cols} FROM {events} e WHERE {found} AND (e.xid, e.seq) >= "
        "((SELECT xid FROM holder), (SELECT seq FROM holder)) "
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
    # `before`: the events of the rows ahead; a row whose events all come after the
    # first limit + EVENT_IDS_PER_ROW (the cursor's row may hold that many delivered) is
    # not needed
    rows = (
        f"SELECT r.*, sum({_span('r')}) OVER (ORDER BY r.xid, r.seq ROWS UNBOUNDED PRECEDING) "
        f"- {_span('r')} AS before "
        f"FROM (({after_row}) UNION ALL ({after_pruned}) UNION ALL ({by_seq})) r"
    )
    return (
        f"WITH holder AS MATERIALIZED ({holder}) "
        "SELECT w.seq, w.at, w.kind, w.job_id, w.job_ids, w.worker_id, w.data, j.type, "
        "j.queue, b.types, b.queues "
        f"FROM ({rows}) w LEFT JOIN {d.table('jobs')} j ON j.id = w.job_id "
        "LEFT JOIN LATERAL (SELECT array_agg(bj.type ORDER BY x.k) AS types, "
        "array_agg(bj.queue ORDER BY x.k) AS queues "
        f"FROM unnest(w.job_ids) WITH ORDINALITY AS x(id, k) LEFT JOIN {d.table('jobs')} bj "
        "ON bj.id = x.id) b ON w.job_ids IS NOT NULL "
        f"WHERE w.before < %(limit)s + {EVENT_IDS_PER_ROW} ORDER BY w.xid, w.seq"
    )


@dataclass(frozen=True, slots=True)
class Delivered:
    """One event as `expand` hands it out: its id (a cursor), and its job's type and queue."""

    seq: int
    at: int
    kind: str
    job_id: str | None
    worker_id: str | None
    data: Any
    type: str | None
    queue: str | None


def expand(rows: Sequence[Sequence[Any]], cursor: int, limit: int) -> list[Delivered]:
    """`events_after_sql`'s rows as events, a batch row as one event per job (ids seq,
    seq + 1, ...), leaving out those of the cursor's row up to the cursor; at most `limit`."""
    out: list[Delivered] = []
    for seq, at, kind, job_id, job_ids, worker_id, data, type_name, queue, types, queues in rows:
        if job_ids is None:
            if seq != cursor:
                out.append(Delivered(seq, at, kind, job_id, worker_id, data, type_name, queue))
        else:
            # only the cursor's own row holds ids at or below it (no two rows' ids meet)
            skip = cursor - seq + 1 if seq <= cursor < seq + len(job_ids) else 0
            for k in range(skip, len(job_ids)):
                out.append(
                    Delivered(seq + k, at, kind, job_ids[k], worker_id, data, types[k], queues[k])
                )
        if len(out) >= limit:
            return out[:limit]
    return out


def newest_delivered_sql(d: Dialect) -> str:
    """The id of the last event in delivery order that readers may deliver now; with none
    stored (all pruned), the greatest id pruned: a cursor that reads every event left."""
    return (
        f"SELECT coalesce((SELECT seq + {_span('e')} - 1 FROM {d.table('events')} e "
        f"WHERE xid < {HORIZON} ORDER BY xid DESC, seq DESC LIMIT 1), "
        f"(SELECT upto FROM {d.table('events_pruned')}))"
    )


def prune_sql(d: Dialect, batch: int) -> str:
    """Delete the longest prefix, in delivery order, of the first `batch` event rows that
    are all deliverable and older than `%(keep)s` ms; remember the greatest event id
    deleted (`events_pruned.upto`). Answers how many rows were deleted.

    Only a prefix: a cursor whose row is gone then comes before every event left. The
    newest deliverable row stays when it is one event (the contract lets a store keep
    its newest event); a batch row goes with the rest, and `newest_delivered_sql` then
    answers the id remembered."""
    events = d.table("events")
    newest = (
        f"SELECT n.seq FROM (SELECT seq, job_ids FROM {events} WHERE xid < {HORIZON} "
        "ORDER BY xid DESC, seq DESC LIMIT 1) n WHERE n.job_ids IS NULL"
    )
    old = f"at < {d.now} - %(keep)s::bigint AND xid < {HORIZON} AND seq <> coalesce(({newest}), 0)"
    return (
        f"WITH first AS (SELECT seq, xid, at FROM {events} ORDER BY xid, seq LIMIT {batch}), "
        f"marked AS (SELECT seq, bool_and({old}) OVER (ORDER BY xid, seq) AS old FROM first), "
        f"gone AS (DELETE FROM {events} e WHERE seq IN (SELECT seq FROM marked WHERE old) "
        f"RETURNING e.seq + {_span('e')} - 1 AS last), "
        f"noted AS (UPDATE {d.table('events_pruned')} SET upto = greatest(upto, "
        "(SELECT max(last) FROM gone)) WHERE EXISTS (SELECT FROM gone)) "
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
