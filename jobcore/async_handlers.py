"""Running one attempt of an `async def` handler on the worker's event loop (DESIGN §15).

The same judgement as the sync path (`jobcore.attempt.AttemptRunner`): the
payload validated first, the result bounded, exceptions turned into retry or
failure by the retry policy, `RetryAfter` and `PermanentError` honoured. The
handler runs as its own task, so a stop request (timeout, cancel, shutdown, a
lost lease) cancels it at once: `CancelledError` in the handler, judged by why
it was asked to stop (shutdown: released without spending the attempt).
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jobcore.attempt import AttemptRunner, describe_error
from jobcore.inflight import Attempt
from jobcore.models import Cancelled, Completed, Failed, Outcome, Released

log = logging.getLogger("jobcore.worker")


def is_async_handler(handler: Callable[..., Any]) -> bool:
    """An `async def` function, or an object whose `__call__` is one."""
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        getattr(handler, "__call__", None)  # noqa: B004 - the method, not callable()
    )


async def run_attempt(
    runner: AttemptRunner,
    attempt: Attempt,
    started: Callable[[asyncio.Future[Any]], None],
) -> Outcome:
    """Run the attempt's handler on this loop and judge it; never raises.

    `started(task)` is told the handler's task once it exists (to cancel it later).
    One coroutine frame per attempt besides the handler's task (memory per job in flight).
    """
    job, ctx = attempt.job, attempt.ctx
    try:
        try:
            ctx.payload = runner.queue.validate_payload(ctx.job_type, job.payload)
        except BaseException as exc:
            return Failed(lease=attempt.lease, error=f"cannot start: {describe_error(exc)}")
        try:
            plan = runner.plan()
            if plan.direct:
                result = ctx.job_type.handler(ctx.payload, ctx)
            else:  # wrappers run here, on the loop, around the call that makes the coroutine
                result = runner.call_hook(job, ctx, plan)
            if inspect.isawaitable(result):
                unbegun = [result]  # emptied by the task's first step
                task = asyncio.ensure_future(_contained(unbegun))
                started(task)
                ctx.on_stop(_canceller(task))  # a timeout, cancel request or shutdown: at once
                try:
                    result = await task
                finally:
                    if unbegun and task.done():  # cancelled before its first step
                        _close_unbegun(unbegun.pop(), job.id)
            result = runner.bounded_result(job, result)
        except GeneratorExit:  # this coroutine closed (the loop ending); the handler's is _Escaped
            raise
        except BaseException as exc:  # CancelledError too: it is the handler's task that ended
            return _ended_by(runner, attempt, exc)
        if ctx.stop_reason == "cancel":
            return Cancelled(lease=attempt.lease, error="cancelled while running")
        if ctx.stop_reason == "timeout":
            return runner.timeout_outcome(attempt)
        return Completed(lease=attempt.lease, result=result, children=ctx.judged())
    except GeneratorExit:
        raise
    except BaseException as exc:  # the last guard: the loop must go on
        return Failed(
            lease=attempt.lease,
            error=f"jobcore could not judge the attempt: {describe_error(exc)}",
        )


def _ended_by(runner: AttemptRunner, attempt: Attempt, exc: BaseException) -> Outcome:
    if isinstance(exc, _Escaped):
        exc = exc.original
    if isinstance(exc, asyncio.CancelledError) and attempt.ctx.stop_reason == "shutdown":
        return Released(lease=attempt.lease)
    return runner.failure_outcome(attempt, exc)


def _canceller(task: asyncio.Future[Any]) -> Callable[[str], None]:
    """Cancels `task` from whichever thread asks the attempt to stop."""
    loop = task.get_loop()

    def cancel(_: str) -> None:
        with contextlib.suppress(RuntimeError):  # the loop closed: the task is gone
            loop.call_soon_threadsafe(task.cancel)

    return cancel


class _Escaped(Exception):
    """A handler's BaseException other than CancelledError (SystemExit, KeyboardInterrupt,
    GeneratorExit, its own subclasses), carried as an ordinary exception."""

    def __init__(self, original: BaseException) -> None:
        super().__init__(describe_error(original))
        self.original = original


def _close_unbegun(awaitable: Awaitable[Any], job_id: str) -> None:
    """The hook's awaitable, never awaited: its task was cancelled before its first step (a
    shutdown cancels every handler's task at once). Its `close()` (if any) lets go of what
    it holds (a wrapper's span, DESIGN §15); for a coroutine, no "never awaited" warning."""
    close = getattr(awaitable, "close", None)
    if callable(close):
        try:
            close()
        except Exception:  # a wrapper's bug; the attempt is judged as cancelled anyway
            log.exception("job %s: closing its never-started handler raised", job_id)


async def _contained(unbegun: list[Awaitable[Any]]) -> Any:
    """The handler's coroutine (taken from `unbegun` at the first step, so what is left there
    was never awaited), with every BaseException but CancelledError turned into
    `_Escaped`: a task re-raises SystemExit and KeyboardInterrupt out of the event loop,
    which would end it for every job on it, and a GeneratorExit awaited across tasks
    escapes the `except` that caught it, leaving the attempt unreported and its job
    claimed for good (DESIGN §6: a handler never takes the worker down)."""
    awaitable = unbegun.pop()
    task = asyncio.current_task()
    try:
        return await awaitable
    except asyncio.CancelledError:
        raise
    except Exception:
        raise
    except GeneratorExit as exc:
        if not _driven_by(task):  # close() of the coroutine (collected, loop closing): let it
            raise
        raise _Escaped(exc) from exc
    except BaseException as exc:
        raise _Escaped(exc) from exc


def _driven_by(task: asyncio.Task[Any] | None) -> bool:
    """This code runs in `task`'s step (not in a close() of its coroutine from elsewhere)."""
    try:
        return task is not None and asyncio.current_task() is task
    except RuntimeError:  # no running loop
        return False


__all__ = ["is_async_handler", "run_attempt"]
