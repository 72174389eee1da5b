"""SQLite statements generated from the state-machine table (`jobcore.transitions`).

Nothing here decides a rule: each `Transition` field maps to one SET or WHERE
fragment, so the SQL cannot drift from `transitions.apply`. Named parameters:
`:now`, `:id`, `:lease_id`, `:error`, `:delay_ms`, `:result`, `:worker`,
`:lease_ms`, `:started_at`, `:limit`.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Sequence
from typing import Any

from jobcore.storage.base import Claim
from jobcore.transitions import (
    CANCEL_WAITING,
    CLAIM,
    EXTEND,
    FAIL_UNRECORDABLE,
    MARK_STARTED,
    OPERATOR_RETRY,
    OWNER,
    PROMOTE,
    REQUEST_CANCEL,
    RETRY_TARGET,
    SWEEP,
    Attempts,
    Cancel,
    Lock,
    RunAt,
    Started,
    Transition,
)

NEW_LEASE_ID = "lower(hex(randomblob(16)))"
"""A new opaque token per claimed row (32 hex digits, like secrets.token_hex(16))."""

PROMOTE_BATCH = 1000
"""At most this many due scheduled jobs are promoted per claim (the rest by the next ones)."""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def set_clause(t: Transition, *, owner: bool = False) -> str:
    """The SET list of `t` (right-hand sides read the row as it was, as SQL defines).

    `owner`: the statement also takes `:started_at`, when the attempt began if its
    executor noted that in a start slot only (`jobcore.start_slots`), else NULL.
    """
    error = ":error" if t.error is not None else "NULL"
    started_at = "coalesce(started_at, :started_at)" if owner else "started_at"
    sets: list[str] = []
    if t.to_status == RETRY_TARGET:
        sets.append("status = CASE WHEN :delay_ms > 0 THEN 'scheduled' ELSE 'pending' END")
    else:
        sets.append(f"status = {_quote(str(t.to_status))}")
    sets += {
        Attempts.KEEP: [],
        Attempts.INCREMENT: ["attempts = attempts + 1"],
        Attempts.GIVE_BACK: ["attempts = attempts - 1"],
        Attempts.RESET: ["attempts = 0"],
    }[t.attempts]
    sets += {
        RunAt.KEEP: [],
        RunAt.NOW: ["run_at = :now"],
        RunAt.AFTER_DELAY: ["run_at = :now + :delay_ms"],
    }[t.run_at]
    sets += {
        Lock.KEEP: [],
        Lock.CLAIM: [
            "locked_by = :worker",
            "locked_at = :now",
            "claimed_at = :now",
            "heartbeat_at = :now",
            "lease_expires_at = :now + :lease_ms",
            f"lease_id = {NEW_LEASE_ID}",
        ],
        Lock.EXTEND: ["heartbeat_at = :now", "lease_expires_at = :now + :lease_ms"],
        Lock.END_KEEP_WORKER: [
            "locked_at = NULL",
            "lease_expires_at = NULL",
            "heartbeat_at = NULL",
        ],
        Lock.END_CLEAR_WORKER: [
            "locked_by = NULL",
            "locked_at = NULL",
            "lease_expires_at = NULL",
            "heartbeat_at = NULL",
        ],
    }[t.lock]
    sets += {
        Started.KEEP: [f"started_at = {started_at}"] if owner else [],
        Started.NOW: ["started_at = coalesce(started_at, :now)"],
        Started.CLEAR: ["started_at = NULL"],
        Started.CLAIM: ["started_at = :started_at"],
    }[t.started]
    sets += {
        Cancel.KEEP: [],
        Cancel.REQUEST: ["cancel_requested = 1"],
        Cancel.CLEAR: ["cancel_requested = 0"],
    }[t.cancel]
    if t.error_entry:
        sets.append(
            "errors = json_insert(errors, '$[#]', json_object("
            f"'attempt', attempts, 'error', {error}, 'worker', locked_by, 'at', :now))"
        )
    if t.last_error:
        sets.append(f"last_error = {error}")
    if t.history is not None:
        sets.append(
            "history = json_insert(history, '$[#]', json_object("
            "'attempt', attempts, 'lease_id', lease_id, 'worker', locked_by, "
            f"'started_at', {started_at}, 'ended_at', :now, "
            f"'outcome', {_quote(t.history)}, 'error', {error}))"
        )
    if t.finishes:
        sets.append("completed_at = :now")
    if t.stores_result:
        sets.append("result = :result")
    if t.reopens:
        sets += ["completed_at = NULL", "result = NULL"]
    if t.event is not None:
        sets.append(f"last_event = {_quote(t.event)}")  # fires the jobs_event trigger
    sets.append("updated_at = :now")
    return ",\n       ".join(sets)


def where_clause(t: Transition, *, by_id: bool) -> str:
    """The guard of `t`: its from-statuses and conditions (plus `id = :id` when `by_id`)."""
    if len(t.from_status) == 1:
        parts = [f"status = {_quote(str(t.from_status[0]))}"]
    else:
        parts = [f"status IN ({', '.join(_quote(str(s)) for s in t.from_status)})"]
    if by_id:
        parts.append("id = :id")
    g = t.guard
    if g.fenced:  # the lease id alone is no secret (readers see it): the worker too
        parts.extend(("lease_id = :lease_id", "locked_by = :worker"))
    if g.lease_expired:
        parts.append("lease_expires_at < :now")
    if g.due:
        parts.append("run_at <= :now")
    if g.started is not None:
        parts.append("started_at IS NOT NULL" if g.started else "started_at IS NULL")
    if g.attempts_left is not None:
        parts.append("attempts < max_attempts" if g.attempts_left else "attempts >= max_attempts")
    if g.cancel_requested is not None:
        parts.append(f"cancel_requested = {int(g.cancel_requested)}")
    return "\n   AND ".join(parts)


def by_id(t: Transition, returning: str = "*", *, owner: bool = False) -> str:
    """`t` applied to one row, chosen by `:id` (fenced by `:lease_id` and `:worker` for owners)."""
    return (
        f"UPDATE jobs\n   SET {set_clause(t, owner=owner)}\n WHERE {where_clause(t, by_id=True)}\n"
        f"RETURNING {returning}"
    )


def set_based(t: Transition, index: str, extra: str = "") -> str:
    """`t` applied to every row its guard (and `extra`) selects (the sweep), through `index`."""
    return (
        f"UPDATE jobs INDEXED BY {index}\n   SET {set_clause(t)}\n"
        f" WHERE {where_clause(t, by_id=False)}{extra}\nRETURNING *"
    )


ONLY_CLAIMS = (
    "\n   AND EXISTS (SELECT 1 FROM json_each(:only) AS o"
    " WHERE json_extract(o.value, '$[0]') = jobs.id"
    " AND json_extract(o.value, '$[1]') = jobs.lease_id"
    " AND json_extract(o.value, '$[2]') = jobs.lease_expires_at)"
)
"""The sweep restricted to the claims `:only` lists (JSON [id, lease_id, lease_expires_at])."""


def listed(only: Sequence[Claim] | None) -> str | None:
    """The `:only` parameter of ONLY_CLAIMS (None without a list)."""
    return None if only is None else json.dumps([list(claim) for claim in only])


def promote(t: Transition) -> str:
    """Promotion of due scheduled rows, at most `PROMOTE_BATCH` per statement, earliest first."""
    return (
        f"UPDATE jobs SET {set_clause(t)}\n WHERE id IN (SELECT id FROM jobs INDEXED BY "
        f"jobs_scheduled WHERE {where_clause(t, by_id=False)} ORDER BY run_at "
        f"LIMIT {PROMOTE_BATCH})"
    )


_ORDER = "ORDER BY priority DESC, run_at, id"


def _in(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    if not values:
        return ""
    names = []
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
        names.append(f":{prefix}{index}")
    if len(names) == 1:
        return f" AND {column} = {names[0]}"
    return f" AND {column} IN ({', '.join(names)})"


def _not_in(column: str, values: Sequence[str], prefix: str, params: dict[str, Any]) -> str:
    """`AND column NOT IN (...)`, the values bound as `:{prefix}N` (pauses, DESIGN §16)."""
    if not values:
        return ""
    for index, value in enumerate(values):
        params[f"{prefix}{index}"] = value
    return f" AND {column} NOT IN ({', '.join(f':{prefix}{i}' for i in range(len(values)))})"


def claim_candidates(
    queues: Sequence[str],
    types: Sequence[str],
    params: dict[str, Any],
    skip_queues: Sequence[str] = (),
    skip_types: Sequence[str] = (),
) -> str:
    """Ids of the next pending jobs in claim order, reading only the filtered queues' rows.

    A queue filter reads the queue-leading index once per queue; a type filter
    (without queues) the type-leading index once per type; each branch stops
    after `:limit` rows, so pending rows of other queues/types are never read.
    `skip_queues`/`skip_types` (paused ones) are left out, read from the index alone.
    """
    pending = "status = 'pending'"
    pending += _not_in("queue", skip_queues, "xq", params)
    pending += _not_in("type", skip_types, "xt", params)
    if not queues and not types:
        return f"SELECT id FROM jobs INDEXED BY jobs_claim WHERE {pending} {_ORDER} LIMIT :limit"
    if queues:
        index, column, values, other, other_values, prefix = (
            "jobs_claim_queue",
            "queue",
            list(dict.fromkeys(queues)),
            "type",
            types,
            "q",
        )
    else:
        index, column, values, other, other_values, prefix = (
            "jobs_claim_type",
            "type",
            list(dict.fromkeys(types)),
            "queue",
            queues,
            "t",
        )
    extra = _in(other, other_values, "o", params)
    branches = []
    for number, value in enumerate(values):
        params[f"{prefix}{number}"] = value
        branches.append(
            f"SELECT id, priority, run_at FROM jobs INDEXED BY {index} "
            f"WHERE {pending} AND {column} = :{prefix}{number}{extra} {_ORDER} LIMIT :limit"
        )
    if len(branches) == 1:
        return branches[0].replace("SELECT id, priority, run_at", "SELECT id", 1)
    union = " UNION ALL ".join(f"SELECT * FROM ({branch})" for branch in branches)
    return f"SELECT id FROM ({union}) {_ORDER} LIMIT :limit"


WINDOW = "4 * :limit + 64"
"""How many pending rows (in claim order) the first phase of a multi-value filtered claim reads."""


def claim(
    queues: Sequence[str],
    types: Sequence[str],
    params: dict[str, Any],
    skip_queues: Sequence[str] = (),
    skip_types: Sequence[str] = (),
) -> tuple[str, ...]:
    """The claim statements for these filters, in order (fills `params` with filter values).

    Run the first; when it claims fewer than `:limit` jobs, run the next with
    `:limit` lowered by what was claimed. A filter on several queues or types
    first looks at the next pending rows of every queue in claim order (a
    bounded window: cheap when most pending work matches), then, only if
    that did not fill the claim, reads each queue's or type's own rows.
    Pending jobs of `skip_queues` and `skip_types` (paused) are never claimed.
    """
    statements, filters = _claim_for(
        tuple(queues), tuple(types), tuple(skip_queues), tuple(skip_types)
    )
    params.update(filters)
    return statements


def _update(candidates: str) -> str:
    return (
        f"UPDATE jobs\n   SET {_CLAIM_SET}\n WHERE status = 'pending' AND id IN "
        f"({candidates})\nRETURNING *"
    )


@functools.lru_cache(maxsize=256)
def _claim_for(
    queues: tuple[str, ...],
    types: tuple[str, ...],
    skip_queues: tuple[str, ...] = (),
    skip_types: tuple[str, ...] = (),
) -> tuple[tuple[str, ...], dict[str, Any]]:
    filters: dict[str, Any] = {}
    candidates = claim_candidates(queues, types, filters, skip_queues, skip_types)
    leading = list(dict.fromkeys(queues)) if queues else list(dict.fromkeys(types))
    if len(leading) < 2:
        return (_update(candidates),), filters
    where = _in("queue", queues, "wq", filters) + _in("type", types, "wt", filters)
    where += _not_in("queue", skip_queues, "xq", filters)
    where += _not_in("type", skip_types, "xt", filters)
    window = (
        "SELECT id FROM (SELECT id, priority, run_at, queue, type FROM jobs INDEXED BY jobs_claim "
        f"WHERE status = 'pending' {_ORDER} LIMIT {WINDOW}) WHERE 1 = 1{where} {_ORDER} "
        "LIMIT :limit"
    )
    return (_update(window), _update(candidates)), filters


_CLAIM_SET = set_clause(CLAIM)


def _owner_statements() -> dict[str, tuple[str, str, str]]:
    """Per owner transition: (statement returning the whole row, a read of what may have
    changed since the claim, the update without RETURNING).

    With the claimed row at hand, the read runs first under the transition's own guard,
    in the same write transaction as the update that follows it: the started marker as
    the transition records it (`coalesce(started_at, :started_at)`, kept or copied into
    the history entry) and `cancel_requested` as it was. The update then returns
    nothing: SQLite buffers RETURNING rows in a temporary b-tree on every execution,
    which cost more than the read (callgrind).
    """
    out = {}
    for group in OWNER.values():
        for t in group:
            read = (
                "SELECT coalesce(started_at, :started_at), cancel_requested FROM jobs\n"
                f" WHERE {where_clause(t, by_id=True)}"
            )
            update = f"UPDATE jobs\n   SET {set_clause(t, owner=True)}\n WHERE {where_clause(t, by_id=True)}"
            out[t.name] = (by_id(t, "*", owner=True), read, update)
    return out


OWNER_SQL = _owner_statements()
SWEEP_SQL = [(set_based(t, "jobs_leases"), t.error, action) for t, action in SWEEP]
SWEEP_ONLY_SQL = [
    (set_based(t, "jobs_leases", ONLY_CLAIMS), t.error, action) for t, action in SWEEP
]
PROMOTE_SQL = promote(PROMOTE)
EXTEND_SQL = by_id(EXTEND, "cancel_requested")
MARK_STARTED_SQL = by_id(MARK_STARTED, "id")
OPERATOR_RETRY_SQL = by_id(OPERATOR_RETRY)
CANCEL_WAITING_SQL = by_id(CANCEL_WAITING)
REQUEST_CANCEL_SQL = by_id(REQUEST_CANCEL)
FAIL_UNRECORDABLE_SQL = by_id(FAIL_UNRECORDABLE)


@functools.lru_cache(maxsize=64)
def _bounded_for(queues: tuple[str, ...], types: tuple[str, ...]) -> tuple[str, dict[str, Any]]:
    filters: dict[str, Any] = {}
    wanted = _in("type", types, "bt", filters)
    branches = []
    for number, value in enumerate(queues):
        filters[f"bq{number}"] = value
        branches.append(
            "SELECT * FROM (SELECT id, priority, run_at FROM (SELECT id, priority, run_at, type "
            f"FROM jobs INDEXED BY jobs_claim_queue WHERE status = 'pending' "
            f"AND queue = :bq{number} {_ORDER} LIMIT {WINDOW}) WHERE 1 = 1{wanted})"
        )
    union = " UNION ALL ".join(branches)
    return _update(f"SELECT id FROM ({union}) {_ORDER} LIMIT :limit"), filters


def claim_bounded_by_queue(
    queues: Sequence[str], types: Sequence[str], params: dict[str, Any]
) -> str:
    """A claim of these types that reads at most the first `WINDOW` pending rows of each
    of `queues` (pauses, DESIGN §16: queues named past a paused one, where other types'
    rows must not be read to the end); a claim it does not fill goes on with another."""
    statement, filters = _bounded_for(tuple(queues), tuple(types))
    params.update(filters)
    return statement


_UPDATE_HEAD = f"UPDATE jobs\n   SET {_CLAIM_SET}\n WHERE "
_RETURNING = "\nRETURNING *"
CANDIDATE_COLUMNS = "id, priority, run_at, queue, type, limit_key"
"""What a limited claim (DESIGN §16) reads of each candidate before it claims it."""


@functools.lru_cache(maxsize=256)
def candidates_of(statement: str) -> str:
    """The rows a claim statement of `claim` would claim, as a SELECT of CANDIDATE_COLUMNS
    (a limited claim picks among them before it claims them by id)."""
    if not (statement.startswith(_UPDATE_HEAD) and statement.endswith(_RETURNING)):
        raise ValueError("not a claim statement")
    where = statement[len(_UPDATE_HEAD) : -len(_RETURNING)]
    return f"SELECT {CANDIDATE_COLUMNS} FROM jobs WHERE {where}"


CLAIM_IDS_SQL = (
    f"{_UPDATE_HEAD}status = 'pending' AND id IN (SELECT value FROM json_each(:ids)){_RETURNING}"
)
"""Claim the pending jobs `:ids` (a JSON list) lists: a limited claim's chosen ones."""
