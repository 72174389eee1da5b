"""Recurring jobs in `jobcore stats` (hook `jobcore_stats`): each schedule's next and last
run and its health, read from the store (SQLite file and PostgreSQL) on a test clock."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import apsw
import psycopg
import pytest
from jobcore_cron import schedule_gauges, schedules_of
from jobcore_cron.health import section
from jobcore_cron.scheduler import Scheduler

from jobcore import JobType, Payload, PermanentError, Queue
from jobcore.cli.admin import stats_json, stats_text
from jobcore.testing import drain

SCHEDULES = {
    "steady": {"type": "noop", "every": "1m", "grace": "10s"},
    "fragile": {"type": "boom", "every": "1m", "grace": "10s", "policy": "latest"},
}


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(f"2026-01-01T{text}+00:00").timestamp() * 1000)


def _boom(payload: Any) -> None:
    raise PermanentError("the report source is gone")


def _health(queue: Queue) -> dict[str, tuple[str, float, str | None]]:
    rows = stats_json(queue.stats())["schedules"]
    return {row["name"]: (row["health"], row["lag_seconds"], row["due_at"]) for row in rows}


def test_stats_show_each_schedule_its_runs_and_its_health(
    clocked_queue: Callable[..., Queue], clock: Any
) -> None:
    queue = clocked_queue(clock, plugin_settings={"cron": {"schedules": SCHEDULES}})
    queue.registry.register(
        JobType(name="boom", payload_model=Payload, handler=_boom), plugin="test"
    )
    # no scheduler has run yet: nothing is recorded, so none is late
    assert _health(queue) == {
        "steady": ("not_started", 0, None),
        "fragile": ("not_started", 0, None),
    }
    scheduler = Scheduler(queue, schedules_of(queue.config))
    scheduler.tick()  # 00:00:30: both recorded, first runs at 00:01:00
    assert _health(queue) == {"steady": ("ok", 0, None), "fragile": ("ok", 0, None)}
    clock.now = _ms("00:01:01")
    scheduler.tick()
    drain(queue)  # the noop completes, the boom fails for good
    [steady, fragile] = stats_json(queue.stats())["schedules"]
    assert (steady["name"], steady["health"], steady["runs"]) == ("steady", "ok", 1)
    assert steady["last_run_at"] == "2026-01-01T00:01:00.000Z"
    assert steady["next_run_at"] == "2026-01-01T00:02:00.000Z"
    assert steady["policy"] == "skip" and steady["type"] == "noop"
    assert fragile["health"] == "failed" and fragile["last_job"]["status"] == "failed"
    # 00:02:05: due 5s ago, within its grace of 10s (a scheduler may be about to run it)
    clock.now = _ms("00:02:05")
    assert _health(queue)["steady"] == ("ok", 5.0, "2026-01-01T00:02:00.000Z")
    # 00:02:11: no scheduler ran since; the 00:02:00 runs are missed, both show it
    clock.now = _ms("00:02:11")
    assert _health(queue) == {
        "steady": ("overdue", 11.0, "2026-01-01T00:02:00.000Z"),
        "fragile": ("overdue", 11.0, "2026-01-01T00:02:00.000Z"),
    }
    text = stats_text(queue.stats())
    assert "Recurring jobs" in text
    [line] = [line for line in text.splitlines() if line.startswith("steady ")]
    assert line.split()[1:3] == ["noop", "skip"]
    assert line.endswith("OVERDUE since 2026-01-01T00:02:00.000Z")
    assert {row["name"]: row for row in schedule_gauges(queue)} == {
        "steady": {"name": "steady", "overdue": True, "lag_seconds": 11.0, "runs": 1},
        "fragile": {"name": "fragile", "overdue": True, "lag_seconds": 11.0, "runs": 1},
    }
    scheduler.tick()  # a scheduler is back: the missed times are dealt with by the policy
    health = _health(queue)
    assert health["steady"] == ("ok", 0, None)  # skip: the missed 00:02:00 is dropped
    assert health["fragile"][:2] == ("ok", 0)  # latest: one catch-up run, not yet run


def test_stats_without_schedules_say_none(clocked_queue: Callable[..., Queue], clock: Any) -> None:
    queue = clocked_queue(clock)
    stats = queue.stats()
    assert stats_json(stats)["schedules"] == []
    assert "Recurring jobs" in stats_text(stats) and schedule_gauges(queue) == []


class Statements:
    """Counts the SQL statements this process runs in `count(call)`: every psycopg cursor's
    (PostgreSQL), or every SQLite connection's opened after this was made."""

    def __init__(self, postgres: bool) -> None:
        self.postgres = postgres
        self.seen: list[str] | None = None
        if postgres:
            self._execute = psycopg.Cursor.execute
            outer = self

            def traced(cursor: Any, query: Any, *args: Any, **kwargs: Any) -> Any:
                if outer.seen is not None:
                    outer.seen.append(str(query))
                return outer._execute(cursor, query, *args, **kwargs)

            psycopg.Cursor.execute = traced  # type: ignore[method-assign]
        else:
            apsw.connection_hooks.append(self._hook)

    def _hook(self, conn: apsw.Connection) -> None:
        conn.exec_trace = self._trace

    def _trace(self, cursor: Any, sql: str, bindings: Any) -> bool:
        if self.seen is not None:
            self.seen.append(sql)
        return True

    def count(self, call: Callable[[], Any]) -> int:
        self.seen = []
        try:
            call()
            return len(self.seen)
        finally:
            self.seen = None

    def close(self) -> None:
        if self.postgres:
            psycopg.Cursor.execute = self._execute  # type: ignore[method-assign]
        else:
            apsw.connection_hooks.remove(self._hook)


@pytest.fixture
def statements(store_db: Path | str) -> Iterator[Statements]:
    counter = Statements(isinstance(store_db, str))
    yield counter
    counter.close()


def test_stats_read_every_schedule_in_the_statements_one_needs(
    statements: Statements, clocked_queue: Callable[..., Queue], clock: Any
) -> None:
    """The `schedules` section costs as many statements for twelve schedules as for one:
    the last runs' jobs are read with the runs, not one query per schedule."""
    many = {f"s{n:02d}": {"type": "noop", "every": "1m"} for n in range(12)}
    queue = clocked_queue(clock, plugin_settings={"cron": {"schedules": many}})
    found = schedules_of(queue.config)
    scheduler = Scheduler(queue, found)
    scheduler.tick()
    clock.now = _ms("00:01:01")
    scheduler.tick()  # each schedule has run once: a pending job each
    one = statements.count(lambda: section(queue, found[:1]))
    assert one > 0  # counted at all
    assert statements.count(lambda: section(queue, found)) == one
    listed = section(queue, found).data
    assert [row["last_job"]["status"] for row in listed] == ["pending"] * 12
    gone = listed[0]["last_job"]["id"]
    queue.cancel([gone])
    clock.now = _ms("00:01:30")
    assert queue.prune(older_than=10) == 1  # a run's job deleted: its status says so
    last = [row["last_job"] for row in section(queue, found).data]
    assert last[0] == {"id": gone, "status": "pruned"} and last[1]["status"] == "pending"
