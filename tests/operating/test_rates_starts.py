"""What a rate limit's starts are, on SQLite and PostgreSQL (DESIGN §16): a rate that goes
(undeclared by a worker, cleared by `jobcore limit --clear`) takes its starts with it; a
push (`RetryAfter(..., limit=True)`) is shown as the limit held until a time, never as
starts, in `jobcore limits`, `stats` and their JSON, while claims still count it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hubproc import jobcore

from jobcore import operating
from jobcore.models import Job
from jobcore.queue import Queue
from jobcore.timeutil import parse_time

PLUGIN = "jobcore_rates_plugin"  # the `queue` fixture's job types (tests/operating/conftest.py)
DECLARED = ["rated", "rated_key", "pushy", "unrated"]


def _claim(queue: Queue, limit: int = 500, **filters: Any) -> list[Job]:
    return queue.storage.claim(worker="w", limit=limit, lease_ms=60_000, **filters)


def _start_rows(queue: Queue, store_db: Path | str) -> list[tuple[str, str]]:
    """(scope, name) of every row of `rate_starts`, read from the store's table."""
    table = f"{queue.storage.schema}.rate_starts" if isinstance(store_db, str) else "rate_starts"
    with queue.transaction() as conn:
        rows = conn.execute(f"SELECT scope, name FROM {table}").fetchall()
    return sorted({(str(scope), str(name)) for scope, name in rows})


def _limits(store_db: Path | str) -> dict[tuple[str, str], dict[str, Any]]:
    rows = json.loads(jobcore(store_db, "limits", "--json").stdout)["limits"]
    return {(row["scope"], row["name"]): row for row in rows}


def test_a_rate_that_goes_takes_its_starts_with_it(queue: Queue, store_db: Path | str) -> None:
    queue.enqueue_many("rated", [{}] * 3)
    queue.enqueue("rated_key", {"customer": "a"})
    assert len(_claim(queue)) == 4
    assert _start_rows(queue, store_db) == [("key", "rated_key"), ("type", "rated")]
    # a worker starts whose `rated` declares no rate any more: its declared rate goes, and
    # with it the starts a later rate of the same name would otherwise count
    assert operating.declare_rates(queue, [], ["rated"])
    assert _start_rows(queue, store_db) == [("key", "rated_key")]
    # another process clears the key rate
    jobcore(store_db, "limit", "--type", "rated_key", "--per-key", "--clear")
    assert _start_rows(queue, store_db) == []
    operating.set_rate(queue, "type", "rated", 3, 60)  # a new rate starts from nothing
    queue.enqueue_many("rated", [{}] * 4)
    assert len(_claim(queue, types=["rated"])) == 3


def test_a_push_is_shown_as_held_until_never_as_starts(queue: Queue, store_db: Path | str) -> None:
    operating.set_rate(queue, "type", "pushy", 5, 60)  # windows longer than this test
    operating.set_rate(queue, "key", "rated_key", 2, 60)
    operating.set_limit(queue, "type", "unrated", 4)
    queue.enqueue_many("pushy", [{}] * 2)
    first, _ = _claim(queue, types=["pushy"])
    before = queue.storage.now()
    assert queue.storage.push_rate(first.id, 30)
    after = queue.storage.now()
    rows = _limits(store_db)
    pushy = rows[("type", "pushy")]
    assert pushy["used"] == 2  # the two real starts; the push is not five more
    held = parse_time(pushy["held_until"])
    assert before + 30_000 <= held <= after + 30_000
    assert rows[("type", "unrated")]["held_until"] is None  # every row has the field
    listed = jobcore(store_db, "limits").stdout
    [line] = [line for line in listed.splitlines() if " pushy " in line]
    assert f"2 started, held until {pushy['held_until']}" in line
    stats = json.loads(jobcore(store_db, "stats", "--json").stdout)
    [stat] = [row for row in stats["limits"] if row["name"] == "pushy"]
    assert (stat["used"], stat["held_until"]) == (2, pushy["held_until"])
    assert pushy["held_until"] in jobcore(store_db, "stats").stdout
    # claims still count the push as the limit full
    queue.enqueue("pushy", {})
    assert _claim(queue, types=["pushy"]) == []
    # a key's push: the keys at their rate are those of real starts only
    queue.enqueue_many("rated_key", [{"customer": "a"}, {"customer": "b"}, {"customer": "b"}])
    assert len(_claim(queue, types=["rated_key"])) == 3
    [a] = [j for j in queue.storage.list_jobs(types=["rated_key"]) if j.payload["customer"] == "a"]
    assert queue.storage.push_rate(a.id, 30)
    keyed = _limits(store_db)[("key", "rated_key")]
    assert keyed["used"] == 1  # b at its 2; a started once, held by the push, not at its rate
    assert keyed["held_until"] is not None
