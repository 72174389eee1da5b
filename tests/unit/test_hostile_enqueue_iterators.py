"""`enqueue_many` over an iterator builds each payload as it comes: an iterator that hands
out one object, changed between items (a reused row buffer), enqueues each item's values."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from jobcore import Queue
from jobcore.errors import InvalidPayload
from jobcore.testing import make_queue


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    queue = make_queue(tmp_path / "jobs.db")
    yield queue
    queue.close()


def _reused_buffer(values: list[Any]) -> Iterator[dict[str, Any]]:
    row: dict[str, Any] = {}
    for value in values:
        row["sleep"] = value
        yield row


def test_a_reused_row_buffer_enqueues_each_row(queue: Queue) -> None:
    inserted = queue.enqueue_many("noop", _reused_buffer([0.1, 0.2, 0.3]))
    assert [i.job.payload["sleep"] for i in inserted] == [0.1, 0.2, 0.3]
    assert [queue.get(i.job.id).payload["sleep"] for i in inserted] == [0.1, 0.2, 0.3]


def test_a_reused_row_buffer_is_refused_at_the_bad_row(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"^item 2: .*sleep"):
        queue.enqueue_many("noop", _reused_buffer([0.1, "soon", 0.3]))
    assert queue.stats().counts == {}


def test_an_iterable_that_raises_midway_writes_nothing(queue: Queue) -> None:
    def broken() -> Iterator[dict[str, Any]]:
        yield {}
        raise RuntimeError("the source broke")

    with pytest.raises(RuntimeError, match="the source broke"):
        queue.enqueue_many("noop", broken())
    assert queue.stats().counts == {}


def test_lists_and_tuples_still_take_one_pass(queue: Queue) -> None:
    for payloads in ([{}, {"sleep": 1}], ({}, {"sleep": 1})):
        inserted = queue.enqueue_many("noop", payloads)
        assert [i.job.payload["sleep"] for i in inserted] == [0.0, 1.0]
