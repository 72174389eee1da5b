"""`Queue`: enqueue, inspect and administer jobs; the state-machine rules live here."""

from __future__ import annotations

import logging
import operator
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from pydantic import BaseModel, ConfigDict

from jobcore import wakeup
from jobcore.concurrency import limit_rows
from jobcore.config import Config
from jobcore.errors import (
    IllegalTransition,
    InvalidPayload,
    JobNotFound,
    PayloadTooLarge,
    StorageError,
    UnknownJobType,
)
from jobcore.ids import new_id, new_ids
from jobcore.job_build import (
    Repeated,
    Settled,
    flat_json_values,
    no_lone_surrogates,
    validated,
)
from jobcore.json_values import check_finite, check_meta, encode_finite, probe_finite
from jobcore.limits import MAX_NAME_BYTES, check_bytes, check_enqueue_options, check_text
from jobcore.models import FINISHED, Job, JobStatus, NewJob
from jobcore.payload_codec import PayloadCodec, codec_for
from jobcore.plugins import JobcorePluginManager, make_plugin_manager, notify
from jobcore.registry import JobType, JobTypeRegistry, Payload
from jobcore.retry import RetryDecision, RetryPolicy
from jobcore.storage.base import STATS_KEYS, Claim, Inserted, Stats, Storage, Swept

log = logging.getLogger("jobcore.queue")


class _AnyPayload(Payload):
    """Model for types this process does not know (allowed by `allow_unregistered_types`)."""

    model_config = ConfigDict(extra="allow")


class Queue:
    """A job queue on one database: the application's and the worker's entry point.

    `db` is a path or URL (default: the `db` setting). `create=False` refuses to
    create a missing database, for commands that only read. `storage` uses that
    backend instead of asking the `jobcore_storage_backend` hook (e.g. a
    backend built with a test clock).
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        config: Config | None = None,
        pm: JobcorePluginManager | None = None,
        create: bool = True,
        storage: Storage | None = None,
    ) -> None:
        self.config = config if config is not None else Config.load()
        self.pm = pm if pm is not None else make_plugin_manager()
        self.url = db if db is not None else self.config.core.db
        self._create = create
        self._storage: Storage | None = storage
        self.pm.configure(self.config)
        self.registry = self._collect_job_types()
        self._has_meta_hooks = bool(self.pm.hook.jobcore_enqueue_meta.get_hookimpls())
        self._settled: dict[tuple[Any, ...], Settled] = {}  # see `_settle_options`

    def _collect_job_types(self) -> JobTypeRegistry:
        registry = JobTypeRegistry()
        # in registration order, so a later plugin cannot take over an earlier one's name
        for impl in self.pm.hook.jobcore_register_job_types.get_hookimpls():
            try:
                impl.function(register=partial(registry.register, plugin=impl.plugin_name))
            except Exception as exc:
                if impl.plugin_name.startswith("jobcore.builtin"):
                    raise
                log.debug(
                    "plugin %s failed to register its job types", impl.plugin_name, exc_info=True
                )
                self.pm.mark_unavailable(impl.plugin_name, f"registering job types failed: {exc}")
        return registry

    # -- storage -------------------------------------------------------------------

    @property
    def storage(self) -> Storage:
        if self._storage is None:
            storage = self.pm.storage_backend(self.url, self.config, self._create)
            if storage is None:
                raise StorageError(self.pm.no_storage_backend(self.url))
            self._storage = storage
        return self._storage

    @property
    def wake_key(self) -> str:
        """Identifies the database for in-process wake-ups (the storage's, else the URL)."""
        return str(getattr(self.storage, "wake_key", self.url))

    def close(self) -> None:
        if self._storage is not None:
            self._storage.close()
            self._storage = None

    def __enter__(self) -> Queue:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def transaction(self) -> AbstractContextManager[Any]:
        """A write transaction on this thread's connection; enqueues inside it join it."""
        return self.storage.transaction()

    # -- enqueue ---------------------------------------------------------------

    def job_type(self, name: str) -> JobType:
        job_type = self.registry.get(name)
        if job_type is not None:
            return job_type
        if self.config.core.allow_unregistered_types:
            check_text("type", name)
            check_bytes("type", name, MAX_NAME_BYTES)
            return JobType(name=name, payload_model=_AnyPayload, handler=_unregistered)
        raise UnknownJobType(self.pm.unknown_job_type(name, (t.name for t in self.registry)))

    def validate_payload(self, job_type: JobType, payload: Any) -> BaseModel:
        return validated(job_type, codec_for(job_type.payload_model), payload)

    def build(
        self,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = None,
        run_at: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> NewJob:
        """Validate enqueue arguments into a `NewJob`; raises a `JobcoreError` naming the problem."""
        options = {
            "queue": queue,
            "priority": priority,
            "delay": delay,
            "run_at": run_at,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "idempotency_key": idempotency_key,
            "parent_id": parent_id,
            "meta": meta,
        }
        return self._build(type, payload, options, None)[0]

    def _build(
        self,
        type: str,
        payload: Any,
        options: dict[str, Any],
        settled: Settled | None,
        *,
        finite: bool = False,
        job_id: str | None = None,
    ) -> tuple[NewJob, Settled]:
        """`build`, reusing the options `settled` for an earlier payload of the same call.

        `finite`: the caller found no NaN or Infinity anywhere in `payload` already.
        `job_id`: the new job's id, when the caller drew it.
        """
        job_type = self.job_type(type) if settled is None else settled.job_type
        model, stored, encoded = self._payload(type, job_type, payload, finite)
        if settled is None:
            settled = self._settle_options(type, job_type, options)
        job = settled.new_job(type, job_id or new_id(), model, stored, encoded)
        self._add_meta(job)
        return job, settled

    def _payload(
        self,
        type: str,
        job_type: JobType,
        payload: Any,
        finite: bool,
        codec: PayloadCodec | None = None,
    ) -> tuple[BaseModel, Any, str]:
        """`payload` validated (the model), dumped as JSON values and encoded, each checked."""
        if not finite:  # before the model: it may turn NaN in untyped fields into null
            check_finite(f"payload for {type!r}", payload)
        codec = codec or codec_for(job_type.payload_model)
        model = validated(job_type, codec, {} if payload is None else payload)
        if job_type.check is not None:
            job_type.check(model, self.config)
        try:
            stored = codec.dump(model)
        except ValueError as exc:  # pydantic: "Maximum serialization depth exceeded"
            raise InvalidPayload(f"payload for {type!r} cannot be stored: {exc}") from None
        # a model's JSON dump holds no circular reference: encode without looking for one
        encoded = encode_finite(f"payload for {type!r}", stored, acyclic=True)
        if "\\ud" in encoded or "\\uD" in encoded:
            no_lone_surrogates(type, stored)
        size = len(encoded) if encoded.isascii() else len(encoded.encode())
        limit = self.config.core.max_payload_bytes
        if size > limit:
            raise PayloadTooLarge(
                f"payload for {type!r} is {size} bytes, over the {limit}-byte limit "
                "(max_payload_bytes); store large data elsewhere and pass a reference"
            )
        return model, stored, encoded

    def _add_meta(self, job: NewJob) -> None:
        """Add the `jobcore_enqueue_meta` hooks' meta to `job` and check it is JSON."""
        if self._has_meta_hooks:
            job.meta.update(self.pm.enqueue_meta(job))
        if job.meta:
            check_meta(f"meta of a {job.type!r} job", job.meta)

    def _build_each(
        self, type: str, payloads: Iterable[Any], options: dict[str, Any]
    ) -> list[NewJob]:
        """`_build` for each payload as it comes (item numbers named).

        A list or tuple is looked at whole first: one NaN probe over every payload (each
        is then probed again only if that one found something) and one draw of the ids.
        In a list or tuple, the same payload object given again in a row is validated
        once when that gives the same answer every time (`Repeated`).
        """
        if not isinstance(payloads, list | tuple):
            return self._build_each_as_it_comes(type, payloads, options)
        finite, ids, count = probe_finite(payloads), new_ids(len(payloads)), len(payloads)
        jobs = []
        settled: Settled | None = None  # the options, checked and resolved at the first item
        again: Repeated | None = None
        for index, payload in enumerate(payloads, start=1):
            job_id = ids[index - 1]
            try:
                if again is not None and payload is again.payload:
                    job = again.job(type, job_id)
                    if self._has_meta_hooks or job.meta:
                        self._add_meta(job)
                    jobs.append(job)
                    continue
                again = None
                if index == count or payloads[index] is not payload:
                    job, settled = self._build(
                        type, payload, options, settled, finite=finite, job_id=job_id
                    )
                    jobs.append(job)
                    continue
                # the next item is this same object: validate it once if that is allowed
                job_type = self.job_type(type) if settled is None else settled.job_type
                codec = codec_for(job_type.payload_model)
                model, stored, encoded = self._payload(type, job_type, payload, finite, codec)
                if settled is None:
                    settled = self._settle_options(type, job_type, options)
                if codec.pure and job_type.check is None and flat_json_values(stored):
                    again = Repeated(payload, settled, model, dict(stored), encoded)
                job = settled.new_job(type, job_id, model, stored, encoded)
                self._add_meta(job)
            except (InvalidPayload, PayloadTooLarge) as exc:
                raise exc.__class__(f"item {index}: {exc}") from None
            jobs.append(job)
        return jobs

    def _build_each_as_it_comes(
        self, type: str, payloads: Iterable[Any], options: dict[str, Any]
    ) -> list[NewJob]:
        """`_build_each` of an iterator: each payload built before the next is asked for."""
        jobs = []
        settled: Settled | None = None  # the options, checked and resolved at the first item
        for index, payload in enumerate(payloads, start=1):
            try:
                job, settled = self._build(type, payload, options, settled)
            except (InvalidPayload, PayloadTooLarge) as exc:
                raise exc.__class__(f"item {index}: {exc}") from None
            jobs.append(job)
        return jobs

    def _settle_options(self, type: str, job_type: JobType, options: dict[str, Any]) -> Settled:
        """`_settle`, remembered per type, option values and the core defaults it reads
        (the answer is the same every time; `[types.NAME]` settings are fixed at load)."""
        if options.get("meta") is not None or not _OPTION_NAMES.issuperset(options):
            return self._settle(type, job_type, **options)  # an unknown option: TypeError
        core = self.config.core
        values = tuple(map(options.get, _OPTION_ORDER))
        if values == _NO_OPTIONS:  # the usual call, no option given: a short key to hash
            key: tuple[Any, ...] = (type, core.max_attempts, core.timeout)
        else:  # with each value's class: 1 and True, or 1 and 1.0, are not the same option
            key = (type, core.max_attempts, core.timeout, values, tuple(map(_class_of, values)))
        try:
            settled = self._settled.get(key)
        except TypeError:  # an unhashable value: _settle will say what is wrong with it
            return self._settle(type, job_type, **options)
        if settled is None or settled.job_type is not job_type:
            settled = self._settle(type, job_type, **options)
            if len(self._settled) >= _SETTLED_CACHE_SIZE:
                self._settled.clear()
            self._settled[key] = settled
        return settled

    def _settle(
        self,
        type: str,
        job_type: JobType,
        *,
        queue: str | None = None,
        priority: int | None = None,
        delay: float | None = None,
        run_at: int | None = None,
        max_attempts: int | None = None,
        timeout: float | None = None,
        idempotency_key: str | None = None,
        parent_id: str | None = None,
        meta: dict[str, Any] | None = None,
    ) -> Settled:
        """Check the enqueue options and resolve them against settings and type defaults."""
        settings = self.config.type_settings(type)
        check_enqueue_options(
            queue=queue,
            priority=priority,
            delay=delay,
            run_at=run_at,
            max_attempts=max_attempts,
            timeout=timeout,
            idempotency_key=idempotency_key,
            parent_id=parent_id,
        )
        effective_timeout = _first(
            timeout, settings.timeout, job_type.timeout, self.config.core.timeout
        )
        return Settled(
            job_type=job_type,
            queue=_first(queue, settings.queue, job_type.queue, "default"),
            priority=_first(priority, settings.priority, 0),
            max_attempts=_first(
                max_attempts,
                settings.max_attempts,
                job_type.max_attempts,
                self.config.core.max_attempts,
            ),
            run_at=run_at,
            delay_ms=int((delay or 0) * 1000),
            timeout_ms=None if effective_timeout is None else int(effective_timeout * 1000),
            idempotency_key=idempotency_key,
            parent_id=parent_id,
            meta=meta,
        )

    def enqueue(
        self,
        type: str,
        payload: dict[str, Any] | None = None,
        *,
        conn: Any = None,
        **options: Any,
    ) -> Inserted:
        """Validate and durably write one job; returns it with `created` False for a duplicate.

        `conn`: the application's own connection to the same store, inside a
        transaction it opened (SQLite: an `apsw.Connection`); the job commits
        or rolls back with it (outbox).
        """
        return self.insert([self.build(type, payload, **options)], conn=conn)[0]

    def enqueue_many(
        self,
        type: str,
        payloads: Iterable[dict[str, Any]],
        *,
        conn: Any = None,
        **options: Any,
    ) -> list[Inserted]:
        """Validate every payload first, then write them all in one transaction."""
        # an iterator may hand out one object changed between items (a reused row buffer):
        # each payload is built as it comes, before the next one is asked for
        return self.insert(self._build_each(type, payloads, options), conn=conn)

    def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        """Write already-validated jobs in one transaction; hooks fire after commit."""
        if not jobs:
            return []
        inserted = self.storage.insert(jobs, conn=conn)
        self.storage.after_commit(partial(self._after_insert, inserted), conn=conn)
        return inserted

    def _after_insert(self, inserted: Sequence[Inserted]) -> None:
        wakeup.notify(self.wake_key)
        if not self.pm.hook.jobcore_job_enqueued.get_hookimpls():
            return  # nobody listens: no call per job
        for item in inserted:
            if item.created:
                notify(self.pm, "jobcore_job_enqueued", job=item.job)

    # -- reading ---------------------------------------------------------------

    def get(self, job_id: str) -> Job:
        job = self.storage.get(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}; `jobcore list` shows recent ids")
        return job

    def list_jobs(
        self,
        *,
        statuses: Sequence[str] = (),
        types: Sequence[str] = (),
        queues: Sequence[str] = (),
        limit: int = 100,
    ) -> list[Job]:
        for status in statuses:
            if status not in JobStatus.__members__.values():
                raise InvalidPayload(
                    f"unknown status {status!r}; use one of {', '.join(s.value for s in JobStatus)}"
                )
        return self.storage.list_jobs(statuses=statuses, types=types, queues=queues, limit=limit)

    def stats(self) -> Stats:
        stats = self.storage.stats()
        stats.paused = self.storage.pauses()  # DESIGN §16: paused queues show plainly
        stats.limits = limit_rows(self.storage)
        stats.sections = self.pm.stats_sections(self, STATS_KEYS)  # e.g. recurring jobs
        return stats

    # -- operator transitions ------------------------------------------------------

    def retry(self, job_ids: Sequence[str]) -> list[Job]:
        """failed/cancelled -> pending, attempts reset, history kept. All or nothing."""
        job_ids = list(dict.fromkeys(job_ids))  # an id given twice is one request
        with self.storage.transaction():
            results = self.storage.retry(job_ids)
            for job_id, job in zip(job_ids, results, strict=True):
                if job is None:
                    current = self.get(job_id)
                    raise IllegalTransition(
                        f"cannot retry job {job_id}: it is {current.status}, "
                        "only failed or cancelled jobs can be retried"
                    )
        jobs = [job for job in results if job is not None]
        self.storage.after_commit(lambda: wakeup.notify(self.wake_key))
        return jobs

    def retry_failed(self, types: Sequence[str] = ()) -> list[Job]:
        with self.storage.transaction():
            return self.retry(self.storage.failed_ids(types))

    def cancel(self, job_ids: Sequence[str]) -> list[Job]:
        """scheduled/pending -> cancelled; claimed -> cancel requested. All or nothing."""
        job_ids = list(dict.fromkeys(job_ids))  # an id given twice is one request
        with self.storage.transaction():
            results = self.storage.cancel(job_ids)
            for job_id, job in zip(job_ids, results, strict=True):
                if job is None:
                    current = self.get(job_id)
                    raise IllegalTransition(
                        f"cannot cancel job {job_id}: it is already {current.status}"
                    )
        jobs = [job for job in results if job is not None]
        for job in jobs:
            if job.status is JobStatus.CANCELLED:
                notify(self.pm, "jobcore_job_cancelled", job=job)
        return jobs

    def sweep(self, *, force: bool = False, confirm: float | None = None) -> list[Swept]:
        """Reclaim, release, fail or cancel jobs whose lease expired; fires the matching hooks.

        Returns [] while another process holds the store's sweep lock, unless `force`.
        `confirm` (seconds; a one-shot sweeper passes lease/4 + 1): one look cannot tell
        a dead worker's lease from a live one that a forward step of the store's clock
        made look expired. So look first, wait `confirm` only if some lease expired, and
        sweep just the claims still unchanged: a live worker's keeper extends its leases
        every lease/4, and at once when it notices the step.
        """
        if confirm is None:
            swept = self.storage.sweep(force=force)
        else:
            only = self.expired_claims()
            if only:
                time.sleep(confirm)
            swept = self.storage.sweep(force=force, only=only)
        for item in swept:
            self.announce_swept(item)
        if any(item.action in ("reclaimed", "released") for item in swept):
            wakeup.notify(self.wake_key)
        return swept

    def expired_claims(self) -> list[Claim]:
        """The claims whose lease has expired by the store's clock, as they are now."""
        now = self.storage.now()
        return [
            Claim(job.id, job.lease_id, job.lease_expires_at)
            for job in self.storage.scan(statuses=[JobStatus.CLAIMED.value])
            if job.lease_id is not None
            and job.lease_expires_at is not None
            and job.lease_expires_at < now
        ]

    def announce_swept(self, item: Swept) -> None:
        job = item.job
        error = job.last_error or "lease expired"
        if item.action == "reclaimed":
            notify(self.pm, "jobcore_job_reclaimed", job=job, error=error)
        elif item.action == "released":
            log.info("job %s never started before its lease expired: back to pending", job.id)
        elif item.action == "failed":
            notify(self.pm, "jobcore_job_failed", job=job, error=error)
        else:
            notify(self.pm, "jobcore_job_cancelled", job=job)

    def prune(self, older_than: float) -> int:
        """Delete jobs that finished more than `older_than` seconds ago."""
        return self.storage.prune(before=self.storage.now() - int(older_than * 1000))

    def reconcile(self, types: Sequence[str] = ()) -> Iterator[tuple[Job, list[str]]]:
        """Yield each completed job with the discrepancies plugins report for it.

        Of the jobs sharing a `reconcile_key` (of any type), only the latest
        completed one is checked: a later write or delete supersedes the others.
        """
        latest = self._latest_by_reconcile_key()
        for job in self.storage.scan(statuses=[JobStatus.COMPLETED], types=types):
            key = self._reconcile_key(job)
            if key is not None and latest.get(key, (0, ""))[1] != job.id:
                continue
            problems = self.pm.reconcile(job, self.config)
            if problems:
                yield job, problems

    def _reconcile_key(self, job: Job) -> str | None:
        job_type = self.registry.get(job.type)
        if job_type is None or job_type.reconcile_key is None:
            return None
        try:
            return job_type.reconcile_key(job.payload, self.config)
        except Exception:
            log.warning("reconcile_key of job %s failed; checking it anyway", job.id, exc_info=True)
            return None

    def _latest_by_reconcile_key(self) -> dict[str, tuple[int, str]]:
        """key → (completed_at, id) of the latest completed job with that key."""
        keyed = [job_type.name for job_type in self.registry if job_type.reconcile_key]
        latest: dict[str, tuple[int, str]] = {}
        if not keyed:
            return latest
        for job in self.storage.scan(statuses=[JobStatus.COMPLETED], types=keyed):
            key = self._reconcile_key(job)
            if key is not None:
                mark = (job.completed_at or 0, job.id)
                if mark > latest.get(key, (-1, "")):
                    latest[key] = mark
        return latest

    # -- retry policy ------------------------------------------------------------

    def policy_for(self, type_name: str) -> RetryPolicy:
        core = self.config.core
        settings = self.config.type_settings(type_name)
        job_type = self.registry.get(type_name)
        return RetryPolicy(
            base=_first(
                settings.backoff_base, job_type and job_type.backoff_base, core.backoff_base
            ),
            cap=_first(settings.backoff_cap, job_type and job_type.backoff_cap, core.backoff_cap),
            jitter=core.backoff_jitter,
        )

    def decide_retry(self, job: Job, error: BaseException) -> RetryDecision:
        policy = self.policy_for(job.type)
        decision: RetryDecision | None = self.pm.hook.jobcore_retry_decision(
            job=job, error=error, policy=policy
        )
        if decision is None:
            return policy.decide(job, error)
        if decision.retries and job.attempts >= job.max_attempts:
            # DESIGN: duplicates are bounded by max_attempts, whatever a plugin decides.
            log.warning(
                "a jobcore_retry_decision plugin asked to retry job %s after its last attempt "
                "(%d/%d); failing it",
                job.id,
                job.attempts,
                job.max_attempts,
            )
            return RetryDecision.fail(f"attempts exhausted ({job.attempts}/{job.max_attempts})")
        return decision


_SETTLED_CACHE_SIZE = 256
_OPTION_ORDER = (
    *("queue", "priority", "delay", "run_at", "max_attempts", "timeout", "idempotency_key"),
    *("parent_id", "meta"),
)  # `_settle`'s options, in the order of `_settle_options`'s keys
_OPTION_NAMES = frozenset(_OPTION_ORDER)
_NO_OPTIONS = (None,) * len(_OPTION_ORDER)
_class_of = operator.attrgetter("__class__")


def _first(*values: Any) -> Any:
    for value in values:
        if value is not None:
            return value
    return None


def _unregistered(payload: Any, ctx: Any) -> None:
    from jobcore.errors import PermanentError

    raise PermanentError(f"no handler for job type {ctx.job.type!r} in this worker")


__all__ = ["FINISHED", "Queue"]
