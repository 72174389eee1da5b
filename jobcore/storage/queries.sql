-- Named queries of the SQLite backend. Each block starts with `-- name: NAME`.
-- Finished rows keep `locked_by`: the worker that ran the last attempt.
-- `{filters}` is replaced by the backend with generated `AND col IN (?, ...)` clauses.

-- name: find_unfinished_by_key
SELECT * FROM jobs
 WHERE type = :type AND idempotency_key = :key
   AND status IN ('scheduled', 'pending', 'claimed');

-- name: insert_job
INSERT INTO jobs (id, type, queue, payload, status, priority, attempts, max_attempts,
                  run_at, timeout_ms, idempotency_key, cancel_requested, errors,
                  parent_id, meta, created_at, updated_at)
VALUES (?1, ?2, ?3, ?4, ?5, ?6, 0, ?7, ?8, ?9, ?10, 0, '[]', ?11, ?12, ?13, ?13);

-- name: promote_due
UPDATE jobs INDEXED BY jobs_scheduled SET status = 'pending', updated_at = :now
 WHERE status = 'scheduled' AND run_at <= :now;

-- name: next_due
SELECT min(run_at) FROM jobs INDEXED BY jobs_scheduled WHERE status = 'scheduled';

-- name: claim
UPDATE jobs
   SET status = 'claimed', attempts = attempts + 1, locked_by = :worker, locked_at = :now,
       claimed_at = :now, heartbeat_at = :now, lease_expires_at = :now + :lease_ms,
       updated_at = :now
 WHERE status = 'pending'
   AND id IN (SELECT id FROM jobs INDEXED BY jobs_claim WHERE status = 'pending' {filters}
               ORDER BY priority DESC, run_at, id LIMIT :limit)
RETURNING *;

-- name: extend_lease
UPDATE jobs SET lease_expires_at = :now + :lease_ms, heartbeat_at = :now, updated_at = :now
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING cancel_requested;

-- name: cancel_requested
SELECT id FROM jobs INDEXED BY jobs_leases
 WHERE status = 'claimed' AND cancel_requested = 1 AND locked_by = :worker;

-- name: complete
UPDATE jobs
   SET status = 'completed', result = :result, completed_at = :now, updated_at = :now,
       locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING *;

-- name: retry_later
UPDATE jobs
   SET status = CASE WHEN :run_at <= :now THEN 'pending' ELSE 'scheduled' END,
       run_at = :run_at, last_error = :error, updated_at = :now,
       errors = json_insert(errors, '$[#]', json_object(
           'attempt', attempts, 'error', :error, 'worker', locked_by, 'at', :now)),
       locked_by = NULL, locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING *;

-- name: fail
UPDATE jobs
   SET status = 'failed', last_error = :error, completed_at = :now, updated_at = :now,
       errors = json_insert(errors, '$[#]', json_object(
           'attempt', attempts, 'error', :error, 'worker', locked_by, 'at', :now)),
       locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING *;

-- name: release
UPDATE jobs
   SET status = 'pending', attempts = attempts - 1, updated_at = :now,
       locked_by = NULL, locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING *;

-- name: cancel_owned
UPDATE jobs
   SET status = 'cancelled', last_error = :error, completed_at = :now, updated_at = :now,
       locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE id = :id AND status = 'claimed' AND locked_by = :worker AND attempts = :attempt
RETURNING *;

-- name: sweep_cancel
UPDATE jobs INDEXED BY jobs_leases
   SET status = 'cancelled', last_error = 'cancelled (lease expired)', completed_at = :now,
       updated_at = :now,
       locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE status = 'claimed' AND lease_expires_at < :now AND cancel_requested = 1
RETURNING *;

-- name: sweep_fail
UPDATE jobs INDEXED BY jobs_leases
   SET status = 'failed', last_error = :error, completed_at = :now, updated_at = :now,
       errors = json_insert(errors, '$[#]', json_object(
           'attempt', attempts, 'error', :error, 'worker', locked_by, 'at', :now)),
       locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE status = 'claimed' AND lease_expires_at < :now AND attempts >= max_attempts
RETURNING *;

-- name: sweep_reclaim
UPDATE jobs INDEXED BY jobs_leases
   SET status = 'pending', last_error = :error, updated_at = :now,
       errors = json_insert(errors, '$[#]', json_object(
           'attempt', attempts, 'error', :error, 'worker', locked_by, 'at', :now)),
       locked_by = NULL, locked_at = NULL, lease_expires_at = NULL, heartbeat_at = NULL
 WHERE status = 'claimed' AND lease_expires_at < :now AND attempts < max_attempts
RETURNING *;

-- name: get_job
SELECT * FROM jobs WHERE id = :id;

-- name: list_jobs
SELECT * FROM jobs WHERE 1 = 1 {filters} ORDER BY id DESC LIMIT :limit;

-- name: operator_retry
UPDATE jobs
   SET status = 'pending', attempts = 0, run_at = :now, cancel_requested = 0,
       completed_at = NULL, result = NULL, updated_at = :now
 WHERE id = :id AND status IN ('failed', 'cancelled')
RETURNING *;

-- name: failed_ids
SELECT id FROM jobs WHERE status = 'failed' {filters} ORDER BY id;

-- name: cancel_waiting
UPDATE jobs SET status = 'cancelled', completed_at = :now, updated_at = :now
 WHERE id = :id AND status IN ('scheduled', 'pending')
RETURNING *;

-- name: request_cancel
UPDATE jobs SET cancel_requested = 1, updated_at = :now
 WHERE id = :id AND status = 'claimed'
RETURNING *;

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
  SELECT type, completed_at - claimed_at AS ms,
         row_number() OVER (PARTITION BY type ORDER BY completed_at - claimed_at) AS rn,
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
