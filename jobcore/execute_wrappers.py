"""`jobcore_execute_job` around a handler, called without pluggy's per-call machinery.

When the hook's implementations are the built-in one and new-style wrappers only
(`@hookimpl(wrapper=True)`, such as the otel plugin's span around each job), an
executor calls them itself: pluggy would build argument lists, copy the list of
implementations and run its general loop for every job, which costs an executor
more than the wrapper's own work. The steps and their order are pluggy's
(`_multicall`): wrappers are entered outermost first; the built-in implementation
calls the handler; each wrapper's teardown, innermost first, is sent the result or
thrown the exception, and what it returns or raises is what the next one sees. A
wrapper that does not yield, or yields twice, is the same `RuntimeError`. Anything
else (an old-style `hookwrapper`, another implementation, hook call monitoring)
goes through pluggy, and the plan is made again whenever the implementations or the
manager's call loop change (`ExecutePlan.current`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, cast

import pluggy
from pluggy import HookImpl

from jobcore.builtin import execute as builtin_execute
from jobcore.context import JobContext
from jobcore.models import Job

_ARGS = frozenset({"job", "ctx"})
_PLAIN_CALLS = getattr(pluggy.PluginManager("jobcore-probe"), "_inner_hookexec", None)

WrapperFunction = Callable[..., Generator[None, Any, Any]]
Wrapper = tuple[WrapperFunction, tuple[str, ...]]


@dataclass(frozen=True)
class ExecutePlan:
    """How an executor calls the hook, for the implementations registered when it was made:
    `direct` (the built-in one alone: the handler itself), `wrappers` (new-style wrappers
    around it only: `call_wrapped`), else through pluggy. `current` says whether it still
    holds: a plugin registered, unregistered or blocked since, or hook call monitoring
    begun or ended, needs a new plan."""

    impls: list[HookImpl]
    calls: object  # the manager's call loop then (`_inner_hookexec`)
    direct: bool
    wrappers: list[Wrapper] | None

    @classmethod
    def of(cls, pm: pluggy.PluginManager) -> ExecutePlan:
        impls = pm.hook.jobcore_execute_job.get_hookimpls()
        calls = getattr(pm, "_inner_hookexec", None)
        if calls is not _PLAIN_CALLS or _PLAIN_CALLS is None:  # tracing or monitoring
            return cls(impls, calls, direct=False, wrappers=None)
        direct = len(impls) == 1 and _is_builtin(impls[0])
        return cls(impls, calls, direct=direct, wrappers=None if direct else _wrappers(impls))

    def current(self, pm: pluggy.PluginManager) -> bool:
        return (
            pm.hook.jobcore_execute_job.get_hookimpls() == self.impls  # by identity
            and getattr(pm, "_inner_hookexec", None) is self.calls
        )


def _wrappers(impls: list[HookImpl]) -> list[Wrapper] | None:
    """The wrappers, outermost first, when they and the built-in implementation are all of
    `impls`; otherwise None."""
    wrappers: list[Wrapper] = []
    builtin = False
    for impl in reversed(impls):  # pluggy's call order
        if _is_builtin(impl):
            builtin = True
        elif (
            impl.wrapper
            and not impl.hookwrapper
            and not builtin  # pluggy lists wrappers last, so enters them first
            and not impl.kwargnames
            and set(impl.argnames) <= _ARGS
        ):
            wrappers.append((cast(WrapperFunction, impl.function), tuple(impl.argnames)))
        else:
            return None
    return wrappers if builtin and wrappers else None


def _is_builtin(impl: HookImpl) -> bool:
    """Whether `impl` is the built-in implementation itself (not just one under its name)."""
    return impl.function is builtin_execute.jobcore_execute_job and not (
        impl.wrapper or impl.hookwrapper
    )


def call_wrapped(wrappers: list[Wrapper], job: Job, ctx: JobContext) -> Any:
    """The hook's result for this job, as pluggy's call of `wrappers` and the built-in
    implementation would give it (or the exception it would raise)."""
    teardowns: list[Generator[None, Any, Any]] = []
    result: Any = None
    exception: BaseException | None = None
    try:
        for function, names in wrappers:
            if names == ("job", "ctx"):
                teardown = function(job, ctx)
            else:
                teardown = function(*[job if name == "job" else ctx for name in names])
            try:
                next(teardown)
            except StopIteration:
                _wrapfail(teardown, "did not yield")
            teardowns.append(teardown)
        result = ctx.job_type.handler(ctx.payload, ctx)  # the built-in implementation
    except BaseException as exc:
        exception = exc
    for teardown in reversed(teardowns):
        try:
            if exception is not None:
                try:
                    teardown.throw(exception)
                except RuntimeError as error:  # PEP 479: a StopIteration thrown in comes back so
                    if isinstance(exception, StopIteration) and error.__cause__ is exception:
                        teardown.close()
                        continue
                    raise
            else:
                teardown.send(result)
            teardown.close()  # only a wrapper that yields again gets here
        except StopIteration as stop:
            result, exception = stop.value, None
            continue
        except BaseException as exc:
            exception = exc
            continue
        _wrapfail(teardown, "has second yield")
    if exception is not None:
        raise exception
    return result


def _wrapfail(teardown: Generator[None, Any, Any], problem: str) -> None:
    code = teardown.gi_code  # type: ignore[attr-defined]  # pluggy accepts generator functions only
    raise RuntimeError(
        f"wrap_controller at {code.co_name!r} {code.co_filename}:{code.co_firstlineno} {problem}"
    )


__all__ = ["ExecutePlan", "Wrapper", "call_wrapped"]
