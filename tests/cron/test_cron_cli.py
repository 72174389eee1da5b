"""`jobcore schedules`, bad schedule definitions (one `Error:` line, nothing written),
schedules declared in Python, and the hub running and listing schedules."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from testenv import subprocess_env, wait_for

from jobcore.testing import make_queue

sys.path.insert(0, str(Path(__file__).parents[1] / "http"))

from hubproc import Hub, jobcore

JOBCORE = [sys.executable, "-m", "jobcore"]
GOOD = """
[plugins.cron.schedules.tick]
type = "noop"
every = "1s"

[plugins.cron.schedules.nightly]
type = "noop"
cron = "30 2 * * *"
timezone = "Europe/Paris"
policy = "latest"
"""


def _jobcore(
    tmp_path: Path, *args: str, config: str = GOOD, **env: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "jobcore.toml").write_text(config)
    return subprocess.run(
        [*JOBCORE, "--db", str(tmp_path / "jobs.db"), *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=subprocess_env(
            **{
                "JOBCORE_LOAD_PLUGINS": "",
                "JOBCORE_PLUGINS": "jobcore_test_plugin,jobcore_cron",
                **env,
            }
        ),
        timeout=60,
    )


def test_schedules_lists_next_and_last_runs(tmp_path: Path) -> None:
    assert _jobcore(tmp_path, "enqueue", "noop").returncode == 0  # the store exists
    listed = _jobcore(tmp_path, "schedules", "--json")
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["nightly"]["when"] == "cron '30 2 * * *' Europe/Paris"
    assert rows["nightly"]["next_run_at"].endswith(("01:30:00.000Z", "00:30:00.000Z"))
    assert rows["tick"]["last_run_at"] is None and rows["tick"]["runs"] == 0
    worker = _jobcore(tmp_path, "run", "--max-jobs", "2")  # the noop, then one scheduled run
    assert worker.returncode == 0, worker.stderr
    rows = {
        row["name"]: row for row in json.loads(_jobcore(tmp_path, "schedules", "--json").stdout)
    }
    assert rows["tick"]["runs"] == 1
    assert rows["tick"]["last_job"]["status"] == "completed"
    assert rows["tick"]["last_run_at"] < rows["tick"]["next_run_at"]
    text = _jobcore(tmp_path, "schedules").stdout.splitlines()
    assert text[0].split() == ["NAME", "WHEN", "TYPE", "POLICY", "NEXT", "LAST", "LAST", "JOB"]
    assert text[1].startswith("tick ") and text[1].endswith(" completed")
    assert text[2].startswith("nightly ") and " never" in text[2]


BAD = [
    ('cron = "61 * * * *"', "bad cron '61 * * * *': not a cron expression"),
    ('cron = "* * * * * *"', "give five fields"),
    ('cron = "0 0 30 2 *"', "bad cron '0 0 30 2 *': never fires (no such date)"),
    ('cron = "0 3 * * *"\ntimezone = "Mars/Olympus"', "bad timezone 'Mars/Olympus': unknown"),
    ('every = "0s"', "bad every '0s': give a duration from 1s"),
    ('every = "5m"\npolicy = "sometimes"', "bad policy 'sometimes': use one of skip, latest"),
    ('every = "5m"\ngrace = "soon"', "bad grace 'soon': 'soon' is not a duration"),
    ('every = "5m"\ncron = "* * * * *"', "give exactly one of cron"),
    ('every = "5m"\nwhen = "now"', "unknown setting 'when'"),
]


COMMANDS = (["run"], ["schedules"], ["enqueue", "noop"])


@pytest.mark.parametrize(
    ("fields", "message", "command"),
    [(fields, message, COMMANDS[n % 3]) for n, (fields, message) in enumerate(BAD)],
    ids=[message.split(":")[0] for _, message in BAD],
)
def test_a_bad_schedule_is_one_error_and_changes_nothing(
    tmp_path: Path, fields: str, message: str, command: list[str]
) -> None:
    config = f'[plugins.cron.schedules.broken]\ntype = "noop"\n{fields}\n'
    done = _jobcore(tmp_path, *command, config=config)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: schedule 'broken' ("), lines
    assert "jobcore.toml [plugins.cron.schedules.broken]" in lines[0]
    assert message in lines[0]
    assert not (tmp_path / "jobs.db").exists()


def test_an_unknown_job_type_or_bad_payload(tmp_path: Path) -> None:
    assert _jobcore(tmp_path, "enqueue", "noop").returncode == 0
    for fields, message in [
        ('type = "nope"', "unknown job type 'nope'"),
        ('type = "noop"\npayload = {colour = "red"}', "invalid payload for 'noop': colour"),
    ]:
        config = f'[plugins.cron.schedules.broken]\n{fields}\nevery = "1s"\n'
        listed = _jobcore(tmp_path, "schedules", config=config)
        assert listed.returncode == 1
        assert listed.stderr.startswith("Error: schedule 'broken' (") and message in listed.stderr
    # a worker says so at start and runs everything else: a type it lacks is left to a
    # process that has it (a warning), a payload its type rejects can run nowhere (an error)
    unknown = '[plugins.cron.schedules.elsewhere]\ntype = "nope"\nevery = "1s"\n'
    worker = _jobcore(tmp_path, "run", "--until-empty", config=config + unknown)
    assert worker.returncode == 0
    lines = [line for line in worker.stderr.splitlines() if "jobcore.cron" in line]
    bad = next(line for line in lines if "'broken'" in line)
    assert " ERROR " in bad and "invalid payload" in bad and "will not run" in bad, lines
    elsewhere = next(line for line in lines if "'elsewhere'" in line)
    assert " WARNING " in elsewhere and "not registered in this process" in elsewhere, lines
    assert "a worker or hub that has it" in elsewhere
    queue = make_queue(tmp_path / "jobs.db")
    try:
        assert [job.type for job in queue.list_jobs()] == ["noop"]  # nothing scheduled
    finally:
        queue.close()


def test_schedules_declared_in_python(tmp_path: Path) -> None:
    (tmp_path / "my_schedules.py").write_text(
        "from jobcore import Payload, job_type\n"
        "from jobcore_cron import schedule\n\n"
        "class Report(Payload):\n    day: str = 'today'\n\n"
        "@schedule('report', cron='0 6 * * 1-5', timezone='America/New_York', policy='all')\n"
        "@job_type('report')\n"
        "def report(payload: Report, ctx: object) -> None:\n    pass\n\n"
        "schedule('purge', type='noop', every='1h')\n"
    )
    (tmp_path / "jobs.db").touch()
    done = _jobcore(tmp_path, "schedules", "--json", JOBCORE_PLUGINS="jobcore_cron,my_schedules")
    assert done.returncode == 0, done.stderr
    rows = {row["name"]: row for row in json.loads(done.stdout)}
    assert rows["report"]["type"] == "report" and rows["report"]["policy"] == "all"
    assert rows["report"]["when"] == "cron '0 6 * * 1-5' America/New_York"
    assert rows["purge"]["when"] == "every 1h"
    assert set(rows) == {"tick", "nightly", "report", "purge"}


def test_the_hub_runs_and_lists_schedules(tmp_path: Path, store_db: Path | str) -> None:
    db = store_db
    env = subprocess_env(
        JOBCORE_PLUGINS="jobcore_test_plugin,jobcore_cron",
        JOBCORE_CRON_SCHEDULES=json.dumps({"tick": {"type": "noop", "every": "1s"}}),
    )
    hub = Hub(db, env=env, logs=tmp_path)
    try:
        read = jobcore(db, "tokens", "create", "--name", "r", "--scope", "read").stdout.strip()
        with hub.client(read) as client:

            def ran() -> dict[str, object] | None:
                rows = client.get("/api/schedules").json()["schedules"]
                return rows[0] if rows and rows[0]["runs"] else None

            row = wait_for(ran, timeout=30)
            assert row["name"] == "tick" and row["when"] == "every 1s"
            [stat] = client.get("/api/stats").json()["schedules"]  # the hub schedules it: ok
            assert (stat["name"], stat["health"], stat["policy"]) == ("tick", "ok", "skip")
            time.sleep(1.2)
            jobs = client.get("/api/jobs", params={"type": "noop"}).json()
            client.post("/ui/login", data={"token": read, "next": "/"})
            overview = client.get("/")  # the dashboard's read-only section
            assert overview.status_code == 200, overview.text[:500]
            section = overview.text.split('id="schedules"')[1].split("</section>")[0]
            assert '<th scope="row">tick</th>' in section and "every 1s" in section
            assert "(completed)" in section or "(pending)" in section or "(claimed)" in section
    finally:
        assert hub.terminate() == 0, hub.output()
    assert "schedules running in hub:" in hub.output()
    listed = jobs["jobs"] if isinstance(jobs, dict) else jobs
    times = [job["meta"]["cron"]["scheduled_at"] for job in listed]
    assert len(times) >= 2 and len(set(times)) == len(times)


def test_a_schedule_no_process_runs_shows_overdue(tmp_path: Path, store_db: Path | str) -> None:
    """The hub ran `tick` once and stopped; a hub that does not schedule (cron disabled)
    shows it overdue in `GET /api/stats`, `GET /api/schedules` and the dashboard."""
    schedules = json.dumps({"tick": {"type": "noop", "every": "1s", "grace": "1s"}})
    plugins = {"JOBCORE_PLUGINS": "jobcore_test_plugin,jobcore_cron"}
    env = subprocess_env(**plugins, JOBCORE_CRON_SCHEDULES=schedules)
    hub = Hub(store_db, env=env, logs=tmp_path)
    try:
        read = jobcore(store_db, "tokens", "create", "--name", "r", "--scope", "read")
        token = read.stdout.strip()
        with hub.client(token) as client:
            wait_for(lambda: client.get("/api/schedules").json()["schedules"][0]["runs"], 30)
    finally:
        assert hub.terminate() == 0, hub.output()
    idle = Hub(store_db, env={**env, "JOBCORE_CRON_ENABLED": "false"}, logs=tmp_path)
    try:
        with idle.client(token) as client:

            def overdue() -> dict[str, object] | None:
                [row] = client.get("/api/stats").json()["schedules"]
                return row if row["health"] == "overdue" else None

            row = wait_for(overdue, timeout=30)
            assert row["name"] == "tick" and float(str(row["lag_seconds"])) > 1
            [listed] = client.get("/api/schedules").json()["schedules"]
            assert listed["health"] == "overdue" and listed["due_at"] == row["due_at"]
            client.post("/ui/login", data={"token": token, "next": "/"})
            section = client.get("/").text.split('id="schedules"')[1].split("</section>")[0]
            assert "<strong>overdue since " in section, section
    finally:
        assert idle.terminate() == 0, idle.output()


def test_schedules_reads_beside_a_writer_without_the_write_lock(tmp_path: Path) -> None:
    import apsw

    assert _jobcore(tmp_path, "run", "--max-jobs", "1").returncode == 0  # one scheduled run
    writer = apsw.Connection(str(tmp_path / "jobs.db"))
    writer.execute("BEGIN IMMEDIATE")  # another process holds the write lock meanwhile
    try:
        listed = _jobcore(tmp_path, "schedules", "--json", JOBCORE_BUSY_TIMEOUT="0.5")
    finally:
        writer.execute("ROLLBACK")
        writer.close()
    assert listed.returncode == 0, listed.stderr
    rows = {row["name"]: row for row in json.loads(listed.stdout)}
    assert rows["tick"]["runs"] == 1 and rows["tick"]["last_job"]["status"] == "completed"
