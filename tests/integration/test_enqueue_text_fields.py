"""Text fields of an enqueue hold no NUL and no lone surrogate, whoever enqueues.

Before, `queue="a\\x00b"` (or an idempotency key, a parent id, an unregistered type
holding NUL) was stored on SQLite and a 503 on PostgreSQL ("text fields cannot
contain NUL"): one rule now refuses it in `Queue.build` for every store.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jobcore_test_plugin as tp
import pytest

from jobcore import InvalidPayload, Queue

MakeQueue = Callable[..., Queue]


@pytest.mark.parametrize(
    ("options", "named"),
    [
        ({"queue": "a\x00b"}, "queue"),
        ({"idempotency_key": "k\x00"}, "idempotency_key"),
        ({"parent_id": "\x00"}, "parent_id"),
        ({"queue": "q\ud800"}, "queue"),
        ({"idempotency_key": "\udfff"}, "idempotency_key"),
    ],
)
def test_nul_and_lone_surrogates_in_text_options_are_refused(
    jobcore_make_queue: MakeQueue, options: dict[str, Any], named: str
) -> None:
    queue = jobcore_make_queue(tp)
    with pytest.raises(InvalidPayload, match=named):
        queue.enqueue("noop", {}, **options)
    with pytest.raises(InvalidPayload, match=named):
        queue.enqueue_many("noop", [{}, {}], **options)
    assert queue.list_jobs() == []


def test_an_unregistered_type_with_nul_is_refused(jobcore_make_queue: MakeQueue) -> None:
    queue = jobcore_make_queue(tp, allow_unregistered_types=True)
    with pytest.raises(InvalidPayload, match="type must not contain a NUL"):
        queue.enqueue("remote\x00type", {})
    assert queue.enqueue("remote-type", {"x": "a\x00b"}).job.payload == {"x": "a\x00b"}
