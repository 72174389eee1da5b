"""The group commit: a worker's decided outcomes and its next claim in one transaction.

When the store refuses a batch for a reason that is not the store's as a whole
(full, read-only, busy, I/O: see `is_environmental`), the batch is recorded
apart: split in halves until the refused outcome is alone, and that job is
recorded as failed instead, so one bad outcome (say, a result the store cannot
take) never blocks the others.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jobcore.attempt import describe_error
from jobcore.errors import (
    NotADatabase,
    SchemaTooNew,
    StorageFull,
    StorageReadOnly,
    StorageUnavailable,
    TransientStorageError,
)
from jobcore.inflight import Attempt
from jobcore.models import Failed, Job, Lease, Outcome
from jobcore.queue import Queue
from jobcore.storage.base import Recorded

log = logging.getLogger("jobcore.worker")

UNRECORDABLE = "the store refused this outcome"


def is_transient(exc: BaseException) -> bool:
    """A database error that says nothing about the outcomes being written (busy, I/O)."""
    return isinstance(exc, TransientStorageError)


ENVIRONMENT_ERRORS = (
    TransientStorageError,
    StorageFull,
    StorageReadOnly,
    NotADatabase,
    StorageUnavailable,
    SchemaTooNew,
)


def is_environmental(exc: BaseException) -> bool:
    """The store as a whole cannot take writes now (full, read-only, busy, I/O): no outcome
    is to blame, so none may be replaced by a failure; the loop backs off instead."""
    return isinstance(exc, ENVIRONMENT_ERRORS)


def outcome_of(attempt: Attempt) -> Outcome:
    assert attempt.outcome is not None
    return attempt.outcome


class GroupCommit:
    """Records outcomes and claims for one worker; see the module docstring."""

    def __init__(
        self,
        queue: Queue,
        *,
        worker: str,
        lease: float,
        queues: tuple[str, ...],
        types: tuple[str, ...],
    ) -> None:
        self.queue = queue  # its storage opens lazily, at the worker's start
        self.worker = worker
        self.lease = lease
        self.queues = queues
        self.types = types

    def commit(
        self,
        batch: list[Attempt],
        *,
        claim_limit: int,
        promote: bool,
        started: list[Lease],
        start: int,
        recorded_apart: Callable[[Attempt, Recorded], None],
        look_ahead: bool = False,
    ) -> tuple[list[Recorded], list[Job]] | None:
        """Record `batch`, mark `started`, claim; None: the batch was recorded apart instead.

        Errors of the store as a whole (`is_environmental`) propagate with nothing
        recorded. Each attempt recorded apart goes to `recorded_apart` once its part commits.
        `look_ahead` is passed on only when true (stores that offer `scheduled_seen`).
        """
        extra = {"look_ahead": True} if look_ahead else {}
        try:
            recorded, claimed = self.queue.storage.commit_batch(
                [outcome_of(attempt) for attempt in batch],
                worker=self.worker,
                claim_limit=claim_limit,
                lease_ms=int(self.lease * 1000),
                queues=self.queues,
                types=self.types,
                promote=promote,
                started=started,
                start=start,
                **extra,
            )
        except Exception as exc:
            if not batch or is_environmental(exc):
                raise
            log.warning(
                "group commit of %d outcome(s) failed (%s); recording them apart",
                len(batch),
                describe_error(exc),
            )
            self.record_apart(batch, recorded_apart)
            return None
        return recorded, claimed

    def record_apart(
        self, batch: list[Attempt], recorded_apart: Callable[[Attempt, Recorded], None]
    ) -> None:
        """Split a refused batch until the outcome the store refuses is alone; fail that job.

        Parts that commit are done. If even a plain failure of that job is refused,
        the database is at fault, not the outcome: its outcome is put back and the
        error propagates (the loop backs off and tries again).
        """
        parts = [batch]
        refused: dict[str, Outcome] = {}  # job id -> the outcome replaced by a failure
        while parts:
            part = parts.pop(0)
            try:
                recorded, _ = self.queue.storage.commit_batch(
                    [outcome_of(attempt) for attempt in part],
                    worker=self.worker,
                    claim_limit=0,
                    lease_ms=int(self.lease * 1000),
                    queues=self.queues,
                    types=self.types,
                    promote=False,
                )
            except Exception as exc:
                if is_environmental(exc):
                    raise
                if len(part) > 1:
                    middle = len(part) // 2
                    parts[:0] = [part[:middle], part[middle:]]
                    continue
                [attempt] = part
                if attempt.job.id in refused:
                    attempt.outcome = refused[attempt.job.id]
                    raise
                outcome = refused[attempt.job.id] = outcome_of(attempt)
                log.error(
                    "job %s: the store refused its %s outcome (%s); recording it as failed",
                    attempt.job.id,
                    type(outcome).__name__.lower(),
                    describe_error(exc),
                )
                attempt.outcome = Failed(
                    lease=attempt.lease, error=f"{UNRECORDABLE}: {describe_error(exc)}"
                )
                parts.insert(0, part)
                continue
            for attempt, answer in zip(part, recorded, strict=True):
                recorded_apart(attempt, answer)
