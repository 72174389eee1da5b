"""A handler's None result: stored as is, unless even `null` is over max_result_bytes."""

from __future__ import annotations

from pathlib import Path

from jobcore.attempt import AttemptRunner
from jobcore.testing import make_queue


def test_none_result_is_kept_when_null_fits(tmp_path: Path) -> None:
    queue = make_queue(tmp_path / "q.db")
    job = queue.enqueue("noop", {}).job
    runner = AttemptRunner(queue, max_result_bytes=4, max_retry_delay=60)
    assert runner.bounded_result(job, None) is None
    queue.close()


def test_none_result_over_a_tiny_bound_is_truncated_like_any_other(tmp_path: Path) -> None:
    queue = make_queue(tmp_path / "q.db")
    job = queue.enqueue("noop", {}).job
    runner = AttemptRunner(queue, max_result_bytes=3, max_retry_delay=60)
    assert runner.bounded_result(job, None) == {"truncated": True, "size": 4, "head": "null"}
    assert runner.bounded_result(job, 12) == 12  # two bytes fit
    queue.close()
