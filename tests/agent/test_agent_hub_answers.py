"""What a hub answers is checked before the agent acts on it: the intervals of its register
answer are bounded (a hub answering -1 or NaN made the agent heartbeat thousands of times a
second, or never, so its job ran twice), and an answer over `max_answer` is not read (a
400 MiB claim answer took the agent to 2 GiB); the agent keeps working and keeps its outcomes.
Real `jobcore agent` processes against a fake hub (`fakehub.py`) on 127.0.0.1."""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fakehub import FakeHub, endless, job, raw
from hubenv import JOBCORE, env
from testenv import wait_for

LEASE = 4.0  # the fake hub's lease: the agent must heartbeat within it


class FakeAgent:
    """`jobcore agent` against a fake hub; stderr in `<tmp>/agent.log`."""

    def __init__(self, tmp: Path, hub: FakeHub, **env_extra: str) -> None:
        token = tmp / "token"
        token.write_text("jch_fake\n")
        self.log_path = tmp / "agent.log"
        args = [*JOBCORE, "--db", str(tmp / "unused.db"), "agent", "--hub", hub.url]
        args += ["--token-file", str(token), "--worker-id", "w1", "--types", "noop"]
        args += ["--cache-dir", str(tmp / "cache")]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                args,
                env=env(JOBCORE_AGENT_MAX_BACKOFF="1s", **env_extra),
                stdout=log,
                stderr=log,
            )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)


@pytest.fixture
def started(tmp_path: Path) -> Iterator[list[tuple[FakeHub, FakeAgent]]]:
    made: list[tuple[FakeHub, FakeAgent]] = []
    yield made
    for hub, agent in made:
        agent.kill()
        hub.close()


def register(heartbeat_interval: str = "1", lease: str = "20", poll_wait: str = "1") -> str:
    """A register answer's JSON text with these values as written (NaN, -1, "fast")."""
    values = {"heartbeat_interval": heartbeat_interval, "lease": lease, "poll_wait": poll_wait}
    return "{" + ", ".join(f'"{name}": {value}' for name, value in values.items()) + "}"


def start(
    tmp: Path, made: list[tuple[FakeHub, FakeAgent]], answer: str, **env_extra: str
) -> tuple[FakeHub, FakeAgent]:
    hub = FakeHub(answer)
    agent = FakeAgent(tmp, hub, **env_extra)
    made.append((hub, agent))
    return hub, agent


@pytest.mark.parametrize("interval", ["-1", "NaN", "Infinity", "1e-9", '"fast"', "1e308"])
def test_a_bad_heartbeat_interval_from_the_hub_is_bounded(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]], interval: str
) -> None:
    """-1 or 1e-9: heartbeats at most every 0.5 s (was thousands a second); NaN, Infinity or
    1e308: still within the lease (was never: the lease lapsed, the job ran twice)."""
    hub, agent = start(tmp_path, started, register(interval, lease=f"{LEASE:g}"))
    hub.jobs.append(job({"sleep": 60.0}))
    wait_for(lambda: hub.heartbeats() >= 1, timeout=LEASE + 10)  # within the lease's time
    first = hub.heartbeats()
    time.sleep(3.0)
    beats = hub.heartbeats() - first
    assert 1 <= beats <= 3.0 / 0.5 + 1, (beats, agent.log())  # at most one per 0.5 s
    assert agent.alive(), agent.log()
    said = agent.log().count("the hub's register answer has heartbeat_interval")
    assert said == 1, agent.log()
    assert not [r for r in hub.reports if r["kind"] != "heartbeat"]  # the job still runs


@pytest.mark.parametrize("lease", ["NaN", "-5", "Infinity", '"60"'])
def test_a_bad_lease_from_the_hub_is_replaced_and_said_once(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]], lease: str
) -> None:
    """A lease that is no number of seconds is taken as 60 s, said once in the log."""
    hub, agent = start(tmp_path, started, register(lease=lease))
    hub.jobs.append(job({"sleep": 60.0}))
    wait_for(lambda: hub.heartbeats() >= 2, timeout=10)
    assert agent.log().count("the hub's register answer has lease") == 1, agent.log()
    assert "lease 60s" in agent.log(), agent.log()
    assert agent.alive(), agent.log()


def test_a_heartbeat_interval_longer_than_the_lease_is_bounded(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]]
) -> None:
    """A heartbeat every 30 s on a 4 s lease would lose every lease: the agent beats at
    least every lease/2."""
    hub, agent = start(tmp_path, started, register("30", lease="4"))
    hub.jobs.append(job({"sleep": 60.0}))
    wait_for(lambda: hub.count("/api/jobs/claim") >= 1, timeout=10)
    wait_for(lambda: hub.heartbeats() >= 2, timeout=4 + 2)
    assert "heartbeat every 2s" in agent.log(), agent.log()


@pytest.mark.parametrize("poll_wait", ["NaN", "-1", "1e9", "0.001", "[]"])
def test_a_bad_poll_wait_from_the_hub_is_bounded(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]], poll_wait: str
) -> None:
    """The claim's long-poll `wait` is a number of 1..30 seconds, whatever the hub said."""
    hub, agent = start(tmp_path, started, register(lease="4", poll_wait=poll_wait))
    wait_for(lambda: hub.count("/api/jobs/claim") >= 2, timeout=20)
    time.sleep(2.0)
    waits = [body.get("wait") for body in hub.claims]
    assert all(isinstance(w, int | float) and math.isfinite(w) and 1 <= w <= 30 for w in waits), (
        waits
    )
    assert len(waits) <= 6, waits  # each claim waits (the fake hub up to 1 s)
    assert agent.alive(), agent.log()


def test_a_claim_answer_over_the_cap_is_not_read(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]]
) -> None:
    """A claim answer declaring 64 MiB against a 1 MiB cap: the agent closes the connection
    without reading it, says so, backs off, and claims (and reports) normally afterwards."""
    hub, agent = start(
        tmp_path,
        started,
        register(),
        JOBCORE_AGENT_MAX_ANSWER="1MiB",
    )
    sent: list[int] = []
    hub.answers["/api/jobs/claim"] = [endless(64 << 20, declared=True, sent=sent)]
    wait_for(lambda: sent, timeout=20)
    assert sent[0] < 16 << 20, sent  # at most what the sockets' buffers took
    wait_for(lambda: "the hub's answer is over 1048576 bytes" in agent.log(), timeout=10)
    assert agent.alive(), agent.log()
    given = job({})
    hub.jobs.append(given)
    wait_for(lambda: any(r["job_id"] == given["id"] for r in hub.reports), timeout=20)
    assert [r["kind"] for r in hub.reports] == ["result"], hub.reports


def test_an_endless_report_answer_keeps_the_outcome(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]]
) -> None:
    """A batched report's answer streamed without a length and without end: the agent stops
    reading at its cap, keeps the outcome (in the outbox) and delivers it with the next
    report; it never read the rest."""
    hub, agent = start(
        tmp_path,
        started,
        register(),
        JOBCORE_AGENT_MAX_ANSWER="1MiB",
    )
    sent: list[int] = []
    hub.answers["/api/jobs/reports"] = [endless(64 << 20, declared=False, sent=sent)]
    given = job({})
    hub.jobs.append(given)
    wait_for(lambda: len([r for r in hub.reports if r["job_id"] == given["id"]]) >= 2, timeout=30)
    wait_for(lambda: sent, timeout=10)
    assert sent[0] < 16 << 20, sent
    assert "report of 1 item(s): the hub's answer is over 1048576 bytes" in agent.log()
    assert {r["kind"] for r in hub.reports} == {"result"}, hub.reports
    assert agent.alive(), agent.log()


def test_a_malformed_claim_answer_is_the_hub_misbehaving(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]]
) -> None:
    """Claim answers that are not jobs (`[1, 2]`, `7`, not JSON) are logged and claimed again
    after a backoff; the claimer goes on (it used to end on `[1, 2]`)."""
    hub, agent = start(tmp_path, started, register())
    hub.answers["/api/jobs/claim"] = [raw(b"[1, 2]"), raw(b"7"), raw(b"{not json")]
    wait_for(lambda: hub.count("/api/jobs/claim") >= 4, timeout=20)
    given = job({})
    hub.jobs.append(given)
    wait_for(lambda: any(r["job_id"] == given["id"] for r in hub.reports), timeout=20)
    assert agent.log().count("claim failed") >= 2, agent.log()  # then quieter
    assert agent.alive(), agent.log()


def test_a_register_answer_that_is_not_json_is_retried(
    tmp_path: Path, started: list[tuple[FakeHub, FakeAgent]]
) -> None:
    """A register answer that is not JSON: logged, registered again after a backoff."""
    hub, agent = start(tmp_path, started, "{not json")
    wait_for(lambda: hub.count("/api/workers/register") >= 3, timeout=20)
    assert "cannot register with the hub (register: the hub's answer is not JSON" in agent.log()
    assert agent.alive(), agent.log()
