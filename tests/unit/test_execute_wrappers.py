"""`call_wrapped` gives what pluggy's call of `jobcore_execute_job` gives, for every shape
of new-style wrapper: the result or exception, and each wrapper's view, in the same order."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Generator
from functools import partial
from typing import Any

import jobcore_test_plugin as tp
import pluggy
import pytest

from jobcore import JobContext, Queue, hookimpl
from jobcore.attempt import AttemptRunner
from jobcore.execute_wrappers import call_wrapped, wrappers_only

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
        job = queue.enqueue("noop", {}).job
        ctx = JobContext(
            job=job,
            job_type=queue.job_type("noop"),
            payload=None,
            worker="w",
            config=queue.config,
            build_child=queue.build,
            request_heartbeat=lambda: None,
        )
        ctx.job_type = dataclasses.replace(ctx.job_type, handler=HANDLERS[handler]())
        wrappers = wrappers_only(queue.pm)
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


def test_a_worker_with_a_wrapper_calls_it_directly_and_other_shapes_through_pluggy(
    jobcore_make_queue: MakeQueue,
) -> None:
    seen: list[str] = []
    wrapped = jobcore_make_queue(tp, make_wrapper("passes", "w", seen))
    runner = AttemptRunner(wrapped, max_result_bytes=1 << 20, max_retry_delay=60)
    assert runner._wrappers is not None

    class OldStyle:
        @hookimpl(hookwrapper=True)
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Generator[None, Any, None]:
            yield

    class Another:
        @hookimpl
        def jobcore_execute_job(self, job: Any, ctx: Any) -> Any:
            return None

    for other in (OldStyle(), Another()):
        queue = jobcore_make_queue(tp, make_wrapper("passes", "w", seen), other)
        assert wrappers_only(queue.pm) is None
    plain = jobcore_make_queue(tp)
    assert wrappers_only(plain.pm) is None  # no wrapper: the handler is called directly

    traced = jobcore_make_queue(tp, make_wrapper("passes", "w", seen))
    undo = traced.pm.add_hookcall_monitoring(lambda *a: None, lambda *a: None)
    try:
        assert wrappers_only(traced.pm) is None  # monitoring sees every call through pluggy
    finally:
        undo()
    assert isinstance(traced.pm, pluggy.PluginManager)
