"""Exception texts PostgreSQL text cannot hold as they are (a NUL; a lone surrogate, as in
an error message naming a file whose name is not UTF-8) are stored shown escaped, so the
attempt is recorded as it ended: a retry stays a retry (DESIGN §6)."""

from __future__ import annotations

import os
import threading
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import JobContext, JobType, Payload, Queue, Worker, hookimpl
from jobcore.models import Failed, JobStatus, Lease, Retrying
from jobcore.testing import make_queue

UNDECODABLE = os.fsdecode(b"/tmp/report-\xff.csv")  # '/tmp/report-\udcff.csv'


@pytest.mark.parametrize("text", [f"no such file: {UNDECODABLE}", "bad\x00err \udcff"])
def test_a_retry_with_unstorable_text_is_recorded_as_a_retry(queue: Queue, text: str) -> None:
    storage: Any = queue.storage
    queue.enqueue("noop", {})
    _, [job] = storage.commit_batch([], worker="w", claim_limit=1, lease_ms=60_000)
    [answer] = storage.record([Retrying(Lease.of(job), text, delay_ms=60_000)])
    assert answer.state == "recorded"
    stored = queue.get(job.id)
    assert stored.status is JobStatus.SCHEDULED and stored.attempts == 1
    shown = text.replace("\x00", "\\x00").replace("\udcff", "\\udcff")
    assert stored.last_error == shown
    assert stored.errors[-1]["error"] == shown
    assert stored.history[-1]["error"] == shown and stored.history[-1]["outcome"] == "retrying"
    assert answer.job is not None and answer.job.last_error == shown


def test_a_failure_with_unstorable_text_in_a_batch_leaves_the_others_alone(queue: Queue) -> None:
    storage: Any = queue.storage
    queue.enqueue_many("noop", [{}, {}])
    _, [one, two] = storage.commit_batch([], worker="w", claim_limit=2, lease_ms=60_000)
    recorded, _ = storage.commit_batch(
        [Failed(Lease.of(one), f"gone: {UNDECODABLE}"), Retrying(Lease.of(two), "x", 60_000)],
        worker="w",
        claim_limit=0,
        lease_ms=60_000,
    )
    assert [r.state for r in recorded] == ["recorded", "recorded"]
    assert queue.get(one.id).last_error == "gone: /tmp/report-\\udcff.csv"
    assert queue.get(two.id).status is JobStatus.SCHEDULED


class Opens(Payload):
    pass


def _opens(payload: Opens, ctx: JobContext) -> None:
    raise RuntimeError(f"cannot parse {UNDECODABLE}")  # a name from os.listdir, say


class _Plugin:
    @hookimpl
    def jobcore_register_job_types(self, register: Any) -> None:
        register(
            JobType(
                name="opens",
                payload_model=Opens,
                handler=_opens,
                max_attempts=2,
                backoff_base=0.001,
                backoff_cap=0.001,
            )
        )


def test_a_worker_retries_a_job_whose_error_names_an_undecodable_file(pg_url: str) -> None:
    """The reviewer's case: the group commit failed with UnicodeEncodeError and the job
    ended failed at attempts=1 (never retried); it must spend both attempts."""
    import jobcore_postgres

    queue = make_queue(pg_url, jobcore_postgres, tp, _Plugin())
    try:
        queue.storage.migrate()
        job = queue.enqueue("opens", {}).job
        others = queue.enqueue_many("noop", [{}] * 5)
        worker = Worker(queue, concurrency=2, until_empty=True, lease=5)
        thread = threading.Thread(target=worker.run, daemon=True)
        thread.start()
        thread.join(30)
        assert not thread.is_alive()
        ended = queue.get(job.id)
        assert ended.status is JobStatus.FAILED and ended.attempts == 2
        assert len(ended.errors) == 2
        assert all("report-\\udcff.csv" in entry["error"] for entry in ended.errors)
        assert [entry["outcome"] for entry in ended.history] == ["retrying", "failed"]
        assert {queue.get(r.job.id).status for r in others} == {JobStatus.COMPLETED}
    finally:
        queue.close()
