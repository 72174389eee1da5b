"""claude plugin: both backends for real against a local Messages API stub over HTTP."""

from __future__ import annotations

import hashlib
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore_claude
import pytest
from anthropic_stub import StubServer

from jobcore import InvalidPayload, Queue
from jobcore.testing import drain
from jobcore.timeutil import now_ms

MakeQueue = Callable[..., Queue]
PROMPT = "List the colours in: the sky is blue and the grass is green"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test-dummy")
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")


@pytest.fixture(params=["api-json", "api-stream", "cli"])
def backend(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "cli":
        return {"backend": "cli", "bin": request.getfixturevalue("claude_bin")}
    return {"backend": "api", "stream": request.param == "api-stream"}


@pytest.fixture
def make(
    jobcore_make_queue: MakeQueue, anthropic_stub: StubServer, root: Path
) -> Callable[..., Queue]:
    def factory(**claude: Any) -> Queue:
        settings = {"base_url": anthropic_stub.base_url, "model": "claude-test-model", **claude}
        return jobcore_make_queue(
            jobcore_claude, plugin_settings={"claude": settings, "files": {"root": str(root)}}
        )

    return factory


def extract(queue: Queue, **payload: Any) -> dict[str, Any]:
    job = queue.enqueue(
        "claude_extraction", {"prompt": PROMPT, "target_path": "answers/colours.md", **payload}
    ).job
    drain(queue)
    return queue.get(job.id).to_json()


def test_success_writes_the_answer_atomically(
    make: Callable[..., Queue], backend: dict[str, Any], root: Path, anthropic_stub: StubServer
) -> None:
    job = extract(make(**backend))
    assert job["status"] == "completed", job["last_error"]
    written = (root / "answers/colours.md").read_text()
    assert written == f"EXTRACTED: {PROMPT}"
    assert job["result"]["sha256"] == hashlib.sha256(written.encode()).hexdigest()
    assert job["result"]["backend"] == backend["backend"]
    [request] = anthropic_stub.message_requests()
    assert request.body["model"] == "claude-test-model"
    credentials = (request.headers.get("x-api-key"), request.headers.get("authorization"))
    assert "sk-test-dummy" in credentials or "Bearer sk-test-dummy" in credentials
    if backend.get("stream") or backend["backend"] == "cli":
        assert request.body.get("stream") is True


def test_server_errors_and_overload_are_retried(
    make: Callable[..., Queue], backend: dict[str, Any], root: Path, anthropic_stub: StubServer
) -> None:
    anthropic_stub.fail_next(529)
    anthropic_stub.fail_next(500)
    job = extract(make(**backend))
    assert job["status"] == "completed" and job["attempts"] == 3
    assert ["529" in job["errors"][0]["error"], "500" in job["errors"][1]["error"]] == [True, True]
    assert len(anthropic_stub.message_requests()) == 3  # the queue retried, not the client


def test_rate_limit_honours_retry_after(
    make: Callable[..., Queue], anthropic_stub: StubServer
) -> None:
    anthropic_stub.fail_next(429, retry_after="7")
    before = now_ms()
    job = extract(make(backend="api"))
    assert job["status"] == "scheduled" and job["attempts"] == 1
    assert "429" in job["last_error"]
    waiting = make(backend="api").get(job["id"])
    assert before + 7000 <= waiting.run_at <= now_ms() + 7000


@pytest.mark.parametrize("header", ["inf", "1e400", "99999999999999999999"])
def test_a_huge_retry_after_is_clamped_to_max_retry_delay(
    make: Callable[..., Queue], anthropic_stub: StubServer, header: str
) -> None:
    """Issue 8 defect 1: a header from outside can no longer stall or jam the worker."""
    anthropic_stub.fail_next(429, retry_after=header)
    before = now_ms()
    job = extract(make(backend="api"))
    assert job["status"] == "scheduled" and job["attempts"] == 1
    week = 7 * 86_400_000
    waiting = make(backend="api").get(job["id"])
    assert before + week <= waiting.run_at <= now_ms() + week


def test_a_nan_retry_after_retries_at_once(
    make: Callable[..., Queue], anthropic_stub: StubServer
) -> None:
    anthropic_stub.fail_next(429, retry_after="nan")
    job = extract(make(backend="api"))
    assert job["status"] == "completed" and job["attempts"] == 2


def test_rate_limit_from_the_cli_is_retried(
    make: Callable[..., Queue], claude_bin: str, anthropic_stub: StubServer
) -> None:
    anthropic_stub.fail_next(429, retry_after="0")
    job = extract(make(backend="cli", bin=claude_bin))
    assert job["status"] == "completed" and job["attempts"] == 2
    assert "status 429" in job["errors"][0]["error"]


def test_client_errors_fail_permanently(
    make: Callable[..., Queue], backend: dict[str, Any], root: Path, anthropic_stub: StubServer
) -> None:
    anthropic_stub.fail_next(400)
    job = extract(make(**backend))
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "400" in job["last_error"]
    assert not (root / "answers/colours.md").exists()


def test_missing_api_key_and_missing_binary_are_permanent(
    make: Callable[..., Queue], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY")
    job = extract(make(backend="api"))
    assert (
        job["status"] == "failed"
        and job["attempts"] == 1
        and "ANTHROPIC_API_KEY" in job["last_error"]
    )
    job = extract(make(backend="cli", bin="no-such-claude-binary"), requirement_id="other")
    assert (
        job["status"] == "failed"
        and job["attempts"] == 1
        and "not found on PATH" in job["last_error"]
    )


def test_unreachable_api_is_retried(jobcore_make_queue: MakeQueue, root: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed_port = sock.getsockname()[1]
    queue = jobcore_make_queue(
        jobcore_claude,
        plugin_settings={
            "claude": {
                "backend": "api",
                "base_url": f"http://127.0.0.1:{closed_port}",
                "timeout": 5,
            },
            "files": {"root": str(root)},
        },
    )
    job = extract(queue, requirement_id="r1")
    assert (
        job["status"] == "failed" and job["attempts"] == 5
    )  # the type's max_attempts, all retried
    assert "unreachable" in job["errors"][0]["error"]


def test_payload_names_hash_and_idempotency(make: Callable[..., Queue]) -> None:
    queue = make(backend="api")
    digest = hashlib.sha256(PROMPT.encode()).hexdigest()
    first = queue.enqueue("claude_extraction", {"prompt": PROMPT, "targetPath": "a.md"})
    assert first.job.payload == {
        "prompt": PROMPT,
        "target_path": "a.md",
        "requirement_id": None,
        "prompt_hash": digest,
    }
    assert first.job.idempotency_key == digest
    again = queue.enqueue(
        "claude_extraction", {"prompt": PROMPT, "target_path": "b.md", "promptHash": digest}
    )
    assert again.created is False and again.job.id == first.job.id
    by_requirement = queue.enqueue(
        "claude_extraction", {"prompt": "p", "target_path": "c.md", "requirementId": "REQ-7"}
    )
    same_requirement = queue.enqueue(
        "claude_extraction",
        {"prompt": "other prompt", "target_path": "d.md", "requirement_id": "REQ-7"},
    )
    assert by_requirement.job.idempotency_key == "REQ-7" and same_requirement.created is False


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        (
            {"prompt": PROMPT, "target_path": "a.md", "prompt_hash": "0" * 64},
            "prompt_hash does not match",
        ),
        ({"prompt": "", "target_path": "a.md"}, "prompt"),
        ({"prompt": " \n\t", "target_path": "a.md"}, "prompt: .*only whitespace"),
        ({"prompt": PROMPT}, "target_path"),
        ({"prompt": PROMPT, "target_path": "../a.md"}, r"^target_path: '\.\./a\.md' is outside"),
        ({"prompt": PROMPT, "targetPath": "x" * 256}, "target_path: the name 'xxx"),
        ({"prompt": PROMPT, "target_path": "a.md", "temperature": 1}, "temperature: unknown field"),
    ],
)
def test_bad_payloads(make: Callable[..., Queue], payload: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPayload, match=message):
        make(backend="api").enqueue("claude_extraction", payload)


@pytest.mark.parametrize(
    "body",
    [
        b'{"type": "error", "error": {"type": "api_error", "message": "boom"}}',
        b"<html>a proxy's page</html>",
        b"[1, 2]",
        b'{"type": "message", "content": [{"type": "text", "text": {"not": "text"}}]}',
    ],
)
def test_a_malformed_answer_is_retried_with_a_clear_error(
    make: Callable[..., Queue], root: Path, anthropic_stub: StubServer, body: bytes
) -> None:
    """A 200 that is not a message (a proxy's page, an error object) is a transient error
    saying so; it was a TypeError or JSONDecodeError traceback, and nothing is written."""
    anthropic_stub.raw_next(body)
    queue = make(backend="api")
    created = queue.enqueue(
        "claude_extraction",
        {"prompt": PROMPT, "target_path": "answers/colours.md"},
        max_attempts=1,
    ).job
    drain(queue)
    job = queue.get(created.id).to_json()
    assert job["status"] == "failed"
    assert job["last_error"].startswith(
        "TransientClaudeError: Claude API answered 200 without a message"
    ), job["last_error"]
    assert not (root / "answers/colours.md").exists()


def test_rerun_overwrites_with_the_new_answer(
    make: Callable[..., Queue], root: Path, anthropic_stub: StubServer
) -> None:
    queue = make(backend="api")
    anthropic_stub.reply_next("first answer")
    extract(queue)
    anthropic_stub.reply_next("second answer")
    job = extract(queue)
    assert (
        job["status"] == "completed"
        and (root / "answers/colours.md").read_text() == "second answer"
    )
