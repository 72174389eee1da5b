"""`@job_type`: job types declared over their handlers, registered as a plugin module."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from jobcore import JobType, job_type
from jobcore.declare import JobTypeDeclarationError
from jobcore.testing.helpers import drain, make_queue

ROOT = Path(__file__).resolve().parents[2]


def write_module(tmp_path: Path, name: str, body: str) -> None:
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))


@pytest.fixture
def importable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in [m for m in sys.modules if m.startswith("declared_")]:
        del sys.modules[name]


def test_a_module_of_declared_types_is_a_plugin_with_its_defaults(
    importable: Path, tmp_path: Path
) -> None:
    write_module(
        importable,
        "declared_plain",
        """
        from jobcore import JobContext, Payload, job_type

        class Welcome(Payload):
            email: str

        @job_type("send_welcome", max_attempts=5, timeout=30, queue="mail")
        def send_welcome(payload: Welcome, ctx: JobContext) -> str:
            '''Send the welcome mail.

            More text.'''
            return payload.email.upper()

        @job_type("send_async")
        async def send_async(payload: Welcome, ctx: JobContext) -> str:
            return payload.email
        """,
    )
    queue = make_queue(tmp_path / "q.db", modules=["declared_plain"])
    declared = queue.registry.get("send_welcome")
    assert declared is not None
    assert declared.payload_model.__name__ == "Welcome"
    assert (declared.max_attempts, declared.timeout, declared.queue) == (5, 30, "mail")
    assert declared.description == "Send the welcome mail."
    assert queue.registry.owner("send_welcome") == "declared_plain"
    assert queue.registry.owner("send_async") == "declared_plain"
    job = queue.enqueue("send_welcome", {"email": "a@b.c"}).job
    assert job.queue == "mail" and job.max_attempts == 5
    with pytest.raises(Exception, match="email"):
        queue.enqueue("send_welcome", {"mail": "a@b.c"})
    drain(queue)
    done = queue.get(job.id)
    assert (done.status.value, done.result) == ("completed", "A@B.C")


def test_declared_types_beside_the_modules_own_hook_are_all_registered(
    importable: Path, tmp_path: Path
) -> None:
    write_module(
        importable,
        "declared_mixed",
        """
        from jobcore import JobContext, JobType, Payload, hookimpl, job_type

        class P(Payload):
            n: int = 0

        def old_style(payload: P, ctx: JobContext) -> int:
            return payload.n

        @job_type("new_style")
        def new_style(payload: P, ctx: JobContext) -> int:
            return payload.n + 1

        @hookimpl
        def jobcore_register_job_types(register):
            register(JobType(name="old_style", payload_model=P, handler=old_style))
        """,
    )
    queue = make_queue(tmp_path / "q.db", modules=["declared_mixed"])
    assert {"old_style", "new_style"} <= {t.name for t in queue.registry}


def test_the_old_form_keeps_working(tmp_path: Path) -> None:
    queue = make_queue(tmp_path / "q.db")
    assert isinstance(queue.registry.get("noop"), JobType)


def test_bad_declarations_say_what_to_do(importable: Path) -> None:
    def no_annotation(payload, ctx):  # type: ignore[no-untyped-def]
        return None

    with pytest.raises(JobTypeDeclarationError, match="annotate its first parameter"):
        job_type("x")(no_annotation)

    def not_a_model(payload: int, ctx: object) -> None:
        return None

    with pytest.raises(JobTypeDeclarationError, match="annotate its first parameter"):
        job_type("x")(not_a_model)  # type: ignore[arg-type]

    def one_param(payload: int) -> None:
        return None

    with pytest.raises(JobTypeDeclarationError, match=r"takes \(payload: Model, ctx\)"):
        job_type("x")(one_param)  # type: ignore[arg-type]

    write_module(
        importable,
        "declared_twice",
        """
        from jobcore import JobContext, Payload, job_type

        class P(Payload):
            pass

        @job_type("same")
        def a(payload: P, ctx: JobContext) -> None: ...

        @job_type("same")
        def b(payload: P, ctx: JobContext) -> None: ...
        """,
    )
    with pytest.raises(JobTypeDeclarationError, match="declared twice"):
        __import__("declared_twice")
    with pytest.raises(JobTypeDeclarationError, match="non-empty name"):
        job_type("")


def test_mypy_sees_the_payload_type(tmp_path: Path) -> None:
    """The typing module passes mypy (tox's typing env checks it too); a misuse does not."""
    bad = tmp_path / "bad_usage.py"
    bad.write_text(
        textwrap.dedent(
            """
            from jobcore import JobContext, Payload, job_type

            class Welcome(Payload):
                email: str

            @job_type("w")
            async def send(payload: Welcome, ctx: JobContext) -> None:
                payload.emial  # a typo mypy must catch

            @job_type("not_a_handler")
            def wrong(payload: Welcome) -> None: ...

            def call(ctx: JobContext) -> None:
                send(Payload(), ctx)  # not a Welcome
            """
        )
    )
    good = ROOT / "tests" / "typing" / "job_types.py"
    cache = tmp_path / "mypy-cache"
    run = [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(cache)]
    ok = subprocess.run([*run, str(good)], capture_output=True, text=True, cwd=ROOT)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    failed = subprocess.run([*run, str(bad)], capture_output=True, text=True, cwd=ROOT)
    assert '"Welcome" has no attribute "emial"' in failed.stdout
    assert 'Value of type variable "H" of function cannot be' in failed.stdout
    assert 'has incompatible type "Payload"; expected "Welcome"' in failed.stdout


def test_a_reloaded_module_declares_its_types_again(importable: Path) -> None:
    write_module(
        importable,
        "declared_reloaded",
        """
        from jobcore import JobContext, Payload, job_type

        class P(Payload):
            n: int = 0

        @job_type("reloaded", max_attempts=2)
        def handle(payload: P, ctx: JobContext) -> int:
            return payload.n
        """,
    )
    module = importlib.import_module("declared_reloaded")
    module = importlib.reload(module)  # re-runs its declarations: not a second declaration
    queue = make_queue(str(importable / "jobs.db"), modules=["declared_reloaded"])
    declared = queue.registry.get("reloaded")
    assert declared is not None and declared.handler is module.handle
    assert declared.payload_model is module.P  # the reloaded model, not the stale one
    assert [t.name for t in module.__jobcore_job_types__] == ["reloaded"]
    queue.close()
