"""`jobcore pause`, `resume`, `queues` and `stats` (DESIGN §8, §16) on both stores."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from hubproc import jobcore

run = partial(jobcore, check=False)  # exits and output are what these tests check


def test_pause_resume_queues_and_stats(store_db: Path | str) -> None:
    assert run(store_db, "enqueue", "noop", "{}", "--queue", "mail").returncode == 0
    done = run(store_db, "pause", "mail", "--reason", "SMTP down")
    assert (done.returncode, done.stdout) == (0, "paused queue mail\n")
    again = run(store_db, "pause", "mail", "--reason", "other")
    assert again.returncode == 0 and again.stdout.startswith("queue mail was already paused")
    assert run(store_db, "pause", "--type", "shell", "--json").returncode == 0
    listed = json.loads(run(store_db, "queues", "--json").stdout)
    (mail,) = listed["queues"]
    assert (mail["queue"], mail["pending"], mail["paused"], mail["reason"]) == (
        "mail",
        1,
        True,
        "SMTP down",
    )
    assert [p["name"] for p in listed["paused_types"]] == ["shell"]
    text = run(store_db, "queues").stdout
    assert "PAUSED" in text and "SMTP down" in text and "type shell PAUSED" in text
    stats = run(store_db, "stats").stdout
    assert stats.startswith("PAUSED queue mail since ") and "SMTP down" in stats
    assert "PAUSED type shell" in stats
    paused = json.loads(run(store_db, "stats", "--json").stdout)["paused"]
    assert [(p["kind"], p["name"]) for p in paused] == [("queue", "mail"), ("type", "shell")]
    # a worker leaves the paused queue's job pending and exits when nothing else is runnable
    assert run(store_db, "run", "--until-empty").returncode == 0
    assert json.loads(run(store_db, "list", "--json").stdout)[0]["status"] == "pending"
    assert run(store_db, "resume", "mail").stdout == "resumed queue mail\n"
    assert run(store_db, "resume", "mail").stdout == "queue mail was not paused\n"
    assert run(store_db, "run", "--until-empty").returncode == 0
    assert json.loads(run(store_db, "list", "--json").stdout)[0]["status"] == "completed"


def test_bad_pause_requests_change_nothing(store_db: Path | str) -> None:
    assert run(store_db, "enqueue", "noop", "{}").returncode == 0
    for args in (("pause",), ("pause", "mail", "--type", "noop"), ("resume",)):
        done = run(store_db, *args)
        assert done.returncode == 2 and "exactly one" in done.stderr, done.stderr
    for args, problem in (
        (("pause", ""), "its name is empty"),
        (("pause", "a\tb"), "control characters"),
        (("pause", "mail", "--reason", "a\x01b"), "reason has control characters"),
    ):
        done = run(store_db, *args)
        assert done.returncode == 1, done.stderr
        assert done.stderr.startswith("Error: ") and problem in done.stderr
    assert json.loads(run(store_db, "stats", "--json").stdout)["paused"] == []
