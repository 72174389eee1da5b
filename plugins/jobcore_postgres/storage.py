"""The PostgreSQL storage backend: psycopg 3 with a connection pool, the server's clock.

Every method borrows a pooled connection (autocommit) for one statement or
one transaction; `transaction()` pins a connection to the calling thread so
everything inside it joins that transaction. Errors leave as the core's
`StorageError` kinds; a lost connection is `StorageConnectionLost` (transient:
the worker backs off and the pool reconnects).
"""

from __future__ import annotations

import logging
import operator
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import psycopg
from psycopg.types.json import set_json_loads
from psycopg_pool import ConnectionPool, PoolTimeout

from jobcore.errors import ConfigError, IllegalTransition, StorageError
from jobcore.models import (
    Completed,
    Failed,
    Job,
    Lease,
    NewJob,
    Outcome,
)
from jobcore.storage.base import Inserted, Recorded
from jobcore.storage.rows import inserted_rows, new_row
from jobcore.transitions import (
    EXTEND,
    MARK_STARTED,
    OWNER,
    STORE_MAX_DELAY_MS,
    Transition,
    clamp_delay_ms,
    recorded_as,
)
from jobcore_postgres import listener as listeners
from jobcore_postgres import outbox
from jobcore_postgres.admin import PostgresAdmin
from jobcore_postgres.errors import mapped, translate
from jobcore_postgres.event_order import change_mark, changed_since
from jobcore_postgres.held_back import HeldBackWatch
from jobcore_postgres.limits import PostgresLimits
from jobcore_postgres.pauses import PostgresPauses
from jobcore_postgres.reads import PostgresReads
from jobcore_postgres.rows import (
    _STATUS,
    clean_text,
    json_loads,
    json_strict,
    result_json,
    row_to_job,
    slim_to_job,
)
from jobcore_postgres.schema import EVENT_IDS_PER_ROW, channel, migrate
from jobcore_postgres.statements import (
    JOB_COLUMNS,
    Dialect,
    claim_statement,
    lease_statement,
    lock_and_mark_statement,
    lock_leases_statement,
    owner_statement,
    promote_statement,
)
from jobcore_postgres.url import PostgresTarget, parse_url

if TYPE_CHECKING:
    from jobcore_postgres.hub_store import PostgresHubStore

log = logging.getLogger("jobcore.postgres")

Conn = psycopg.Connection[tuple[Any, ...]]

PROMOTE_LIMIT = 1000  # due scheduled jobs promoted per claim
# set_config, not SET LOCAL: a group commit is an implicit transaction (no BEGIN), where
# SET LOCAL works but warns (in the server's log too) that it is outside a transaction block
_GENERIC_PLANS = "SELECT set_config('plan_cache_mode', 'force_generic_plan', true)"
_UNFINISHED = ("scheduled", "pending", "claimed")
_SHARED = operator.attrgetter(
    *("type", "queue", "priority", "max_attempts", "run_at", "delay_ms", "timeout_ms"),
    *("parent_id", "meta"),
)  # what jobs of a `shared` insert have in common


# Plans must not depend on table statistics (autovacuum may be off, or behind a
# high-churn table): claims walk a partial index in claim order and owner
# transitions find rows by primary key, whatever the planner thinks the table holds.
_PLANNER = (
    "enable_seqscan=off",
    "enable_material=off",
    "enable_bitmapscan=off",
    "enable_sort=off",
    "enable_hashjoin=off",
    "enable_mergejoin=off",
    "jit=off",
)


_SYNCHRONOUS_COMMIT = ("on", "off", "local", "remote_write", "remote_apply")


def _session_options(
    lock_timeout_ms: int | None, synchronous_commit: str | None = None, users: str = ""
) -> str:
    """jobcore's `-c` settings, then `users` (the URL's `options`, else `PGOPTIONS`, which
    this keyword would otherwise replace): given last, the user's settings win."""
    settings = list(_PLANNER)
    if lock_timeout_ms is not None:
        settings.append(f"lock_timeout={int(lock_timeout_ms)}")
    if synchronous_commit is not None:
        if synchronous_commit not in _SYNCHRONOUS_COMMIT:
            raise ConfigError(
                f"synchronous_commit must be one of {', '.join(_SYNCHRONOUS_COMMIT)}, "
                f"not {synchronous_commit!r}"
            )
        settings.append(f"synchronous_commit={synchronous_commit}")
    return " ".join([*(f"-c {setting}" for setting in settings), *([users] if users else [])])


class _Pooled(psycopg.Connection[tuple[Any, ...]]):
    """A pooled connection that keeps one cursor for statements run alone (`_alone`):
    a new cursor per statement costs more client time than a small statement's dumping."""

    _kept: psycopg.Cursor[tuple[Any, ...]] | None = None

    def kept_cursor(self) -> psycopg.Cursor[tuple[Any, ...]]:
        cursor = self._kept
        if cursor is None or cursor.closed:
            cursor = self._kept = self.cursor()
        return cursor


def _configure(conn: Conn) -> None:
    """Every pooled connection decodes json and jsonb columns with `json_loads`."""
    set_json_loads(json_loads, conn)


_T = TypeVar("_T")
_R = TypeVar("_R")


_UNSTORABLE = (
    psycopg.DataError,
    psycopg.IntegrityError,
    psycopg.errors.ProgramLimitExceeded,  # class 54: e.g. a key over the btree entry limit
    TypeError,
    ValueError,
)
"""What a completion's children may raise that is theirs, not the store's (DESIGN §6)."""


_INSERT_PARAMS = (
    *("ids", "types", "queues", "payloads", "priorities", "max_attempts", "run_ats"),
    *("delays", "timeouts", "keys", "parents", "metas", "limit_keys"),
)
"""The insert's parameters (`_insert_sql`), in `_insert_values` order."""


def _insert_values(job: NewJob) -> tuple[Any, ...]:
    """One job's values of the insert's parameters, in `_INSERT_PARAMS` order."""
    return (
        job.id,
        job.type,
        job.queue,
        _payload_json(job),
        job.priority,
        job.max_attempts,
        job.run_at,
        clamp_delay_ms(job.delay_ms),
        job.timeout_ms,
        job.idempotency_key,
        job.parent_id,
        json_strict(job.meta) if job.meta else "{}",
        job.limit_key,
    )


def _payload_json(job: NewJob) -> str:
    """The job's payload as stored (JSON text; `Queue` encoded it already)."""
    return job.payload_json if job.payload_json is not None else json_strict(job.payload)


def _by_job_id(lease: Lease) -> str:
    return lease.job_id


def _row_statements(outcomes: Sequence[Outcome]) -> int:
    """How many statements of a transaction recording `outcomes` write reported rows (a
    completion with children counts as two: it writes apart)."""
    kinds = {type(outcome) for outcome in outcomes}
    count = sum(len(OWNER[kind]) for kind in kinds)
    return count + (1 if _has_children(outcomes) else 0)


def _has_children(outcomes: Sequence[Outcome]) -> bool:
    return any(isinstance(o, Completed) and o.children for o in outcomes)


@dataclass
class _Sent:
    """A queued owner statement and the outcomes (by index) it reported."""

    indexes: list[int]
    cursor: psycopg.Cursor[Any]
    transition: Transition | None = None  # set when the answer is slim (see owner_statement)


@dataclass
class _Batch:
    """What a group commit queued: owner statements, the claim, the look-ahead read,
    the start markers."""

    sent: list[_Sent]
    claim: psycopg.Cursor[Any] | None
    ahead: psycopg.Cursor[Any] | None
    marked: psycopg.Cursor[Any] | None = None


def _forget_prepared(conn: Conn) -> None:
    """After a failed pipeline: forget (and deallocate) `conn`'s prepared statements.

    psycopg counts a statement prepared once it queued its Parse, but the server skips
    what follows an error up to the Sync: every later use of that statement on `conn`
    would fail ("prepared statement _pg3_N does not exist"). A transaction block's
    rollback clears them the same way (psycopg's `Transaction`); without the cache to
    clear (another psycopg), the connection is closed and the pool replaces it.
    """
    prepared = getattr(conn, "_prepared", None)
    if prepared is not None and callable(getattr(prepared, "clear", None)):
        prepared.clear()  # psycopg sends DEALLOCATE ALL with the connection's next statement
    else:  # pragma: no cover - psycopg without its statement cache
        conn.close()


_Limited = tuple[list[Recorded], list[Any], "psycopg.Cursor[Any] | None", "int | None"]
"""A limited group commit before its Sync: recorded, rows, rows read after it, rate opens."""


@dataclass
class _Tx:
    conn: Conn
    callbacks: list[Callable[[], None]] = field(default_factory=list)


class PostgresStorage(PostgresReads, PostgresAdmin, PostgresPauses, PostgresLimits):
    """Jobs in a PostgreSQL schema; see the module docstring."""

    default_prefetch = 100
    """A worker's `prefetch` when no setting gives one (the core default is 32): each
    group commit is a round trip and a flush, so short jobs drain faster in larger
    batches (`noop` by one worker: about +20%; on SQLite the larger batches are slower)."""

    def __init__(
        self,
        url: str,
        *,
        schema: str = "jobcore",
        poll_only: bool = False,
        pool_min: int = 1,
        pool_max: int = 10,
        connect_timeout: float = 5.0,
        poll_step: float = 0.05,
        sweep_hold_ms: int = 30_000,
        event_retention_ms: int = 3_600_000,
        lock_timeout_ms: int | None = None,
        synchronous_commit: str | None = None,
        clock: Callable[[], int] | None = None,
        create: bool = True,
    ) -> None:
        self.target: PostgresTarget = parse_url(url, schema=schema, poll_only=poll_only)
        self.where = self.target.display
        self.schema = self.target.schema
        self.poll_only = self.target.poll_only
        self.poll_step = poll_step
        self.sweep_hold_ms = sweep_hold_ms
        self.event_retention_ms = event_retention_ms
        self.connect_timeout = connect_timeout
        self._create = create
        self._clock = clock
        self._d = Dialect(self.schema)
        self._holder = secrets.token_hex(8)
        self._local = threading.local()
        self._ready_lock = threading.Lock()
        self._ready = False
        self._closed = False
        self._listener: listeners.Listener | None = None
        self._checking = threading.Lock()
        self._connection_kwargs: dict[str, Any] = {
            "autocommit": True,
            # transaction-pooling proxies cannot keep prepared statements
            "prepare_threshold": None if self.poll_only else 5,
            "connect_timeout": max(1, int(connect_timeout)),
            # proxies in transaction mode refuse startup options: set them on the role there
            **(
                {}
                if self.poll_only
                else {
                    "options": _session_options(
                        lock_timeout_ms,
                        synchronous_commit,
                        self.target.options or os.environ.get("PGOPTIONS", ""),
                    )
                }
            ),
        }
        """The pooled connections' settings, the async pool's (`AsyncPostgres`) as well."""
        self._pool = ConnectionPool(
            self.target.conninfo,
            connection_class=_Pooled,
            min_size=pool_min,
            max_size=max(pool_min, pool_max),
            open=False,
            timeout=connect_timeout,
            name=f"jobcore-{self.schema}",
            configure=_configure,
            kwargs=self._connection_kwargs,
        )
        self._sql: dict[Any, str] = {}
        self._held_back = HeldBackWatch(self.where)

    def async_store(self) -> Any:
        """This store for `jobcore.AsyncQueue`: psycopg's async pool and connections."""
        from jobcore_postgres.async_store import AsyncPostgres

        return AsyncPostgres(self)

    @property
    def wake_key(self) -> str:
        """Identifies the store for in-process wake-ups."""
        return f"{self.target.conninfo}#{self.schema}"

    def __repr__(self) -> str:
        return f"PostgresStorage({self.where!r}, schema={self.schema!r})"

    # -- connections ---------------------------------------------------------------

    def _connect_direct(self) -> Conn:
        with mapped(self.where):
            conn: Conn = psycopg.connect(
                self.target.conninfo,
                autocommit=True,
                connect_timeout=max(1, int(self.connect_timeout)),
            )
        return conn

    def _ensure_ready(self) -> None:
        if self._ready:
            return
        with self._ready_lock:
            if self._ready:
                return
            if self._closed:
                raise StorageError(f"the storage for {self.where} was closed")
            # one direct connection first: a wrong URL fails at once with the server's reason
            with self._connect_direct() as conn, mapped(self.where):
                if not self._create and not self._schema_exists(conn):
                    raise StorageError(
                        f"no jobcore store in schema {self.schema!r} at {self.where}; enqueue a "
                        "job or run a worker to create it, or point --db at an existing one"
                    )
                migrate(conn, self.schema, self.where)
            self._pool.open(wait=False)
            self._ready = True

    def _schema_exists(self, conn: Conn) -> bool:
        row = conn.execute("SELECT to_regclass(%s)", (f"{self.schema}.jobs",)).fetchone()
        return row is not None and row[0] is not None

    def migrate(self) -> None:
        if self._ready:
            with self._connection() as conn:
                migrate(conn, self.schema, self.where)
            return
        self._ensure_ready()

    def _check_pool(self) -> None:
        """After a lost connection, replace broken idle connections in the background."""
        if not self._checking.acquire(blocking=False):
            return

        def check() -> None:
            try:
                self._pool.check()
            except Exception as exc:  # pragma: no cover - best effort
                log.debug("pool check: %s", exc)
            finally:
                self._checking.release()

        threading.Thread(target=check, name="jobcore-pool-check", daemon=True).start()

    @contextmanager
    def _connection(self) -> Iterator[Conn]:
        """This thread's transaction connection, else a pooled one for the duration."""
        tx: _Tx | None = getattr(self._local, "tx", None)
        if tx is not None:
            with mapped(self.where):
                yield tx.conn
            return
        self._ensure_ready()
        try:
            with mapped(self.where), self._pool.connection() as conn:
                if getattr(self._local, "seen_mark", None) is None:
                    self._local.seen_mark = change_mark(conn)  # this thread's first use
                yield conn
        except StorageError as exc:
            if isinstance(exc.__cause__, psycopg.OperationalError):
                self._check_pool()
            raise

    def close(self) -> None:
        """Give up held locks, stop listening, close every pooled connection."""
        with self._ready_lock:
            self._closed = True
            ready, self._ready = self._ready, False
        if ready:
            try:
                with self._pool.connection(timeout=1.0) as conn:
                    conn.execute(
                        f"DELETE FROM {self._d.table('locks')} WHERE holder = %s", (self._holder,)
                    )
            except Exception as exc:  # closing is best effort
                log.debug("releasing locks on close: %s", exc)
        if self._listener is not None:
            listeners.release(self._listener)
            self._listener = None
        self._pool.close()

    # -- transactions ---------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[Conn]:
        tx: _Tx | None = getattr(self._local, "tx", None)
        if tx is not None:  # nested: a savepoint
            mark = len(tx.callbacks)
            try:
                with mapped(self.where), tx.conn.transaction():
                    yield tx.conn
            except BaseException:
                del tx.callbacks[mark:]
                raise
            return
        with self._outermost() as conn, conn.transaction():
            yield conn

    @contextmanager
    def _outermost(self) -> Iterator[Conn]:
        """A connection for this thread's outermost transaction; its after-commit
        callbacks run once the block ends without an exception."""
        with self._connection() as conn:
            tx = _Tx(conn)
            self._local.tx = tx
            try:
                yield conn
            finally:
                self._local.tx = None
        for callback in tx.callbacks:
            try:
                callback()
            except Exception:
                log.exception("after-commit callback failed")

    @contextmanager
    def _batch(self) -> Iterator[Conn]:
        """A write transaction in pipeline mode: statements go out without waiting for
        each other's answers, so a group commit costs one round trip plus the commit.
        Inside an open transaction it is a plain nested write."""
        if getattr(self._local, "tx", None) is not None:
            with self._write() as conn:
                yield conn
            return
        with self._outermost() as conn, conn.pipeline(), conn.transaction():
            yield conn

    def _one_trip(self, send: Callable[[Conn], _T], collect: Callable[[Conn, _T], _R]) -> _R:
        """`send` statements in one pipeline, `collect` their answers once it committed:
        the statements and the Sync reach the server in one round trip.

        No BEGIN or COMMIT: the statements before a pipeline's Sync are one implicit
        transaction, committed at the Sync, or rolled back whole if one fails. A
        `send` that raises queues a ROLLBACK first, so that Sync commits nothing; a
        failed pipeline leaves no prepared statement behind (`_forget_prepared`).
        Inside an open transaction both run in it.
        """
        if getattr(self._local, "tx", None) is not None:
            with self._write() as conn:
                return collect(conn, send(conn))
        with self._outermost() as conn:
            try:
                with conn.pipeline():
                    try:
                        sent = send(conn)
                    except BaseException:
                        with suppress(psycopg.Error):  # failing, the pipeline commits nothing
                            conn.execute("ROLLBACK")
                        raise
            except BaseException:
                _forget_prepared(conn)
                raise
            return collect(conn, sent)

    @contextmanager
    def transaction(self) -> Iterator[Conn]:
        with self._write() as conn:
            yield conn

    def after_commit(self, callback: Callable[[], None], *, conn: Any = None) -> None:
        """Run `callback` after this thread's transaction (or `conn`'s) commits; now if none."""
        if conn is not None:
            outbox.after_commit(conn, callback)
            return
        tx: _Tx | None = getattr(self._local, "tx", None)
        if tx is not None:
            tx.callbacks.append(callback)
        else:
            callback()

    def _params(self, **values: Any) -> dict[str, Any]:
        values["now"] = self._clock() if self._clock is not None else None
        return values

    def now(self) -> int:
        if self._clock is not None:
            return self._clock()
        with self._connection() as conn:
            row = conn.execute(
                "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
            ).fetchone()
        assert row is not None
        return int(row[0])

    def _statement(self, key: Any, build: Callable[..., str], *args: Any) -> str:
        """`build(*args)`, made once per key."""
        sql = self._sql.get(key)
        if sql is None:
            sql = self._sql[key] = build(*args)
        return sql

    # -- enqueue ---------------------------------------------------------------------

    def _insert_sql(self, keyed: bool, shape: str) -> str:
        """One statement inserting every job and its `job:enqueued` event.

        The store's clock is read once per statement. `keyed`: some job has an
        idempotency key, so a duplicate of an unfinished job is skipped (ON
        CONFLICT); without keys no row can conflict and the arbiter check is left
        out. `shape` (see `_shape`): `single`, one job, its values as scalars (no
        arrays to build and unnest); `shared`, jobs that differ only in id, payload
        and key, sent as three arrays and the rest once; `many`, a column per array.

        A batch appends one `job:enqueued` row per `EVENT_IDS_PER_ROW` jobs
        (`_enqueued_events`). The answer is each inserted row's (id, status,
        created_at, run_at), except for
        a `shared` batch without keys: every job is inserted, with the same status and
        times, so one row (NULL, status, created_at, run_at, count) says it all.
        """
        d = self._d
        names = (
            "id, type, queue, payload, priority, max_attempts, given_run_at, delay_ms, "
            "timeout_ms, idempotency_key, parent_id, meta, limit_key"
        )
        if shape == "single":
            rows = (
                "(VALUES (%(ids)s::text, %(types)s::text, %(queues)s::text, %(payloads)s::text, "
                "%(priorities)s::int, %(max_attempts)s::int, %(run_ats)s::bigint, "
                "%(delays)s::bigint, %(timeouts)s::bigint, %(keys)s::text, %(parents)s::text, "
                f"%(metas)s::text, %(limit_keys)s::text)) AS v({names})"
            )
        elif shape == "shared":
            rows = (
                "(SELECT x.id, %(types)s::text AS type, %(queues)s::text AS queue, x.payload, "
                "%(priorities)s::int AS priority, %(max_attempts)s::int AS max_attempts, "
                "%(run_ats)s::bigint AS given_run_at, %(delays)s::bigint AS delay_ms, "
                "%(timeouts)s::bigint AS timeout_ms, x.idempotency_key, "
                "%(parents)s::text AS parent_id, %(metas)s::text AS meta, x.limit_key "
                "FROM unnest(%(ids)b::text[], %(payloads)b::text[], %(keys)b::text[], "
                "%(limit_keys)b::text[]) AS x(id, payload, idempotency_key, limit_key)) AS v"
            )
        else:  # arrays go in binary: no per-element text formatting and quoting on the client
            rows = (
                "unnest(%(ids)b::text[], %(types)b::text[], %(queues)b::text[], "
                "%(payloads)b::text[], %(priorities)b::int[], %(max_attempts)b::int[], "
                "%(run_ats)b::bigint[], %(delays)b::bigint[], %(timeouts)b::bigint[], "
                "%(keys)b::text[], %(parents)b::text[], %(metas)b::text[], "
                f"%(limit_keys)b::text[]) AS v({names})"
            )
        conflict = (
            "ON CONFLICT (type, idempotency_key) WHERE idempotency_key IS NOT NULL "
            "AND status IN ('scheduled', 'pending', 'claimed') DO NOTHING "
            if keyed
            else ""
        )
        return (
            f"WITH n AS (SELECT {d.now} AS now), "
            "v AS (SELECT v.*, coalesce(v.given_run_at, n.now + v.delay_ms) AS run_at, n.now "
            f"FROM n, {rows}), "
            f"u AS (INSERT INTO {d.table('jobs')} (id, type, queue, payload, status, priority, "
            "max_attempts, run_at, timeout_ms, idempotency_key, parent_id, meta, created_at, "
            "updated_at, limit_key) "
            "SELECT v.id, v.type, v.queue, v.payload::json, "
            "CASE WHEN v.run_at <= v.now THEN 'pending' ELSE 'scheduled' END, v.priority, "
            "v.max_attempts, v.run_at, v.timeout_ms, v.idempotency_key, v.parent_id, "
            f"v.meta::json, v.now, v.now, v.limit_key FROM v {conflict}"
            "RETURNING id, status, created_at, run_at), "
            f"e AS ({self._enqueued_events(shape)}) "
            + (
                "SELECT NULL, status, created_at, run_at, count(*) FROM u "
                "GROUP BY status, created_at, run_at"
                if shape == "shared" and not keyed
                else "SELECT id, status, created_at, run_at FROM u"
            )
        )

    def _enqueued_events(self, shape: str) -> str:
        """The `job:enqueued` events of the jobs inserted (CTE `u`): a row for one job, a
        row listing up to `EVENT_IDS_PER_ROW` jobs for a batch (migration 8; readers
        expand it into one event per job, see `event_order`)."""
        events = self._d.table("events")
        if shape == "single":
            return (
                f"INSERT INTO {events} (at, kind, job_id) "
                "SELECT u.created_at, 'job:enqueued', u.id FROM u"
            )
        # every row of `u` has the same created_at (the statement's clock); no row, no event
        return (
            f"INSERT INTO {events} (at, kind, job_ids) "
            "SELECT min(c.created_at), 'job:enqueued', array_agg(c.id ORDER BY c.n) "
            "FROM (SELECT u.id, u.created_at, row_number() OVER () - 1 AS n FROM u) c "
            f"GROUP BY c.n / {EVENT_IDS_PER_ROW} ORDER BY min(c.n)"
        )

    @staticmethod
    def _shape(jobs: Sequence[NewJob]) -> str:
        """`single`, `shared` (every column but id, payload and key alike) or `many`."""
        if len(jobs) == 1:
            return "single"
        first = _SHARED(jobs[0])
        if not all(_SHARED(j) == first for j in jobs):
            return "many"
        # == holds for 1, 1.0 and True alike (and for keys in another order): the meta sent
        # once must be each job's own JSON
        meta = jobs[0].meta
        if meta:
            text = json_strict(meta)
            if any(j.meta is not meta and json_strict(j.meta) != text for j in jobs):
                return "many"
        return "shared"

    def _shaped_params(self, jobs: Sequence[NewJob], shape: str) -> dict[str, Any]:
        """The insert's parameters for `shape` (`_insert_sql`'s names): a column per array
        for `many`; scalars for `single`; for `shared`, scalars but the arrays of ids,
        payloads and keys."""
        params = self._params()
        if shape == "many":
            columns = map(list, zip(*map(_insert_values, jobs), strict=True))
            params.update(zip(_INSERT_PARAMS, columns, strict=True))
            return params
        params.update(zip(_INSERT_PARAMS, _insert_values(jobs[0]), strict=True))
        if shape == "shared":
            params["ids"] = [j.id for j in jobs]
            params["payloads"] = list(map(_payload_json, jobs))
            params["keys"] = [j.idempotency_key for j in jobs]
            params["limit_keys"] = [j.limit_key for j in jobs]
        return params

    def _insert_on(
        self, conn: Conn, jobs: Sequence[NewJob], cursor: psycopg.Cursor[Any] | None = None
    ) -> list[Inserted]:
        """Insert `jobs` on `conn` (the insert itself on `cursor`, when given)."""
        keyed = any(j.idempotency_key is not None for j in jobs)
        shape = self._shape(jobs)
        sql = self._statement(("insert", keyed, shape), self._insert_sql, keyed, shape)
        params = self._shaped_params(jobs, shape)
        rows = (cursor or conn.cursor()).execute(sql, params).fetchall()
        if shape == "shared" and not keyed:
            [(_, status_text, at, due, count)] = rows
            if count != len(jobs):  # pragma: no cover - without keys no row can conflict
                raise StorageError(f"inserted {count} of {len(jobs)} jobs at {self.where}")
            status = _STATUS[status_text]
            return inserted_rows(jobs, at, run_at=due, status=status)
        created = {row[0]: row[1:] for row in rows}
        results: list[Inserted] = []
        for job in jobs:
            made = created.get(job.id)
            if made is not None:
                status, now, run_at = made
                row = new_row(job, now, run_at=run_at, status=_STATUS[status])
                results.append(Inserted(row, created=True))
                continue
            existing = conn.execute(
                f"SELECT {', '.join(JOB_COLUMNS)} FROM {self._d.table('jobs')} "
                "WHERE type = %s AND idempotency_key = %s AND status = ANY(%s)",
                (job.type, job.idempotency_key, list(_UNFINISHED)),
            ).fetchone()
            if existing is None:  # the holder finished in between: insert after all
                results.extend(self._insert_on(conn, [job]))
            else:
                results.append(Inserted(row_to_job(existing), created=False))
        return results

    def insert(self, jobs: Sequence[NewJob], *, conn: Any = None) -> list[Inserted]:
        if not jobs:
            return []
        if conn is not None:
            outbox.check(conn)
            self._ensure_ready()
            with mapped(self.where):
                return self._insert_on(conn, jobs)
        if getattr(self._local, "tx", None) is None and (
            len(jobs) == 1 or all(j.idempotency_key is None for j in jobs)
        ):
            # one statement, atomic on its own: no BEGIN/COMMIT round trips (a duplicate
            # key's follow-up reads need the transaction unless the job is alone)
            return self._alone(lambda c: self._insert_on(c, jobs, c.kept_cursor()))
        with self._write() as c:
            return self._insert_on(c, jobs)

    def _alone(self, use: Callable[[_Pooled], _T]) -> _T:
        """`use(conn)` on a pooled connection outside any transaction (autocommit).

        `_connection` without its layers: the pool's checkout and return, no context
        managers and no COMMIT call (autocommit has nothing to commit). Errors leave
        as from `_connection`.
        """
        self._ensure_ready()
        try:
            conn: Any = self._pool.getconn()
            try:
                if getattr(self._local, "seen_mark", None) is None:
                    self._local.seen_mark = change_mark(conn)  # this thread's first use
                return use(conn)
            finally:
                self._pool.putconn(conn)
        except (StorageError, IllegalTransition):
            raise
        except (psycopg.Error, PoolTimeout) as exc:
            if isinstance(exc, psycopg.OperationalError):
                self._check_pool()
            raise translate(exc, self.where) from exc

    def hub_store(self) -> PostgresHubStore:
        """The hub's tokens and workers registry in this store (`jobcore.storage.hub_state.HubStore`,
        an optional power: `jobcore.storage.powers.KeepsHubState`)."""
        from jobcore_postgres.hub_store import PostgresHubStore

        return PostgresHubStore(self)

    # -- the worker's path -------------------------------------------------------------

    def claim(
        self,
        *,
        worker: str,
        limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        start: int | None = None,
    ) -> list[Job]:
        if limit <= 0:
            return []
        if self._limits_exist():  # DESIGN §16: the plain claim would claim nothing
            return self.commit_batch(
                [],
                worker=worker,
                claim_limit=limit,
                lease_ms=lease_ms,
                queues=queues,
                types=types,
                start=start,
            )[1]
        return self._one_trip(
            lambda conn: self._send_claim(
                conn, worker, limit, lease_ms, queues, types, start, True
            )[0],
            lambda conn, cursor: self._claimed(cursor),
        )

    def _send_claim(
        self,
        conn: Conn,
        worker: str,
        limit: int,
        lease_ms: int,
        queues: Sequence[str],
        types: Sequence[str],
        start: int | None,
        promote: bool,
        look_ahead: bool = False,
    ) -> tuple[psycopg.Cursor[Any] | None, psycopg.Cursor[Any] | None]:
        """Queue the promotion and the claim: (the claim's cursor, for `_claimed`; the
        look-ahead's, read after the promotion, for `scheduled_seen`)."""
        if promote:
            sql = self._statement("promote", promote_statement, self._d, PROMOTE_LIMIT)
            conn.execute(sql, self._params())
        if limit <= 0:
            return None, None
        by_queue, by_type = bool(queues), bool(types)
        sql = self._statement(
            ("claim", by_queue, by_type), claim_statement, self._d, by_queue, by_type
        )
        # Without this the server plans the claim afresh at every execution (its generic
        # plan looks costlier by estimate, though it is the same plan): a prepared claim
        # then costs its planning time again each time. The look-ahead statement sets it
        # too (one statement less); it reads before the claim, which changes no scheduled row.
        ahead = None
        if look_ahead:
            ahead = conn.execute(self._statement("ahead", self._ahead_sql), self._params())
        else:
            conn.execute(_GENERIC_PLANS)
        params = self._params(
            worker=worker,
            limit=limit,
            lease_ms=lease_ms,
            start=limit if start is None else start,
            queues=list(queues),
            types=list(types),
        )
        return conn.execute(sql, params), ahead

    @staticmethod
    def _claimed(cursor: psycopg.Cursor[Any] | None) -> list[Job]:
        return [] if cursor is None else [row_to_job(row) for row in cursor.fetchall()]

    def commit_batch(
        self,
        outcomes: Sequence[Outcome],
        *,
        worker: str,
        claim_limit: int,
        lease_ms: int,
        queues: Sequence[str] = (),
        types: Sequence[str] = (),
        promote: bool = True,
        started: Sequence[Lease] = (),
        start: int | None = None,
        look_ahead: bool = False,
    ) -> tuple[list[Recorded], list[Job]]:
        """See `Storage.commit_batch`. `look_ahead`: also read, in the same trip, the
        earliest scheduled `run_at` and the store's clock, for `scheduled_seen()`."""
        checked = self._checked(outcomes)
        self._local.seen_ahead = None

        self._local.marked = set()

        limited = claim_limit > 0 and self._limits_exist()  # DESIGN §16: see `claim`

        def send(conn: Conn) -> _Batch:
            marked = None
            if started and checked:  # one statement locks them all in order and marks
                marked = self._lock_and_mark(conn, started, checked)
            elif started:
                sql = self._lease_statement(MARK_STARTED, "j.id")
                marked = conn.execute(sql, self._lease_params(started))
            else:
                self._lock_in_order(conn, checked)
            sent = self._send_owner(conn, checked)
            if limited:  # the outcomes, then the limited claim, in one transaction
                self._send_claim(conn, worker, 0, lease_ms, queues, types, start, promote)
                # the limited claim's statements keep their prepared plans (see `_send_claim`)
                if look_ahead:
                    ahead = conn.execute(self._statement("ahead", self._ahead_sql), self._params())
                else:
                    ahead, _ = None, conn.execute(_GENERIC_PLANS)
                return _Batch(sent, None, ahead, marked)
            claim, ahead = self._send_claim(
                conn, worker, claim_limit, lease_ms, queues, types, start, promote, look_ahead
            )
            return _Batch(sent, claim, ahead, marked)

        def collect(conn: Conn, batch: _Batch) -> tuple[list[Recorded], list[Job]]:
            if batch.marked is not None:
                self._local.marked = {row[0] for row in batch.marked.fetchall()}
            if batch.ahead is not None:
                row = batch.ahead.fetchone()
                assert row is not None
                self._local.seen_ahead = (None if row[0] is None else int(row[0]), int(row[1]))
            return self._collect(conn, checked, batch.sent), self._claimed(batch.claim)

        if limited:
            # one implicit transaction (up to the pipeline's Sync), its first trip carrying
            # the outcomes, the limits' advisory lock and the claim's reads; the lock is
            # taken once the outcomes are written (a limited claim holding it never waits
            # for a row lock: SKIP LOCKED). What the claim reads comes back by Flush, inside
            # the transaction; a claim that cannot refuse (`claim_fitting`) goes with the Sync
            def send_limited(conn: Conn) -> _Limited:
                batch = send(conn)
                state = self._send_limited(
                    conn, worker, claim_limit, lease_ms, queues, types, start
                )
                recorded, _ = collect(conn, batch)
                return (recorded, *self._finish_limited(conn, state, types, claim_limit))

            def committed(conn: Conn, sent: _Limited) -> tuple[list[Recorded], list[Job]]:
                recorded, rows, later, opens = sent
                self._rate_opens = opens
                return recorded, self._limited_jobs(rows, later)

            if _has_children(checked):
                # children go in under a savepoint, which needs an explicit transaction: in
                # the implicit one psycopg would BEGIN and COMMIT (or ROLLBACK) around them,
                # ending the transaction, and the advisory lock, before the claim
                with self._batch() as conn:
                    sent = send_limited(conn)
                return committed(conn, sent)
            return self._one_trip(send_limited, committed)
        if _has_children(checked):  # children go in with their parent: collect before COMMIT
            with self._batch() as conn:
                return collect(conn, send(conn))
        return self._one_trip(send, collect)

    def _ahead_sql(self) -> str:
        """The earliest scheduled `run_at`, the store's clock, and `_GENERIC_PLANS`."""
        d = self._d
        return (
            f"SELECT (SELECT min(run_at) FROM {d.table('jobs')} WHERE status = 'scheduled'), "
            f"{d.now}, set_config('plan_cache_mode', 'force_generic_plan', true)"
        )

    def marked_seen(self) -> set[str]:
        """Ids whose start marker this thread's last `commit_batch` recorded (its `started`
        leases that still held): the worker runs a handler only once its start is durable."""
        marked: set[str] = getattr(self._local, "marked", set())
        return marked

    def scheduled_seen(self) -> tuple[int | None, int] | None:
        """(earliest scheduled `run_at` or None, the store's clock) as read by this thread's
        last `commit_batch`, if it was asked to `look_ahead`; else None.

        The worker then needs no `next_due()` and `now()` trips after a claim, and can
        leave promotion out of claims while it knows no scheduled job is due.
        """
        seen: tuple[int | None, int] | None = getattr(self._local, "seen_ahead", None)
        opens = None if seen is None else self.rate_opens(seen[1])  # DESIGN §16
        if seen is None or opens is None:
            return seen
        return (opens if seen[0] is None else min(seen[0], opens), seen[1])

    def _lease_statement(self, transition: Transition, returning: str) -> str:
        return self._statement(
            ("lease", transition.name, returning), lease_statement, transition, self._d, returning
        )

    def _lease_params(self, leases: Sequence[Lease], **extra: Any) -> dict[str, Any]:
        """The leases as report arrays, in job id order (see `_lock_in_order`)."""
        leases = sorted(leases, key=_by_job_id)
        nothing: list[None] = [None] * len(leases)
        return self._params(
            ids=[lease.job_id for lease in leases],
            lease_ids=[lease.lease_id for lease in leases],
            workers=[lease.worker for lease in leases],
            errors=nothing,
            results=nothing,
            delays=nothing,
            **extra,
        )

    def extend_leases(self, leases: Sequence[Lease], *, lease_ms: int) -> dict[str, bool]:
        if not leases:
            return {}
        sql = self._lease_statement(EXTEND, "j.id, j.cancel_requested")
        with self._connection() as conn:  # one statement: atomic without BEGIN/COMMIT
            rows = conn.execute(sql, self._lease_params(leases, lease_ms=lease_ms)).fetchall()
        return {row[0]: bool(row[1]) for row in rows}

    def _lock_in_order(self, conn: Conn, outcomes: Sequence[Outcome]) -> None:
        """Lock the rows a transaction will write for `outcomes`, in job id order, if it
        writes them in more than one statement (start markers lock them themselves:
        `_lock_and_mark`).

        Every statement writing reported rows takes them in job id order (the report
        arrays are sorted), but a transaction of several such statements (one per kind
        of outcome) would still lock in two runs: the worker's heartbeat, waiting for a
        row of the second run while holding one of the first, deadlocks with it. Locked
        here first, all the rows are taken in one run, in the order every other writer
        of them uses.
        """
        if _row_statements(outcomes) <= 1:
            return
        sql = self._statement("lock_leases", lock_leases_statement, self._d)
        conn.execute(sql, self._lease_params([outcome.lease for outcome in outcomes]))

    def _lock_and_mark(
        self, conn: Conn, started: Sequence[Lease], outcomes: Sequence[Outcome]
    ) -> psycopg.Cursor[Any]:
        """Mark `started` and lock the rows of `outcomes` too, all in job id order, in one
        statement: what `_lock_in_order` and the start markers would do in two."""
        reports = sorted(
            [(lease, True) for lease in started] + [(o.lease, False) for o in outcomes],
            key=lambda report: report[0].job_id,
        )
        sql = self._statement("lock_and_mark", lock_and_mark_statement, self._d)
        return conn.execute(
            sql,
            self._params(
                ids=[lease.job_id for lease, _ in reports],
                lease_ids=[lease.lease_id for lease, _ in reports],
                workers=[lease.worker for lease, _ in reports],
                marks=[mark for _, mark in reports],
            ),
        )

    def _mark_started(self, conn: Conn, leases: Sequence[Lease]) -> set[str]:
        sql = self._lease_statement(MARK_STARTED, "j.id")
        return {row[0] for row in conn.execute(sql, self._lease_params(leases)).fetchall()}

    def mark_started(self, leases: Sequence[Lease]) -> set[str]:
        if not leases:
            return set()
        with self._connection() as conn:
            return self._mark_started(conn, leases)

    def record(self, outcomes: Sequence[Outcome]) -> list[Recorded]:
        if not outcomes:
            return []
        checked = self._checked(outcomes)
        if _has_children(checked):
            with self._batch() as conn:
                self._lock_in_order(conn, checked)
                return self._collect(conn, checked, self._send_owner(conn, checked))

        def send(conn: Conn) -> list[_Sent]:
            self._lock_in_order(conn, checked)
            return self._send_owner(conn, checked)

        return self._one_trip(send, lambda conn, sent: self._collect(conn, checked, sent))

    def _send_owner(
        self, conn: Conn, outcomes: Sequence[Outcome], *, children: bool = False
    ) -> list[_Sent]:
        """Queue one statement per transition (completions with children only if `children`)."""
        sent: list[_Sent] = []
        by_type: dict[type[Any], list[int]] = {}
        for index, outcome in enumerate(outcomes):
            if children or not (isinstance(outcome, Completed) and outcome.children):
                by_type.setdefault(type(outcome), []).append(index)
        for kind, indexes in by_type.items():
            indexes.sort(key=lambda i: outcomes[i].lease.job_id)  # rows in id order
            group = [outcomes[i] for i in indexes]
            errors: list[str | None]
            delays: list[int]
            results: list[str | None]
            if kind is Completed:  # the usual report: no error, no delay
                errors, delays = [None] * len(group), [0] * len(group)
                results = [result_json(o.result) for o in group if isinstance(o, Completed)]
            else:
                errors = [clean_text(getattr(o, "error", None)) for o in group]
                delays = [
                    clamp_delay_ms(getattr(o, "delay_ms", 0), STORE_MAX_DELAY_MS) for o in group
                ]
                results = [None] * len(group)
            params = self._params(
                ids=[o.lease.job_id for o in group],
                lease_ids=[o.lease.lease_id for o in group],
                workers=[o.lease.worker for o in group],
                errors=errors,
                results=results,
                delays=delays,
            )
            slim = all(o.lease.job is not None for o in group)
            for transition in OWNER[kind]:
                sql = self._statement(
                    ("owner", transition.name, slim), owner_statement, transition, self._d, slim
                )
                cursor = conn.execute(sql, params)
                sent.append(_Sent(indexes, cursor, transition if slim else None))
        return sent

    @staticmethod
    def _updated(outcomes: Sequence[Outcome], sent: list[_Sent]) -> dict[int, Job]:
        """{index in outcomes: the row its statement updated}.

        A statement updates a row once: of several reports of one job, the first one
        not yet answered by an earlier transition's statement gets it.
        """
        done: dict[int, Job] = {}
        for item in sent:
            waiting: dict[str, int] = {}  # job id -> its first report not yet answered
            for i in item.indexes:
                if i not in done:
                    waiting.setdefault(outcomes[i].lease.job_id, i)
            rows = item.cursor.fetchall()
            transition = item.transition
            for row in rows:
                i = waiting.pop(row[0], -1)
                if i < 0:
                    continue
                done[i] = (
                    row_to_job(row)
                    if transition is None
                    else slim_to_job(row, outcomes[i], transition)
                )
        return done

    @staticmethod
    def _checked(outcomes: Sequence[Outcome]) -> list[Outcome]:
        """Results that cannot be stored fail their job alone, before any statement runs."""
        checked: list[Outcome] = []
        for outcome in outcomes:
            if isinstance(outcome, Completed):
                try:
                    result_json(outcome.result)
                except (TypeError, ValueError) as exc:
                    outcome = Failed(outcome.lease, f"could not record outcome: {exc}")
            checked.append(outcome)
        return checked

    def _record(self, conn: Conn, outcomes: Sequence[Outcome]) -> list[Recorded]:
        checked = self._checked(outcomes)
        self._lock_in_order(conn, checked)
        return self._collect(conn, checked, self._send_owner(conn, checked))

    def _collect(self, conn: Conn, checked: list[Outcome], sent: list[_Sent]) -> list[Recorded]:
        done = self._updated(checked, sent)
        answers: dict[int, Recorded] = {i: Recorded(checked[i], job) for i, job in done.items()}
        for i, outcome in enumerate(checked):
            if isinstance(outcome, Completed) and outcome.children:
                answers[i] = self._record_with_children(conn, outcome)
        missing = [i for i in range(len(checked)) if i not in answers or answers[i].job is None]
        if missing:
            ids = list({checked[i].lease.job_id for i in missing})
            rows = conn.execute(
                f"SELECT {', '.join(JOB_COLUMNS)} FROM {self._d.table('jobs')} WHERE id = ANY(%s)",
                (ids,),
            ).fetchall()
            current = {job.id: job for job in map(row_to_job, rows)}
            for i in missing:
                outcome = checked[i]
                job = current.get(outcome.lease.job_id)
                ended = recorded_as(outcome)
                if job is not None and any(
                    entry.get("lease_id") == outcome.lease.lease_id
                    and entry.get("worker") == outcome.lease.worker
                    and entry.get("outcome") in ended
                    for entry in job.history
                ):
                    answers[i] = Recorded(outcome, job, state="already")
                else:
                    answers[i] = Recorded(outcome, None, state="stale")
        return [answers[i] for i in range(len(checked))]

    def _apply(self, conn: Conn, outcomes: Sequence[Outcome]) -> dict[int, Job]:
        """Run the owner statements for `outcomes` now (children are the caller's)."""
        return self._updated(outcomes, self._send_owner(conn, outcomes, children=True))

    def _record_with_children(self, conn: Conn, outcome: Completed) -> Recorded:
        try:
            with conn.transaction():
                done = self._apply(conn, [outcome])
                if 0 not in done:
                    return Recorded(outcome, None, state="stale")
                children = tuple(self._insert_on(conn, outcome.children))
                return Recorded(outcome, done[0], children=children)
        except _UNSTORABLE as exc:  # this outcome alone: its parent fails, the batch goes on
            log.error("could not record outcome for job %s: %s", outcome.lease.job_id, exc)
            fallback = Failed(outcome.lease, f"could not record outcome: {exc}")
            done = self._apply(conn, [fallback])
            return Recorded(fallback, done.get(0), state="recorded" if 0 in done else "stale")

    # -- change notification and events ----------------------------------------------

    def _start_listening(self) -> listeners.Listener:
        with self._ready_lock:
            if self._listener is None:
                self._listener = listeners.acquire(
                    self.target.conninfo, channel(self.schema), self.where, self.wake_key
                )
            return self._listener

    @property
    def pushes_changes(self) -> bool:
        """True while every commit that changes jobs or events wakes this process's
        `jobcore.wakeup` subscribers of `wake_key` (the listener is up): no need to poll."""
        listener = self._listener
        return listener is not None and listener.connected

    def wait_for_change(self, timeout: float) -> bool:
        """True once another transaction changed jobs or events since this thread last looked.

        A thread's first wait looks for events committed since its first use of
        the store; from then on LISTEN/NOTIFY wakes it (one listening connection
        per process). With `poll_only` that look is repeated every `poll_step`;
        while the listener is down the answer is "maybe" every few hundred ms,
        so the caller looks itself.
        """
        return self._wait_for(timeout, work=False)

    def wait_for_work(self, timeout: float) -> bool:
        """Like `wait_for_change`, but claims and outcomes alone (`NO_WORK` notifications,
        such as those of this thread's own commits) are no change: True once work may have
        been added or made due, or a cancel requested, since this thread last looked.

        Optional (the worker uses it while `pushes_changes`); counted apart from
        `wait_for_change`, so the hub's waiter still hears every commit. While
        concurrency limits exist, an outcome may free a slot: every commit counts.
        """
        return self._wait_for(timeout, work=not self._limits_exist())

    def _wait_for(self, timeout: float, *, work: bool) -> bool:
        timeout = max(0.0, timeout)
        if self.poll_only:
            return self._poll_for_change(timeout)
        listener = self._listener or self._start_listening()
        local = self._local
        if getattr(local, "seen_count", None) is None:  # first wait on this thread
            local.seen_count, local.seen_work = listener.count, listener.work_count
            changed, local.seen_mark = self._changed()  # between first use and listening
            if changed:
                return True
        # from here on the notifications alone tell: no query per wait
        if work:
            local.seen_work, changed = listener.wait(local.seen_work, timeout, work=True)
        else:
            local.seen_count, changed = listener.wait(local.seen_count, timeout)
        return changed

    def _changed(self) -> tuple[bool, str]:
        """Whether events committed since this thread's mark, and the new mark."""
        with self._connection() as conn:
            return changed_since(conn, self._d, self._local.seen_mark)

    def _poll_for_change(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        changed, self._local.seen_mark = self._changed()
        while not changed:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            time.sleep(min(self.poll_step, remaining))
            changed, self._local.seen_mark = self._changed()
        return True
