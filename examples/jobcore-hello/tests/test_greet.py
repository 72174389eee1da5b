"""The plugin's own tests, using jobcore's pytest fixtures (`jobcore_make_queue`)."""

from __future__ import annotations

from pathlib import Path

import jobcore_hello
import pytest

from jobcore import InvalidPayload, JobStatus
from jobcore.testing import drain


def test_greets_once(jobcore_make_queue, tmp_path: Path) -> None:
    queue = jobcore_make_queue(jobcore_hello)
    target = tmp_path / "greetings.txt"
    job = queue.enqueue(
        "greet", {"name": "Ada", "greetings_file": str(target), "language": "fr"}
    ).job
    drain(queue)
    assert queue.get(job.id).status is JobStatus.COMPLETED
    assert target.read_text() == f"Bonjour, Ada! ({job.id})\n"


def test_bad_payload_and_permanent_failure(jobcore_make_queue, tmp_path: Path) -> None:
    queue = jobcore_make_queue(jobcore_hello)
    with pytest.raises(InvalidPayload, match="language"):
        queue.enqueue("greet", {"name": "Ada", "greetings_file": "x", "language": "tlh"})
    job = queue.enqueue("greet", {"name": "nobody", "greetings_file": str(tmp_path / "g")}).job
    drain(queue)
    assert queue.get(job.id).status is JobStatus.FAILED and queue.get(job.id).attempts == 1
