"""`greet`: append a greeting to a file. An example of a third-party jobcore plugin."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Literal

from pydantic import Field

from jobcore import JobContext, JobType, Payload, PermanentError, hookimpl


class Greet(Payload):
    name: str = Field(min_length=1, max_length=100)
    greetings_file: str
    language: Literal["en", "fr", "de"] = "en"


HELLO = {"en": "Hello", "fr": "Bonjour", "de": "Hallo"}


def greet(payload: Greet, ctx: JobContext) -> dict[str, str]:
    if payload.name.lower() == "nobody":
        raise PermanentError("cannot greet nobody")
    line = f"{HELLO[payload.language]}, {payload.name}! ({ctx.job.id})\n"
    # idempotent: a re-run after a crash does not greet twice
    try:
        with open(payload.greetings_file, encoding="utf-8") as handle:
            if line in handle.read():
                return {"greeting": line.strip(), "repeated": "yes"}
    except FileNotFoundError:
        pass
    with open(payload.greetings_file, "a", encoding="utf-8") as handle:
        handle.write(line)
        handle.flush()
        os.fsync(handle.fileno())
    return {"greeting": line.strip()}


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(JobType(name="greet", payload_model=Greet, handler=greet, max_attempts=4))
