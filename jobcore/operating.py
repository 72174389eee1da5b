"""Operating a queue (DESIGN §16): pause and resume queues and job types, list queues,
set and clear concurrency limits.

Callers are the CLI, the hub and applications; the rules (checked names,
clamped text, waking workers on resume) live here once.
"""

from __future__ import annotations

import getpass
import os
import socket
from collections.abc import Sequence
from typing import Any

from jobcore import concurrency, rates, wakeup
from jobcore.concurrency import (
    Limit,
    checked_limit,
    checked_scope,
    declared_limits,
    declaring_changes,
)
from jobcore.pauses import MAX_REASON, Pause, checked_kind, checked_name, checked_text
from jobcore.queue import Queue
from jobcore.rates import Rate

MAX_BY = 200
"""Longest operator name kept with a pause (characters)."""


def operator_name() -> str:
    """Who is pausing from this process: `user@host` (best effort)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (container without passwd)
        user = str(os.getuid()) if hasattr(os, "getuid") else "unknown"
    return f"{user}@{socket.gethostname()}"


def pause(
    queue: Queue, kind: str, name: str, *, reason: str = "", by: str | None = None
) -> tuple[Pause, bool]:
    """Pause a queue or a type; (the pause as stored, whether this call made it).

    Claims that begin after this returns skip the paused work; running jobs finish.
    """
    kind = checked_kind(kind)
    name = checked_name(kind, name)
    reason = checked_text("reason", reason, MAX_REASON)
    by = checked_text("by", operator_name() if by is None else by, MAX_BY)
    return queue.storage.pause(kind, name, reason=reason, by=by)


def resume(queue: Queue, kind: str, name: str) -> Pause | None:
    """Lift a pause (None when it was not paused) and wake this process's idle workers."""
    kind = checked_kind(kind)
    name = checked_name(kind, name)
    lifted = queue.storage.resume(kind, name)
    if lifted is not None:
        wakeup.notify(queue.wake_key)
    return lifted


def queue_rows(queue: Queue) -> list[dict[str, Any]]:
    """Each queue with unfinished jobs, a pause or a limit: depth by status, its pause
    if any, its concurrency limit (None: none)."""
    depths = queue.storage.queue_depths()
    paused = {p.name: p for p in queue.storage.pauses() if p.kind == "queue"}
    caps = {lim.name: lim.concurrency for lim in queue.storage.limits() if lim.scope == "queue"}
    rows = []
    for name in sorted(set(depths) | set(paused) | set(caps)):
        counts = depths.get(name, {})
        pause_ = paused.get(name)
        rows.append(
            {
                "queue": name,
                "scheduled": counts.get("scheduled", 0),
                "pending": counts.get("pending", 0),
                "claimed": counts.get("claimed", 0),
                "paused": pause_ is not None,
                "reason": pause_.reason if pause_ else None,
                "since": pause_.to_json()["since"] if pause_ else None,
                "by": pause_.by if pause_ else None,
                "concurrency": caps.get(name),
            }
        )
    return rows


def set_limit(queue: Queue, scope: str, name: str, concurrency: Any) -> Limit:
    """Allow at most `concurrency` claimed jobs per queue, type or key of a type, from the
    next claim on (jobs already claimed above it finish); wins over a declared limit."""
    limit = checked_limit(scope, name, concurrency)
    made = queue.storage.set_limit(limit.scope, limit.name, limit.concurrency)
    wakeup.notify(queue.wake_key)  # a raised limit may free work for idle workers
    return made


def clear_limit(queue: Queue, scope: str, name: str) -> Limit | None:
    """Remove a limit (None when there was none); a type's declared limit comes back
    when a worker that registers the type next starts."""
    scope = checked_scope(scope)
    name = checked_name("type" if scope == "key" else scope, name)
    cleared = queue.storage.clear_limit(scope, name)
    if cleared is not None:
        wakeup.notify(queue.wake_key)
    return cleared


def declare_types(queue: Queue, names: Sequence[str]) -> None:
    """Write the concurrency and rate limits the job types `names` declare to the store (a
    worker does at start), so every claimer on the store respects them."""
    registered = [t for t in (queue.registry.get(name) for name in names) if t is not None]
    declare_limits(queue, *declared_limits(registered))
    declare_rates(queue, *rates.declared_rates(registered))


def declare_limits(queue: Queue, declared: Sequence[Limit], unlimited: Sequence[str]) -> bool:
    """Store `declared` (a limit set at run time stays) and drop the declared limits of the
    types in `unlimited`; without a write when nothing would change. Whether it changed."""
    if not declaring_changes(queue.storage.limits(), declared, unlimited):
        return False
    queue.storage.declare_limits(declared, unlimited)
    wakeup.notify(queue.wake_key)  # a limit dropped or raised may free work for idle workers
    return True


def declare_rates(queue: Queue, declared: Sequence[Rate], unrated: Sequence[str]) -> bool:
    """Store the `declared` rate limits (a rate set at run time stays) and drop the declared
    rates of the types in `unrated`; without a write when nothing would change. Whether it
    changed."""
    if not rates.declaring_rates_changes(queue.storage.rates(), declared, unrated):
        return False
    queue.storage.declare_rates(declared, unrated)
    wakeup.notify(queue.wake_key)  # a rate dropped or raised may free work for idle workers
    return True


def set_rate(queue: Queue, scope: str, name: str, rate: Any, period_seconds: Any) -> Rate:
    """Allow at most `rate` claims per sliding `period_seconds` per queue, type or key of a
    type, from the next claim on; wins over a declared rate limit."""
    made = rates.checked_rate_limit(scope, name, rate, period_seconds)
    stored = queue.storage.set_rate(made.scope, made.name, made.rate, made.period_ms)
    wakeup.notify(queue.wake_key)  # a raised rate may free work for idle workers
    return stored


def clear_rate(queue: Queue, scope: str, name: str) -> Rate | None:
    """Remove a rate limit (None when there was none)."""
    scope = checked_scope(scope)
    name = checked_name("type" if scope == "key" else scope, name)
    cleared = queue.storage.clear_rate(scope, name)
    if cleared is not None:
        wakeup.notify(queue.wake_key)
    return cleared


def limit_rows(queue: Queue) -> list[dict[str, Any]]:
    """Each limit with how many jobs it holds claimed now (for a key limit: its keys at
    the limit)."""
    return concurrency.limit_rows(queue.storage)


def waits_for_a_slot(queue: Queue, queues: Sequence[str], types: Sequence[str]) -> bool:
    """Whether a pending job of these queues and types (empty: all), in no paused queue or
    type, is under a concurrency limit of its queue, type or type's keys: held back by a
    slot a job running elsewhere frees, it is not "nothing runnable" for a worker draining
    `--until-empty`. A job no limit covers (held back by a rate, as a scheduled one by the
    clock) is not waited for. Reads the limits, the pauses and at most two pending jobs."""
    storage = queue.storage
    limits = storage.limits()
    if not limits:
        return False
    paused = {(pause.kind, pause.name) for pause in storage.pauses()}
    kinds = [
        t for t in types or sorted(job.name for job in queue.registry) if ("type", t) not in paused
    ]
    stopped = {name for kind, name in paused if kind == "queue"}
    served: list[str] | None = None  # every queue
    if queues:
        served = [name for name in queues if name not in stopped]
    elif stopped:  # every queue but the paused ones: those with jobs pending
        depths = storage.queue_depths()
        served = [name for name in depths if depths[name].get("pending") and name not in stopped]
    if not kinds or served == []:
        return False
    limited_queues = [
        limit.name
        for limit in limits
        if limit.scope == "queue" and (served is None or limit.name in served)
    ]
    limited_kinds = [
        t for t in kinds if any(limit.name == t for limit in limits if limit.scope != "queue")
    ]
    looks = [(limited_queues, kinds)] if limited_queues else []
    if limited_kinds:
        looks.append((served or [], limited_kinds))
    return any(
        storage.list_jobs(statuses=["pending"], queues=names, types=of, limit=1)
        for names, of in looks
    )


class SlotLook:
    """`waits_for_a_slot` for one draining worker, looked at once a poll interval at most:
    every commit on the store wakes the worker, and the look reads the limits, the pauses
    and pending jobs. A "waits" answer stands for `poll_interval` (a claim takes the job
    once a slot frees, whatever the answer); a "nothing waits" one is never kept."""

    def __init__(
        self, queue: Queue, queues: Sequence[str], types: Sequence[str], poll_interval: float
    ) -> None:
        self.queue, self.queues, self.types = queue, queues, types
        self.poll_interval = poll_interval
        self._until = float("-inf")  # monotonic: the last "waits" answer stands until then

    def waits(self, mono: float) -> bool:
        """Whether a job of these queues and types waits for a slot (see `waits_for_a_slot`)."""
        if mono < self._until:
            return True
        if not waits_for_a_slot(self.queue, self.queues, self.types):
            return False
        self._until = mono + self.poll_interval
        return True
