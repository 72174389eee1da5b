"""End to end: a real hub (`jobcore serve`) and real agents (`jobcore agent`) on 127.0.0.1."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hubenv import JOBCORE, Agent, Hub, env, wait_until

from conftest import sha256, solver_source

pytest.importorskip("fastapi")

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[Hub]:
    hub = Hub(tmp_path, lease="3s")
    yield hub
    hub.close()


@pytest.fixture
def agents() -> Iterator[list[Agent]]:
    started: list[Agent] = []
    yield started
    for agent in started:
        agent.kill()


def upload(hub: Hub, data: bytes, tmp: Path) -> str:
    path = tmp / f"solver-{sha256(data)[:8]}"
    path.write_bytes(data)
    token_file = tmp / "admin-token"
    token_file.write_text(hub.admin_token)
    done = subprocess.run(
        [
            *JOBCORE,
            "artifacts",
            "upload",
            str(path),
            "--hub",
            hub.url,
            "--token-file",
            str(token_file),
        ],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def assert_reclaimed_then_completed(job: dict[str, Any]) -> None:
    """a1's attempt was reclaimed, the job completed once (a 2-3 s lease may lapse again on a
    loaded machine; every attempt in between must then be a reclaim too)."""
    outcomes = [a["outcome"] for a in job["attempts_detail"]]
    assert job["attempts_detail"][0]["worker"] == "a1"
    assert outcomes[0] == "reclaimed" and outcomes[-1] == "completed", outcomes
    assert set(outcomes[1:-1]) <= {"reclaimed"}, outcomes


def started_by(started: Path) -> str | None:
    """The worker named in a `stamp` job's started file (`id attempt worker`), if written yet."""
    fields = started.read_text().split() if started.exists() else []
    return fields[2] if len(fields) == 3 else None


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_plugin_and_exec_jobs_run_on_an_agent(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    solver = solver_source("print(json.dumps({'double': params['x'] * 2, 'args': args}))")
    digest = upload(hub, solver, tmp_path)
    assert digest == sha256(solver)
    agents.append(Agent(hub, "a1", extra=("--tags", "gpu,ssd")))
    log = tmp_path / "stamps"
    stamp = hub.enqueue("stamp", {"log": str(log)})
    from_store = hub.enqueue("exec", {"sha256": digest, "params": {"x": 21}, "args": ["-v"]})
    by_url = hub.enqueue(
        "exec", {"url": f"{hub.url}/api/artifacts/{digest}", "sha256": digest, "params": {"x": 1}}
    )
    wrong = hub.enqueue(
        "exec",
        {"sha256": sha256(b"other"), "url": f"{hub.url}/api/artifacts/{digest}"},
        max_attempts=3,
    )
    parent = hub.enqueue("spawn", {"children": 2})

    done = hub.wait_status(stamp["id"], "completed")
    assert done["result"] == {"attempt": 1, "worker": "a1"}
    assert [a["worker"] for a in done["attempts_detail"]] == ["a1"]
    assert done["attempts_detail"][0]["outcome"] == "completed"
    assert hub.wait_status(from_store["id"], "completed")["result"] == {
        "double": 42,
        "args": ["-v"],
    }
    assert hub.wait_status(by_url["id"], "completed")["result"] == {"double": 2, "args": []}
    failed = hub.wait_status(wrong["id"], "failed")
    assert failed["attempts"] == 1
    assert failed["last_error"].startswith("solver_checksum_mismatch")
    assert hub.wait_status(parent["id"], "completed")["result"] == "spawned"
    children = hub.admin.get("/api/jobs", params={"type": "noop"}).json()["jobs"]
    assert sorted(c["parent_id"] for c in children) == [parent["id"]] * 2
    workers = {w["worker_id"]: w for w in hub.admin.get("/api/workers").json()["workers"]}
    assert workers["a1"]["tags"] == ["gpu", "ssd"]
    assert {"exec", "stamp", "spawn"} <= set(workers["a1"]["types"])
    assert workers["a1"]["cores"] >= 1
    # the executable was downloaded once and then served from the cache
    assert [p.name for p in (agents[0].cache_dir / "artifacts").iterdir() if p.name == digest]


def test_kill_9_mid_job_is_reclaimed_by_another_agent(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    started = tmp_path / "started"
    job = hub.enqueue("stamp", {"log": str(tmp_path / "log"), "sleep": 2, "started": str(started)})
    first = Agent(hub, "a1")
    agents.append(first)
    wait_until(started.exists)
    first.proc.send_signal(signal.SIGKILL)
    first.wait()
    agents.append(Agent(hub, "a2"))
    done = hub.wait_status(job["id"], "completed", timeout=60)
    assert done["attempts"] == 2
    assert [a["worker"] for a in done["attempts_detail"]] == ["a1", "a2"]
    first_attempt, second = done["attempts_detail"]
    assert first_attempt["outcome"] == "reclaimed" and "lease" in (first_attempt["error"] or "")
    assert second["outcome"] == "completed"


def test_hub_down_mid_job_result_is_buffered_and_delivered_once(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="60s")
    try:
        started, log = tmp_path / "started", tmp_path / "log"
        job = hub.enqueue("stamp", {"log": str(log), "sleep": 1, "started": str(started)})
        agent = Agent(hub, "a1")
        agents.append(agent)
        wait_until(started.exists)
        # the hub crashes mid-job (SIGTERM would end it cleanly: docs/storage-backends.md)
        hub.stop(signal.SIGKILL)
        wait_until(lambda: log.exists() and log.read_text())  # finished while the hub was away
        wait_until(lambda: "not delivered yet" in agent.log())
        hub.start()
        done = hub.wait_status(job["id"], "completed", timeout=60)
        assert done["attempts"] == 1 and done["result"]["worker"] == "a1"
        assert len(log.read_text().splitlines()) == 1
    finally:
        hub.close()


def test_outcome_recorded_while_hub_away_survives_an_agent_restart(
    tmp_path: Path, agents: list[Agent]
) -> None:
    hub = Hub(tmp_path, lease="60s")
    try:
        started, log = tmp_path / "started", tmp_path / "log"
        job = hub.enqueue("stamp", {"log": str(log), "sleep": 1, "started": str(started)})
        agent = Agent(hub, "a1", extra=("--shutdown-timeout", "1s"))
        agents.append(agent)
        wait_until(started.exists)
        hub.stop(signal.SIGKILL)
        wait_until(lambda: log.exists() and log.read_text())
        agent.signal(signal.SIGTERM)
        assert agent.wait() == 0
        assert "kept in" in agent.log()
        hub.start()
        agent.restart()
        done = hub.wait_status(job["id"], "completed", timeout=60)
        assert done["attempts"] == 1
        assert len(log.read_text().splitlines()) == 1
    finally:
        hub.close()


def test_revoked_token_stops_the_agent_with_one_error_line(hub: Hub, tmp_path: Path) -> None:
    token = hub.token("agent-r1", "agent", "r1")
    subprocess.run(
        [*JOBCORE, "--db", hub.db, "tokens", "revoke", "agent-r1"],
        env=env(),
        check=True,
        timeout=60,
    )
    agent = Agent(hub, "r1", token=token)
    assert agent.wait(60) == 1
    errors = [line for line in agent.log().splitlines() if line.startswith("Error:")]
    assert len(errors) == 1 and "token" in errors[0]
    assert token not in agent.log()


def test_cancel_kills_the_exec_process_group_with_its_grandchild(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    pids = tmp_path / "pids"
    solver = solver_source(
        "import subprocess\n"
        "child = subprocess.Popen(['sleep', '300'])\n"
        f"open({str(pids)!r}, 'w').write(f'{{os.getpid()}} {{child.pid}}')\n"
        "time.sleep(300)"
    )
    digest = upload(hub, solver, tmp_path)
    agents.append(Agent(hub, "a1"))
    job = hub.enqueue("exec", {"sha256": digest})
    wait_until(lambda: pids.exists() and len(pids.read_text().split()) == 2)
    solver_pid, grandchild = map(int, pids.read_text().split())
    assert alive(solver_pid) and alive(grandchild)
    assert hub.admin.delete(f"/api/jobs/{job['id']}").status_code == 204
    done = hub.wait_status(job["id"], "cancelled", timeout=30)
    wait_until(lambda: not alive(solver_pid) and not alive(grandchild), timeout=10)
    assert done["attempts_detail"][-1]["outcome"] == "cancelled"


def test_sigterm_finishes_short_jobs_and_releases_the_rest(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    short_started, long_started = tmp_path / "short", tmp_path / "long"
    log = str(tmp_path / "log")
    short = hub.enqueue("stamp", {"log": log, "sleep": 1.5, "started": str(short_started)})
    long = hub.enqueue("stamp", {"log": log, "sleep": 60, "started": str(long_started)})
    agent = Agent(hub, "a1", extra=("--concurrency", "2", "--shutdown-timeout", "3s"))
    agents.append(agent)
    wait_until(lambda: short_started.exists() and long_started.exists())
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    assert hub.job(short["id"])["status"] == "completed"
    released = hub.job(long["id"])
    assert released["status"] == "pending"
    assert released["attempts"] == 0  # the attempt was given back
    assert released["attempts_detail"][-1]["outcome"] == "released"


def test_bad_options_fail_before_anything_runs(tmp_path: Path) -> None:
    done = subprocess.run(
        [*JOBCORE, "agent", "--hub", "ftp://x", "--cache-dir", str(tmp_path / "c")],
        env=env(),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == ["Error: --hub 'ftp://x' is not an http(s) URL"]
    assert not (tmp_path / "c").exists()
    assert sys.executable


def test_the_hub_tells_an_agent_to_drain(hub: Hub, agents: list[Agent], tmp_path: Path) -> None:
    started = tmp_path / "started"
    running = hub.enqueue(
        "stamp", {"log": str(tmp_path / "log"), "sleep": 2, "started": str(started)}
    )
    agent = Agent(hub, "a1")
    agents.append(agent)
    wait_until(started.exists)
    assert hub.admin.post("/api/workers/a1/drain").status_code == 204
    wait_until(lambda: "asked this agent to drain" in agent.log())  # told by a heartbeat
    later = hub.enqueue("stamp", {"log": str(tmp_path / "log")})
    assert agent.wait(60) == 0  # finished its job, started nothing more, exited
    assert hub.job(running["id"])["status"] == "completed"
    assert hub.job(later["id"])["status"] == "pending"
    assert hub.job(later["id"])["attempts"] == 0


def test_exec_past_its_timeout_is_killed(hub: Hub, agents: list[Agent], tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    solver = solver_source(f"open({str(pids)!r}, 'w').write(str(os.getpid()))\ntime.sleep(300)")
    digest = upload(hub, solver, tmp_path)
    agents.append(Agent(hub, "a1"))
    job = hub.enqueue("exec", {"sha256": digest}, timeout=1, max_attempts=1)
    wait_until(lambda: pids.exists() and pids.read_text())
    done = hub.wait_status(job["id"], "failed", timeout=30)
    assert "timed out" in done["last_error"] or "max_runtime_exceeded" in done["last_error"]
    wait_until(lambda: not alive(int(pids.read_text())), timeout=10)


def test_a_stale_outcome_is_logged_and_dropped(tmp_path: Path, agents: list[Agent]) -> None:
    hub = Hub(tmp_path, lease="3s")
    try:
        started, log = tmp_path / "started", tmp_path / "log"
        job = hub.enqueue("stamp", {"log": str(log), "sleep": 1, "started": str(started)})
        first = Agent(hub, "a1", extra=("--shutdown-timeout", "0.5s"))
        agents.append(first)
        wait_until(started.exists)
        hub.stop(signal.SIGKILL)
        wait_until(lambda: log.exists() and log.read_text())  # its outcome waits in the outbox
        first.signal(signal.SIGTERM)
        assert first.wait() == 0
        hub.start()  # the lease has lapsed: the hub's sweep gives the job to someone else
        agents.append(Agent(hub, "a2"))
        done = hub.wait_status(job["id"], "completed", timeout=60)
        assert done["result"]["worker"] == "a2"
        first.restart()  # delivers the old outcome: the hub says stale, the agent drops it
        wait_until(lambda: "stale result of job" in first.log(), timeout=60)
        wait_until(lambda: _outbox_empty(first.cache_dir))
        after = hub.job(job["id"])
        assert after["status"] == "completed" and after["result"]["worker"] == "a2"
        assert_reclaimed_then_completed(after)
    finally:
        hub.close()


def _outbox_empty(cache_dir: Path) -> bool:
    import apsw

    db = apsw.Connection(str(cache_dir / "outbox.db"))
    try:
        return db.execute("SELECT count(*) FROM outcomes").fetchone() == (0,)
    finally:
        db.close()


def test_an_agent_that_lost_its_lease_stops_the_handler(
    tmp_path: Path, agents: list[Agent]
) -> None:
    from faultproxy import FaultProxy

    hub = Hub(tmp_path, lease="3s")
    proxy = FaultProxy(hub.url)
    try:
        started, log = tmp_path / "started", tmp_path / "log"
        job = hub.enqueue("stamp", {"log": str(log), "sleep": 15, "started": str(started)})
        cut_off = Agent(hub, "a1", hub_url=proxy.url)
        agents.append(cut_off)
        wait_until(lambda: started_by(started) == "a1")
        proxy.rates["bad_gateway"] = 1.0  # a1's heartbeats stop reaching the hub
        agents.append(Agent(hub, "a2"))
        # reclaimed once the lease lapsed, and running on a2
        wait_until(lambda: started_by(started) == "a2", timeout=60)
        proxy.rates["bad_gateway"] = 0.0
        wait_until(lambda: "lost the lease of job" in cut_off.log(), timeout=30)
        done = hub.wait_status(job["id"], "completed", timeout=60)
        assert done["result"]["worker"] == "a2"
        assert [line.split()[2] for line in log.read_text().splitlines()] == ["a2"]
        assert_reclaimed_then_completed(done)
    finally:
        proxy.close()
        hub.close()


def test_sigterm_gives_back_prefetched_jobs_at_once(
    hub: Hub, agents: list[Agent], tmp_path: Path
) -> None:
    log = str(tmp_path / "log")
    agent = Agent(hub, "a1", extra=("--concurrency", "1", "--shutdown-timeout", "2s"))
    agents.append(agent)
    quick = [hub.enqueue("stamp", {"log": log}) for _ in range(3)]  # short jobs: prefetch on
    for job in quick:
        hub.wait_status(job["id"], "completed")
    started = tmp_path / "long"
    batch = [
        {"type": "stamp", "payload": {"log": log, "sleep": 60, "started": str(started)}},
        {"type": "stamp", "payload": {"log": log}},
    ]
    long, waiting = hub.admin.post("/api/jobs/batch", json={"jobs": batch}).json()["jobs"]
    wait_until(started.exists)
    # claimed ahead, waiting for the one slot
    wait_until(lambda: hub.job(waiting["id"])["status"] == "claimed")
    agent.signal(signal.SIGTERM)
    assert agent.wait(30) == 0
    for job_id in (long["id"], waiting["id"]):
        released = hub.job(job_id)
        assert released["status"] == "pending" and released["attempts"] == 0
    assert "agent a1 stopped" in agent.log()
