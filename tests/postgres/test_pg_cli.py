"""The CLI contract (DESIGN §8) with `--db postgresql://…`, and `jobcore copy`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner, Result

from jobcore.cli import cli

Run = Callable[..., Result]


@pytest.fixture
def run(pg_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    monkeypatch.chdir(tmp_path)

    def invoke(*args: str, db: str | None = None, input: str | None = None) -> Result:
        env = {"JOBCORE_DB": db or pg_url, "JOBCORE_PLUGINS": "jobcore_test_plugin"}
        return CliRunner().invoke(cli, list(args), input=input, env=env, catch_exceptions=False)

    return invoke


def one_error_line(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]


def as_json(result: Result) -> Any:
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_enqueue_run_and_inspect(run: Run) -> None:
    job = as_json(run("enqueue", "noop", "{}", "--json", "--idempotency-key", "k"))
    assert job["created"] is True and job["status"] == "pending"
    again = as_json(run("enqueue", "noop", "{}", "--json", "--idempotency-key", "k"))
    assert again["created"] is False and again["id"] == job["id"]
    later = run("enqueue", "noop", "{}", "--delay", "1h")
    assert later.exit_code == 0 and later.stdout.strip()
    listed = as_json(run("list", "--json"))
    assert [j["id"] for j in listed] == [later.stdout.strip(), job["id"]]
    assert run("run", "--until-empty").exit_code == 0
    shown = as_json(run("show", job["id"], "--json"))
    assert shown["attempts"] == 1 and shown["history"][0]["outcome"] == "completed"
    stats = as_json(run("stats", "--json"))
    assert {k: n for k, n in stats["counts"].items() if n} == {"completed": 1, "scheduled": 1}
    assert set(stats) >= {"counts", "by_type", "failures", "stuck", "durations", "last_hour"}


def test_operator_commands(run: Run) -> None:
    failing = run("enqueue", "fail", '{"how": "permanent"}').stdout.strip()
    waiting = run("enqueue", "noop", "{}", "--delay", "1h").stdout.strip()
    assert run("run", "--until-empty").exit_code == 0
    assert as_json(run("show", failing, "--json"))["status"] == "failed"
    retried = run("retry", failing)
    assert retried.exit_code == 0, retried.stderr
    assert as_json(run("show", failing, "--json"))["status"] == "pending"
    assert run("cancel", waiting).exit_code == 0
    assert as_json(run("show", waiting, "--json"))["status"] == "cancelled"
    one_error_line(run("retry", "no-such-id"), "no-such-id")
    one_error_line(run("cancel", waiting), waiting)
    assert run("sweep").exit_code == 0
    assert run("prune", "--older-than", "1d").exit_code == 0
    plugins = {p["name"]: p for p in as_json(run("plugins", "--json"))}
    assert plugins["postgres"]["status"] == "loaded"


def test_unusable_stores_are_one_error_line_and_nothing_is_written(
    run: Run, pg_database: str, pg_url: str
) -> None:
    missing_db = pg_database.rsplit("/", 1)[0] + "/jobcore_no_such_database"
    one_error_line(run("enqueue", "noop", "{}", db=missing_db), "jobcore_no_such_database")
    one_error_line(run("list", db="postgresql://postgres@127.0.0.1:1/x"), "127.0.0.1")
    one_error_line(run("list"), "no jobcore store")  # reading never creates the schema
    schema = pg_url.rsplit("schema=", 1)[1]
    with psycopg.connect(pg_database) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchone()
    assert row is not None and row[0] == 0
    bad = run("enqueue", "noop", "{}", db=pg_url.replace("schema=", "schema=Bad-"))
    assert bad.exit_code == 1 and "schema name" in bad.stderr


def test_copy_moves_every_job_with_its_history_both_ways(
    run: Run, tmp_path: Path, pg_url: str
) -> None:
    sqlite = str(tmp_path / "jobs.db")
    run("enqueue", "noop", "{}", db=sqlite)
    run("enqueue", "fail", '{"how": "permanent"}', db=sqlite)
    run("enqueue", "noop", "{}", "--delay", "1h", db=sqlite)
    assert run("run", "--until-empty", db=sqlite).exit_code == 0
    source = as_json(run("list", "--json", db=sqlite))
    assert as_json(run("copy", "--from", sqlite, "--to", pg_url, "--json")) == {"copied": 3}
    assert as_json(run("list", "--json")) == source  # ids, statuses, times, errors, history
    one_error_line(run("copy", "--from", sqlite, "--to", pg_url), "already holds 3 jobs", "--force")
    assert as_json(run("copy", "--from", sqlite, "--to", pg_url, "--force", "--json")) == {
        "copied": 3
    }
    back = str(tmp_path / "back.db")
    assert run("copy", "--from", pg_url, "--to", back).stdout.strip() == "copied 3 jobs"
    assert as_json(run("list", "--json", db=back)) == source
    same = run("copy", "--from", back, "--to", back)
    assert same.exit_code == 2 and "same store" in same.stderr


def test_a_bad_line_rejects_the_whole_file_and_reads_show_the_job_shape(
    run: Run, tmp_path: Path
) -> None:
    lines = tmp_path / "jobs.jsonl"
    lines.write_text('{"sleep": 0}\n{"sleep": "long"}\n')
    bad = run("enqueue", "noop", "--from", str(lines))
    one_error_line(bad, "line 2")
    lines.write_text('{"sleep": 0}\n{"sleep": 0}\n')
    assert run("enqueue", "noop", "--from", str(lines)).exit_code == 0
    listed = as_json(run("list", "--json"))
    assert len(listed) == 2  # the rejected file wrote nothing
    shown = as_json(run("show", listed[0]["id"], "--json"))
    assert set(shown) >= {
        "id",
        "type",
        "queue",
        "payload",
        "status",
        "priority",
        "attempts",
        "max_attempts",
        "run_at",
        "timeout",
        "idempotency_key",
        "locked_by",
        "lease_id",
        "cancel_requested",
        "last_error",
        "errors",
        "result",
        "parent_id",
        "meta",
        "created_at",
        "started_at",
        "history",
    }
    assert shown["created_at"].endswith("Z") and shown["payload"]["sleep"] == 0
    one_error_line(run("show", "no-such-id"), "no-such-id")
    text = run("stats")
    assert text.exit_code == 0 and "noop" in text.stdout
