"""The dashboard's reads on a real SQLite file: pages, windows, search, counts."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from jobcore_http.dashboard.filters import BadFilter, JobFilter
from jobcore_http.dashboard.reader import Reader
from jobcore_http.dashboard.sql import PostgresSql
from jobcore_http.store import hub_store_for
from starlette.datastructures import QueryParams

from jobcore import Queue


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Queue]:
    with Queue(str(tmp_path / "jobs.db")) as opened:
        yield opened


def test_search_matches_payloads_and_errors_literally_as_the_hub_does(queue: Queue) -> None:
    queue.enqueue("shell", {"command": "echo 100%"})
    queue.enqueue("shell", {"command": "echo 1000"})
    reader = Reader(queue, hub_store_for(queue.storage))
    assert reader.count(JobFilter(q="100%")) == 1
    assert reader.count(JobFilter(q="1_00")) == 0  # `_` is not a wildcard
    hub = reader.store
    for q in ("100%", "echo", "1_00"):
        listed = hub.search_jobs(JobFilter(q=q).for_hub(), before=None, limit=100).jobs
        assert len(listed) == reader.count(JobFilter(q=q))


def test_count_covers_every_match(queue: Queue) -> None:
    queue.enqueue_many("noop", [{} for _ in range(7)], queue="mail")
    queue.enqueue_many("noop", [{} for _ in range(3)])
    reader = Reader(queue, hub_store_for(queue.storage))
    mail = JobFilter(statuses=("pending",), queue="mail")
    assert reader.count(mail) == 7


def test_filters_refuse_unknown_statuses_and_round_trip_through_the_url() -> None:
    with pytest.raises(BadFilter, match="unknown status 'done'"):
        JobFilter.from_params(QueryParams("status=done"))
    flt = JobFilter.from_params(QueryParams("status=failed&status=cancelled&type=shell&q=a+b"))
    assert JobFilter.from_params(QueryParams(flt.query())) == flt
    assert flt.narrowed(("failed",)).statuses == ("failed",)
    assert JobFilter(type="x").narrowed(("failed", "cancelled")).statuses == ("failed", "cancelled")


def test_postgres_statements_take_psycopg_parameters() -> None:
    translated = PostgresSql.translate(
        "SELECT count(*) FROM jobs NOT INDEXED WHERE id > :after AND status = :s0 LIMIT :batch"
    )
    assert translated == (
        "SELECT count(*) FROM jobs WHERE id > %(after)s AND status = %(s0)s LIMIT %(batch)s"
    )
