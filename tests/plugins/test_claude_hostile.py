"""claude plugin, api backend: hostile or broken answers over real HTTP from the stub.

Answers of any size, huge error pages, errors inside a stream, streams cut
short, answers cut at max_tokens, a target below a file, and error messages
that quote the credentials: each fails as DESIGN §9 says, and nothing is written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import jobcore_claude
import pytest
from anthropic_stub import StubServer

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
