"""A `jobcore_retry_decision` plugin cannot retry past `max_attempts` (DESIGN: duplicates
are bounded by max_attempts); its retry on the last attempt becomes a logged failure.
A decision hook that raises, even SystemExit, leaves the job to the default policy."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

import jobcore_test_plugin as tp
import pytest

from jobcore import JobStatus, Queue, RetryDecision, Worker, hookimpl
from jobcore.models import Job
from jobcore.retry import RetryPolicy

MakeQueue = Callable[..., Queue]


class EagerRetries:
    """Retries every failure at once, up to a generous 6 attempts, whatever max_attempts says."""

    @hookimpl(tryfirst=True)
    def jobcore_retry_decision(
        self, job: Job, error: BaseException, policy: RetryPolicy
    ) -> RetryDecision | None:
        return RetryDecision.retry_in(0) if job.attempts < 6 else None


def test_a_plugins_retry_on_the_last_attempt_fails_the_job(
    jobcore_make_queue: MakeQueue, caplog: pytest.LogCaptureFixture
) -> None:
    queue = jobcore_make_queue(tp, EagerRetries())
    job = queue.enqueue("fail", {}, max_attempts=2).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    with caplog.at_level(logging.WARNING, logger="jobcore.queue"):
        thread.start()
        thread.join(20)
    assert not thread.is_alive()
    done = queue.get(job.id)
    assert done.status is JobStatus.FAILED
    assert done.attempts == 2
    assert "asked to retry job" in caplog.text and "(2/2)" in caplog.text


def test_a_plugins_retry_before_the_last_attempt_still_retries(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(tp, EagerRetries())
    job = queue.enqueue("fail", {}, max_attempts=3).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    done = queue.get(job.id)
    assert done.status is JobStatus.FAILED and done.attempts == 3


class RaisingDecision:
    """A retry-decision hook that raises a BaseException, not an Exception."""

    def __init__(self, error: BaseException) -> None:
        self.error = error

    @hookimpl(tryfirst=True)
    def jobcore_retry_decision(
        self, job: Job, error: BaseException, policy: RetryPolicy
    ) -> RetryDecision | None:
        raise self.error


@pytest.mark.parametrize("raised", [SystemExit(1), KeyboardInterrupt()], ids=repr)
def test_a_retry_hook_raising_a_base_exception_falls_back_to_the_default_policy(
    jobcore_make_queue: MakeQueue, raised: BaseException
) -> None:
    # Before, only an Exception fell back: SystemExit from the hook failed a retryable
    # job for good on its first attempt ("jobcore could not judge the attempt").
    queue = jobcore_make_queue(tp, RaisingDecision(raised))
    job = queue.enqueue("fail", {"message": "boom"}, max_attempts=3).job
    worker = Worker(queue, until_empty=True)
    thread = threading.Thread(target=worker.run, daemon=True)
    thread.start()
    thread.join(20)
    assert not thread.is_alive()
    done = queue.get(job.id)
    assert done.status is JobStatus.FAILED and done.attempts == 3
    name = type(raised).__name__
    assert all(f"(retry hook failed: {name}" in e["error"] for e in done.errors), done.errors
