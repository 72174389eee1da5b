"""Lifecycle log lines: their text and JSON shapes, order, and batched writes."""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from testenv import subprocess_env

from jobcore import Config, Queue
from jobcore.builtin import event_log
from jobcore.logs import BatchedStreamHandler, JsonFormatter, TextFormatter, configure_logging
from jobcore.models import Job


@pytest.fixture(scope="module")
def job(tmp_path_factory: pytest.TempPathFactory) -> Job:
    with Queue(str(tmp_path_factory.mktemp("logs") / "jobs.db"), config=Config(env={})) as queue:
        enqueued = queue.enqueue("noop", {}, queue="mail").job
    return dataclasses.replace(enqueued, attempts=2, locked_by="host:1:abc")


class CountingStream(io.StringIO):
    def __init__(self) -> None:
        super().__init__()
        self.writes = 0

    def write(self, text: str) -> int:
        self.writes += 1
        return super().write(text)


@pytest.fixture
def stream() -> Iterator[CountingStream]:
    out = CountingStream()
    root = logging.getLogger("jobcore")
    handler = BatchedStreamHandler(out)
    handler.setFormatter(TextFormatter())
    saved = root.handlers[:], root.level
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    yield out
    handler.close()
    root.handlers[:], root.level = saved[0], saved[1]


def handler() -> BatchedStreamHandler:
    found = logging.getLogger("jobcore").handlers[0]
    assert isinstance(found, BatchedStreamHandler)
    return found


def test_event_text_line(stream: CountingStream, job: Job, monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[logging.LogRecord] = []

    def counting(*args: Any, **kwargs: Any) -> logging.LogRecord:
        made.append(logging.LogRecord(*args, **kwargs))
        return made[-1]

    jobcore_logger = logging.getLogger("jobcore")
    jobcore_logger.propagate = False  # as in the CLI: no other handler listens (pytest's neither)
    logging.setLogRecordFactory(counting)
    try:
        event_log.jobcore_job_completed(job=job, duration_ms=1.23456)
        event_log.jobcore_job_retrying(job=job, error="ValueError: no")
    finally:
        logging.setLogRecordFactory(logging.LogRecord)
        jobcore_logger.propagate = True
    assert made == []  # the direct path: no LogRecord made
    handler().flush()
    lines = stream.getvalue().splitlines()
    assert lines[0].endswith(
        f" INFO    jobcore.events: completed noop {job.id} attempt=2 duration_ms=1.235"
    )
    assert lines[1].endswith(f"retrying noop {job.id} attempt=2 error=ValueError: no")
    assert lines[0][:4].isdigit() and lines[0][19] == ","


def test_event_json_fields_without_building_text(job: Job) -> None:
    captured: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            captured.append(record)

    keep = Keep()
    logging.getLogger("jobcore.events").addHandler(keep)
    try:
        event_log.jobcore_job_claimed(job=job, worker="w-1")
    finally:
        logging.getLogger("jobcore.events").removeHandler(keep)
    [record] = captured
    data = json.loads(JsonFormatter().format(record))
    assert data == {
        "ts": data["ts"],
        "event": "claimed",
        "job_id": job.id,
        "type": "noop",
        "queue": "mail",
        "attempt": 2,
        "worker": "w-1",
    }
    assert data["ts"].endswith("Z") and len(data["ts"]) == len("2026-01-31T12:00:00.123Z")
    fresh = event_log._record(dict(data, ts=None))
    JsonFormatter().format(fresh)
    assert isinstance(fresh.msg, event_log.EventMessage) and fresh.msg._text is None  # lazy
    assert record.getMessage() == f"claimed noop {job.id} attempt=2"
    assert record.name == "jobcore.events" and record.levelname == "INFO"


def test_other_records_write_after_the_events_queued_before_them(
    stream: CountingStream, job: Job
) -> None:
    event_log.jobcore_job_claimed(job=job, worker="w")
    event_log.jobcore_job_completed(job=job, duration_ms=1.0)
    logging.getLogger("jobcore.worker").info("worker stopped")
    text = stream.getvalue()  # no flush: the plain record wrote everything before it
    assert [line.split(": ", 1)[1].split()[0] for line in text.splitlines()] == [
        "claimed",
        "completed",
        "worker",
    ]


def test_events_queued_during_a_write_go_out_in_one_write(stream: CountingStream, job: Job) -> None:
    batched = handler()
    with batched._write_lock:  # the writer is busy writing
        emitter = threading.Thread(
            target=lambda: [event_log.jobcore_job_claimed(job=job, worker="w") for _ in range(100)]
        )
        emitter.start()
        emitter.join()
        assert stream.writes == 0
    batched.flush()
    assert stream.getvalue().count("claimed noop") == 100
    assert stream.writes <= 2  # the writer thread's batch, or this flush's


def test_configure_logging_replaces_and_closes_its_handler(
    capsys: pytest.CaptureFixture[str], job: Job
) -> None:
    root = logging.getLogger("jobcore")
    saved = root.handlers[:], root.level
    try:
        configure_logging("json")
        first = root.handlers[-1]
        configure_logging("text")
        assert first not in root.handlers and first._closed  # type: ignore[attr-defined]
        event_log.jobcore_job_cancelled(job=job)
        root.handlers[-1].flush()
        assert f"cancelled noop {job.id}" in capsys.readouterr().err
    finally:
        for added in root.handlers[len(saved[0]) :]:
            added.close()
        root.handlers[:], root.level = saved[0], saved[1]


def test_direct_event_lines_match_formatted_records(job: Job) -> None:
    fields = {
        "event": "failed",
        "job_id": job.id,
        "type": "noop",
        "queue": "mail",
        "attempt": 2,
        "worker": "w",
        "error": "ValueError: no",
    }
    record = event_log._record(fields)
    for formatter in (TextFormatter(), JsonFormatter()):
        assert formatter.format_event(record.created, fields) == formatter.format(record)


def test_the_cli_logs_events_without_records(tmp_path: Path) -> None:
    """Only jobcore's stderr handler listens in `jobcore run`: events take the direct path."""
    env = subprocess_env(JOBCORE_DB=str(tmp_path / "jobs.db"))

    def jobcore(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "jobcore", *args],
            env=env,
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )

    ids = [jobcore("enqueue", "noop").stdout.strip() for _ in range(3)]
    text = jobcore("run", "--until-empty").stderr.splitlines()
    for job_id in ids:
        assert sum(f"jobcore.events: claimed noop {job_id} attempt=1" in line for line in text) == 1
        assert sum(f"completed noop {job_id} attempt=1 duration_ms=" in line for line in text) == 1
    assert "stopped" in text[-1]  # the worker's own last line comes after every event line
    failing = jobcore("enqueue", "fail", '{"how": "permanent", "message": "no"}').stdout.strip()
    lines = jobcore("--log-format", "json", "run", "--until-empty").stderr.splitlines()
    events = [json.loads(line) for line in lines if '"event"' in line]
    assert [(e["event"], e["job_id"]) for e in events] == [
        ("claimed", failing),
        ("failed", failing),
    ]
    assert events[1]["error"] == "PermanentError: no" and events[1]["ts"].endswith("Z")
