"""A job-type plugin: `send_welcome` writes a welcome note for a new user.

A plugin is any module (or object) with `@hookimpl` functions. Installed
packages register it under the `jobcore` entry-point group; for a local
module, name it in `JOBCORE_PLUGINS` (as the example below does) or pass it
to `make_plugin_manager(plugins=[...])`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import Field

from jobcore import JobContext, JobType, Payload, PermanentError, hookimpl


class WelcomePayload(Payload):
    user_id: int = Field(gt=0)
    email: str = Field(pattern=r"^[^@\s]+@[^@\s]+$")
    outbox_dir: str


def send_welcome(payload: WelcomePayload, ctx: JobContext) -> dict[str, str]:
    folder = Path(payload.outbox_dir)
    if not folder.is_dir():
        raise PermanentError(f"outbox folder {folder} does not exist")
    note = folder / f"welcome-{payload.user_id}.txt"
    note.write_text(
        f"To: {payload.email}\nWelcome aboard! (job {ctx.job.id}, attempt {ctx.attempt})\n"
    )
    ctx.logger.info("wrote %s", note)
    return {"note": str(note)}


@hookimpl
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    register(
        JobType(
            name="send_welcome",
            payload_model=WelcomePayload,
            handler=send_welcome,
            max_attempts=5,
            timeout=30,
            # one welcome per user, however often the signup code retries
            idempotency_key=lambda payload: f"user-{payload.user_id}",
        )
    )
