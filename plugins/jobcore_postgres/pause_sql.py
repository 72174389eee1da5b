"""SQL by which the claim statement honours pauses (DESIGN §16), read inside the statement.

A claim that starts after a pause commits sees it; nothing is cached by a worker.
With nothing paused, the claim pays for three InitPlans over the empty `pauses`
table. With a queue paused, an unfiltered (or type-filtered) claim names the
queues that have pending jobs (a skip scan of `jobs_claim_queue`, one index seek
per queue) and walks each unpaused one, so a paused backlog is never read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from jobcore_postgres.statements import Dialect


def paused_names(d: Dialect, kind: str) -> str:
    """The paused queues or types as an array (an InitPlan: read once per statement)."""
    return f"ARRAY(SELECT name FROM {d.table('pauses')} WHERE kind = '{kind}')"


def not_paused(d: Dialect) -> str:
    """`AND` conditions keeping the row `p` out of paused queues and types."""
    return "".join(f" AND p.{kind} <> ALL({paused_names(d, kind)})" for kind in ("queue", "type"))


def unpaused_filter(d: Dialect, lead: str) -> str:
    """The claimer's own `lead` names (its queues or its types) less the paused ones."""
    return (
        f"SELECT name FROM unnest(%({lead}s)s::text[]) AS u(name) "
        f"WHERE name <> ALL({paused_names(d, lead)})"
    )


def pending_queues(d: Dialect) -> str:
    """Queues with pending jobs and no pause, one index seek per queue."""
    jobs = d.table("jobs")
    first = f"SELECT queue FROM {jobs} WHERE status = 'pending' ORDER BY queue LIMIT 1"
    after = (
        f"SELECT queue FROM {jobs} WHERE status = 'pending' AND queue > q.name "
        "ORDER BY queue LIMIT 1"
    )
    return (
        f"WITH RECURSIVE q(name) AS (SELECT ({first}) "
        f"UNION ALL SELECT ({after}) FROM q WHERE q.name IS NOT NULL) "
        f"SELECT name FROM q WHERE name IS NOT NULL AND name <> ALL({paused_names(d, 'queue')})"
    )


def past_paused_queues(d: Dialect, usual: str, by_queue: str) -> str:
    """`usual` while no queue is paused, else `by_queue` (which walks unpaused queues):
    each branch is gated by a one-time filter, so only one of them runs."""
    any_paused = f"EXISTS (SELECT 1 FROM {d.table('pauses')} WHERE kind = 'queue')"
    return (
        f"SELECT * FROM ({usual}) AS usual WHERE NOT {any_paused} "
        f"UNION ALL SELECT * FROM ({by_queue}) AS by_queue WHERE {any_paused}"
    )


def bounded_by_queue(d: Dialect, order: str, where: str) -> str:
    """Pending jobs of the claimer's types among the first rows of each unpaused queue
    (`4 * limit + 64` of them, read without locking; only the picked rows are locked):
    other types' rows at the head of a queue are never read to the end."""
    jobs = d.table("jobs")
    head = (
        f"SELECT h.id FROM (SELECT id, type FROM {jobs} WHERE status = 'pending' "
        f"AND queue = f.name ORDER BY {order} LIMIT 4 * %(limit)s + 64) AS h "
        "WHERE h.type = ANY(%(types)s::text[])"
    )
    return (
        f"SELECT c.id, c.priority, c.run_at FROM ({pending_queues(d)}) AS f(name), "
        f"LATERAL (SELECT p.id, p.priority, p.run_at FROM {jobs} p "
        f"WHERE p.id = ANY(ARRAY({head})) AND p.status = 'pending'{where} "
        f"ORDER BY p.{order.replace(', ', ', p.')} LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS c "
        f"ORDER BY c.{order.replace(', ', ', c.')} LIMIT %(limit)s"
    )


def heads_then(bounded: str, fallback: str, order: str) -> str:
    """`bounded`, and only when it found fewer than the limit, `fallback` too (which may
    find the same rows again: they are merged), best first."""
    return (
        f"WITH b AS MATERIALIZED ({bounded}), "
        f"r AS MATERIALIZED (SELECT * FROM ({fallback}) AS x "
        "WHERE (SELECT count(*) FROM b) < %(limit)s) "
        f"SELECT * FROM (SELECT * FROM b UNION SELECT * FROM r) AS u "
        f"ORDER BY {order} LIMIT %(limit)s"
    )
