"""PostgreSQL statements generated from the core's state-machine table (`jobcore.transitions`).

Every transition becomes one set-based `UPDATE … RETURNING` that appends its
event in the same statement (a data-modifying CTE). Owner transitions take
their reports as arrays (`unnest`), so a group commit is one statement per
kind of outcome, not one per job. Inside a `SET`, column names read the row
as it was before the update, which is what the history and error entries
record (the attempt, lease and worker that ended).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

from jobcore.event_snapshot import SNAPSHOT_FIELDS, SNAPSHOT_KEY
from jobcore.models import Job, JobStatus
from jobcore.transitions import (
    CLAIM,
    MARK_STARTED,
    OUTCOME_ERROR,
    RETRY_TARGET,
    Attempts,
    Cancel,
    Lock,
    RunAt,
    Started,
    Transition,
)
from jobcore_postgres import pause_sql

JOB_COLUMNS: tuple[str, ...] = tuple(f.name for f in fields(Job))
"""The jobs table's columns, in `Job` field order (every field is a column)."""


def columns(alias: str) -> str:
    return ", ".join(f"{alias}.{name}" for name in JOB_COLUMNS)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


@dataclass(frozen=True)
class Dialect:
    """Names and expressions of one store: its schema, and where its clock comes from."""

    schema: str

    @property
    def now(self) -> str:
        # the injected test clock when given, else the server's clock
        return f"coalesce(%(now)s::bigint, {self.schema}.now_ms())"

    def table(self, name: str) -> str:
        return f"{self.schema}.{name}"


def _error_expr(transition: Transition) -> str:
    if transition.error == OUTCOME_ERROR:
        return "v.error"
    if transition.error is None:
        return "NULL::text"
    return _quote(transition.error)


def set_clause(transition: Transition, d: Dialect) -> str:
    """The SET list of `transition`; reports come from `v`, claim parameters from %(…)s."""
    now = d.now
    err = _error_expr(transition)
    if transition.to_status == RETRY_TARGET:
        status = "CASE WHEN v.delay_ms > 0 THEN 'scheduled' ELSE 'pending' END"
    else:
        status = _quote(str(JobStatus(transition.to_status)))
    sets = [f"status = {status}", f"updated_at = {now}"]
    match transition.attempts:
        case Attempts.INCREMENT:
            sets.append("attempts = j.attempts + 1")
        case Attempts.GIVE_BACK:
            sets.append("attempts = j.attempts - 1")
        case Attempts.RESET:
            sets.append("attempts = 0")
    match transition.run_at:
        case RunAt.NOW:
            sets.append(f"run_at = {now}")
        case RunAt.AFTER_DELAY:
            sets.append(f"run_at = {now} + v.delay_ms")
    match transition.lock:
        case Lock.CLAIM:
            sets += [
                "locked_by = %(worker)s",
                f"locked_at = {now}",
                f"claimed_at = {now}",
                f"heartbeat_at = {now}",
                f"lease_expires_at = {now} + %(lease_ms)s::bigint",
                "lease_id = md5(random()::text || clock_timestamp()::text || j.id)",
            ]
        case Lock.EXTEND:
            sets += [f"heartbeat_at = {now}", f"lease_expires_at = {now} + %(lease_ms)s::bigint"]
        case Lock.END_KEEP_WORKER:
            sets += ["locked_at = NULL", "lease_expires_at = NULL", "heartbeat_at = NULL"]
        case Lock.END_CLEAR_WORKER:
            sets += [
                "locked_by = NULL",
                "locked_at = NULL",
                "lease_expires_at = NULL",
                "heartbeat_at = NULL",
            ]
    match transition.started:
        case Started.NOW:
            sets.append(f"started_at = coalesce(j.started_at, {now})")
        case Started.CLEAR:
            sets.append("started_at = NULL")
        case Started.CLAIM:
            sets.append(f"started_at = CASE WHEN v.rn <= %(start)s THEN {now} END")
    match transition.cancel:
        case Cancel.REQUEST:
            sets.append("cancel_requested = true")
        case Cancel.CLEAR:
            sets.append("cancel_requested = false")
    if transition.error_entry:
        sets.append(
            "errors = j.errors || jsonb_build_array(jsonb_build_object("
            f"'attempt', j.attempts, 'error', {err}, 'worker', j.locked_by, 'at', {now}))"
        )
    if transition.last_error:
        sets.append(f"last_error = {err}")
    if transition.history is not None:
        sets.append(
            "history = j.history || jsonb_build_array(jsonb_build_object("
            "'attempt', j.attempts, 'lease_id', j.lease_id, 'worker', j.locked_by, "
            f"'started_at', j.started_at, 'ended_at', {now}, "
            f"'outcome', {_quote(transition.history)}, 'error', {err}))"
        )
    if transition.finishes:
        sets.append(f"completed_at = {now}")
    if transition.stores_result:
        sets.append("result = v.result::json")
    if transition.reopens:
        sets += ["completed_at = NULL", "result = NULL"]
    return ", ".join(sets)


def guard_clause(transition: Transition, d: Dialect) -> str:
    """The WHERE conditions of `transition` on row `j` (status first: partial indexes)."""
    statuses = ", ".join(_quote(str(s)) for s in transition.from_status)
    # Owner transitions find each reported row by primary key. Their status test is
    # written so that no partial index over claimed rows can serve it: without table
    # statistics the planner would otherwise walk every claimed row once per report.
    status = 'j.status COLLATE "C"' if transition.guard.fenced else "j.status"
    conds = [
        f"{status} IN ({statuses})" if len(transition.from_status) > 1 else f"{status} = {statuses}"
    ]
    g = transition.guard
    if g.fenced:  # the lease id alone is no secret (readers see it): the worker too
        conds.append("j.lease_id = v.lease_id AND j.locked_by = v.worker")
    if g.lease_expired:
        conds.append(f"j.lease_expires_at < {d.now}")
    if g.due:
        conds.append(f"j.run_at <= {d.now}")
    if g.started is not None:
        conds.append(f"j.started_at IS {'NOT ' if g.started else ''}NULL")
    if g.attempts_left is not None:
        conds.append(
            "j.attempts < j.max_attempts" if g.attempts_left else "j.attempts >= j.max_attempts"
        )
    if g.cancel_requested is not None:
        conds.append(f"j.cancel_requested = {'true' if g.cancel_requested else 'false'}")
    return " AND ".join(conds)


def _event_insert(
    transition: Transition, d: Dialect, source: str, last_history: str = "u.history -> -1"
) -> str:
    """An INSERT of one event per row of CTE `source` (the updated rows)."""
    if transition.lock is Lock.CLAIM:
        worker = "u.locked_by"
    elif JobStatus.CLAIMED in transition.from_status and transition.history is not None:
        worker = f"{last_history} ->> 'worker'"
    else:
        worker = "NULL"
    # a job event stores the job as this transition left it (jobcore.event_snapshot);
    # readers get the job's type and queue by joining the job
    return (
        f"INSERT INTO {d.table('events')} (at, kind, job_id, worker_id, data) "
        f"SELECT u.updated_at, {_quote(transition.event or '')}, u.id, {worker}, "
        f"{_SNAPSHOT} FROM {source} u"
    )


_SNAPSHOT = (
    f"jsonb_build_object({_quote(SNAPSHOT_KEY)}, jsonb_build_object("
    + ", ".join(f"{_quote(name)}, u.{name}" for name in SNAPSHOT_FIELDS)
    + "))"
)


def with_event(transition: Transition, d: Dialect, update: str, names: str | None = None) -> str:
    """`update` (an `UPDATE … RETURNING` of all columns) plus the event insert, one statement.

    `names`: the columns to answer (those of the RETURNING list), default every job column.
    """
    if transition.event is None:
        return update
    last = "u.last_history_entry" if names else "u.history -> -1"
    return (
        f"WITH u AS ({update}), e AS ({_event_insert(transition, d, 'u', last)}) "
        f"SELECT {names or columns('u')} FROM u"
    )


SLIM_SKIPPED = ("payload", "meta", "result", "errors", "history")
"""Columns a slim answer leaves out: the caller has them from the claimed row."""
SLIM_COLUMNS = tuple(name for name in JOB_COLUMNS if name not in SLIM_SKIPPED)


# report arrays of owner transitions: one element per outcome
_REPORT_ARRAYS = (
    ("id", "%(ids)b::text[]"),
    ("lease_id", "%(lease_ids)b::text[]"),
    ("worker", "%(workers)b::text[]"),
    ("error", "%(errors)b::text[]"),
    ("result", "%(results)b::text[]"),
    ("delay_ms", "%(delays)s::bigint[]"),
    ("mark", "%(marks)s::boolean[]"),
)


def reports(used: str) -> str:
    """The reports as rows `v`: ids, lease ids, workers, and the arrays SQL text `used` reads.

    Arrays a transition does not read are neither sent nor dumped (a completion
    needs no errors or delays): each costs the reporter a Python call per element.
    """
    names, arrays = zip(
        *(
            (name, array)
            for name, array in _REPORT_ARRAYS
            if name in ("id", "lease_id", "worker") or f"v.{name}" in used
        ),
        strict=True,
    )
    return f"unnest({', '.join(arrays)}) AS v({', '.join(names)})"


def owner_statement(transition: Transition, d: Dialect, slim: bool = False) -> str:
    """Apply `transition` to every reported job whose lease is still held.

    `slim` answers the scalar columns plus the last `errors` and `history` entries
    (`SLIM_COLUMNS`, then those two): the reporter holds the claimed row, and a
    claim-ending transition only appends to those lists, so the JSON columns need
    not travel back and be decoded again.
    """
    if slim:
        returning = ", ".join(
            [f"j.{name}" for name in SLIM_COLUMNS]
            + ["j.errors -> -1 AS last_error_entry", "j.history -> -1 AS last_history_entry"]
        )
        names = ", ".join(
            [f"u.{name}" for name in SLIM_COLUMNS] + ["u.last_error_entry", "u.last_history_entry"]
        )
    else:
        returning, names = columns("j"), None
    sets, guard = set_clause(transition, d), guard_clause(transition, d)
    update = (
        f"UPDATE {d.table('jobs')} j SET {sets} FROM {reports(sets + guard)} "
        f"WHERE j.id = v.id AND {guard} RETURNING {returning}"
    )
    return with_event(transition, d, update, names)


def lock_leases_statement(d: Dialect) -> str:
    """Lock the rows of the reported leases that still hold, in the order reported.

    A transaction that writes reported rows in more than one statement (start
    markers, then one statement per kind of outcome) runs this first, with the
    reports in job id order, as every single-statement writer of reported rows
    sends them (`PostgresStorage._lease_params`, `_send_owner`): all take the rows
    of a worker in one order, so a heartbeat and a group commit cannot deadlock.
    Each report locks its row in a LATERAL subquery: the reports drive the loop
    whatever the planner thinks, so rows are locked in array order.
    """
    guard = guard_clause(MARK_STARTED, d)  # a claim that still holds
    return (
        f"SELECT l.id FROM {reports('')}, LATERAL (SELECT j.id FROM {d.table('jobs')} j "
        f"WHERE j.id = v.id AND {guard} FOR NO KEY UPDATE) AS l"
    )


def lock_and_mark_statement(d: Dialect) -> str:
    """Lock the rows of the reported leases that still hold, in the order reported (as
    `lock_leases_statement`), and mark started those reported with `mark`: the start
    markers and the pre-lock of a group commit in one statement instead of two."""
    guard = guard_clause(MARK_STARTED, d)
    return (
        f"WITH v AS MATERIALIZED (SELECT v.id, v.mark FROM {reports('v.mark')}, "
        f"LATERAL (SELECT j.id FROM {d.table('jobs')} j WHERE j.id = v.id AND {guard} "
        f"FOR NO KEY UPDATE) AS l) "
        f"UPDATE {d.table('jobs')} j SET {set_clause(MARK_STARTED, d)} "
        f"WHERE j.id = ANY(ARRAY(SELECT id FROM v WHERE v.mark)) RETURNING j.id"
    )


def lease_statement(transition: Transition, d: Dialect, returning: str) -> str:
    """Apply a lease-keeping `transition` (extend, mark started) to the reported leases that
    still hold, answering `returning`: each row locked first, in the order reported, as in
    `lock_leases_statement` (a plain join may walk the table and rescan the reports for
    every row: a heartbeat of 500 leases then takes ~300 ms, locking in index order).
    The rows locked are those whose lease held; locked, they stay so until the update."""
    guard = guard_clause(transition, d)
    return (
        f"WITH v AS MATERIALIZED (SELECT v.id, v.lease_id, v.worker FROM {reports('')}, "
        f"LATERAL (SELECT j.id FROM {d.table('jobs')} j WHERE j.id = v.id AND {guard} "
        f"FOR NO KEY UPDATE) AS l) "
        f"UPDATE {d.table('jobs')} j SET {set_clause(transition, d)} "
        f"WHERE j.id = ANY(ARRAY(SELECT id FROM v)) RETURNING {returning}"
    )


def sweep_statement(transition: Transition, d: Dialect, limit: int, only: bool = False) -> str:
    """Apply a sweep transition to at most `limit` expired leases (skipping locked rows);
    `only`: just the claims listed as unchanged by `%(only_ids)s`, `%(only_leases)s`
    and `%(only_expiries)s`."""
    listed = (
        " AND (j.id, j.lease_id, j.lease_expires_at) IN (SELECT * FROM unnest("
        "%(only_ids)s::text[], %(only_leases)s::text[], %(only_expiries)s::bigint[]))"
        if only
        else ""
    )
    update = (
        f"UPDATE {d.table('jobs')} j SET {set_clause(transition, d)} "
        f"FROM (SELECT id FROM {d.table('jobs')} j WHERE {guard_clause(transition, d)}{listed} "
        f"ORDER BY j.lease_expires_at LIMIT {int(limit)} FOR UPDATE SKIP LOCKED) AS v "
        f"WHERE j.id = v.id RETURNING {columns('j')}"
    )
    return with_event(transition, d, update)


def by_id_statement(transition: Transition, d: Dialect) -> str:
    """Apply an operator transition to one job `%(id)s` (no reports: `v` is empty)."""
    update = (
        f"UPDATE {d.table('jobs')} j SET {set_clause(transition, d)} "
        f"WHERE j.id = %(id)s AND {guard_clause(transition, d)} RETURNING {columns('j')}"
    )
    return with_event(transition, d, update)


_PICK_ORDER = "priority DESC, run_at, id"


def _by_name(jobs: str, lead: str, names: str, where: str) -> str:
    """The pick walking, for each name `names` yields, that `lead` (queue or type)'s
    slice of its leading partial index (a LATERAL per name)."""
    return (
        f"SELECT c.id, c.priority, c.run_at FROM ({names}) AS f(name), "
        f"LATERAL (SELECT p.id, p.priority, p.run_at FROM {jobs} p "
        f"WHERE p.status = 'pending' AND p.{lead} = f.name{where} "
        f"ORDER BY p.{_PICK_ORDER} LIMIT %(limit)s FOR UPDATE SKIP LOCKED) AS c "
        f"ORDER BY c.{_PICK_ORDER.replace(', ', ', c.')} LIMIT %(limit)s"
    )


def claim_statement(d: Dialect, by_queue: bool, by_type: bool) -> str:
    """Claim up to %(limit)s pending jobs: one CTE picking with SKIP LOCKED, then UPDATE.

    With queue (or type) filters the pick walks each named queue's slice of the
    queue-leading partial index (a LATERAL per name), never other queues' rows.
    Paused queues and types are skipped (`pause_sql`, DESIGN §16).
    """
    jobs = d.table("jobs")
    not_paused = pause_sql.not_paused(d)
    types = " AND p.type = ANY(%(types)s::text[])"
    if by_queue or by_type:
        lead = "queue" if by_queue else "type"
        extra = types if by_queue and by_type else ""
        names = pause_sql.unpaused_filter(d, lead)
        pick = _by_name(jobs, lead, names, extra + not_paused)
        if not by_queue:
            # past a paused queue: the heads of the other queues, then (if need be) this
            # pick, which skips the paused queues' rows of these types one by one
            heads = pause_sql.bounded_by_queue(d, _PICK_ORDER, not_paused)
            by_queues = pause_sql.heads_then(heads, pick, _PICK_ORDER)
            pick = pause_sql.past_paused_queues(d, pick, by_queues)
    else:
        # `attempts >= 0` (always true) is in jobs_claim's predicate and only here, so
        # that a filtered pick can never walk every queue's rows in jobs_claim
        pick = (
            f"SELECT p.id, p.priority, p.run_at FROM {jobs} p "
            f"WHERE p.status = 'pending'{not_paused} AND p.attempts >= 0 "
            f"ORDER BY p.{_PICK_ORDER} LIMIT %(limit)s FOR UPDATE SKIP LOCKED"
        )
        by_queues = _by_name(jobs, "queue", pause_sql.pending_queues(d), not_paused)
        pick = pause_sql.past_paused_queues(d, pick, by_queues)
    # with any concurrency or rate limit, claims go through `jobcore_postgres.limits`
    # instead (one-time filters: the pick does not run)
    pick = (
        f"SELECT * FROM ({pick}) AS g WHERE NOT EXISTS (SELECT 1 FROM {d.table('limits')}) "
        f"AND NOT EXISTS (SELECT 1 FROM {d.table('rates')})"
    )
    return claim_picked_statement(d, pick)


def claim_ids_statement(d: Dialect) -> str:
    """Claim the pending jobs %(ids)s lists (a limited claim's choice, DESIGN §16)."""
    pick = (
        f"SELECT p.id, p.priority, p.run_at FROM {d.table('jobs')} p "
        "WHERE p.id = ANY(%(ids)s::text[]) AND p.status = 'pending' "
        f"ORDER BY p.{_PICK_ORDER} FOR UPDATE SKIP LOCKED"
    )
    return claim_picked_statement(d, pick)


def claim_picked_statement(d: Dialect, pick: str) -> str:
    """The claim of the rows `pick` selects (id, priority, run_at), with its events."""
    jobs = d.table("jobs")
    update = (
        f"UPDATE {jobs} j SET {set_clause(CLAIM, d)} FROM ranked v "
        f"WHERE j.id = v.id RETURNING {columns('j')}, v.rn"
    )
    return (
        f"WITH picked AS MATERIALIZED ({pick}), "
        f"ranked AS (SELECT id, row_number() OVER (ORDER BY {_PICK_ORDER}) AS rn FROM picked), "
        f"u AS ({update}), e AS ({_event_insert(CLAIM, d, 'u')}) "
        f"SELECT {columns('u')} FROM u ORDER BY u.rn"
    )


def promote_statement(d: Dialect, limit: int) -> str:
    """Due scheduled jobs become pending, at most `limit` per call (no event)."""
    jobs = d.table("jobs")
    return (
        f"UPDATE {jobs} j SET status = 'pending', updated_at = {d.now} "
        f"WHERE j.id IN (SELECT id FROM {jobs} WHERE status = 'scheduled' AND run_at <= {d.now} "
        f"ORDER BY run_at LIMIT {int(limit)} FOR UPDATE SKIP LOCKED) AND j.status = 'scheduled'"
    )
