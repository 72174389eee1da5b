"""jobcore plugin `shell`: run a command (through /bin/sh) or an argv list."""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, field_validator, model_validator

from jobcore import (
    Interrupted,
    JobContext,
    JobcoreError,
    JobType,
    Payload,
    PermanentError,
    hookimpl,
)
from jobcore.timeutil import parse_duration
from jobcore_shell.runner import check_output_limit, kept_bytes, run_command

Duration = Annotated[float, BeforeValidator(parse_duration), Field(gt=0)]

MAX_ARG_STRLEN = 131072  # Linux: the longest single argv or environment string, NUL included


def os_string(value: str, what: str, *, limit: int = MAX_ARG_STRLEN) -> str:
    """`value` as the kernel can take it in argv, envp or a path: no NUL, encodable, bounded."""
    if "\0" in value:
        raise ValueError(f"{what} contains a NUL character, which no program can receive")
    try:
        size = len(os.fsencode(value))
    except UnicodeEncodeError:
        raise ValueError(f"{what} holds a lone surrogate, which cannot be encoded") from None
    if size >= limit:
        raise ValueError(f"{what} is {size} bytes; the kernel takes at most {limit - 1}")
    return value


class ShellPayload(Payload):
    command: str | None = Field(default=None, min_length=1, description="run through /bin/sh -c")
    argv: list[str] | None = Field(default=None, min_length=1, description="run without a shell")
    cwd: str | None = None
    env: dict[str, str] | None = Field(
        default=None, description="added to the worker's environment"
    )
    timeout: Duration | None = None
    output_limit: int = Field(
        default=65536,
        ge=0,
        description="bytes kept per stream (the tail); at most 16 MiB, and at run time "
        "no more than max_result_bytes",
    )

    @field_validator("command")
    @classmethod
    def _command(cls, value: str | None) -> str | None:
        return None if value is None else os_string(value, "the command")

    @field_validator("argv")
    @classmethod
    def _argv(cls, value: list[str] | None) -> list[str] | None:
        for index, item in enumerate(value or ()):
            os_string(item, f"element {index}")
        return value

    @field_validator("cwd")
    @classmethod
    def _cwd(cls, value: str | None) -> str | None:
        return None if value is None else os_string(value, "the path", limit=4096)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        for name, item in (value or {}).items():
            if not name or "=" in name:
                raise ValueError(f"variable name {name!r} is empty or holds '='")
            os_string(name, f"variable name {name!r}")
            os_string(f"{name}={item}", f"variable {name!r}")
        return value

    @model_validator(mode="after")
    def _one_of(self) -> ShellPayload:
        if (self.command is None) == (self.argv is None):
            raise ValueError("give exactly one of command or argv")
        return self


NEVER_STARTS = {errno.E2BIG, errno.ENOEXEC, errno.ENAMETOOLONG, errno.ELOOP, errno.EISDIR}


class CommandFailed(JobcoreError):
    """The command exited non-zero (retryable; an expected failure, logged without a traceback)."""


def tail(text: str, limit: int = 500) -> str:
    text = text.strip()
    return text if len(text) <= limit else "…" + text[-limit:]


def run_shell(payload: ShellPayload, ctx: JobContext) -> dict[str, Any]:
    args = payload.command if payload.command is not None else payload.argv
    assert args is not None
    try:
        finished = run_command(
            args,
            shell=payload.command is not None,
            cwd=payload.cwd,
            env=payload.env,
            timeout=payload.timeout,
            output_limit=kept_bytes(payload.output_limit, ctx.config.core.max_result_bytes),
            should_stop=lambda: ctx.stop_reason,
        )
    except FileNotFoundError as exc:
        raise PermanentError(f"cannot run {args!r}: {exc.strerror}: {exc.filename}") from None
    except NotADirectoryError as exc:
        raise PermanentError(f"cannot run {args!r}: cwd {payload.cwd!r}: {exc.strerror}") from None
    except PermissionError as exc:
        raise PermanentError(f"cannot run {args!r}: {exc.strerror}: {exc.filename}") from None
    except OSError as exc:
        if exc.errno in NEVER_STARTS:
            raise PermanentError(f"cannot run the command: {exc.strerror}") from None
        raise  # out of processes or memory: may work next time
    result = {
        "exit_code": finished.exit_code,
        "stdout": finished.stdout.text(),
        "stderr": finished.stderr.text(),
        "duration_ms": round(finished.duration_ms, 3),
        "truncated": finished.stdout.truncated or finished.stderr.truncated,
    }
    if finished.stopped == "timeout":
        raise TimeoutError(
            f"command timed out after {payload.timeout:g}s; process group killed; "
            f"stderr: {tail(finished.stderr.text())}"
        )
    if finished.stopped is not None:
        raise Interrupted(f"command stopped ({finished.stopped}); process group killed")
    if finished.exit_code != 0:
        raise CommandFailed(
            f"exit code {finished.exit_code}; stderr: {tail(finished.stderr.text())}"
        )
    return result


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="shell",
            payload_model=ShellPayload,
            handler=run_shell,
            description="run a command; non-zero exit retries",
            check=check_output_limit,
        )
    )
