-- Named queries of the SQLite backend. Each block starts with `-- name: NAME`.
-- Job transitions are not here: sqlite_statements.py generates them from jobcore/transitions.py.
-- Finished rows keep `locked_by`: the worker that ran the last attempt.
-- `{filters}` is replaced by the backend with generated `AND col IN (?, ...)` clauses.

-- name: find_unfinished_by_key
-- the status condition is written as jobs_idempotency's (STATUS_CHECK_MIGRATION), so the
-- index is used
SELECT * FROM jobs
 WHERE type = :type AND idempotency_key = :key
   AND (status = 'pending' OR status = 'scheduled' OR status = 'claimed');

-- name: insert_job
INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,
                  run_at, timeout_ms, idempotency_key, cancel_requested, errors,
                  parent_id, meta, created_at, updated_at, limit_key)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, 0, '[]', ?11, ?12, ?13, ?13, ?14);

-- name: next_due
SELECT min(run_at) FROM jobs INDEXED BY jobs_scheduled WHERE status = 'scheduled';

-- name: cancel_requested
SELECT id FROM jobs INDEXED BY jobs_leases
 WHERE status = 'claimed' AND cancel_requested = 1 AND locked_by = :worker;

-- name: get_job
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
SELECT * FROM jobs WHERE 1 = 1 {filters} ORDER BY id DESC LIMIT :limit;

-- name: failed_ids
SELECT id FROM jobs WHERE status = 'failed' {filters} ORDER BY id;

-- name: prune
DELETE FROM jobs
 WHERE status IN ('completed', 'failed', 'cancelled') AND completed_at < :before {filters};

-- name: scan_jobs
SELECT * FROM jobs WHERE id > :after {filters} ORDER BY id LIMIT :limit;

-- name: count_by_status
SELECT status, count(*) FROM jobs GROUP BY status;

-- name: stats_counts
SELECT type, status, count(*) FROM jobs GROUP BY type, status;

-- name: stats_failures
SELECT type, coalesce(last_error, ''), count(*) FROM jobs WHERE status = 'failed'
 GROUP BY type, last_error ORDER BY count(*) DESC, type LIMIT 50;

-- name: stats_stuck
SELECT * FROM jobs INDEXED BY jobs_leases WHERE status = 'claimed' AND lease_expires_at < :now
 ORDER BY lease_expires_at LIMIT 100;

-- name: stats_durations
WITH d AS (
  SELECT type, completed_at - coalesce(started_at, claimed_at) AS ms,
         row_number() OVER (PARTITION BY type
                            ORDER BY completed_at - coalesce(started_at, claimed_at)) AS rn,
         count(*) OVER (PARTITION BY type) AS n
    FROM jobs WHERE status = 'completed' AND completed_at >= :since AND claimed_at IS NOT NULL
)
SELECT type, n,
       min(CASE WHEN rn >= (n * 50 + 99) / 100 THEN ms END),
       min(CASE WHEN rn >= (n * 95 + 99) / 100 THEN ms END)
  FROM d GROUP BY type ORDER BY type;

-- name: stats_last_hour
SELECT (SELECT count(*) FROM jobs WHERE created_at >= :since),
       (SELECT count(*) FROM jobs WHERE status = 'completed' AND completed_at >= :since),
       (SELECT count(*) FROM jobs WHERE status = 'failed' AND completed_at >= :since);

-- name: stats_duplicates
SELECT type, idempotency_key, count(*) FROM jobs WHERE idempotency_key IS NOT NULL
 GROUP BY type, idempotency_key HAVING count(*) > 1 ORDER BY count(*) DESC LIMIT 50;

-- name: events_after
-- job events carry no data of their own: type and queue (which never change) come from the
-- job while it exists
SELECT e.seq, e.at, e.kind, e.job_id, e.worker_id, e.data, j.type, j.queue
  FROM events e LEFT JOIN jobs j ON j.id = e.job_id
 WHERE e.seq > :seq ORDER BY e.seq LIMIT :limit;

-- name: last_event_seq
SELECT coalesce(max(seq), 0) FROM events;

-- name: add_event
INSERT INTO events (at, kind, job_id, worker_id, data)
VALUES (:at, :kind, :job_id, :worker_id, :data)
RETURNING seq;

-- name: prune_events
-- events are appended in time order: delete those before the first recent one (reading
-- only the old rows), at most :chunk per statement so the write lock is held briefly,
-- and never the newest (so seq keeps growing)
DELETE FROM events
 WHERE seq < coalesce((SELECT seq FROM events WHERE at >= :before ORDER BY seq LIMIT 1),
                      (SELECT max(seq) FROM events))
   AND seq < (SELECT min(seq) FROM events) + :chunk;
