"""Durations, times, ids and the named-query parser."""

from __future__ import annotations

import pytest

from jobcore.ids import new_id
from jobcore.storage.sql import load_queries, parse_queries
from jobcore.timeutil import iso, parse_duration, parse_time


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("30s", 30),
        ("5m", 300),
        ("2h", 7200),
        ("1d", 86400),
        ("1.5", 1.5),
        (" 7 s", 7),
        (3, 3.0),
    ],
)
def test_parse_duration(text: str, seconds: float) -> None:
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "5x", "-1s", "s", "1e3", "ten"])
def test_bad_durations_say_what_is_accepted(text: str) -> None:
    with pytest.raises(ValueError, match="500ms, 30s, 5m, 2h, 1d"):
        parse_duration(text)


def test_times_are_utc_unless_an_offset_is_given() -> None:
    assert parse_time("2026-01-01T00:00:00") == 1767225600000
    assert parse_time("2026-01-01T02:00:00+02:00") == 1767225600000
    assert parse_time("2026-01-01T00:00:00Z") == 1767225600000
    assert iso(1767225600123) == "2026-01-01T00:00:00.123Z"
    with pytest.raises(ValueError, match="ISO-8601"):
        parse_time("tomorrow")


def test_ids_are_uuid7_and_sort_by_creation() -> None:
    ids = [new_id() for _ in range(5000)]
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    assert all(i[14] == "7" and i[19] in "89ab" for i in ids)


def test_query_parser() -> None:
    text = "-- header comment\n-- name: one\nSELECT 1;\n\n-- name: two\nSELECT\n  2\n"
    assert parse_queries(text) == {"one": "SELECT 1", "two": "SELECT\n  2"}
    with pytest.raises(ValueError, match="twice"):
        parse_queries("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;")
    with pytest.raises(ValueError, match="empty"):
        parse_queries("-- name: a\n\n-- name: b\nSELECT 1")
    queries = load_queries("jobcore.storage", "queries.sql")
    assert {"insert_job", "get_job", "events_after", "prune_events"} <= set(queries)
