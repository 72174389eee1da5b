"""A worker's commit under concurrency limits (DESIGN §16) on PostgreSQL is one transaction:
its outcomes, the limits' advisory lock and the claim commit or roll back together, also
when an outcome inserts children (`Completed.children`, a savepoint of its own), when an
outcome cannot go in, and when the connection dies before the commit; a refused commit
leaves its connection usable, and a worker draining `--until-empty` goes on past it."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job
from testenv import subprocess_env

from jobcore.errors import StorageError
from jobcore.models import Completed, Job, JobStatus, Lease

Factory = Callable[..., PostgresStorage]


def _xids(storage: PostgresStorage) -> dict[tuple[str, str], str]:
    """The transaction id of each (event kind, job id)."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        rows = conn.execute(f"SELECT kind, job_id, xid::text FROM {storage.schema}.events")
        return {(str(kind), str(job)): str(xid) for kind, job, xid in rows}


def _refuse_completing(storage: PostgresStorage, job_id: str) -> None:
    """A trigger on the store's jobs that refuses to complete job `job_id`."""
    with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
        conn.execute(
            f"CREATE FUNCTION {storage.schema}.refuse() RETURNS trigger LANGUAGE plpgsql AS $$ "
            f"BEGIN IF new.id = '{job_id}' AND new.status = 'completed' THEN "
            "RAISE EXCEPTION 'refused by a trigger'; END IF; RETURN new; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER refuse BEFORE UPDATE ON {storage.schema}.jobs "
            f"FOR EACH ROW EXECUTE FUNCTION {storage.schema}.refuse()"
        )


def test_a_completion_with_children_and_the_limited_claim_are_one_transaction(
    pg_storage_factory: Factory,
) -> None:
    # the children's savepoint must not end the claim's transaction (and its advisory
    # lock) before the claim: it would claim on counts another claimer may be changing
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 2)
    storage.insert([new_job(priority=1), new_job(), new_job()])
    [first] = storage.claim(worker="w", limit=1, lease_ms=60_000)
    child = new_job("child")
    recorded, claimed = storage.commit_batch(
        [Completed(Lease.of(first), None, (child,))], worker="w", claim_limit=5, lease_ms=60_000
    )
    assert [r.state for r in recorded] == ["recorded"]
    [second] = [job for job in claimed if job.type == "noop"]
    xids = _xids(storage)
    completed = xids[("job:completed", first.id)]
    assert xids[("job:enqueued", child.id)] == completed
    assert xids[("job:claimed", second.id)] == completed, xids  # the same transaction


def test_an_outcome_beside_a_child_that_cannot_go_in_stays_recorded(
    pg_storage_factory: Factory,
) -> None:
    # a child whose id is taken fails its parent alone (DESIGN §6); the other outcome of
    # the commit, answered "recorded", must be what the store holds
    storage = pg_storage_factory()
    storage.set_limit("type", "noop", 5)
    taken = new_job("other")
    storage.insert([new_job(), new_job(), taken])
    fine, bad = storage.claim(worker="w", limit=2, lease_ms=60_000, types=["noop"])
    recorded, claimed = storage.commit_batch(
        [Completed(Lease.of(fine), "ok"), Completed(Lease.of(bad), None, (new_job(id=taken.id),))],
        worker="w",
        claim_limit=5,
        lease_ms=60_000,
    )
    assert [(r.state, r.job and r.job.status) for r in recorded] == [
        ("recorded", JobStatus.COMPLETED),
        ("recorded", JobStatus.FAILED),
    ]
    for answer in recorded:
        assert answer.job is not None
        stored = storage.get(answer.job.id)
        assert stored is not None and stored.status is answer.job.status
    assert [job.id for job in claimed] == [taken.id]


def test_racing_limited_commits_never_hold_more_than_a_limit(
    pg_storage_factory: Factory, pg_url: str
) -> None:
    # claimers on connections of their own, completing what they hold (some with a child)
    # in the commit that claims again, while another connection counts the claimed rows
    limits = {("type", "noop"): 2, ("queue", "q1"): 2, ("type", "other"): 3}
    admin = pg_storage_factory()
    for (scope, name), concurrency in limits.items():
        admin.set_limit(scope, name, concurrency)
    kinds = [(t, q) for t in ("noop", "other", "free") for q in ("q1", "q2")]
    admin.insert([new_job(t, q) for t, q in kinds for _ in range(40)])
    stop, over, failed = threading.Event(), [], []

    def count() -> None:
        with psycopg.connect(admin.target.conninfo, autocommit=True) as conn:
            while not stop.is_set():
                held: Counter[tuple[str, str]] = Counter()
                for queue, type_, n in conn.execute(
                    f"SELECT queue, type, count(*) FROM {admin.schema}.jobs "
                    "WHERE status = 'claimed' GROUP BY queue, type"
                ):
                    held["queue", queue] += n
                    held["type", type_] += n
                over.extend((pair, held[pair]) for pair, cap in limits.items() if held[pair] > cap)

    def claimer(i: int) -> None:
        storage = PostgresStorage(pg_url, pool_min=1, pool_max=1)
        held: list[Job] = []
        try:
            while not stop.is_set():
                kids = [(new_job("free", "q2"),) if j.type == "noop" else () for j in held]
                done = [Completed(Lease.of(j), None, c) for j, c in zip(held, kids, strict=True)]
                _, held = storage.commit_batch(
                    done, worker=f"w{i}", claim_limit=1 + i % 4, lease_ms=60_000
                )
            storage.record([Completed(Lease.of(j), None) for j in held])
        except Exception as exc:  # pragma: no cover - shown by the assertion below
            failed.append(exc)
        finally:
            storage.close()

    threads = [threading.Thread(target=count)]
    threads += [threading.Thread(target=claimer, args=(i,)) for i in range(6)]
    for thread in threads:
        thread.start()
    time.sleep(3)
    stop.set()
    for thread in threads:
        thread.join()
    assert not failed and not over, (failed, over[:5])
    assert admin.count_by_status().get("claimed", 0) == 0


@pytest.mark.parametrize("limited", [True, False], ids=["limited", "plain"])
def test_a_refused_commit_leaves_its_connection_usable(
    pg_storage_factory: Factory, limited: bool
) -> None:
    # an outcome the store refuses (a trigger) aborts the commit's pipeline: the statements
    # after it are skipped, among them, once, one psycopg asks the server to prepare; the
    # store's only connection must still work for the commits after (DESIGN §6)
    storage = pg_storage_factory(pool_min=1, pool_max=1)
    if limited:
        storage.set_limit("type", "noop", 50)
    refused, *fine = (new_job() for _ in range(4))
    storage.insert([refused, *fine])
    _refuse_completing(storage, refused.id)
    held = {job.id: job for job in storage.claim(worker="w", limit=4, lease_ms=60_000)}
    for _ in range(8):  # past psycopg's prepare threshold (5) for every statement
        with pytest.raises(StorageError, match="refused by a trigger"):
            storage.commit_batch(
                [Completed(Lease.of(held[refused.id]), None)],
                worker="w",
                claim_limit=1,
                lease_ms=60_000,
            )
    for job in fine:
        recorded, claimed = storage.commit_batch(
            [Completed(Lease.of(held[job.id]), None)], worker="w", claim_limit=1, lease_ms=60_000
        )
        assert [r.state for r in recorded] == ["recorded"] and claimed == []
    stored = storage.get(refused.id)
    assert stored is not None and stored.status is JobStatus.CLAIMED  # rolled back whole


def test_a_worker_until_empty_drains_past_a_refused_commit(
    pg_storage_factory: Factory, pg_url: str, tmp_path: Path
) -> None:
    # the refused group commit is recorded apart and claims nothing: that says nothing of
    # what is left, and `--until-empty` must not stop with runnable jobs pending
    storage = pg_storage_factory()
    storage.set_limit("type", "record", 1)  # when it is refused, nothing else is held
    jobs = [new_job("record", payload={"log": str(tmp_path / "runs.log")}) for _ in range(30)]
    storage.insert(jobs)
    refused = jobs[5]
    _refuse_completing(storage, refused.id)
    done = subprocess.run(
        [sys.executable, "-m", "jobcore", "run", "--until-empty", "--concurrency", "1"],
        env=subprocess_env(JOBCORE_DB=pg_url),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert storage.count_by_status() == {"completed": 29, "failed": 1}, done.stderr[-2000:]


@pytest.mark.parametrize("scopes", [1, 2], ids=["one-statement", "rounds"])
def test_a_connection_lost_before_the_sync_commits_neither_outcome_nor_claim(
    pg_storage_factory: Factory, monkeypatch: pytest.MonkeyPatch, scopes: int
) -> None:
    # the claim's rows already read back (rounds) or queued (one statement), the server
    # drops the connection before the Sync: the outcome and the claim are lost together
    import jobcore_postgres.limits as limits

    storage = pg_storage_factory(pool_min=1, pool_max=1)
    storage.set_limit("type", "noop", 3)
    if scopes == 2:
        storage.set_limit("queue", "default", 3)
    storage.insert([new_job() for _ in range(4)])
    [held] = storage.claim(worker="w", limit=1, lease_ms=60_000)
    claim_limited = limits.claim_limited

    def then_drop(reads: Any, *args: Any) -> list[Any]:
        rows = claim_limited(reads, *args)
        with psycopg.connect(storage.target.conninfo, autocommit=True) as conn:
            conn.execute("SELECT pg_terminate_backend(%s)", (reads.conn.info.backend_pid,))
        return rows

    monkeypatch.setattr(limits, "claim_limited", then_drop)
    with pytest.raises(StorageError):
        storage.commit_batch(
            [Completed(Lease.of(held), None)], worker="w", claim_limit=5, lease_ms=60_000
        )
    monkeypatch.setattr(limits, "claim_limited", claim_limited)
    assert storage.count_by_status() == {"claimed": 1, "pending": 3}
    recorded, claimed = storage.commit_batch(
        [Completed(Lease.of(held), None)], worker="w", claim_limit=5, lease_ms=60_000
    )
    assert [r.state for r in recorded] == ["recorded"] and len(claimed) == 3
