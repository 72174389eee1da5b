"""Built-in lifecycle log: one record per event on the `jobcore.events` logger.

Events are logged at INFO, the CLI's default level. Building them is kept
cheap because a busy worker logs two per job: when jobcore's own stderr
handler is the only one listening (the CLI) an event goes straight to it as a
line, without a LogRecord; otherwise the record is made without a caller
lookup and its text is built only if a formatter asks for it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from typing import Any

from jobcore.hookspecs import hookimpl
from jobcore.logs import EVENT_ATTR, EVENT_LOGGER, direct_event_handler, event_text
from jobcore.models import Job

log = logging.getLogger(EVENT_LOGGER)


class EventMessage:
    """An event's text message (`logs.event_text`), built when first asked for."""

    __slots__ = ("_text", "fields")

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        self._text: str | None = None

    def __str__(self) -> str:
        if self._text is None:
            self._text = event_text(self.fields)
        return self._text


_PER_RECORD = ("created", "msecs", "relativeCreated", "msg")
_local = threading.local()
_LOGGING_STARTED: float = getattr(logging, "_startTime", time.time())  # for relativeCreated


def _record(fields: dict[str, Any]) -> logging.LogRecord:
    """A LogRecord as `Logger.makeRecord` would make it, from a per-thread template."""
    template: dict[str, Any] | None = getattr(_local, "template", None)
    if template is None or template["process"] != os.getpid():
        made = logging.LogRecord(log.name, logging.INFO, __file__, 0, "", (), None)
        template = {k: v for k, v in made.__dict__.items() if k not in _PER_RECORD}
        _local.template = template
    record = logging.LogRecord.__new__(logging.LogRecord)
    attributes = record.__dict__
    attributes.update(template)
    created = time.time()
    attributes["created"] = created
    attributes["msecs"] = int((created - int(created)) * 1000) + 0.0
    attributes["relativeCreated"] = (created - _LOGGING_STARTED) * 1000
    attributes["msg"] = EventMessage(fields)
    attributes[EVENT_ATTR] = fields
    return record


def _emit(event: str, job: Job, worker: str | None = None, **extra: Any) -> None:
    if not log.isEnabledFor(logging.INFO):
        return
    fields: dict[str, Any] = {
        "event": event,
        "job_id": job.id,
        "type": job.type,
        "queue": job.queue,
        "attempt": job.attempts,
        "worker": worker or job.locked_by or (job.errors[-1].get("worker") if job.errors else None),
    }
    for key, value in extra.items():
        if value is not None:
            fields[key] = value
    direct = direct_event_handler(log)
    if direct is not None:  # only jobcore's own stderr handler listens: no LogRecord needed
        direct.emit_event(time.time(), fields)
        return
    if logging.getLogRecordFactory() is logging.LogRecord:
        record = _record(fields)
    else:  # the application installed its own record factory: use it
        record = log.makeRecord(
            log.name,
            logging.INFO,
            __file__,
            0,
            EventMessage(fields),
            (),
            None,
            extra={EVENT_ATTR: fields},
        )
    log.handle(record)


@hookimpl(trylast=True)
def jobcore_job_enqueued(job: Job) -> None:
    _emit("enqueued", job)


@hookimpl(trylast=True)
def jobcore_job_claimed(job: Job, worker: str) -> None:
    _emit("claimed", job, worker)


@hookimpl(trylast=True)
def jobcore_job_completed(job: Job, duration_ms: float) -> None:
    _emit("completed", job, duration_ms=round(duration_ms, 3))


@hookimpl(trylast=True)
def jobcore_job_retrying(job: Job, error: str) -> None:
    _emit("retrying", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_failed(job: Job, error: str) -> None:
    _emit("failed", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_reclaimed(job: Job, error: str) -> None:
    _emit("reclaimed", job, error=error)


@hookimpl(trylast=True)
def jobcore_job_cancelled(job: Job) -> None:
    _emit("cancelled", job)
