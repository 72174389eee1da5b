"""The jobcore plugin API: every hook a plugin may implement.

Plugins are modules or objects with functions decorated `@jobcore.hookimpl`,
registered through the setuptools entry-point group ``jobcore``. Hooks are
always called with keyword arguments; an implementation may accept fewer
arguments than its spec, so hooks evolve only by gaining arguments.

Kinds of hook:

* registration -- `jobcore_register_job_types`, `jobcore_register_commands`
* collecting (every answer is used) -- `jobcore_enqueue_meta`, `jobcore_stats`,
  `jobcore_reconcile`
* decision (firstresult: the first non-None answer wins) --
  `jobcore_storage_backend`, `jobcore_retry_decision`, `jobcore_execute_job`
* wrapper -- implement `jobcore_execute_job` with ``wrapper=True`` to run code
  around every handler call (spans, timing)
* notification (return value ignored; an exception is logged with the
  plugin's name and never fails a job) -- `jobcore_job_*`, `jobcore_worker_*`
* historic -- `jobcore_configure`, replayed to plugins registered later

Hooks are synchronous, also for `async def` handlers (DESIGN §15). Only
`jobcore_execute_job` runs on the worker's event loop (for async job types),
and `jobcore_enqueue_meta` runs there when a handler enqueues children or an
application enqueues from async code: neither may block (no network or disk
waits; a blocked loop stalls every async job of the worker and is logged with
their ids). Notifications run off the loop: the built-in event log's on the
worker's notifier thread, each other plugin's on a thread of its own, in commit
order for that plugin; one stuck in a hook holds up only itself, is reported by
name, and has at most `jobcore.notifier.BACKLOG` notifications waiting (newer
ones for it are dropped and counted) -- see `jobcore.notifier`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    import click

    from jobcore.config import Config
    from jobcore.context import JobContext
    from jobcore.models import Job, NewJob
    from jobcore.queue import Queue
    from jobcore.registry import JobType
    from jobcore.retry import RetryDecision, RetryPolicy
    from jobcore.storage.base import StatsSection, Storage

PROJECT = "jobcore"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -- registration ----------------------------------------------------------


@hookspec
def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
    """Register job types by calling ``register(JobType(...))`` once per type.

    Called once when a `Queue` is built. A name registered twice is an error
    naming both plugins.
    """


@hookspec
def jobcore_register_commands(cli: click.Group) -> None:
    """Add click commands or groups to the ``jobcore`` command line."""


# -- decisions ----------------------------------------------------------------


@hookspec(firstresult=True)
def jobcore_storage_backend(url: str, config: Config, create: bool) -> Storage | None:
    """Return a storage backend for ``url``, or None if this plugin does not handle it.

    firstresult. The built-in answers for ``sqlite:`` URLs and plain paths.
    ``create`` False means the database must already exist (read-only commands
    must not create one as a side effect).
    """


@hookspec(firstresult=True)
def jobcore_retry_decision(
    job: Job, error: BaseException, policy: RetryPolicy
) -> RetryDecision | None:
    """Decide what happens after ``job``'s current attempt raised ``error``.

    firstresult. Return ``RetryDecision.retry_in(seconds)`` or
    ``RetryDecision.fail()``; None defers to the next plugin, ending at the
    built-in exponential-backoff policy. ``job.attempts`` counts the attempt
    that just failed.
    """


@hookspec(firstresult=True)
def jobcore_execute_job(job: Job, ctx: JobContext) -> Any:
    """Run one attempt of ``job`` and return its result.

    firstresult; the built-in calls the job type's handler. Implement it with
    ``wrapper=True`` (a generator that yields once) to run code around every
    attempt: the yield returns the result or raises the handler's exception.
    Runs on the executor thread. For an `async def` handler it runs on the
    worker's event loop and must not block it: the result (what a wrapper's
    yield returns) is then the handler's coroutine, which the worker awaits
    once the hook returned; to act on the awaited outcome, a wrapper returns
    a coroutine of its own that awaits the handler's. If the handler's task
    is cancelled before its first step (a shutdown), that awaitable is never
    awaited: the worker calls its ``close()`` instead, if it has one, so a
    wrapper that holds something until the handler ends (a span) returns an
    awaitable whose ``close()`` lets go of it and closes the awaitable it
    wraps (as the otel plugin's does). When the built-in implementation and
    such wrappers are all this hook has, jobcore calls them itself, in
    pluggy's order and with its semantics (it costs less per job); another
    implementation, an old-style ``hookwrapper`` or hook call monitoring
    (``JOBCORE_TRACE_HOOKS``) puts every call back through pluggy.
    """


@hookspec
def jobcore_enqueue_meta(job: NewJob) -> dict[str, Any] | None:
    """Return extra ``meta`` entries to store with ``job`` at enqueue (e.g. trace context).

    ``job`` is the validated job about to be written. Runs on the enqueuing
    thread (for child jobs: the handler's thread, which for an `async def`
    handler is the event loop: it must not block). The returned dicts are merged.
    """


@hookspec
def jobcore_stats(queue: Queue) -> StatsSection | list[StatsSection] | None:
    """Return this plugin's part of ``jobcore stats`` for ``queue`` (e.g. recurring jobs).

    Collected from every plugin: each `StatsSection`'s ``data`` appears under its
    ``key`` in ``stats --json`` and ``GET /api/stats``, its ``text`` in plain
    ``stats``. Must only read. A key the core or another plugin already has, a
    key or text that is not a string, data that is not JSON, or an exception is
    logged with the plugin's name and that plugin's sections are left out; stats
    still answer.
    """


# -- notifications ---------------------------------------------------------------


@hookspec
def jobcore_job_enqueued(job: Job) -> None:
    """A job was written (after the enqueue transaction committed)."""


@hookspec
def jobcore_job_claimed(job: Job, worker: str) -> None:
    """A worker claimed ``job``; ``job.attempts`` is the attempt about to run."""


@hookspec
def jobcore_job_completed(job: Job, duration_ms: float) -> None:
    """``job`` completed and its outcome is committed."""


@hookspec
def jobcore_job_retrying(job: Job, error: str) -> None:
    """An attempt failed and ``job`` is scheduled to run again at ``job.run_at``."""


@hookspec
def jobcore_job_failed(job: Job, error: str) -> None:
    """``job`` ended ``failed``: attempts exhausted, permanent error, or invalid payload."""


@hookspec
def jobcore_job_reclaimed(job: Job, error: str) -> None:
    """A lease expired and the sweep put ``job`` back to ``pending``."""


@hookspec
def jobcore_job_cancelled(job: Job) -> None:
    """``job`` ended ``cancelled``."""


@hookspec
def jobcore_worker_started(worker: str, queue: Queue) -> None:
    """A worker with id ``worker`` started on ``queue`` (e.g. to observe its depth)."""


@hookspec
def jobcore_worker_stopped(worker: str) -> None:
    """A worker with id ``worker`` stopped; nothing it claimed is still claimed."""


# -- reconcile and configuration ---------------------------------------------------


@hookspec
def jobcore_reconcile(job: Job, config: Config) -> list[str] | None:
    """Return discrepancies between completed ``job`` and the world (empty or None: none).

    Used by ``jobcore reconcile``; must not change anything. Return None for
    jobs of types this plugin does not own.
    """


@hookspec(historic=True)
def jobcore_configure(config: Config) -> None:
    """Called once with the loaded configuration; stateful plugins read their settings here."""
