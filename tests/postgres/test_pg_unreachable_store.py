"""Issue 17.16: a worker that cannot reach its PostgreSQL store.

Bounded runs (`--until-empty`, `--max-jobs`) and stores that waiting cannot fix fail
with one `Error:` line (no `started`/`stopped` lines first) within a bounded time; a
long-running `run` waits for its store with one warning line (then one a minute);
with `--log-format json` every stderr line is JSON, psycopg's included.
"""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
from pg_testing import SERVER
from testenv import subprocess_env

JOBCORE = [sys.executable, "-m", "jobcore"]


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"postgresql://postgres@127.0.0.1:{port}/jobcore"


def _run(tmp: Path, db: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, "--db", db, *args],
        env=subprocess_env(),
        cwd=tmp,
        capture_output=True,
        text=True,
        timeout=90,
    )


@pytest.mark.parametrize("bounded", [("--until-empty",), ("--max-jobs", "1")])
@pytest.mark.parametrize("where", ["no_such_db", "closed_port"])
def test_a_bounded_run_fails_with_one_error_line(
    tmp_path: Path, pg_database: str, bounded: tuple[str, ...], where: str
) -> None:
    if where == "no_such_db":
        db = urlunsplit(urlsplit(SERVER)._replace(path="/no_such_db_jobcore"))
    else:
        db = _closed_port_url()
    started = time.monotonic()
    done = _run(tmp_path, db, "run", *bounded)
    assert time.monotonic() - started < 60
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr


def test_a_long_running_worker_waits_for_its_store_saying_so_once(tmp_path: Path) -> None:
    log = tmp_path / "worker.log"
    with open(log, "wb") as out:
        worker = subprocess.Popen(
            [*JOBCORE, "--log-format", "json", "--db", _closed_port_url(), "run"],
            env=subprocess_env(),
            cwd=tmp_path,
            stdout=subprocess.DEVNULL,
            stderr=out,
        )
    try:
        time.sleep(6)  # several retries (0.1s, 0.2s, ... 3.2s): still one line
        assert worker.poll() is None, log.read_text()
        worker.send_signal(signal.SIGTERM)
        assert worker.wait(30) == 1
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.wait()
    lines = [json.loads(line) for line in log.read_text().splitlines()]  # all JSON
    waiting = [line for line in lines if "database error at start" in line["message"]]
    assert len(waiting) == 1 and waiting[0]["level"] == "warning", lines
    assert not any("started" in line["message"] for line in lines), lines


def test_psycopg_lines_go_through_jobcore_s_json_formatter() -> None:
    code = (
        "import logging; from jobcore.logs import configure_logging; "
        "configure_logging('json'); "
        "logging.getLogger('psycopg.pool').warning('error connecting in %r', 'pool-1'); "
        "logging.getLogger('jobcore').handlers[0].flush()"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env(), capture_output=True, text=True
    )
    [line] = done.stderr.splitlines()
    record = json.loads(line)
    assert record["logger"] == "psycopg.pool" and record["level"] == "warning"
