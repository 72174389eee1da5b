"""A PostgreSQL batch sent as `shared` (one meta for every job) only when each job's meta
is the same JSON: 1, 1.0 and True are equal in Python but not as stored meta."""

from __future__ import annotations

import json
from typing import Any

import jobcore_postgres
import pytest
from jobcore_postgres.storage import PostgresStorage
from pg_testing import new_job

from jobcore import Queue
from jobcore.hookspecs import hookimpl
from jobcore.models import NewJob
from jobcore.testing import make_queue


@pytest.mark.parametrize(
    "metas",
    [
        [{"a": 1}, {"a": True}, {"a": 1.0}],
        [{"a": 0}, {"a": False}],
        [{"a": 1, "b": 2}, {"b": 2, "a": 1}],
        [{"a": {"x": [1, 0]}}, {"a": {"x": [True, False]}}],
    ],
)
def test_each_job_keeps_its_own_meta(queue: Queue, metas: list[dict[str, Any]]) -> None:
    jobs = [queue.build("noop", {}, meta=meta) for meta in metas]
    inserted = queue.insert(jobs)
    for job, answer, meta in zip(jobs, inserted, metas, strict=True):
        stored = queue.get(job.id).meta
        # as JSON: == alone holds for 1, 1.0 and True alike
        assert json.dumps(stored) == json.dumps(meta) == json.dumps(answer.job.meta)


def test_meta_hooks_of_one_batch(pg_url: str) -> None:
    class Flags:
        seen = 0

        @hookimpl
        def jobcore_enqueue_meta(self, job: NewJob) -> dict[str, Any]:
            self.seen += 1
            return {"flag": 1 if self.seen % 2 else True}

    queue = make_queue(pg_url, jobcore_postgres, Flags())
    try:
        inserted = queue.enqueue_many("noop", [{}, {}, {}, {}])
        stored = [queue.get(i.job.id).meta["flag"] for i in inserted]
        assert [type(v) for v in stored] == [int, bool, int, bool]
    finally:
        queue.close()


def test_shape_tells_equal_but_different_meta_apart() -> None:
    shape = PostgresStorage._shape
    assert shape([new_job(id="a", meta={"k": 1}), new_job(id="b", meta={"k": 1})]) == "shared"
    assert shape([new_job(id="a", meta={}), new_job(id="b", meta={})]) == "shared"
    assert shape([new_job(id="a", meta={"k": 1}), new_job(id="b", meta={"k": True})]) == "many"
    assert shape([new_job(id="a", meta={"k": 1}), new_job(id="b", meta={"k": 1.0})]) == "many"
