"""The dashboard's reads on a real SQLite file: pages, windows, search, counts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobcore_http.dashboard.filters import BadFilter, JobFilter
from jobcore_http.dashboard.reader import Reader
from starlette.datastructures import QueryParams

from jobcore import Queue


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    with Queue(str(tmp_path / "jobs.db")) as opened:
        yield opened


def test_pages_walk_every_job_once_newest_first(queue: Queue) -> None:
    ids = [item.job.id for item in queue.enqueue_many("noop", [{} for _ in range(23)])]
    reader = Reader(queue)
    seen: list[str] = []
    cursor = None
    while True:
        page = reader.page(JobFilter(), cursor=cursor, limit=5)
        seen.extend(job.id for job in page.jobs)
        if page.next_cursor is None:
            break
        cursor = page.next_cursor
    assert seen == sorted(ids, reverse=True)


def test_a_sparse_filter_stops_after_its_window_and_says_where(queue: Queue) -> None:
    needle = queue.enqueue("shell", {"command": "echo needle"}).job.id
    queue.enqueue_many("noop", [{} for _ in range(30)])
    reader = Reader(queue, budget=0, chunk=10)  # one chunk per page
    page = reader.page(JobFilter(q="needle"), limit=5)
    assert page.jobs == [] and page.next_cursor is None
    assert page.window_end is not None  # checked 10 rows, more below
    while page.window_end is not None and not page.jobs:
        page = reader.page(JobFilter(q="needle"), cursor=page.window_end, limit=5)
    assert [job.id for job in page.jobs] == [needle]


def test_search_matches_payloads_errors_and_ids_literally(queue: Queue) -> None:
    percent = queue.enqueue("shell", {"command": "echo 100%"}).job
    queue.enqueue("shell", {"command": "echo 1000"})
    reader = Reader(queue)
    assert [j.id for j in reader.page(JobFilter(q="100%")).jobs] == [percent.id]
    assert [j.id for j in reader.page(JobFilter(q=percent.id)).jobs] == [percent.id]
    assert reader.count(JobFilter(q="1_00")) == 0  # `_` is not a wildcard


def test_one_status_walks_the_status_index(queue: Queue) -> None:
    reader = Reader(queue)
    params: dict[str, object] = {}
    base, done = reader._base(JobFilter(statuses=("failed",)), params, None)
    plan = " ".join(str(row[-1]) for row in reader.rows(f"EXPLAIN QUERY PLAN {base}", params))
    assert done and "jobs_status" in plan and "TEMP B-TREE" not in plan


def test_count_and_ids_cover_every_match(queue: Queue) -> None:
    queue.enqueue_many("noop", [{} for _ in range(7)], queue="mail")
    queue.enqueue_many("noop", [{} for _ in range(3)])
    reader = Reader(queue)
    mail = JobFilter(statuses=("pending",), queue="mail")
    assert reader.count(mail) == 7
    assert sum(len(batch) for batch in reader.ids(mail, batch=2)) == 7


def test_filters_refuse_unknown_statuses_and_round_trip_through_the_url() -> None:
    with pytest.raises(BadFilter, match="unknown status 'done'"):
        JobFilter.from_params(QueryParams("status=done"))
    flt = JobFilter.from_params(QueryParams("status=failed&status=cancelled&type=shell&q=a+b"))
    assert JobFilter.from_params(QueryParams(flt.query())) == flt
    assert flt.narrowed(("failed",)).statuses == ("failed",)
    assert JobFilter(type="x").narrowed(("failed", "cancelled")).statuses == ("failed", "cancelled")
