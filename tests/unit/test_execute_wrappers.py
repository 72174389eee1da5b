"""`call_wrapped` gives what pluggy's call of `jobcore_execute_job` gives, for every shape
of new-style wrapper: the result or exception, and each wrapper's view, in the same order."""

from __future__ import annotations

import itertools
import logging
import os
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import jobcore_test_plugin as tp
import pytest
from attempts import noop_attempt

from jobcore import JobContext, Queue, hookimpl
from jobcore.attempt import AttemptRunner, handler_traceback
from jobcore.execute_wrappers import ExecutePlan, call_wrapped
from jobcore.models import Completed, Retrying

MakeQueue = Callable[..., Queue]


class Boom(Exception):
    pass


def handler_returning(value: Any) -> Callable[..., Any]:
    def handler(payload: Any, ctx: JobContext) -> Any:
        return value

    return handler


def handler_raising(exc: BaseException) -> Callable[..., Any]:
    def handler(payload: Any, ctx: JobContext) -> Any:
        raise exc

    return handler


HANDLERS = {
    "returns": lambda: handler_returning({"done": 1}),
    "returns None": lambda: handler_returning(None),
    "raises": lambda: handler_raising(Boom("handler")),
    "raises StopIteration": lambda: handler_raising(StopIteration("odd")),
    "raises KeyboardInterrupt": lambda: handler_raising(KeyboardInterrupt()),
}


def make_wrapper(style: str, name: str, seen: list[str]) -> object:
    """A plugin whose wrapper behaves as `style` says, noting what it sees in `seen`."""

    class Plugin:
        @hookimpl(wrapper=True)
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Generator[None, Any, Any]:
            seen.append(f"{name} enter")
            if style == "raises before yield":
                raise Boom(f"{name} setup")
            if style == "no yield":
                return "never"
            try:
                result = yield
            except BaseException as exc:
                seen.append(f"{name} got {type(exc).__name__}: {exc}")
                if style == "swallows":
                    return f"{name} recovered"
                if style == "replaces error":
                    raise Boom(f"{name} replaced") from exc
                raise
            seen.append(f"{name} got {result!r}")
            if style == "yields twice":
                yield
            if style == "changes result":
                return {"by": name, "was": result}
            if style == "raises after":
                raise Boom(f"{name} after")
            return result

    class OnlyCtx:  # a wrapper taking one of the hook's arguments
        @hookimpl(wrapper=True)
        def jobcore_execute_job(self, ctx: Any) -> Generator[None, Any, Any]:
            seen.append(f"{name} enter (ctx only)")
            result = yield
            seen.append(f"{name} got {result!r}")
            return result

    return OnlyCtx() if style == "ctx only" else Plugin()


STYLES = [
    "passes",
    "changes result",
    "swallows",
    "replaces error",
    "raises before yield",
    "raises after",
    "no yield",
    "yields twice",
    "ctx only",
]


def outcome(call: Callable[[], Any]) -> tuple[str, str]:
    try:
        return "result", repr(call())
    except BaseException as exc:  # compared as they are
        cause = exc.__cause__
        return "raised", f"{type(exc).__name__}: {exc} (from {type(cause).__name__})"


def both(
    jobcore_make_queue: MakeQueue, styles: tuple[str, ...], handler: str
) -> tuple[tuple[tuple[str, str], list[str]], ...]:
    found = []
    for direct in (False, True):
        seen: list[str] = []
        plugins = [make_wrapper(style, f"w{n}", seen) for n, style in enumerate(styles)]
        queue: Queue = jobcore_make_queue(tp, *plugins)
        attempt = noop_attempt(queue, HANDLERS[handler]())
        job, ctx = attempt.job, attempt.ctx
        wrappers = ExecutePlan.of(queue.pm).wrappers
        assert wrappers is not None and len(wrappers) == len(styles)
        if direct:
            call = partial(call_wrapped, wrappers, job, ctx)
        else:
            call = partial(queue.pm.hook.jobcore_execute_job, job=job, ctx=ctx)
        found.append((outcome(call), seen))
    return tuple(found)


@pytest.mark.parametrize("handler", list(HANDLERS))
@pytest.mark.parametrize("style", STYLES)
def test_one_wrapper_as_pluggy_calls_it(
    jobcore_make_queue: MakeQueue, style: str, handler: str
) -> None:
    theirs, ours = both(jobcore_make_queue, (style,), handler)
    assert ours == theirs


@pytest.mark.parametrize(
    "styles",
    [
        pair
        for pair in itertools.product(STYLES, repeat=2)
        if pair[0] in ("passes", "swallows", "changes result", "replaces error")
        or pair[1] in ("passes", "swallows")
    ],
)
@pytest.mark.parametrize("handler", ["returns", "raises"])
def test_two_wrappers_nest_as_pluggy_nests_them(
    jobcore_make_queue: MakeQueue, styles: tuple[str, str], handler: str
) -> None:
    theirs, ours = both(jobcore_make_queue, styles, handler)
    assert ours == theirs


def runner_of(queue: Queue) -> AttemptRunner:
    return AttemptRunner(queue, max_result_bytes=1 << 20, max_retry_delay=60)


def test_only_wrappers_around_the_built_in_one_are_called_directly(
    jobcore_make_queue: MakeQueue,
) -> None:
    seen: list[str] = []
    assert runner_of(jobcore_make_queue(tp, make_wrapper("passes", "w", seen))).plan().wrappers

    class OldStyle:
        @hookimpl(hookwrapper=True)
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Generator[None, Any, None]:
            yield

    class Another:
        @hookimpl
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Any:
            return None

    for other in (OldStyle(), Another()):
        plan = ExecutePlan.of(jobcore_make_queue(tp, make_wrapper("passes", "w", seen), other).pm)
        assert plan.wrappers is None and not plan.direct
    plain = ExecutePlan.of(jobcore_make_queue(tp).pm)
    assert plain.direct and plain.wrappers is None  # no wrapper: the handler is called directly


def test_plugins_registered_or_unregistered_later_are_called_as_pluggy_would(
    jobcore_make_queue: MakeQueue,
) -> None:
    """The plan is made again when the hook's implementations change after the runner."""
    seen: list[str] = []
    wrapper = make_wrapper("passes", "w", seen)
    queue = jobcore_make_queue(tp, wrapper)
    runner = runner_of(queue)
    assert runner.plan().wrappers
    queue.pm.unregister(wrapper)
    assert isinstance(runner._execute(noop_attempt(queue)), Completed)
    assert seen == []  # no longer registered: no longer called
    assert runner.plan().direct

    class Answers:
        @hookimpl(tryfirst=True)
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Any:
            return {"by": "late plugin"}

    queue.pm.register(make_wrapper("changes result", "late wrapper", seen))
    outcome = runner._execute(noop_attempt(queue, handler_returning(1)))
    assert isinstance(outcome, Completed) and outcome.result == {"by": "late wrapper", "was": 1}
    queue.pm.register(Answers(), name="late")
    outcome = runner._execute(noop_attempt(queue))
    assert isinstance(outcome, Completed)
    assert outcome.result == {"by": "late wrapper", "was": {"by": "late plugin"}}


def test_an_implementation_registered_under_the_built_in_ones_name_is_called(
    jobcore_make_queue: MakeQueue,
) -> None:
    """The built-in implementation is known by its function, not by its plugin's name."""
    queue = jobcore_make_queue(tp)
    runner = runner_of(queue)
    assert runner.plan().direct

    class Replacement:
        @hookimpl
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Any:
            return {"by": "replacement"}

    queue.pm.unregister(name="jobcore.builtin.execute")
    queue.pm.register(Replacement(), name="jobcore.builtin.execute")
    outcome = runner._execute(noop_attempt(queue, handler_returning("the handler")))
    assert isinstance(outcome, Completed) and outcome.result == {"by": "replacement"}
    assert not runner.plan().direct and runner.plan().wrappers is None


def note(called: list[str], name: str, *_: Any) -> None:
    called.append(name)


def test_hook_call_monitoring_sees_every_call_even_when_begun_later(
    jobcore_make_queue: MakeQueue,
) -> None:
    for plugins in ((), (make_wrapper("passes", "w", []),)):
        queue = jobcore_make_queue(tp, *plugins)
        runner = runner_of(queue)
        called: list[str] = []
        undo = queue.pm.add_hookcall_monitoring(partial(note, called), lambda *_: None)
        try:
            runner._execute(noop_attempt(queue))
        finally:
            undo()
        assert called == ["jobcore_execute_job"]
        runner._execute(noop_attempt(queue))  # monitoring over: called directly again
        assert called == ["jobcore_execute_job"]


def test_a_failed_handlers_logged_traceback_shows_no_jobcore_frames(
    jobcore_make_queue: MakeQueue,
) -> None:
    queue = jobcore_make_queue(tp, make_wrapper("passes", "w", []))
    runner = runner_of(queue)

    def boom(payload: Any, ctx: JobContext) -> Any:
        raise Boom("in the handler")

    attempt = noop_attempt(queue, boom)
    try:
        runner.call_hook(attempt.job, attempt.ctx, runner.plan())
    except Boom as exc:
        text = handler_traceback(exc)
    for plumbing in ("execute_wrappers.py", "attempt.py"):
        assert os.path.join("jobcore", plumbing) not in text
    assert "in the handler" in text and "def boom" not in text and "boom" in text
    assert isinstance(runner._execute(noop_attempt(queue, boom)), Retrying)


def test_jobcore_trace_hooks_logs_the_execute_call_on_every_path(
    jobcore_make_queue: MakeQueue, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """`JOBCORE_TRACE_HOOKS=1` logs every hook call: with it the handler is not called
    directly, with or without wrappers."""
    monkeypatch.setenv("JOBCORE_TRACE_HOOKS", "1")
    for plugins in ((), (make_wrapper("passes", "w", []),)):
        queue = jobcore_make_queue(tp, *plugins)
        runner = runner_of(queue)
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="jobcore.plugins"):
            outcome = runner._execute(noop_attempt(queue, handler_returning("done")))
        assert isinstance(outcome, Completed) and outcome.result == "done"
        assert "finish jobcore_execute_job --> done" in caplog.text
