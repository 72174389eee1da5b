"""Forward-only schema migrations for SQLite, numbered by `PRAGMA user_version`.

Migration N (1-based) upgrades a database at version N-1. Append new ones;
never edit a released one.
"""

from __future__ import annotations

MIGRATIONS: tuple[tuple[str, str], ...] = (
    (
        "create jobs table",
        """
        CREATE TABLE jobs (
            id               TEXT PRIMARY KEY,
            type             TEXT NOT NULL,
            queue            TEXT NOT NULL DEFAULT 'default',
            payload          TEXT NOT NULL,
            status           TEXT NOT NULL CHECK (status IN
                               ('scheduled', 'pending', 'claimed',
                                'completed', 'failed', 'cancelled')),
            priority         INTEGER NOT NULL DEFAULT 0,
            attempts         INTEGER NOT NULL DEFAULT 0 CHECK (attempts >= 0),
            max_attempts     INTEGER NOT NULL CHECK (max_attempts >= 1),
            run_at           INTEGER NOT NULL,
            timeout_ms       INTEGER,
            idempotency_key  TEXT,
            locked_by        TEXT,
            locked_at        INTEGER,
            lease_expires_at INTEGER,
            heartbeat_at     INTEGER,
            cancel_requested INTEGER NOT NULL DEFAULT 0,
            last_error       TEXT,
            errors           TEXT NOT NULL DEFAULT '[]',
            result           TEXT,
            parent_id        TEXT,
            meta             TEXT NOT NULL DEFAULT '{}',
            created_at       INTEGER NOT NULL,
            claimed_at       INTEGER,
            completed_at     INTEGER,
            updated_at       INTEGER NOT NULL
        );
        -- the claim path: only pending rows, in claim order; queue and type make
        -- the worker's filters answerable from the index alone
        CREATE INDEX jobs_claim ON jobs (priority DESC, run_at, id, queue, type)
            WHERE status = 'pending';
        -- promotion of due scheduled rows
        CREATE INDEX jobs_scheduled ON jobs (run_at) WHERE status = 'scheduled';
        -- the sweep: claimed rows by lease expiry
        CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status = 'claimed';
        -- at most one unfinished job per (type, idempotency_key)
        CREATE UNIQUE INDEX jobs_idempotency ON jobs (type, idempotency_key)
            WHERE idempotency_key IS NOT NULL
              AND status IN ('scheduled', 'pending', 'claimed');
        -- list/retry/prune by status, newest first
        CREATE INDEX jobs_status ON jobs (status, id);
        CREATE INDEX jobs_parent ON jobs (parent_id) WHERE parent_id IS NOT NULL;
        """,
    ),
    (
        "v2: lease ids, started marker, attempt history, events, locks, per-queue claim indexes",
        """
        ALTER TABLE jobs ADD COLUMN lease_id TEXT;
        ALTER TABLE jobs ADD COLUMN started_at INTEGER;
        ALTER TABLE jobs ADD COLUMN history TEXT NOT NULL DEFAULT '[]';
        -- set by every transition statement that appends an event (fires jobs_event)
        ALTER TABLE jobs ADD COLUMN last_event TEXT;
        -- claims made by v1 had no marker: treat them as started (the v1 sweep rules)
        UPDATE jobs SET lease_id = lower(hex(randomblob(16))), started_at = claimed_at
         WHERE status = 'claimed';
        -- the event log: one row per job transition, appended by the triggers below in
        -- the transition's own transaction (details are read from the job); pruning
        -- always keeps the newest row, so a seq is never handed out twice
        CREATE TABLE events (
            seq       INTEGER PRIMARY KEY,
            at        INTEGER NOT NULL,
            kind      TEXT NOT NULL,
            job_id    TEXT,
            worker_id TEXT,
            data      TEXT
        );
        CREATE TABLE locks (
            name       TEXT PRIMARY KEY,
            holder     TEXT NOT NULL,
            expires_at INTEGER NOT NULL
        );
        -- claims filtered by queue or by type read only their own rows
        CREATE INDEX jobs_claim_queue ON jobs (queue, priority DESC, run_at, id, type)
            WHERE status = 'pending';
        CREATE INDEX jobs_claim_type ON jobs (type, priority DESC, run_at, id, queue)
            WHERE status = 'pending';
        CREATE TRIGGER jobs_event_insert AFTER INSERT ON jobs
        BEGIN
            INSERT INTO events (at, kind, job_id) VALUES (NEW.created_at, 'job:enqueued', NEW.id);
        END;
        CREATE TRIGGER jobs_event AFTER UPDATE OF last_event ON jobs
        WHEN NEW.last_event IS NOT NULL
        BEGIN
            INSERT INTO events (at, kind, job_id, worker_id)
            VALUES (NEW.updated_at, NEW.last_event, NEW.id,
                    CASE WHEN NEW.status = 'claimed' THEN NEW.locked_by
                         WHEN OLD.status = 'claimed' THEN OLD.locked_by END);
        END;
        """,
    ),
    (
        "v3: a job event stores the job as its transition left it",
        """
        -- data.job: the columns transitions change, as this transition left them
        -- (jobcore/event_snapshot.py); job:enqueued (the insert trigger) stores none
        DROP TRIGGER jobs_event;
        CREATE TRIGGER jobs_event AFTER UPDATE OF last_event ON jobs
        WHEN NEW.last_event IS NOT NULL
        BEGIN
            INSERT INTO events (at, kind, job_id, worker_id, data)
            VALUES (NEW.updated_at, NEW.last_event, NEW.id,
                    CASE WHEN NEW.status = 'claimed' THEN NEW.locked_by
                         WHEN OLD.status = 'claimed' THEN OLD.locked_by END,
                    json_object('job', json_object(
                        'status', NEW.status, 'attempts', NEW.attempts, 'run_at', NEW.run_at,
                        'locked_by', NEW.locked_by, 'locked_at', NEW.locked_at,
                        'lease_id', NEW.lease_id, 'lease_expires_at', NEW.lease_expires_at,
                        'heartbeat_at', NEW.heartbeat_at,
                        'cancel_requested', NEW.cancel_requested,
                        'last_error', NEW.last_error, 'claimed_at', NEW.claimed_at,
                        'started_at', NEW.started_at, 'completed_at', NEW.completed_at,
                        'updated_at', NEW.updated_at)));
        END;
        """,
    ),
    (
        "v4: paused queues and job types (DESIGN §16)",
        """
        -- every claim reads this table in its own write transaction (jobcore/pauses.py)
        CREATE TABLE pauses (
            kind   TEXT NOT NULL CHECK (kind IN ('queue', 'type')),
            name   TEXT NOT NULL,
            reason TEXT NOT NULL DEFAULT '',
            since  INTEGER NOT NULL,
            by     TEXT NOT NULL DEFAULT '',
            PRIMARY KEY (kind, name)
        ) WITHOUT ROWID;
        """,
    ),
    (
        "v5: global concurrency limits (DESIGN §16)",
        """
        -- a job's concurrency key, from its type's `concurrency_key` at enqueue
        -- (jobcore/concurrency.py); NULL: no key limit applies to it
        ALTER TABLE jobs ADD COLUMN limit_key TEXT;
        -- every claim reads this table in its own write transaction; the claimed
        -- count of each limit is derived from the claimed rows, never stored
        CREATE TABLE limits (
            scope       TEXT NOT NULL CHECK (scope IN ('queue', 'type', 'key')),
            name        TEXT NOT NULL,
            concurrency INTEGER NOT NULL CHECK (concurrency >= 1),
            source      TEXT NOT NULL CHECK (source IN ('set', 'declared')),
            updated_at  INTEGER NOT NULL,
            PRIMARY KEY (scope, name)
        ) WITHOUT ROWID;
        -- keyed pending jobs by key (a claim past keys at their limit); keyed claimed
        -- jobs by key (their count); rows without a key are in neither
        CREATE INDEX jobs_claim_keyed ON jobs (type, limit_key, priority DESC, run_at, id, queue)
            WHERE status = 'pending' AND limit_key IS NOT NULL;
        CREATE INDEX jobs_held_keyed ON jobs (type, limit_key)
            WHERE status = 'claimed' AND limit_key IS NOT NULL;
        """,
    ),
)


def _sql_text(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


V1_STATUS_CHECK = """CHECK (status IN
                               ('scheduled', 'pending', 'claimed',
                                'completed', 'failed', 'cancelled'))"""
"""The status CHECK as migration 1 wrote it (so as `sqlite_schema` stores it)."""

STATUS_CHECK = (
    "CHECK (status = 'pending' OR status = 'claimed' OR status = 'completed'"
    " OR status = 'scheduled' OR status = 'failed' OR status = 'cancelled')"
)
"""The same rule, in a form SQLite tests without building a temporary table: an `IN` list of
more than two constants is looked up in one, made anew on every statement that changes
`status` (callgrind: about 19k instructions, the `CHECK` of every owner outcome)."""

MIGRATIONS += (
    (
        "v6: the status CHECK and the key index without a temporary table per status change",
        f"""
        -- The rule stays the same and no row changes, so the table's text is rewritten in
        -- place (SQLite's documented procedure for CHECK changes, "ALTER TABLE", section 7):
        -- no copy of the table, however large. RESET reloads this connection's schema; the
        -- table made and dropped bumps the schema cookie so other connections reload theirs.
        PRAGMA writable_schema = ON;
        UPDATE sqlite_schema
           SET sql = replace(sql, {_sql_text(V1_STATUS_CHECK)}, {_sql_text(STATUS_CHECK)})
         WHERE type = 'table' AND name = 'jobs';
        PRAGMA writable_schema = RESET;
        CREATE TABLE jobcore_schema_reload (x);
        DROP TABLE jobcore_schema_reload;
        -- the same for the unfinished-key index: its condition is tested on every status
        -- change of a job with a key (the lookup by key states it the same way to use it)
        DROP INDEX jobs_idempotency;
        CREATE UNIQUE INDEX jobs_idempotency ON jobs (type, idempotency_key)
            WHERE idempotency_key IS NOT NULL
              AND (status = 'pending' OR status = 'scheduled' OR status = 'claimed');
        """,
    ),
)

STATUS_CHECK_MIGRATION = len(MIGRATIONS)
"""The number of the migration above (the schema version it makes)."""

MIGRATIONS += (
    (
        "v7: global rate limits (DESIGN §16)",
        """
        -- at most `rate` claims per sliding `period_ms`, per queue, type or key of a type;
        -- every claim reads this table with `limits` and `pauses` (jobcore/rates.py)
        CREATE TABLE rates (
            scope       TEXT NOT NULL CHECK (scope IN ('queue', 'type', 'key')),
            name        TEXT NOT NULL,
            rate        INTEGER NOT NULL CHECK (rate >= 1),
            period_ms   INTEGER NOT NULL CHECK (period_ms >= 1),
            source      TEXT NOT NULL CHECK (source IN ('set', 'declared')),
            updated_at  INTEGER NOT NULL,
            PRIMARY KEY (scope, name)
        ) WITHOUT ROWID;
        -- the starts of each rate limit (key '' for queue and type limits): `n` jobs
        -- claimed at `at` by one claim; rows past their window are deleted by claims
        CREATE TABLE rate_starts (
            scope TEXT NOT NULL,
            name  TEXT NOT NULL,
            key   TEXT NOT NULL,
            at    INTEGER NOT NULL,
            n     INTEGER NOT NULL
        );
        CREATE INDEX rate_starts_window ON rate_starts (scope, name, at);
        """,
    ),
)

MIGRATIONS += (
    (
        "v8: rate_starts tell a pushed window from real starts",
        """
        -- set on the row a `RetryAfter(..., limit=True)` writes: the limit is held full
        -- until then; claims count the row as before, `jobcore limits` shows it apart
        ALTER TABLE rate_starts ADD COLUMN held_until INTEGER;
        """,
    ),
)

SCHEMA_VERSION = len(MIGRATIONS)
