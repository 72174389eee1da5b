"""dlq plugin: the dead-letter commands on a real database, and failure notifications."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import jobcore_test_plugin as tp
import pytest
from click.testing import CliRunner, Result
from jobcore_dlq import DlqPlugin, commands
from jobcore_dlq.signature import signature
from testenv import LocalHTTPServer

from jobcore import JobStatus, Queue
from jobcore.cli import cli
from jobcore.testing import drain
from jobcore.timeutil import now_ms

MakeQueue = Callable[..., Queue]


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (
            "ConnectionError: timeout to db-3.internal:5432 after 30s",
            "ConnectionError: timeout to <host> after <n>s",
        ),
        (
            "ConnectionError: timeout to 10.1.2.3:6379 after 5s",
            "ConnectionError: timeout to <host> after <n>s",
        ),
        (
            "OSError: [Errno 28] No space left on device: '/var/data/run-17/out.csv'",
            "OSError: [Errno <n>] No space left on device: '<path>'",
        ),
        (
            "ValueError: checksum deadbeefcafe0123 for 01a214f5-8d1b-72ff-8049-f4387b19e36c",
            "ValueError: checksum <hex> for <id>",
        ),
        (
            "HTTPError: 503 from https://api.example.com/v1/items?page=3",
            "HTTPError: <n> from <url>",
        ),
        (
            "RuntimeError: noop failed as asked (fail: true)",
            "RuntimeError: noop failed as asked (fail: true)",
        ),
        (None, "(no error message)"),
    ],
)
def test_signature(error: str | None, expected: str) -> None:
    assert signature(error) == expected


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path / "dlq.db"


@pytest.fixture
def jc(db: Path) -> Callable[..., Result]:
    def invoke(*args: str, input: str | None = None) -> Result:
        env = {
            "JOBCORE_DB": str(db),
            "JOBCORE_PLUGINS": "jobcore_test_plugin",
            "JOBCORE_BACKOFF_BASE": "0",
        }
        return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return invoke


@pytest.fixture
def failures(jc: Callable[..., Result]) -> dict[str, list[str]]:
    ids: dict[str, list[str]] = {"conn": [], "disk": [], "ok": []}
    for i in range(5):
        message = f"ConnectionError: timeout to db-{i}.internal:5432 after {10 + i}s"
        ids["conn"].append(
            jc(
                "enqueue", "fail", json.dumps({"how": "permanent", "message": message})
            ).stdout.strip()
        )
    for i in range(2):
        message = f"disk full writing /data/part-{i}.csv"
        ids["disk"].append(
            jc(
                "enqueue", "fail", json.dumps({"message": message}), "--max-attempts", "1"
            ).stdout.strip()
        )
    ids["ok"].append(jc("enqueue", "noop").stdout.strip())
    assert jc("run", "--until-empty").exit_code == 0
    return ids


def test_summary_groups_by_signature(
    jc: Callable[..., Result], failures: dict[str, list[str]]
) -> None:
    groups = json.loads(jc("dlq", "summary", "--json").stdout)
    assert [(g["signature"], g["count"], g["types"]) for g in groups] == [
        ("PermanentError: ConnectionError: timeout to <host> after <n>s", 5, ["fail"]),
        ("ValueError: disk full writing <path>", 2, ["fail"]),
    ]
    assert groups[0]["example_id"] in failures["conn"] and groups[0]["last_failed_at"].endswith("Z")
    text = jc("dlq", "summary").stdout
    assert "5      fail   PermanentError: ConnectionError: timeout to <host> after <n>s" in text


def test_list_show_and_export(jc: Callable[..., Result], failures: dict[str, list[str]]) -> None:
    listed = json.loads(jc("dlq", "list", "--json").stdout)
    assert sorted(j["id"] for j in listed) == sorted(failures["conn"] + failures["disk"])
    assert json.loads(jc("dlq", "list", "--since", "1h", "--type", "noop", "--json").stdout) == []
    assert len(json.loads(jc("dlq", "list", "--since", "1h", "--json").stdout)) == 7
    shown = json.loads(jc("dlq", "show", failures["disk"][0], "--json").stdout)
    assert shown["status"] == "failed" and "disk full" in shown["errors"][0]["error"]
    not_failed = jc("dlq", "show", failures["ok"][0])
    assert not_failed.exit_code == 1 and "not failed" in not_failed.stderr
    lines = jc("dlq", "export").stdout.splitlines()
    assert sorted(json.loads(line)["id"] for line in lines) == sorted(
        failures["conn"] + failures["disk"]
    )


def test_retry_keeps_history(jc: Callable[..., Result], failures: dict[str, list[str]]) -> None:
    one = failures["disk"][0]
    assert jc("dlq", "retry", one).stdout.strip() == f"{one} pending"
    job = json.loads(jc("show", one, "--json").stdout)
    assert job["status"] == "pending" and job["attempts"] == 0 and len(job["errors"]) == 1
    result = jc("dlq", "retry", "--all", "--type", "fail")
    assert len(result.stdout.splitlines()) == 6
    assert jc("dlq", "retry", failures["ok"][0]).exit_code == 1  # completed: not retryable
    assert jc("dlq", "retry").exit_code == 2


def test_purge_needs_yes_off_a_terminal(
    jc: Callable[..., Result], failures: dict[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    refused = jc("dlq", "purge")
    assert (
        refused.exit_code == 1
        and "refusing to delete 7 failed job(s) without --yes" in refused.stderr
    )
    assert len(json.loads(jc("dlq", "list", "--json").stdout)) == 7
    assert jc("dlq", "purge", "--older-than", "7d", "--yes").stdout.strip() == "deleted 0 job(s)"
    monkeypatch.setattr(commands, "interactive", lambda: True)
    declined = jc("dlq", "purge", "--type", "fail", input="n\n")
    assert declined.exit_code == 1 and "Aborted" in declined.stderr
    assert jc("dlq", "purge", input="y\n").stdout.strip().endswith("deleted 7 job(s)")
    assert (
        json.loads(jc("list", "--json").stdout)[0]["id"] == failures["ok"][0]
    )  # completed jobs kept


class Receiver:
    """An HTTP server on 127.0.0.1 collecting the JSON bodies POSTed to it."""

    def __init__(self, status: int = 200) -> None:
        received: list[dict[str, Any]] = []
        self.received = received

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["content-length"]))
                received.append(
                    {"content_type": self.headers["content-type"], "job": json.loads(body)}
                )
                self.send_response(status)
                self.send_header("content-length", "0")
                self.end_headers()

        self.http = LocalHTTPServer(Handler)
        self.url = f"{self.http.url}/hooks/jobcore"

    def close(self) -> None:
        self.http.close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.close()


def test_notifications_on_failure(
    jobcore_make_queue: MakeQueue, receiver: Receiver, tmp_path: Path
) -> None:
    out = tmp_path / "notified.jsonl"
    settings = {"notify_url": receiver.url, "notify_command": f"cat >> {out}; echo >> {out}"}
    queue = jobcore_make_queue(DlqPlugin(), tp, plugin_settings={"dlq": settings})
    failed = queue.enqueue("fail", {"how": "permanent", "message": "nope"}).job
    ok = queue.enqueue("noop", {}).job
    retried = queue.enqueue("fail", {"message": "again"}, max_attempts=2).job
    drain(queue)
    posted = {item["job"]["id"]: item for item in receiver.received}
    assert set(posted) == {failed.id, retried.id}  # only jobs that ended failed, once each
    assert posted[failed.id]["content_type"] == "application/json"
    assert (
        posted[failed.id]["job"]["status"] == "failed"
        and posted[failed.id]["job"]["event"] == "failed"
    )
    assert len(posted[retried.id]["job"]["errors"]) == 2
    lines = [json.loads(line) for line in out.read_text().splitlines() if line.strip()]
    assert sorted(line["id"] for line in lines) == sorted([failed.id, retried.id])
    assert queue.get(ok.id).status is JobStatus.COMPLETED


def test_failing_notifiers_never_block_or_corrupt(
    jobcore_make_queue: MakeQueue, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broken = Receiver(status=500)
    try:
        settings = {"notify_url": broken.url, "notify_command": "echo boom >&2; exit 3"}
        queue = jobcore_make_queue(DlqPlugin(), tp, plugin_settings={"dlq": settings})
        jobs = [queue.enqueue("fail", {"how": "permanent"}).job for _ in range(3)]
        with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
            drain(queue)
        assert all(queue.get(job.id).status is JobStatus.FAILED for job in jobs)
        messages = [r.getMessage() for r in caplog.records]
        assert sum("notify_command exited 3" in m and "boom" in m for m in messages) == 3
        assert sum("notify_url answered 500" in m for m in messages) == 3
    finally:
        broken.close()
    slow = {
        "notify_command": "sleep 30",
        "notify_timeout": "300ms",
        "notify_url": "http://127.0.0.1:9/closed",
    }
    queue = jobcore_make_queue(
        DlqPlugin(), tp, plugin_settings={"dlq": slow}, db=str(tmp_path / "slow.db")
    )
    job = queue.enqueue("fail", {"how": "permanent"}).job
    started = now_ms()
    with caplog.at_level(logging.ERROR, logger="jobcore.dlq"):
        drain(queue)
    assert queue.get(job.id).status is JobStatus.FAILED
    assert now_ms() - started < 10_000
    assert any("timed out" in r.getMessage() for r in caplog.records)
    assert any("notify_url failed" in r.getMessage() for r in caplog.records)
