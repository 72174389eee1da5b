"""PostgreSQL for `jobcore.AsyncQueue`: inserts and reads on psycopg's async connections.

The same statements as `PostgresStorage` (its cached insert SQL and parameter
shapes), run on an `AsyncConnectionPool` of this store, or on the
application's own `psycopg.AsyncConnection` inside its transaction (the
outbox: the job commits or rolls back with the application's rows). Callbacks
at the application's commit use the server as the sync outbox does
(`jobcore_postgres.outbox`): a LISTEN and a NOTIFY in the same transaction,
delivered only if it commits.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import weakref
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import TransactionStatus
from psycopg.types.json import set_json_loads
from psycopg_pool import AsyncConnectionPool, PoolTimeout

from jobcore.errors import IllegalTransition, StorageError
from jobcore.models import Job, NewJob
from jobcore.storage.base import Inserted
from jobcore.storage.rows import new_row
from jobcore_postgres.errors import mapped, translate
from jobcore_postgres.outbox import MAX_PENDING
from jobcore_postgres.reads import select_jobs
from jobcore_postgres.rows import _STATUS, json_loads, row_to_job
from jobcore_postgres.statements import JOB_COLUMNS

if TYPE_CHECKING:
    from jobcore_postgres.storage import PostgresStorage

_UNFINISHED = ["scheduled", "pending", "claimed"]

log = logging.getLogger("jobcore.postgres")


def check(conn: Any) -> None:
    """`conn` must be a psycopg AsyncConnection inside an open transaction."""
    if not isinstance(conn, psycopg.AsyncConnection):
        raise StorageError(
            "conn must be a psycopg AsyncConnection (or an SQLAlchemy AsyncSession or "
            "AsyncConnection on the psycopg driver) to the same database, inside the "
            f"application's transaction; got {type(conn).__name__}"
        )
    status = conn.info.transaction_status
    if status == TransactionStatus.INERROR:
        raise StorageError("the application's transaction on conn has failed; roll it back")
    if status == TransactionStatus.IDLE and not conn.autocommit:
        return  # psycopg opens the transaction with our statement; the application commits it
    if status != TransactionStatus.INTRANS:
        raise StorageError(
            "conn has no open transaction: enqueue inside the application's transaction "
            "(e.g. `async with conn.transaction():`) so the jobs commit or roll back with it"
        )


class _AsyncPooled(psycopg.AsyncConnection[tuple[Any, ...]]):
    """A pooled async connection that keeps one cursor for the inserts run alone: a new
    cursor per statement costs more client time than a small insert's dumping (as
    `PostgresStorage`'s pooled connections)."""

    _kept: psycopg.AsyncCursor[tuple[Any, ...]] | None = None

    def kept_cursor(self) -> psycopg.AsyncCursor[tuple[Any, ...]]:
        cursor = self._kept
        if cursor is None or cursor.closed:
            cursor = self._kept = self.cursor()
        return cursor


async def _configure(conn: psycopg.AsyncConnection[Any]) -> None:
    set_json_loads(json_loads, conn)


class AsyncPostgres:
    """Async inserts and reads for one `PostgresStorage`, on a pool bound to one event loop."""

    def __init__(self, storage: PostgresStorage, *, pool_max: int = 10) -> None:
        self.storage = storage
        self.pool_max = pool_max
        self._pool: AsyncConnectionPool[_AsyncPooled] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._opening = asyncio.Lock()
        self._hooks: weakref.WeakKeyDictionary[Any, _CommitHook] = weakref.WeakKeyDictionary()
        self._checking: asyncio.Future[None] | None = None

    async def _ready(self) -> None:
        if not self.storage._ready:  # migrations run once, off the loop
            await asyncio.to_thread(self.storage._ensure_ready)

    async def pool(self) -> AsyncConnectionPool[_AsyncPooled]:
        loop = asyncio.get_running_loop()
        pool = self._pool
        if pool is not None and self._loop is loop:
            return pool  # the usual call: open already, on this loop (no lock to take)
        if self._pool is not None and self._loop is not loop:
            if self._loop is None or not self._loop.is_closed():
                raise StorageError(
                    "this AsyncQueue's PostgreSQL pool belongs to another running event loop; "
                    "make one AsyncQueue per event loop"
                )
            self._pool = None  # its loop ended (one asyncio.run after another): a new pool
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._pool is None:
                await self._ready()
                pool = AsyncConnectionPool(
                    self.storage.target.conninfo,
                    min_size=1,
                    max_size=self.pool_max,
                    open=False,
                    timeout=max(30.0, self.storage.connect_timeout),  # a wait for a free one
                    name=f"jobcore-async-{self.storage.schema}",
                    configure=_configure,
                    connection_class=_AsyncPooled,
                    # the sync pool's settings: session options (synchronous_commit,
                    # lock_timeout, the planner's), no prepared statements behind a
                    # transaction-pooling proxy, the connect timeout
                    kwargs=dict(self.storage._connection_kwargs),
                )
                with mapped(self.storage.where):
                    await pool.open(wait=True, timeout=self.storage.connect_timeout)
                self._pool, self._loop = pool, loop
        return self._pool

    async def _give_back(self, pool: AsyncConnectionPool[_AsyncPooled], conn: _AsyncPooled) -> None:
        """`putconn`; when `conn` was lost (the server restarted, the session was killed),
        replace the pool's other broken idle connections too, so the next calls do not fail
        one per pooled connection (as the sync store's `_check_pool`)."""
        lost = conn.closed
        await pool.putconn(conn)
        if lost:
            await self._check_pool(pool)

    async def _check_pool(self, pool: AsyncConnectionPool[_AsyncPooled]) -> None:
        """`pool.check()`, once at a time. Shielded: a check cancelled half-way would keep
        the idle connections it took out of the pool."""
        checking = self._checking
        if checking is None or checking.done():
            checking = self._checking = asyncio.ensure_future(_checked(pool))
        await asyncio.shield(checking)

    async def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None and self._loop is asyncio.get_running_loop():
            await pool.close()
        # a pool of an event loop that has ended cannot be closed from another: its
        # connections close as it is collected

    # -- writes ------------------------------------------------------------------------

    async def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        if not jobs:
            return []
        if conn is not None:
            check(conn)
            await self._ready()
            with mapped(self.storage.where):
                return await self._insert_on(conn, jobs)
        pool = self._pool
        if pool is None or self._loop is not asyncio.get_running_loop():
            pool = await self.pool()
        # `mapped`'s translation written out (no context manager object per call), and
        # getconn/putconn rather than `pool.connection()`: its context managers (and the
        # connection's, a COMMIT call with nothing to commit in autocommit) cost an awaited
        # enqueue about twice the checkout itself. putconn brings the connection back as
        # they would: idle to the pool; mid-statement (cancelled) or broken, closed and
        # replaced.
        try:
            pooled = await pool.getconn()
            try:
                if len(jobs) == 1 or all(j.idempotency_key is None for j in jobs):
                    # one statement: atomic alone
                    return await self._insert_on(pooled, jobs, pooled.kept_cursor())
                async with pooled.transaction():
                    return await self._insert_on(pooled, jobs)
            finally:
                lost = pooled.closed
                await pool.putconn(pooled)
                if lost:  # as `_give_back`
                    await self._check_pool(pool)
        except (StorageError, IllegalTransition):
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            raise translate(exc, self.storage.where) from exc

    async def _insert_on(
        self,
        conn: psycopg.AsyncConnection[Any],
        jobs: Sequence[NewJob],
        cursor: psycopg.AsyncCursor[Any] | None = None,
    ) -> list[Inserted]:
        """`PostgresStorage._insert_on`, awaited; on `cursor` if given (a kept one)."""
        store = self.storage
        keyed = any(j.idempotency_key is not None for j in jobs)
        shape = store._shape(jobs)
        sql = store._statement(("insert", keyed, shape), store._insert_sql, keyed, shape)
        params = store._shaped_params(jobs, shape)
        if cursor is None:
            cursor = conn.cursor()
        await cursor.execute(sql, params)
        rows = await cursor.fetchall()
        if shape == "shared" and not keyed:
            [(_, status_text, at, due, count)] = rows
            if count != len(jobs):  # pragma: no cover - without keys no row can conflict
                raise StorageError(f"inserted {count} of {len(jobs)} jobs at {store.where}")
            status = _STATUS[status_text]
            return [Inserted(new_row(job, at, run_at=due, status=status), True) for job in jobs]
        created = {row[0]: row[1:] for row in rows}
        results: list[Inserted] = []
        for job in jobs:
            made = created.get(job.id)
            if made is not None:
                status_text, now, run_at = made
                row = new_row(job, now, run_at=run_at, status=_STATUS[status_text])
                results.append(Inserted(row, created=True))
                continue
            cursor = await conn.execute(
                f"SELECT {', '.join(JOB_COLUMNS)} FROM {store._d.table('jobs')} "
                "WHERE type = %s AND idempotency_key = %s AND status = ANY(%s)",
                (job.type, job.idempotency_key, _UNFINISHED),
            )
            existing = await cursor.fetchone()
            if existing is None:  # the holder finished in between: insert after all
                results.extend(await self._insert_on(conn, [job]))
            else:
                results.append(Inserted(row_to_job(existing), created=False))
        return results

    async def after_commit(self, conn: Any, callback: Callable[[], None]) -> None:
        """Run `callback` once `conn`'s open transaction commits; now if none is open."""
        if (
            not isinstance(conn, psycopg.AsyncConnection)
            or conn.info.transaction_status != TransactionStatus.INTRANS
        ):
            callback()
            return
        hook = self._hooks.get(conn)
        if hook is None:
            hook = self._hooks[conn] = _CommitHook(conn)
        token = hook.add(callback)
        # LISTEN again in every transaction: a rolled-back one takes its LISTEN with it
        await conn.execute(f"LISTEN {hook.channel}; NOTIFY {hook.channel}, '{token}'".encode())

    # -- reads -------------------------------------------------------------------------

    async def get(self, job_id: str) -> Job | None:
        pool = await self.pool()
        with mapped(self.storage.where):
            conn = await pool.getconn()  # as `insert`
            try:
                cursor = await conn.execute(
                    select_jobs(self.storage._d, "WHERE id = %s"), (job_id,)
                )
                row = await cursor.fetchone()
            finally:
                await self._give_back(pool, conn)
        return None if row is None else row_to_job(row)


async def _checked(pool: AsyncConnectionPool[Any]) -> None:
    try:
        await pool.check()
    except Exception as exc:  # best effort: the call that lost its connection raises anyway
        log.warning("checking the async pool's connections failed: %s", exc)


class _CommitHook:
    """One application connection's channel and the callbacks waiting for its commits."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.channel = f"jobcore_commit_{secrets.token_hex(6)}"
        self.pending: dict[str, Callable[[], None]] = {}
        conn.add_notify_handler(self.on_notify)

    def on_notify(self, notify: psycopg.Notify) -> None:
        if notify.channel != self.channel:
            return
        callback = self.pending.pop(notify.payload, None)
        if callback is not None:
            callback()  # `AsyncQueue` guards its own callbacks

    def add(self, callback: Callable[[], None]) -> str:
        token = secrets.token_hex(8)
        while len(self.pending) >= MAX_PENDING:
            self.pending.pop(next(iter(self.pending)))
        self.pending[token] = callback
        return token


__all__ = ["AsyncPostgres", "check"]
