"""claude plugin, api backend: hostile or broken answers over real HTTP from the stub.

Answers of any size, huge error pages, errors inside a stream, streams cut
short, answers cut at max_tokens, a target below a file, and error messages
that quote the credentials: each fails as DESIGN §9 says, and nothing is written.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore_claude
import pytest
from anthropic_stub import StubServer
from jobcore_claude.backends import ANSWER_LIMIT, ERROR_LIMIT, MESSAGE_LIMIT
from testenv import wait_for

from jobcore import Queue
from jobcore.testing import drain

MakeQueue = Callable[..., Queue]
KEY = "sk-ant-api03-SECRET-key-0123456789"
TARGET = "answers/colours.md"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    folder = tmp_path / "out"
    folder.mkdir()
    return folder


@pytest.fixture(autouse=True)
def api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    monkeypatch.setenv("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")


@pytest.fixture
def make(jobcore_make_queue: MakeQueue, anthropic_stub: StubServer, root: Path) -> MakeQueue:
    def factory(**claude: Any) -> Queue:
        settings = {"backend": "api", "base_url": anthropic_stub.base_url, **claude}
        return jobcore_make_queue(
            jobcore_claude,
            backoff_base=0,
            plugin_settings={"claude": settings, "files": {"root": str(root)}},
        )

    return factory


def extract(queue: Queue, target: str = TARGET, **options: Any) -> dict[str, Any]:
    job = queue.enqueue(
        "claude_extraction", {"prompt": "List the colours", "target_path": target}, **options
    ).job
    drain(queue)
    return queue.get(job.id).to_json()


@pytest.mark.parametrize(
    ("stream", "length"),
    [(False, True), (False, False), (True, False)],
    ids=["json", "json-no-length", "stream"],
)
def test_an_answer_over_the_limit_is_not_read_whole_and_fails(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, stream: bool, length: bool
) -> None:
    """It was read whole into memory and written whole (150 MiB: RSS 725 MiB)."""
    size = 2 * ANSWER_LIMIT
    anthropic_stub.huge_next(size, length=length)
    job = extract(make(stream=stream))
    assert job["status"] == "failed" and job["attempts"] == 1, job["last_error"]
    assert job["last_error"].startswith(
        "PermanentError: Claude API answer is larger than 32 MiB"
    ), job["last_error"]
    assert not (root / TARGET).exists()
    wait_for(lambda: anthropic_stub.answered == 1, timeout=30)
    assert anthropic_stub.sent < ANSWER_LIMIT + 16 * 1024 * 1024  # the client stopped reading


def test_an_answer_within_the_limit_is_written(
    make: MakeQueue, anthropic_stub: StubServer, root: Path
) -> None:
    anthropic_stub.huge_next(3 * 1024 * 1024, length=False)
    job = extract(make())
    assert job["status"] == "completed", job["last_error"]
    assert (root / TARGET).stat().st_size == 3 * 1024 * 1024


@pytest.mark.parametrize("status", [400, 503])
def test_a_huge_error_page_is_not_read_whole(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, status: int
) -> None:
    """The SDK read a 100 MiB error page whole (RSS 512 MiB) into the job's error."""
    anthropic_stub.error_body_next(status, 64 * 1024 * 1024)
    job = extract(make())
    wait_for(lambda: anthropic_stub.answered == len(anthropic_stub.message_requests()), timeout=30)
    assert anthropic_stub.sent < 16 * 1024 * 1024 + ERROR_LIMIT  # the client stopped reading
    if status == 400:
        assert job["status"] == "failed" and job["attempts"] == 1
        assert not (root / TARGET).exists()
    else:  # still retried: its status says so
        assert job["status"] == "completed" and job["attempts"] == 2
    error = job["errors"][0]["error"]
    kind = "PermanentError" if status == 400 else "TransientClaudeError"
    assert error.startswith(f"{kind}: Claude API {status}: EEEE"), error[:100]
    assert len(error) <= len(f"{kind}: ") + MESSAGE_LIMIT


def test_a_compressed_answer_is_not_inflated(
    make: MakeQueue, anthropic_stub: StubServer, root: Path
) -> None:
    """jobcore asks for no compression: 40 KiB of gzip would inflate to the 40 MiB answer."""
    anthropic_stub.gzip_next(40 * 1024 * 1024)
    job = extract(make())
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "Content-Encoding gzip" in job["last_error"]
    [request] = anthropic_stub.message_requests()
    assert request.headers["accept-encoding"] == "identity"
    assert not (root / TARGET).exists()


@pytest.mark.parametrize("error_type", ["overloaded_error", "rate_limit_error", "api_error"])
def test_an_overload_inside_a_stream_is_retried(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, error_type: str
) -> None:
    """An `event: error` after the 200 was a permanent failure (retryable_status(200) is false)."""
    anthropic_stub.stream_error_next(error_type)
    job = extract(make(stream=True))
    assert job["status"] == "completed" and job["attempts"] == 2, job["last_error"]
    error = job["errors"][0]["error"]
    assert (
        error
        == f"TransientClaudeError: Claude API error mid-stream ({error_type}): stub {error_type}"
    )
    assert (root / TARGET).read_text() == "EXTRACTED: List the colours"


def test_a_request_error_inside_a_stream_is_permanent(
    make: MakeQueue, anthropic_stub: StubServer, root: Path
) -> None:
    anthropic_stub.stream_error_next("invalid_request_error")
    job = extract(make(stream=True))
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "mid-stream (invalid_request_error)" in job["last_error"]
    assert not (root / TARGET).exists()


@pytest.mark.parametrize("chunked", [False, True], ids=["close-delimited", "chunked"])
def test_a_stream_cut_before_message_stop_is_retried_and_nothing_is_written(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, chunked: bool
) -> None:
    """The partial text of a cut stream was written as the answer (close-delimited) or
    escaped as an httpx RemoteProtocolError traceback (chunked)."""
    anthropic_stub.cut_next(chunked=chunked)
    job = extract(make(stream=True), max_attempts=1)
    assert job["status"] == "failed" and job["attempts"] == 1
    assert job["last_error"].startswith("TransientClaudeError: Claude API "), job["last_error"]
    assert not (root / TARGET).exists()
    anthropic_stub.cut_next(chunked=chunked)
    job = extract(make(stream=True), target="again.md")
    assert job["status"] == "completed" and job["attempts"] == 2
    assert (root / "again.md").read_text() == "EXTRACTED: List the colours"


@pytest.mark.parametrize("stream", [False, True], ids=["json", "stream"])
def test_an_answer_cut_at_max_tokens_fails_permanently(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, stream: bool
) -> None:
    """It was written as a complete answer. Not retried: the same prompt is cut again."""
    anthropic_stub.reply_next("REQ-1: the first", stop_reason="max_tokens")
    job = extract(make(stream=stream, max_tokens=16))
    assert job["status"] == "failed" and job["attempts"] == 1
    assert "cut at max_tokens=16" in job["last_error"]
    assert "JOBCORE_CLAUDE_MAX_TOKENS" in job["last_error"]
    assert not (root / TARGET).exists()


@pytest.mark.parametrize("target", ["afile/x.md", "a/afile/deeper/x.md"])
def test_a_target_below_a_file_fails_before_the_call(
    make: MakeQueue, anthropic_stub: StubServer, root: Path, target: str
) -> None:
    """Each of the 5 attempts paid for a call, then failed writing (NotADirectoryError)."""
    folder = root / target.rsplit("afile", 1)[0]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "afile").write_text("a file")
    job = extract(make(), target=target)
    assert job["status"] == "failed" and job["attempts"] == 1
    component = target.split("afile")[0] + "afile"
    assert job["last_error"] == (
        f"PermanentError: {component} is not a folder, so {target} cannot be written below it"
    )
    assert anthropic_stub.message_requests() == []
    assert (folder / "afile").read_text() == "a file"


def test_an_error_message_is_the_apis_own_cut_and_without_credentials(
    make: MakeQueue, anthropic_stub: StubServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The SDK's whole `Error code: 401 - {body}` went into last_error and the `failed`
    log line, with the key a gateway quoted back."""
    anthropic_stub.echo_key_next(401)
    with caplog.at_level(logging.INFO):
        job = extract(make())
    assert job["status"] == "failed" and job["attempts"] == 1
    error = job["last_error"]
    assert error.startswith(
        "PermanentError: Claude API 401 (authentication_error): invalid credentials: "
    ), error
    assert "; key [redacted] unknown (Authorization: Bearer [redacted]) xxx" in error, error
    assert len(error) <= len("PermanentError: ") + MESSAGE_LIMIT
    [failed] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("failed ")]
    for text in (error, failed, str(job["errors"])):
        assert KEY not in text and "gw-token-42" not in text and "Error code" not in text
    assert "[redacted]" in failed


def test_the_cli_backend_keeps_credentials_out_of_its_errors_too(
    make: MakeQueue, anthropic_stub: StubServer, claude_bin: str
) -> None:
    """Claude Code quotes the API's error message, key and all, in its `result`."""
    anthropic_stub.echo_key_next(401)
    job = extract(make(backend="cli", bin=claude_bin), max_attempts=1)
    assert job["status"] == "failed" and job["attempts"] == 1
    error = job["last_error"]
    assert error.startswith("PermanentError: claude failed (status 401): "), error
    assert "[redacted]" in error and KEY not in error and "gw-token-42" not in error
