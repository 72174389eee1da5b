"""Review: `Queue.build` refuses payloads it could not serve back as JSON (InvalidPayload, not
ValueError/a hub 500), e.g. nested 300 deep or holding a lone surrogate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from jobcore import Queue
from jobcore.errors import InvalidPayload


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    q = Queue(str(tmp_path / "jobs.db"))
    q.config.core.allow_unregistered_types = True
    return q


def test_deeply_nested_payload_is_invalid(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match="depth"):
        queue.build("anything", {"x": json.loads("[" * 300 + "]" * 300)})


def test_lone_surrogate_is_invalid_but_pairs_are_fine(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match="surrogate"):
        queue.build("anything", {"name": "report-\udcff.txt"})  # os.fsdecode of a bad name
    assert queue.build("anything", {"x": "\U0001f600"}).payload == {"x": "\U0001f600"}
