"""TLS between agents and the hub: `serve --tls-cert/--tls-key`, `--ca-file`, `--insecure-http`."""

from __future__ import annotations

import signal
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from hubenv import JOBCORE, Agent, Hub, env, pause, wait_until

from conftest import sha256, solver_source

pytest.importorskip("fastapi")
pytest.importorskip("cryptography")

from cryptography.hazmat.primitives import serialization
from tlscerts import Pki, make_pki

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def pki(tmp_path: Path) -> Pki:
    return make_pki(tmp_path)


@pytest.fixture
def hub(tmp_path: Path, pki: Pki) -> Iterator[Hub]:
    hub = Hub(
        tmp_path,
        lease="10s",
        extra=("--tls-cert", str(pki.cert), "--tls-key", str(pki.key)),
        verify=ssl.create_default_context(cafile=str(pki.ca)),
    )
    yield hub
    hub.close()


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*JOBCORE, *args], cwd=cwd, env=env(), capture_output=True, text=True, timeout=60
    )


def test_agent_and_upload_work_over_https_trusting_a_private_ca(
    hub: Hub, pki: Pki, tmp_path: Path
) -> None:
    assert hub.url.startswith("https://127.0.0.1:")
    solver = solver_source("print(json.dumps({'double': params['x'] * 2}))")
    (tmp_path / "solver").write_bytes(solver)
    (tmp_path / "admin-token").write_text(hub.admin_token)
    uploaded = run(
        "artifacts",
        "upload",
        str(tmp_path / "solver"),
        "--hub",
        hub.url,
        "--token-file",
        str(tmp_path / "admin-token"),
        "--ca-file",
        str(pki.ca),
        cwd=tmp_path,
    )
    assert uploaded.returncode == 0, uploaded.stderr
    assert uploaded.stdout.strip() == sha256(solver)
    agent = Agent(hub, "a1", extra=("--ca-file", str(pki.ca), "--concurrency", "2"))
    log, started = str(tmp_path / "log"), tmp_path / "started"
    try:
        stamp = hub.enqueue("stamp", {"log": log})
        solved = hub.enqueue("exec", {"sha256": sha256(solver), "params": {"x": 21}})
        assert hub.wait_status(stamp["id"], "completed")["result"]["worker"] == "a1"
        assert hub.wait_status(solved["id"], "completed")["result"] == {"double": 42}
        # the long-poll it holds over TLS ends at SIGTERM too: nothing more is claimed
        running = hub.enqueue("stamp", {"log": log, "sleep": 2, "started": str(started)})
        wait_until(started.exists)
        pause(0.5)
        agent.signal(signal.SIGTERM)
        wait_until(lambda: "received SIGTERM" in agent.log())
        later = hub.enqueue("stamp", {"log": log})
        assert agent.wait(20) == 0
        assert hub.job(running["id"])["status"] == "completed"
        assert hub.job(later["id"])["attempts_detail"] == []
    finally:
        agent.kill()


def test_an_agent_refuses_a_hub_whose_certificate_it_cannot_verify(
    hub: Hub, tmp_path: Path
) -> None:
    other = make_pki(tmp_path, "other")  # a CA that did not sign the hub's certificate
    job = hub.enqueue("stamp", {"log": str(tmp_path / "log")})
    agent = Agent(hub, "a1", extra=("--ca-file", str(other.ca)))
    try:
        wait_until(lambda: "not trusted: pass --ca-file" in agent.log())
        assert "CERTIFICATE_VERIFY_FAILED" in agent.log()
        assert not agent.registered()
        assert hub.job(job["id"])["attempts"] == 0
    finally:
        agent.kill()


def test_plain_http_to_another_machine_needs_insecure_http(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("x")
    remote = "http://192.0.2.1:8080"  # TEST-NET-1: never this machine
    for args in (["agent", "--hub", remote], ["artifacts", "upload", "file", "--hub", remote]):
        done = run(*args, cwd=tmp_path)
        assert done.returncode == 1
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: --hub http://192.0.2.1:8080 is"), (
            lines
        )
        assert "clear text" in lines[0] and "--insecure-http" in lines[0] and "https" in lines[0]
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        told = subprocess.Popen(
            [*JOBCORE, "agent", "--hub", remote, "--insecure-http", "--cache-dir", "c"],
            cwd=tmp_path,
            env=env(JOBCORE_AGENT_REQUEST_TIMEOUT="1s"),
            stdout=out,
            stderr=out,
        )
    try:
        wait_until(lambda: "cannot register with the hub" in log.read_text())
        told.send_signal(signal.SIGTERM)
        assert told.wait(20) == 0
    finally:
        if told.poll() is None:
            told.kill()
            told.wait()


def test_serve_tls_options_are_checked_before_it_starts(tmp_path: Path, pki: Pki) -> None:
    (tmp_path / "not-a-cert.pem").write_text("nothing here\n")
    key = serialization.load_pem_private_key(pki.key.read_bytes(), None)
    locked = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.BestAvailableEncryption(b"secret"),
    )
    (tmp_path / "locked.key").write_bytes(locked)
    for args, expected in (
        (["--tls-cert", str(pki.cert)], "--tls-cert and --tls-key go together"),
        (["--tls-key", str(pki.key)], "--tls-cert and --tls-key go together"),
        (
            ["--tls-cert", str(tmp_path / "not-a-cert.pem"), "--tls-key", str(pki.key)],
            "cannot load --tls-cert",
        ),
        (["--tls-cert", str(pki.cert), "--tls-key", str(tmp_path / "missing")], "No such file"),
        (  # never a passphrase prompt on the terminal
            ["--tls-cert", str(pki.cert), "--tls-key", str(tmp_path / "locked.key")],
            "passphrase-protected",
        ),
    ):
        done = run("--db", str(tmp_path / "hub.db"), "serve", "--port", "0", *args, cwd=tmp_path)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: ") and expected in lines[0], lines
    assert not (tmp_path / "hub.db").exists()
