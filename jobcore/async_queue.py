"""`AsyncQueue`: the producer side of `Queue` for asyncio code, never blocking the loop (§15).

A class of its own rather than async methods on `Queue`: its calls need an
event loop's resources (an async connection pool bound to that loop, a thread
for stores without async access) that a `Queue` used from threads must not
carry, and `await queue.enqueue(...)` beside a sync `queue.enqueue(...)` of the
same name on one object would be easy to call wrongly (an un-awaited
coroutine enqueues nothing).

Where the store offers async access (`Storage.async_store()`: PostgreSQL,
psycopg's `AsyncConnectionPool`), `enqueue`, `enqueue_many` and `get` run on
it, and the outbox takes the application's own psycopg `AsyncConnection`, or
an SQLAlchemy `AsyncSession`/`AsyncConnection` on the psycopg driver, inside
its transaction. Everything else (SQLite; `cancel` and `retry`, which run
transitions and their hooks) runs on a thread of this `AsyncQueue`'s own, one
call at a time. Payloads are validated on the loop (CPU only), so
`jobcore_enqueue_meta` runs there; `jobcore_job_enqueued` (and the wake-up of
workers in this process) runs after the commit on a second thread, which takes
the commits of a burst together (`_Teller`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from jobcore.config import Config
from jobcore.errors import JobcoreError, JobNotFound, StorageError
from jobcore.models import Job, NewJob
from jobcore.plugins import JobcorePluginManager
from jobcore.queue import Queue
from jobcore.storage.base import Inserted

log = logging.getLogger("jobcore.queue")

T = TypeVar("T")


async def driver_connection(conn: Any) -> Any:
    """The psycopg connection under an SQLAlchemy `AsyncSession` or `AsyncConnection`."""
    if not type(conn).__module__.startswith("sqlalchemy"):
        return conn
    if hasattr(conn, "get_raw_connection"):  # AsyncConnection
        raw = await conn.get_raw_connection()
        return raw.driver_connection
    if hasattr(conn, "connection"):  # AsyncSession: its connection, in its transaction
        return await driver_connection(await conn.connection())
    return conn


class AsyncQueue:
    """`enqueue`, `enqueue_many`, `get`, `cancel`, `retry` for asyncio code; see the module doc.

    Takes the same arguments as `Queue` (or an existing `queue=`), and its methods the
    same arguments as `Queue`'s. Use one per event loop; close it with `await aclose()`
    (or `async with`).
    """

    def __init__(
        self,
        db: str | None = None,
        *,
        queue: Queue | None = None,
        config: Config | None = None,
        pm: JobcorePluginManager | None = None,
        create: bool = True,
    ) -> None:
        self.queue = queue if queue is not None else Queue(db, config=config, pm=pm, create=create)
        self._owns_queue = queue is None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="jobcore-async-queue")
        self._native: Any = None
        self._looked = False
        self._looking = asyncio.Lock()  # bound to the loop of its first use
        self._waiting: list[tuple[Sequence[NewJob], asyncio.Future[list[Inserted]]]] = []
        self._committer: asyncio.Task[None] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None  # the loop of its calls
        self._binding = threading.Lock()
        self._teller = _Teller(self.queue._after_insert)

    async def __aenter__(self) -> AsyncQueue:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        if self._native is not None:
            await self._native.close()
        await self._teller.told()  # every commit's hooks ran
        await self._off(self.queue.close if self._owns_queue else lambda: None)
        self._thread.shutdown(wait=False)
        self._teller.close()

    # -- producers ---------------------------------------------------------------------

    async def enqueue(
        self, type: str, payload: dict[str, Any] | None = None, *, conn: Any = None, **options: Any
    ) -> Inserted:
        """`Queue.enqueue`, awaited. `conn`: see the module docstring (the outbox)."""
        return (await self.insert([self.queue.build(type, payload, **options)], conn=conn))[0]

    async def enqueue_many(
        self,
        type: str,
        payloads: Iterable[dict[str, Any]],
        *,
        conn: Any = None,
        **options: Any,
    ) -> list[Inserted]:
        """`Queue.enqueue_many`, awaited: every payload validated first, one transaction."""
        return await self.insert(self.queue._build_each(type, payloads, options), conn=conn)

    async def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        """Write already-validated jobs in one transaction; hooks fire after commit."""
        self._bind()
        if not jobs:
            return []
        native = self._native if self._looked else await self._native_store()
        if conn is not None:
            if native is None:
                raise StorageError(
                    "conn= on an AsyncQueue needs a store with async connections (PostgreSQL: "
                    "a psycopg AsyncConnection or an SQLAlchemy AsyncSession); on SQLite use "
                    "Queue.transaction() from a thread"
                )
            raw = await driver_connection(conn)
            inserted: list[Inserted] = await native.insert(jobs, conn=raw)
            await native.after_commit(raw, partial(self._after_insert, inserted))
            return inserted
        if native is not None:
            inserted = await native.insert(jobs)
            self._after_insert(inserted)
            return inserted
        return await self._grouped(jobs)

    async def _grouped(self, jobs: Sequence[NewJob]) -> list[Inserted]:
        """On the thread, with the inserts of every other call waiting by then: one
        transaction, one durable commit for all of them (a store without async access
        commits one at a time, so 1,000 concurrent calls would wait for 1,000 commits).
        A call cancelled before the thread begins its group's write writes nothing; once
        it has begun, the jobs commit whether or not anyone awaits the answer."""
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[list[Inserted]] = loop.create_future()
        self._waiting.append((jobs, answer))
        if len(self._waiting) == 1:  # a reference, so the task is not collected mid-way
            self._committer = loop.create_task(self._commit_waiting())
        return await answer

    async def _commit_waiting(self) -> None:
        while self._waiting:
            groups, self._waiting = self._waiting, []
            try:
                results = await self._off(self._insert_groups, groups)
            except BaseException as exc:  # the thread is gone (closed): every caller hears it
                results = [exc] * len(groups)
            for (_, answer), result in zip(groups, results, strict=True):
                if answer.done():
                    continue  # its caller was cancelled (written if the thread had begun)
                if isinstance(result, BaseException):
                    answer.set_exception(result)
                else:
                    answer.set_result(result)

    def _insert_groups(
        self, groups: list[tuple[Sequence[NewJob], asyncio.Future[list[Inserted]]]]
    ) -> list[Any]:
        """Each group's inserts (or its error): all in one transaction; if that fails,
        each group alone, so one call's error is that call's alone. A group whose caller
        was cancelled before this began is left out (its result None): nothing written."""
        results: list[Any] = [None] * len(groups)
        live = [i for i, (_, answer) in enumerate(groups) if not answer.done()]
        if len(live) > 1:
            try:
                with self.queue.transaction():
                    for i in live:
                        results[i] = self.queue.insert(groups[i][0])
                return results
            except Exception:
                log.debug("grouped enqueue failed; each call alone", exc_info=True)
        for i in live:
            try:
                results[i] = self.queue.insert(groups[i][0])
            except Exception as exc:
                results[i] = exc
        return results

    def _after_insert(self, inserted: Sequence[Inserted]) -> None:
        """Wake-ups and `jobcore_job_enqueued` off the loop, on the teller's thread."""
        self._teller.add(inserted)

    # -- reads and transitions ---------------------------------------------------------------

    async def get(self, job_id: str) -> Job:
        self._bind()
        native = await self._native_store()
        if native is None:
            return await self._off(self.queue.get, job_id)
        job: Job | None = await native.get(job_id)
        if job is None:
            raise JobNotFound(f"no job with id {job_id!r}; `jobcore list` shows recent ids")
        return job

    async def cancel(self, job_ids: Sequence[str]) -> list[Job]:
        """`Queue.cancel` on this AsyncQueue's thread."""
        self._bind()
        return await self._off(self.queue.cancel, list(job_ids))

    async def retry(self, job_ids: Sequence[str]) -> list[Job]:
        """`Queue.retry` on this AsyncQueue's thread."""
        self._bind()
        return await self._off(self.queue.retry, list(job_ids))

    # -- plumbing ------------------------------------------------------------------------------

    def _bind(self) -> None:
        """Tie this AsyncQueue to the running loop; refuse another loop while its own runs.

        Its waiting calls, their committer task and its lock belong to one loop: a call
        from a second loop running at the same time would wait for an answer set from the
        other loop's thread, which never wakes it (a hang). After its loop closed (one
        `asyncio.run` after another) the next loop takes it over.
        """
        loop = asyncio.get_running_loop()
        if self._loop is loop:
            return  # the usual call: bound to this loop already (set only under the lock)
        with self._binding:
            if self._loop is loop:
                return
            if self._loop is not None and not self._loop.is_closed():
                raise JobcoreError(
                    "this AsyncQueue is in use on another event loop that is still running; "
                    "make one AsyncQueue per event loop (per thread running asyncio)"
                )
            self._loop = loop
            self._looking = asyncio.Lock()
            self._waiting = []
            self._committer = None

    async def _off(self, call: Callable[..., T], *args: Any) -> T:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._thread, partial(call, *args))

    async def _native_store(self) -> Any:
        if self._looked:
            return self._native
        async with self._looking:
            if not self._looked:
                storage = await self._off(lambda: self.queue.storage)  # opening may do I/O
                make = getattr(storage, "async_store", None)
                self._native = make() if make is not None else None
                self._looked = True
        return self._native


class _Teller:
    """Runs `tell(inserted)` (wake-ups, `jobcore_job_enqueued`) on a thread of its own.

    Handing work to a thread wakes it: a context switch and a hand-over of the GIL
    that cost an awaited enqueue about as much as its own work. So the thread, once
    woken, stays on duty for `LINGER` after each turn and takes whatever committed
    meanwhile in one go: the first commit of a burst is told at once, later ones
    within `LINGER`, and a loop awaiting one enqueue after another hands over once
    per `LINGER` rather than once per call. Its thread is joined at exit, so what
    was committed is told even if the `AsyncQueue` is never closed.
    """

    LINGER = 0.02  # seconds

    def __init__(self, tell: Callable[[Sequence[Inserted]], None]) -> None:
        self._tell = tell
        self._lock = threading.Lock()
        self._items: list[Inserted] = []
        self._on_duty = False
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="jobcore-async-queue-tell")

    def add(self, inserted: Sequence[Inserted]) -> None:
        with self._lock:
            self._items.extend(inserted)
            if self._on_duty:
                return  # its next turn takes these
            self._on_duty = True
        try:
            self._thread.submit(self._duty)
        except RuntimeError:  # closed meanwhile: tell them here rather than drop them
            self._duty(linger=0.0)

    def _duty(self, linger: float = LINGER) -> None:
        while True:
            with self._lock:
                items, self._items = self._items, []
                if not items:
                    self._on_duty = False
                    return
            try:
                self._tell(items)
            except Exception:  # pragma: no cover - `Queue._after_insert` guards its hooks
                log.exception("telling of %d enqueued job(s) failed", len(items))
            time.sleep(linger)

    async def told(self) -> None:
        """Until what was added so far has been told."""
        with contextlib.suppress(RuntimeError):  # closed: told already
            await asyncio.wrap_future(self._thread.submit(lambda: None))

    def close(self) -> None:
        self._thread.shutdown(wait=False)  # its duty, if any, ends at once: nothing waits


__all__ = ["AsyncQueue", "driver_connection"]
