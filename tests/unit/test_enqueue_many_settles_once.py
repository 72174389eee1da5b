"""`Queue.enqueue_many` checks and resolves its options once per call, not once per payload,
and still names the item when they are refused; `enqueue` and `enqueue_many` resolve the
same options once per type and values."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from jobcore import Queue
from jobcore.errors import InvalidPayload


@pytest.fixture
def queue(tmp_path: Path) -> Queue:
    return Queue(str(tmp_path / "jobs.db"))


@pytest.fixture
def looked_up(queue: Queue, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The type names whose settings `queue` looks up from here on."""
    names: list[str] = []
    type_settings = queue.config.type_settings

    def counting(name: str) -> Any:
        names.append(name)
        return type_settings(name)

    monkeypatch.setattr(queue.config, "type_settings", counting)
    return names


def test_options_are_resolved_once_per_call(queue: Queue, looked_up: list[str]) -> None:
    inserted = queue.enqueue_many("noop", [{}] * 5, priority=3, queue="mail", meta={"a": 1})
    assert looked_up == ["noop"]
    jobs = [item.job for item in inserted]
    assert {(job.priority, job.queue) for job in jobs} == {(3, "mail")}
    assert len({job.id for job in jobs}) == 5
    jobs[0].meta["changed"] = True  # every job holds its own copy of meta
    assert [queue.get(job.id).meta for job in jobs] == [{"a": 1}] * 5


def test_refused_options_name_the_first_item(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"^item 1: priority must be an integer"):
        queue.enqueue_many("noop", [{}, {}], priority="high")
    assert queue.enqueue_many("noop", [], priority="high") == []  # nothing to enqueue: no check
    with pytest.raises(TypeError):
        queue.enqueue_many("noop", [{}], colour="red")


def test_a_bad_payload_is_named_before_the_options(queue: Queue) -> None:
    with pytest.raises(InvalidPayload, match=r"^item 2: invalid payload for 'noop'"):
        queue.enqueue_many("noop", [{}, {"sleep": "long"}], priority=1)
    assert queue.list_jobs() == []


def test_same_options_are_resolved_once_per_type_and_values(
    queue: Queue, looked_up: list[str]
) -> None:
    for _ in range(3):
        queue.enqueue("noop", {}, priority=1)
        queue.enqueue_many("noop", [{}, {}], priority=1)
    assert looked_up == ["noop"]
    queue.enqueue("noop", {}, priority=2)
    assert looked_up == ["noop", "noop"]
    assert {job.priority for job in queue.list_jobs()} == {1, 2}
    queue.config.core.max_attempts = 7  # a default it read changed: resolved again
    assert queue.enqueue("noop", {}, priority=2).job.max_attempts == 7
    assert looked_up == ["noop", "noop", "noop"]


def test_no_options_share_one_resolution_apart_from_given_ones(
    queue: Queue, looked_up: list[str]
) -> None:
    """A call with no option (`None` for each, as `build` passes them) has a short key of its
    own: it is resolved once, is not confused with an option given later, and still follows
    the defaults it read."""
    queue.enqueue("noop", {})
    queue.enqueue("noop", {}, priority=None, queue=None)
    queue.enqueue_many("noop", [{}, {}])
    assert looked_up == ["noop"]
    assert queue.enqueue("noop", {}, priority=0).job.priority == 0
    assert queue.enqueue("noop", {}, queue="mail").job.queue == "mail"
    assert looked_up == ["noop", "noop", "noop"]
    assert queue.enqueue("noop", {}).job.queue == "default"
    assert looked_up == ["noop", "noop", "noop"]
    queue.config.core.max_attempts = 7
    assert queue.enqueue("noop", {}).job.max_attempts == 7
    assert looked_up == ["noop", "noop", "noop", "noop"]
