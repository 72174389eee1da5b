"""The CLI contract of DESIGN §8, through click's CliRunner on a real database file."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from testenv import subprocess_env

from jobcore.cli import cli, main
from jobcore.storage.sqlite import SQLiteStorage
from jobcore.timeutil import now_ms

CRON = importlib.util.find_spec("croniter") is not None  # the cron plugin loads

Run = Callable[..., Result]

JOB_FIELDS = {
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
    "locked_at",
    "lease_expires_at",
    "heartbeat_at",
    "cancel_requested",
    "last_error",
    "errors",
    "result",
    "parent_id",
    "meta",
    "created_at",
    "claimed_at",
    "completed_at",
    "updated_at",
    "lease_id",
    "started_at",
    "history",
}


@pytest.fixture
def db(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path / "cli.db"


@pytest.fixture
def run(db: Path) -> Run:
    def invoke(*args: str, input: str | None = None, env: dict[str, str] | None = None) -> Result:
        runner = CliRunner()
        full_env = {"JOBCORE_DB": str(db), "JOBCORE_PLUGINS": "jobcore_test_plugin", **(env or {})}
        return runner.invoke(cli, list(args), input=input, env=full_env, catch_exceptions=False)

    return invoke


def job_count(db: Path) -> int:
    if not db.exists():
        return 0
    storage = SQLiteStorage(db, create=False)
    try:
        return len(storage.list_jobs(limit=100_000))
    finally:
        storage.close()


def assert_runtime_error(result: Result, *fragments: str) -> None:
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    for fragment in fragments:
        assert fragment in lines[0]
    assert result.stdout == ""


# -- help and listing --------------------------------------------------------------


def test_every_command_has_help(run: Run) -> None:
    result = run("--help")
    assert result.exit_code == 0
    names = [
        "enqueue",
        "run",
        "list",
        "show",
        "stats",
        "retry",
        "cancel",
        "sweep",
        "prune",
        "reconcile",
        "plugins",
    ]
    for name in names:
        assert name in result.stdout
        assert run(name, "--help").exit_code == 0


def test_plugins_json_lists_loaded_and_unavailable(run: Run, tmp_path: Path) -> None:
    (tmp_path / "broken_plugin.py").write_text("import not_a_real_dependency_xyz\n")
    env = {"JOBCORE_PLUGINS": "jobcore_test_plugin,broken_plugin", "PYTHONPATH": str(tmp_path)}
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        result = run("plugins", "--json", env=env)
    finally:
        sys.path.remove(str(tmp_path))
    assert result.exit_code == 0, result.output
    plugins = {p["name"]: p for p in json.loads(result.stdout)}
    for plugin in plugins.values():
        assert set(plugin) == {"name", "version", "status", "reason", "job_types", "hooks"}
    assert plugins["jobcore.builtin.noop"]["job_types"] == ["noop"]
    assert plugins["jobcore_test_plugin"]["status"] == "loaded"
    assert "sleepy" in plugins["jobcore_test_plugin"]["job_types"]
    assert "jobcore_register_job_types" in plugins["jobcore_test_plugin"]["hooks"]
    broken = plugins["broken_plugin"]
    assert broken["status"] == "unavailable" and "not_a_real_dependency_xyz" in broken["reason"]
    assert run("enqueue", "noop", env=env).exit_code == 0  # the CLI still works


# -- enqueue -------------------------------------------------------------------------


def test_enqueue_prints_the_id_and_json_has_every_field(run: Run, db: Path) -> None:
    result = run("enqueue", "noop", '{"sleep": 0}')
    assert result.exit_code == 0
    job_id = result.stdout.strip()
    shown = json.loads(run("show", job_id, "--json").stdout)
    assert set(shown) == JOB_FIELDS
    assert shown["id"] == job_id and shown["status"] == "pending" and shown["timeout"] == 3600.0
    assert shown["created_at"].endswith("Z") and shown["errors"] == []


def test_enqueue_options_and_idempotency(run: Run) -> None:
    args = [
        "enqueue",
        "noop",
        "{}",
        "--queue",
        "mail",
        "--priority",
        "5",
        "--delay",
        "5m",
        "--max-attempts",
        "9",
        "--timeout",
        "500ms",
        "--idempotency-key",
        "k1",
        "--json",
    ]
    first = json.loads(run(*args).stdout)
    assert first["created"] is True
    assert (first["queue"], first["priority"], first["max_attempts"], first["timeout"]) == (
        "mail",
        5,
        9,
        0.5,
    )
    assert first["status"] == "scheduled" and first["idempotency_key"] == "k1"
    again = run(*args)
    assert json.loads(again.stdout)["created"] is False
    assert json.loads(again.stdout)["id"] == first["id"]
    at = json.loads(run("enqueue", "noop", "--run-at", "2030-01-02T03:04:05", "--json").stdout)
    assert at["run_at"] == "2030-01-02T03:04:05.000Z"


def test_payload_from_stdin_file_and_jsonl(run: Run, db: Path, tmp_path: Path) -> None:
    assert run("enqueue", "noop", "-", "--json", input='{"sleep": 0.5}').exit_code == 0
    (tmp_path / "p.json").write_text('{"fail": true}')
    result = json.loads(run("enqueue", "noop", "@p.json", "--json").stdout)
    assert result["payload"] == {"sleep": 0.0, "fail": True}
    (tmp_path / "many.jsonl").write_text('{"sleep": 0}\n\n{"fail": false}\n{}\n')
    result = run("enqueue", "noop", "--from", "many.jsonl")
    assert result.exit_code == 0 and len(result.stdout.split()) == 3
    assert job_count(db) == 5


def test_a_bad_jsonl_line_rejects_the_whole_file(run: Run, db: Path, tmp_path: Path) -> None:
    (tmp_path / "bad.jsonl").write_text('{}\n{"sleep": 1}\n{"slep": 1}\n')
    assert_runtime_error(run("enqueue", "noop", "--from", "bad.jsonl"), "line 3", "slep")
    (tmp_path / "broken.jsonl").write_text("{}\n{oops\n")
    assert_runtime_error(
        run("enqueue", "noop", "--from", "broken.jsonl"), "line 2", "not valid JSON"
    )
    assert job_count(db) == 0


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["enqueue", "noop", "{bad"], ["not valid JSON"]),
        (["enqueue", "noop", "[1, 2]"], ["must be a JSON object"]),
        (["enqueue", "noop", '{"sleep": 1e999}'], ["not valid JSON", "1e999 is out of range"]),
        (["enqueue", "noop", '{"sleep": NaN}'], ["not valid JSON", "NaN is not a JSON value"]),
        (["enqueue", "noop", '{"sleep": "long"}'], ["sleep", "valid number"]),
        (["enqueue", "noop", '{"colour": 1}'], ["colour: unknown field"]),
        (["enqueue", "teleport", "{}"], ["unknown job type 'teleport'"]),
        (["enqueue", "noop", "@missing.json"], ["cannot read payload file missing.json"]),
    ],
)
def test_bad_enqueue_input_is_one_clear_line_and_writes_nothing(
    run: Run, db: Path, args: list[str], fragments: list[str]
) -> None:
    assert_runtime_error(run(*args), *fragments)
    assert not db.exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["enqueue", "noop", '{"colour\\nError: forged": 1}'], "colour\\nError: forged"),
        (["enqueue", "tele\nError: forged", "{}"], "'tele\\nError: forged'"),
        (["enqueue", "noop", "@no\rError: forged.json"], "no\\rError: forged.json"),
    ],
)
def test_a_newline_from_the_input_cannot_forge_a_second_error_line(
    run: Run, db: Path, args: list[str], fragment: str
) -> None:
    """DESIGN §8: one `Error:` line, whatever control characters a payload key, a job type
    or a file name brings; they are shown escaped."""
    assert_runtime_error(run(*args), fragment)
    assert not db.exists()


@pytest.mark.parametrize(
    "args", [["list", "--status", "a\nError: forged"], ["--no\nError: forged", "list"]]
)
def test_a_newline_in_a_bad_option_cannot_forge_an_error_line(
    run: Run, db: Path, args: list[str]
) -> None:
    result = run(*args)
    assert result.exit_code == 2
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "\\nError: forged" in errors[0], result.stderr
    assert not db.exists()


@pytest.mark.parametrize(
    "args",
    [
        ["list", "--queue", "q\udcff"],
        ["list", "--type", "t\udcff"],
        ["show", "id\udcff"],
        ["cancel", "id\udcff"],
        ["retry", "id\udcff"],
        ["retry", "--failed", "--type", "t\udcff"],
        ["run", "--until-empty", "--worker-id", "w\udcff"],
        ["run", "--until-empty", "--queue", "q\udcff"],
        ["run", "--until-empty", "--type", "t\udcff"],
        ["enqueue", "noop\udcff"],
        ["pause", "q\udcff"],
        ["resume", "--type", "t\udcff"],
        ["limit", "--type", "t\udcff", "--concurrency", "2"],
        ["reconcile", "--type", "t\udcff"],
    ],
)
def test_names_and_ids_of_bytes_that_are_not_utf8_are_usage_errors(
    run: Run, db: Path, args: list[str]
) -> None:
    """A shell's `$'q\\xff'` reaches Python as a lone surrogate, which no store can hold or
    look up: a usage error naming the option (it was a traceback, or a worker retrying a
    "database error" for ever)."""
    run("enqueue", "noop")
    before = job_count(db)
    result = run(*args)
    assert result.exit_code == 2, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "not UTF-8 (b'\\xff')" in errors[0], result.stderr
    assert job_count(db) == before
    storage = SQLiteStorage(db, create=False)
    try:
        assert [job.status.value for job in storage.list_jobs()] == ["pending"]
    finally:
        storage.close()


def test_oversized_payload(run: Run, db: Path) -> None:
    env = {"JOBCORE_MAX_PAYLOAD_BYTES": "200"}
    big = json.dumps({"log": "x" * 300})
    assert_runtime_error(run("enqueue", "record", big, env=env), "over the 200-byte limit")
    assert job_count(db) == 0


@pytest.mark.parametrize(
    "args",
    [
        ["enqueue", "noop", "--delay", "5 minutes"],
        ["enqueue", "noop", "--timeout", "-1"],
        ["enqueue", "noop", "--timeout", "0"],
        ["enqueue", "noop", "--timeout", "0.1ms"],
        ["enqueue", "noop", "--delay", "99999999999d"],
        ["enqueue", "noop", "--run-at", "next tuesday"],
        ["enqueue", "noop", "--max-attempts", "0"],
        ["enqueue", "noop", "--max-attempts", "99999999999999999999"],
        ["enqueue", "noop", "--priority", "99999999999999999999"],
        ["enqueue", "noop", "--idempotency-key", ""],
        ["enqueue", "noop", "--queue", " "],
        ["list", "--limit", "99999999999999999999"],
        ["run", "--worker-id", ""],
        ["run", "--lease", "forever"],
        ["run", "--lease", "0"],
        ["run", "--lease", "0s"],
        ["run", "--poll-interval", "0ms"],
        ["prune", "--older-than", "old"],
        ["list", "--status", "sleeping"],
    ],
)
def test_bad_option_values_are_usage_errors(run: Run, db: Path, args: list[str]) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert "Usage:" in result.stderr and "Invalid value" in result.stderr
    assert not db.exists()


def test_unknown_id(run: Run, db: Path) -> None:
    run("enqueue", "noop")
    for command in ("show", "retry", "cancel"):
        assert_runtime_error(run(command, "0000-nope"), "no job with id '0000-nope'")


def test_database_location_errors(run: Run, tmp_path: Path) -> None:
    assert_runtime_error(
        run("--db", str(tmp_path / "no" / "such" / "x.db"), "enqueue", "noop"), "does not exist"
    )
    assert not (tmp_path / "no").exists()
    not_db = tmp_path / "notes.txt"
    not_db.write_text("these are my notes, not a database\n")
    assert_runtime_error(run("--db", str(not_db), "enqueue", "noop"), "is not a SQLite database")
    assert not_db.read_text() == "these are my notes, not a database\n"
    assert_runtime_error(run("--db", str(tmp_path / "absent.db"), "list"), "does not exist")
    assert not (tmp_path / "absent.db").exists()


@pytest.fixture
def read_only_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "ro"
    folder.mkdir()
    if os.geteuid() != 0:
        folder.chmod(0o555)
        yield folder
        folder.chmod(0o755)
        return
    # root ignores permission bits: use a read-only bind mount instead
    mounted = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot make a read-only folder as root here: {mounted.stderr.decode().strip()}"
        )
    try:
        subprocess.run(["mount", "-o", "remount,bind,ro", str(folder)], check=True)
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], check=False)


def test_read_only_folder(run: Run, read_only_dir: Path) -> None:
    assert_runtime_error(
        run("--db", str(read_only_dir / "x.db"), "enqueue", "noop"), "not writable"
    )
    assert list(read_only_dir.iterdir()) == []


def test_bad_config_value_names_the_setting(run: Run, db: Path) -> None:
    assert_runtime_error(
        run("enqueue", "noop", env={"JOBCORE_LEASE": "soon"}), "'lease'", "JOBCORE_LEASE"
    )
    assert not db.exists()


# -- operating on jobs --------------------------------------------------------------


def test_run_list_show_retry_cancel(run: Run, db: Path) -> None:
    ok = run("enqueue", "noop").stdout.strip()
    bad = run("enqueue", "fail", '{"how": "permanent", "message": "no route"}').stdout.strip()
    later = run("enqueue", "noop", "--delay", "1h").stdout.strip()
    result = run("run", "--until-empty", "--concurrency", "2")
    assert result.exit_code == 0, result.output
    assert "completed 1" in result.stdout and "failed 1" in result.stdout

    listed = json.loads(run("list", "--json").stdout)
    assert [job["id"] for job in listed] == [later, bad, ok]  # newest first
    failed = json.loads(run("list", "--status", "failed", "--json").stdout)
    assert [job["id"] for job in failed] == [bad]
    assert bad in run("list", "--type", "fail").stdout

    text = run("show", bad).stdout
    assert "PermanentError: no route" in text and "attempt 1" in text
    shown = json.loads(run("show", bad, "--json").stdout)
    assert shown["errors"][0]["error"] == "PermanentError: no route"

    assert_runtime_error(run("retry", ok), "only failed or cancelled")
    retried = run("retry", "--failed", "--type", "fail")
    assert retried.exit_code == 0 and bad in retried.stdout
    again = json.loads(run("show", bad, "--json").stdout)
    assert again["status"] == "pending" and again["attempts"] == 0 and len(again["errors"]) == 1

    assert run("cancel", later).stdout.strip() == f"{later} cancelled"
    assert_runtime_error(run("cancel", ok), "already completed")
    assert_runtime_error(run("cancel", later, ok), "already")  # all or nothing


def test_json_lifecycle_logs_on_stderr(run: Run) -> None:
    job_id = run("enqueue", "noop").stdout.strip()
    result = run("--log-format", "json", "run", "--until-empty")
    events = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
    lifecycle = [e for e in events if e.get("job_id") == job_id]
    assert [e["event"] for e in lifecycle] == ["claimed", "completed"]
    for event in lifecycle:
        assert {"ts", "event", "job_id", "type", "queue", "attempt", "worker"} <= set(event)
    assert "duration_ms" in lifecycle[-1]
    assert all(not line.startswith("{") for line in result.stdout.splitlines())


def test_sweep_reclaims_expired_leases(run: Run, db: Path) -> None:
    job_id = run("enqueue", "noop").stdout.strip()
    storage = SQLiteStorage(db, clock=lambda: now_ms() - 120_000)  # a claim made long ago
    storage.claim(worker="dead-worker", limit=1, lease_ms=60_000)
    storage.close()
    stats = json.loads(run("stats", "--json").stdout)
    assert [job["id"] for job in stats["stuck"]] == [job_id]
    result = run("sweep", env={"JOBCORE_LEASE": "1s"})  # confirms over lease/4 + 1s
    assert result.stdout.strip() == f"reclaimed {job_id} (noop, attempt 1)"
    shown = json.loads(run("show", job_id, "--json").stdout)
    assert shown["status"] == "pending" and shown["errors"][0]["error"] == "lease expired"
    assert shown["errors"][0]["worker"] == "dead-worker"


def test_prune(run: Run, db: Path) -> None:
    run("enqueue", "noop")
    run("run", "--until-empty")
    assert run("prune", "--older-than", "1h").stdout.strip() == "deleted 0 job(s)"
    assert run("prune", "--older-than", "0s").stdout.strip() == "deleted 1 job(s)"


def test_stats_json_shape(run: Run) -> None:
    run("enqueue", "noop", "--idempotency-key", "a")
    run("enqueue", "fail", '{"how": "permanent"}')
    run("run", "--until-empty")
    run("enqueue", "noop", "--idempotency-key", "a")
    stats = json.loads(run("stats", "--json").stdout)
    assert set(stats) == {
        "counts",
        "by_type",
        "failures",
        "stuck",
        "durations",
        "last_hour",
        "duplicates",
        "paused",  # DESIGN §16
        "limits",
        *(["schedules"] if CRON else []),  # the cron plugin's (`jobcore_stats`)
    }
    assert (
        stats["counts"]["completed"] == 1
        and stats["counts"]["failed"] == 1
        and stats["counts"]["pending"] == 1
    )
    assert stats["failures"] == [{"type": "fail", "error": "PermanentError: it broke", "count": 1}]
    assert stats["duplicates"] == [{"type": "noop", "idempotency_key": "a", "count": 2}]
    assert set(stats["durations"]["noop"]) == {"count", "p50_ms", "p95_ms"}
    assert stats["last_hour"] == {"enqueued": 3, "completed": 1, "failed": 1}
    assert "Failures" in run("stats").stdout


def test_reconcile_uses_the_hook(run: Run, db: Path, tmp_path: Path) -> None:
    (tmp_path / "reconcile_plugin.py").write_text(
        "from jobcore import hookimpl\n"
        "@hookimpl\n"
        "def jobcore_reconcile(job):\n"
        "    if job.payload.get('sleep') == 0.25:\n"
        "        return ['the quarter-second nap did not happen']\n"
    )
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        env = {"JOBCORE_PLUGINS": "reconcile_plugin"}
        run("enqueue", "noop", '{"sleep": 0.25}', env=env)
        run("enqueue", "noop", env=env)
        run("run", "--until-empty", env=env)
        result = run("reconcile", env=env)
        assert result.exit_code == 1
        assert "the quarter-second nap did not happen" in result.stdout
        assert len(result.stdout.splitlines()) == 1
        assert run("reconcile", "--type", "other", env=env).exit_code == 0
    finally:
        sys.path.remove(str(tmp_path))


def test_main_entry_point(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: Any) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("JOBCORE_DB", str(tmp_path / "m.db"))
    with pytest.raises(SystemExit) as exit_info:
        main(["enqueue", "noop"])
    assert exit_info.value.code == 0
    assert len(capsys.readouterr().out.strip()) == 36


# -- storage failures through the real command line ---------------------------------------


def jobcore(
    cwd: Path, *args: str, input: str | None = None, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "jobcore", *args],
        input=input,
        cwd=cwd,
        env=subprocess_env(**env),
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_error_line(
    done: subprocess.CompletedProcess[str], db: Path, *fragments: str
) -> None:
    """One `Error:` line naming `db`, and (case-insensitively, outside the path) `fragments`."""
    assert done.returncode == 1, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), done.stderr
    assert str(db) in lines[0]
    message = lines[0].replace(str(db), "<db>").lower()
    for fragment in fragments:
        assert fragment.lower() in message, lines[0]
    assert done.stdout == ""


def ids_in(db: Path) -> list[str]:
    storage = SQLiteStorage(db, create=False)
    try:
        return [job.id for job in storage.list_jobs(limit=1000)]
    finally:
        storage.close()


HOLD_WRITE_LOCK = """
import sys, apsw
conn = apsw.Connection(sys.argv[1])
conn.execute("BEGIN IMMEDIATE")
conn.execute("SELECT count(*) FROM jobs").fetchall()
print("held", flush=True)
sys.stdin.readline()
conn.execute("ROLLBACK")
"""


def test_busy_database_is_one_error_line_and_writes_nothing(tmp_path: Path) -> None:
    db = tmp_path / "busy.db"
    first = jobcore(tmp_path, "--db", str(db), "enqueue", "noop").stdout.strip()
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK, str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        busy = jobcore(tmp_path, "--db", str(db), "enqueue", "noop", JOBCORE_BUSY_TIMEOUT="0.2")
    finally:
        holder.communicate("\n", timeout=30)
    assert_one_error_line(busy, db, "busy")
    assert ids_in(db) == [first]


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 512 KiB tmpfs (root only), unmounted afterwards."""
    folder = tmp_path / "small"
    folder.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs to fill needs root")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=512k", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)


def test_full_disk_is_one_error_line_and_writes_nothing(small_disk: Path, tmp_path: Path) -> None:
    db = small_disk / "jobs.db"
    first = jobcore(tmp_path, "--db", str(db), "enqueue", "noop").stdout.strip()
    # a reader keeps the database open, as a running worker would, so its WAL stays
    reader = subprocess.Popen(
        [sys.executable, "-c", HOLD_WRITE_LOCK.replace("BEGIN IMMEDIATE", "BEGIN"), str(db)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert reader.stdout is not None and reader.stdout.readline() == "held\n"
        fill = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fill, b"\0" * 4096):
                pass
        except OSError:
            pass  # the disk is full now
        finally:
            os.close(fill)
        payload = json.dumps({"log": "x" * 200_000})
        full = jobcore(tmp_path, "--db", str(db), "enqueue", "record", "-", input=payload)
    finally:
        reader.communicate("\n", timeout=30)
    assert_one_error_line(full, db, "full")
    (small_disk / "filler").unlink()
    assert ids_in(db) == [first]


def test_database_on_a_full_disk_is_reported_full_not_io(small_disk: Path, tmp_path: Path) -> None:
    db = small_disk / "jobs.db"
    first = jobcore(tmp_path, "--db", str(db), "enqueue", "noop").stdout.strip()
    fill = os.open(small_disk / "filler", os.O_WRONLY | os.O_CREAT)
    try:
        while os.write(fill, b"\0" * 4096):
            pass
    except OSError:
        pass  # the disk is full now: no room for the -wal and -shm files an open needs
    finally:
        os.close(fill)
    full = jobcore(tmp_path, "--db", str(db), "enqueue", "noop")
    assert_one_error_line(full, db, "is full", "free space")
    (small_disk / "filler").unlink()
    assert ids_in(db) == [first]


def test_io_error_is_one_error_line(tmp_path: Path) -> None:
    db = tmp_path / "jobs.db"
    plugins = {"JOBCORE_PLUGINS": "jobcore_test_plugin,faulty_disk"}
    first = jobcore(tmp_path, "--db", str(db), "enqueue", "noop", **plugins).stdout.strip()
    failed = jobcore(tmp_path, "--db", str(db), "enqueue", "noop", FAULTY_DISK="1", **plugins)
    assert_one_error_line(failed, db, "I/O error", "write failed on the faulty disk")
    assert ids_in(db) == [first]


def test_corrupt_database_is_one_error_line(tmp_path: Path) -> None:
    db = tmp_path / "corrupt.db"
    db.write_bytes(b"SQLite format 3\x00" + bytes(range(256)) * 64)
    for args in (["enqueue", "noop"], ["list"], ["stats"]):
        done = jobcore(tmp_path, "--db", str(db), *args)
        assert_one_error_line(done, db, "not a", "SQLite database")
    assert db.read_bytes()[:16] == b"SQLite format 3\x00"


def test_expected_failures_are_logged_without_a_traceback(tmp_path: Path) -> None:
    env = {"JOBCORE_DB": str(tmp_path / "jobs.db"), "JOBCORE_BACKOFF_BASE": "0"}
    jobcore(tmp_path, "enqueue", "shell", '{"command": "exit 3"}', "--max-attempts", "2", **env)
    ran = jobcore(tmp_path, "run", "--until-empty", **env)
    assert ran.returncode == 0, ran.stderr
    assert "failed 1" in ran.stdout
    assert ran.stderr.count("CommandFailed: exit code 3") == 2  # the retrying and failed events
    assert "Traceback" not in ran.stderr
    # an unexpected exception in a handler still shows where it happened
    jobcore(tmp_path, "enqueue", "fail", '{"message": "bug"}', "--max-attempts", "1", **env)
    ran = jobcore(tmp_path, "run", "--until-empty", **env)
    assert "ValueError: bug" in ran.stderr and "Traceback" in ran.stderr
