"""jobcore's tables in their own PostgreSQL schema, with forward-only versioned migrations.

Migration N (1-based) upgrades a schema at version N-1; `{s}` stands for the
schema name. Append new ones; never edit a released one. Migrating takes a
transaction-scoped advisory lock, so processes starting at once queue up
behind one migrator; a schema already current is checked without the lock.
"""

from __future__ import annotations

import logging

import psycopg

from jobcore.errors import SchemaTooNew

log = logging.getLogger("jobcore.postgres")

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "jobs, events and locks",
        """
        CREATE SCHEMA IF NOT EXISTS {s};
        CREATE TABLE {s}.schema_version (version integer NOT NULL);
        INSERT INTO {s}.schema_version VALUES (0);

        -- the store's clock in ms; stable within one statement
        CREATE FUNCTION {s}.now_ms() RETURNS bigint LANGUAGE sql STABLE AS
          $$ SELECT (extract(epoch FROM statement_timestamp()) * 1000)::bigint $$;

        CREATE TABLE {s}.jobs (
            id               text PRIMARY KEY,
            type             text NOT NULL,
            queue            text NOT NULL DEFAULT 'default',
            payload          json NOT NULL,
            status           text NOT NULL CHECK (status IN
                               ('scheduled', 'pending', 'claimed',
                                'completed', 'failed', 'cancelled')),
            priority         integer NOT NULL DEFAULT 0,
            attempts         integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            max_attempts     integer NOT NULL CHECK (max_attempts >= 1),
            run_at           bigint NOT NULL,
            timeout_ms       bigint,
            idempotency_key  text,
            locked_by        text,
            locked_at        bigint,
            lease_expires_at bigint,
            heartbeat_at     bigint,
            cancel_requested boolean NOT NULL DEFAULT false,
            last_error       text,
            errors           jsonb NOT NULL DEFAULT '[]',
            result           json,
            parent_id        text,
            meta             json NOT NULL DEFAULT '{{}}',
            created_at       bigint NOT NULL,
            claimed_at       bigint,
            completed_at     bigint,
            updated_at       bigint NOT NULL,
            lease_id         text,
            started_at       bigint,
            history          jsonb NOT NULL DEFAULT '[]'
        ) WITH (autovacuum_vacuum_scale_factor = 0.02, autovacuum_analyze_scale_factor = 0.02);

        -- claim paths: only pending rows, in claim order; one per leading filter,
        -- so a claim filtered by queue or type never walks other queues' rows
        CREATE INDEX jobs_claim ON {s}.jobs (priority DESC, run_at, id)
            WHERE status = 'pending';
        CREATE INDEX jobs_claim_queue ON {s}.jobs (queue, priority DESC, run_at, id)
            WHERE status = 'pending';
        CREATE INDEX jobs_claim_type ON {s}.jobs (type, priority DESC, run_at, id)
            WHERE status = 'pending';
        -- promotion of due scheduled rows
        CREATE INDEX jobs_scheduled ON {s}.jobs (run_at) WHERE status = 'scheduled';
        -- the sweep and cancel checks: claimed rows
        CREATE INDEX jobs_leases ON {s}.jobs (lease_expires_at) WHERE status = 'claimed';
        CREATE INDEX jobs_claimed_by ON {s}.jobs (locked_by) WHERE status = 'claimed';
        -- at most one unfinished job per (type, idempotency_key)
        CREATE UNIQUE INDEX jobs_idempotency ON {s}.jobs (type, idempotency_key)
            WHERE idempotency_key IS NOT NULL
              AND status IN ('scheduled', 'pending', 'claimed');
        -- list/retry by status, newest first; pruning and stats by finish time
        CREATE INDEX jobs_status ON {s}.jobs (status, id);
        CREATE INDEX jobs_finished ON {s}.jobs (completed_at)
            WHERE status IN ('completed', 'failed', 'cancelled');
        CREATE INDEX jobs_parent ON {s}.jobs (parent_id) WHERE parent_id IS NOT NULL;

        CREATE TABLE {s}.events (
            seq       bigint GENERATED ALWAYS AS IDENTITY (SEQUENCE NAME {s}.events_seq)
                      PRIMARY KEY,
            at        bigint NOT NULL,
            kind      text NOT NULL CHECK (kind <> ''),
            job_id    text,
            worker_id text,
            data      jsonb
        );
        CREATE INDEX events_at ON {s}.events (at);

        -- one tiny notification per transaction that changed jobs (the server folds
        -- identical notifications of one transaction into one)
        CREATE FUNCTION {s}.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('{s}_changes', '');
          RETURN NULL;
        END $$;
        CREATE TRIGGER events_notify AFTER INSERT ON {s}.events
            FOR EACH STATEMENT EXECUTE FUNCTION {s}.notify_change();

        CREATE TABLE {s}.locks (
            name       text PRIMARY KEY,
            holder     text NOT NULL,
            expires_at bigint NOT NULL
        );
        """,
    ),
    (
        "the hub's tokens and workers",
        """
        CREATE TABLE {s}.hub_tokens (
            id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
            name       text NOT NULL,
            hash       text NOT NULL UNIQUE,
            scope      text NOT NULL CHECK (scope IN ('read', 'produce', 'agent', 'admin')),
            agent_id   text,
            created_at bigint NOT NULL,
            revoked_at bigint
        );
        CREATE UNIQUE INDEX hub_tokens_active_name ON {s}.hub_tokens (name)
            WHERE revoked_at IS NULL;
        CREATE TABLE {s}.hub_workers (
            worker_id     text PRIMARY KEY,
            name          text,
            cores         integer,
            ram_gb        double precision,
            tags          jsonb NOT NULL DEFAULT '[]',
            types         jsonb NOT NULL DEFAULT '[]',
            registered_at bigint NOT NULL,
            last_seen     bigint NOT NULL,
            lost_at       bigint,
            drain         boolean NOT NULL DEFAULT false
        );
        """,
    ),
    (
        "notifications only when events were appended or a cancel was requested",
        """
        -- A statement-level trigger fires even when its statement inserted no row: every
        -- empty claim notified, and each notification made idle workers claim again.
        -- Events that only take or end work (claims, outcomes) notify as 'no-work': every
        -- listener counts them, no worker claims because of them.
        CREATE OR REPLACE FUNCTION {s}.notify_change() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          IF EXISTS (SELECT FROM appended WHERE kind NOT IN
                     ('job:claimed', 'job:completed', 'job:failed', 'job:cancelled')) THEN
            PERFORM pg_notify('{s}_changes', '');
          ELSIF EXISTS (SELECT FROM appended) THEN
            PERFORM pg_notify('{s}_changes', 'no-work');
          END IF;
          RETURN NULL;
        END $$;
        DROP TRIGGER events_notify ON {s}.events;
        CREATE TRIGGER events_notify AFTER INSERT ON {s}.events
            REFERENCING NEW TABLE AS appended
            FOR EACH STATEMENT EXECUTE FUNCTION {s}.notify_change();

        -- a cancel request of a running job appends no event: its holder still hears of it
        CREATE FUNCTION {s}.notify_cancel_request() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
          PERFORM pg_notify('{s}_changes', '');
          RETURN NULL;
        END $$;
        CREATE TRIGGER jobs_cancel_requested AFTER UPDATE OF cancel_requested ON {s}.jobs
            FOR EACH ROW WHEN (NEW.cancel_requested AND NOT OLD.cancel_requested)
            EXECUTE FUNCTION {s}.notify_cancel_request();
        """,
    ),
    (
        "jobs_claim only for unfiltered claims",
        """
        -- A claim filtered by queue or type must walk its own index: with statistics taken
        -- while the table was small the planner found jobs_claim as cheap and walked every
        -- queue's pending rows. Only the unfiltered claim states `attempts >= 0` (always
        -- true, by the table's CHECK), so only it can use this index.
        DROP INDEX {s}.jobs_claim;
        CREATE INDEX jobs_claim ON {s}.jobs (priority DESC, run_at, id)
            WHERE status = 'pending' AND attempts >= 0;
        """,
    ),
    (
        "events in commit-safe order",
        """
        -- the writer's transaction: readers deliver in (xid, seq) order, only events of
        -- transactions older than any still running (jobcore_postgres/event_order.py);
        -- events already stored are older than every later one
        ALTER TABLE {s}.events ADD COLUMN xid xid8 NOT NULL DEFAULT '1';
        ALTER TABLE {s}.events ALTER COLUMN xid SET DEFAULT pg_current_xact_id();
        CREATE INDEX events_delivery ON {s}.events (xid, seq);
        """,
    ),
    (
        "hub tokens limited to job types and queues",
        """
        -- the job types and queues a token may use, as JSON arrays; NULL is any, as for
        -- every token made before
        ALTER TABLE {s}.hub_tokens ADD COLUMN types jsonb, ADD COLUMN queues jsonb;
        """,
    ),
    (
        "pruned events remembered, so a pruned cursor resumes without loss",
        """
        -- pruning deletes a prefix of the delivery order and notes the greatest seq it
        -- deleted: a cursor at or below it with no row comes before every event left
        -- (jobcore_postgres/event_order.py); it starts below every event stored
        CREATE TABLE {s}.events_pruned (upto bigint NOT NULL);
        INSERT INTO {s}.events_pruned SELECT coalesce(min(seq) - 1, 0) FROM {s}.events;
        -- pruning walks events_delivery now: nothing reads events by time any more
        DROP INDEX {s}.events_at;
        """,
    ),
    (
        "one job:enqueued row per batch, pending rows out of jobs_status",
        """
        -- A batch enqueue appends one job:enqueued row for up to 1024 of its jobs: job_ids
        -- lists them (NULL: a row of one event, job_id's). Readers expand such a row into
        -- one event per job, with ids seq, seq + 1, ... (jobcore_postgres/event_order.py):
        -- rows appended from now on are 1024 ids apart, so no two rows' ids meet.
        ALTER TABLE {s}.events ADD COLUMN job_ids text[];
        ALTER TABLE {s}.events ALTER COLUMN seq SET INCREMENT BY 1024;
        -- Pending rows (listed newest first through the primary key; claimed through
        -- the claim indexes) leave the status index: an enqueue writes one index less.
        DROP INDEX {s}.jobs_status;
        CREATE INDEX jobs_status ON {s}.jobs (status, id) WHERE status <> 'pending';
        """,
    ),
    (
        "paused queues and job types (DESIGN §16)",
        """
        -- every claim statement reads this table (jobcore_postgres/statements.py)
        CREATE TABLE IF NOT EXISTS {s}.pauses (
            kind   text NOT NULL CHECK (kind IN ('queue', 'type')),
            name   text NOT NULL,
            reason text NOT NULL DEFAULT '',
            since  bigint NOT NULL,
            by     text NOT NULL DEFAULT '',
            PRIMARY KEY (kind, name)
        );
        """,
    ),
    (
        "global concurrency limits (DESIGN §16)",
        """
        -- a job's concurrency key, from its type's `concurrency_key` at enqueue
        ALTER TABLE {s}.jobs ADD COLUMN IF NOT EXISTS limit_key text;
        -- a limited claim reads this table under an advisory lock (jobcore_postgres/limits.py);
        -- the claimed count of each limit is derived from the claimed rows, never stored
        CREATE TABLE IF NOT EXISTS {s}.limits (
            scope       text NOT NULL CHECK (scope IN ('queue', 'type', 'key')),
            name        text NOT NULL,
            concurrency integer NOT NULL CHECK (concurrency >= 1),
            source      text NOT NULL CHECK (source IN ('set', 'declared')),
            updated_at  bigint NOT NULL,
            PRIMARY KEY (scope, name)
        );
        CREATE INDEX IF NOT EXISTS jobs_claim_keyed
            ON {s}.jobs (type, limit_key, priority DESC, run_at, id)
            WHERE status = 'pending' AND limit_key IS NOT NULL;
        CREATE INDEX IF NOT EXISTS jobs_held_keyed ON {s}.jobs (type, limit_key)
            WHERE status = 'claimed' AND limit_key IS NOT NULL;
        """,
    ),
)

MIGRATIONS += (
    (
        "global rate limits (DESIGN §16)",
        """
        -- at most `rate` claims per sliding `period_ms` per queue, type or key of a type; a
        -- limited claim reads it under the limits' advisory lock (jobcore_postgres/limits.py)
        CREATE TABLE IF NOT EXISTS {s}.rates (
            scope       text NOT NULL CHECK (scope IN ('queue', 'type', 'key')),
            name        text NOT NULL,
            rate        integer NOT NULL CHECK (rate >= 1),
            period_ms   bigint NOT NULL CHECK (period_ms >= 1),
            source      text NOT NULL CHECK (source IN ('set', 'declared')),
            updated_at  bigint NOT NULL,
            PRIMARY KEY (scope, name)
        );
        -- each claim's starts per rate limit (key '' for queue and type limits); rows past
        -- their window are deleted by the claims that write the same limit's starts
        CREATE TABLE IF NOT EXISTS {s}.rate_starts (
            scope text NOT NULL,
            name  text NOT NULL,
            key   text NOT NULL,
            at    bigint NOT NULL,
            n     integer NOT NULL
        );
        CREATE INDEX IF NOT EXISTS rate_starts_window ON {s}.rate_starts (scope, name, at);
        """,
    ),
)

MIGRATIONS += (
    (
        "rate_starts tell a pushed window from real starts (DESIGN §16)",
        """
        -- set on the row a `RetryAfter(..., limit=True)` writes: the limit is held full
        -- until then; claims count the row as before, `jobcore limits` shows it apart
        ALTER TABLE {s}.rate_starts ADD COLUMN IF NOT EXISTS held_until bigint;
        """,
    ),
)

EVENT_IDS_PER_ROW = 1024
"""How many jobs one batch `job:enqueued` row lists at most: the ids between two rows' seqs."""

SCHEMA_VERSION = len(MIGRATIONS)


NO_WORK = "no-work"  # the payload of a notification whose events only took or ended work
LIMITS_CHANGED = "limits"  # the payload of a notification of changed limits or rates


def channel(schema: str) -> str:
    """The LISTEN/NOTIFY channel of a schema's store."""
    return f"{schema}_changes"


def stored_version(conn: psycopg.Connection[tuple[object, ...]], schema: str) -> int:
    """The schema's migration version; 0 when jobcore's tables are not there yet."""
    # a plain scan of pg_tables, not to_regclass: a name lookup that misses leaves a negative
    # cache entry in this backend that a lock taken later does not invalidate
    row = conn.execute(
        "SELECT count(*) FROM pg_catalog.pg_tables "
        "WHERE schemaname = %s AND tablename = 'schema_version'",
        (schema,),
    ).fetchone()
    if row is None or not row[0]:
        return 0
    found = conn.execute(f"SELECT version FROM {schema}.schema_version").fetchone()
    return int(found[0]) if found else 0  # type: ignore[call-overload]


def _too_new(version: int, schema: str, where: str) -> SchemaTooNew:
    return SchemaTooNew(
        f"PostgreSQL at {where}: schema {schema!r} is at version {version}, newer than this "
        f"jobcore knows ({SCHEMA_VERSION}); upgrade jobcore"
    )


def migrate(conn: psycopg.Connection[tuple[object, ...]], schema: str, where: str) -> None:
    """Bring `schema` to `SCHEMA_VERSION`; locks only when there is work to do."""
    version = stored_version(conn, schema)
    if version == SCHEMA_VERSION:
        return
    if version > SCHEMA_VERSION:
        raise _too_new(version, schema, where)
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"jobcore migrate {schema}",))
        version = stored_version(conn, schema)  # another process may have migrated meanwhile
        if version > SCHEMA_VERSION:
            raise _too_new(version, schema, where)
        if version >= 1:
            # Workers of the older version may be writing: their transactions lock jobs, then
            # events. Taking both up front, in that order, queues this behind them; locking them
            # one script statement at a time (events' trigger, then jobs') deadlocked with them.
            conn.execute(f"LOCK TABLE {schema}.jobs, {schema}.events IN ACCESS EXCLUSIVE MODE")
        for number in range(version + 1, SCHEMA_VERSION + 1):
            name, script = MIGRATIONS[number - 1]
            log.info("migrating %s schema %s to version %d: %s", where, schema, number, name)
            conn.execute(script.format(s=schema).encode())
            conn.execute(f"UPDATE {schema}.schema_version SET version = %s", (number,))
