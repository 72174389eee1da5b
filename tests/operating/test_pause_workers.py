"""Pause under load with real worker processes on SQLite and PostgreSQL (DESIGN §16):
no claim made after the pause commits takes the paused queue's jobs; the other queue
goes on; resume wakes the idle workers and the held jobs run."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from hubproc import jobcore
from testenv import subprocess_env, wait_for

from jobcore.queue import Queue
from jobcore.timeutil import parse_time

JOBCORE = [sys.executable, "-m", "jobcore"]


def _cli(db: Path | str, *args: str) -> str:
    return jobcore(db, *args).stdout


def _lines(path: Path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


def _enqueue(db: Path | str, tmp: Path, queue: str, count: int, sleep: float) -> Path:
    log = tmp / f"{queue}.log"
    payloads = tmp / f"{queue}.jsonl"
    payloads.write_text(
        "".join(json.dumps({"log": str(log), "sleep": sleep}) + "\n" for _ in range(count))
    )
    _cli(db, "enqueue", "record", "--from", str(payloads), "--queue", queue)
    return log


def test_nothing_is_claimed_from_a_paused_queue_under_load(
    store_db: Path | str, tmp_path: Path, queue_on: Callable[..., Queue]
) -> None:
    queue = queue_on()
    hot = _enqueue(store_db, tmp_path, "hot", 600, 0.04)  # lasts past the pause command
    cold = _enqueue(store_db, tmp_path, "cold", 500, 0.025)
    logs = [(tmp_path / f"worker{n}.log").open("w") for n in range(2)]
    workers = [
        subprocess.Popen(
            [*JOBCORE, "--db", str(store_db), "run", "--concurrency", "2", "--lease", "20s"],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=subprocess_env(JOBCORE_PREFETCH="4"),  # PostgreSQL's default takes 100 at once
        )
        for log in logs
    ]
    try:
        wait_for(lambda: _lines(hot) >= 20, timeout=30)
        paused = json.loads(_cli(store_db, "pause", "hot", "--reason", "test", "--json"))
        since = parse_time(paused["since"])
        time.sleep(0.5)  # claims that began before the pause committed have ended by now
        taken = {j.id for j in queue.list_jobs(queues=["hot"], limit=1000) if j.status != "pending"}
        cold_then = _lines(cold)
        wait_for(lambda: _lines(cold) >= cold_then + 60, timeout=30)  # workers go on claiming
        time.sleep(0.5)
        jobs = queue.list_jobs(queues=["hot"], limit=1000)
        # nothing claimed since (a prefetched job that never started may have been given
        # back: pending again, and not claimed again)
        assert {j.id for j in jobs if j.status != "pending"} <= taken
        assert max(j.claimed_at or 0 for j in jobs) <= since + 500
        held = [j for j in jobs if j.status == "pending"]
        assert len(held) > 100, "the pause came too late to hold anything back"
        assert all(j.attempts == 0 for j in held)
        assert _cli(store_db, "resume", "hot").startswith("resumed queue hot")
        # idle workers are woken by the resume (not by a poll of their own after a while)
        wait_for(lambda: _lines(hot) >= 600, timeout=90)
    finally:
        for proc in workers:
            proc.send_signal(signal.SIGTERM)
        codes = [proc.wait(60) for proc in workers]
        for log in logs:
            log.close()
    assert codes == [0, 0], [(tmp_path / f"worker{n}.log").read_text()[-2000:] for n in range(2)]
    assert _lines(hot) == 600  # each ran once
