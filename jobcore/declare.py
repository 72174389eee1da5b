"""`@job_type("name", **defaults)`: declare a job type over its handler (DESIGN §15).

The handler is a `def` or an `async def` taking `(payload: Model, ctx)`; the
payload model is read from the first parameter's annotation. The decorator
returns the handler unchanged (so mypy keeps checking its calls) and records
the `JobType` in its module's `__jobcore_job_types__`. The first declaration in
a module gives it a `jobcore_register_job_types` hook that registers them all,
so the module is a plugin as it is (an entry point, `JOBCORE_PLUGINS`, or
`make_plugin_manager(modules=...)`).
"""

from __future__ import annotations

import inspect
import sys
import typing
from collections.abc import Callable
from typing import Any, TypeVar

from pydantic import BaseModel

from jobcore.concurrency import check_declaration
from jobcore.config import Config
from jobcore.context import JobContext
from jobcore.errors import InvalidPayload, JobcoreError
from jobcore.hookspecs import hookimpl
from jobcore.registry import JobType

H = TypeVar("H", bound=Callable[[Any, JobContext], Any])  # (payload, ctx), def or async def

DECLARED = "__jobcore_job_types__"


class JobTypeDeclarationError(JobcoreError, TypeError):
    """`@job_type` was used over something it cannot turn into a job type."""


def payload_model_of(handler: Callable[..., Any]) -> type[BaseModel]:
    """The pydantic model annotated on the handler's first parameter."""
    where = f"{getattr(handler, '__module__', '?')}.{getattr(handler, '__qualname__', handler)}"
    try:
        params = list(inspect.signature(handler).parameters.values())
    except (TypeError, ValueError) as exc:
        raise JobTypeDeclarationError(f"@job_type over {where}: not a function ({exc})") from None
    if len(params) < 2:
        raise JobTypeDeclarationError(
            f"@job_type over {where}: a handler takes (payload: Model, ctx); "
            f"it takes {len(params)} parameter(s)"
        )
    try:
        hints = typing.get_type_hints(handler)
    except Exception as exc:  # a name in the annotations that does not resolve
        raise JobTypeDeclarationError(
            f"@job_type over {where}: its annotations do not resolve ({exc}); "
            "define the payload model at module level"
        ) from None
    model = hints.get(params[0].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise JobTypeDeclarationError(
            f"@job_type over {where}: annotate its first parameter with the payload model "
            f"(a subclass of jobcore.Payload), e.g. `{params[0].name}: MyPayload`; "
            f"found {model!r}"
        )
    return model


def job_type(
    name: str,
    *,
    max_attempts: int | None = None,
    timeout: float | None = None,
    backoff_base: float | None = None,
    backoff_cap: float | None = None,
    queue: str | None = None,
    idempotency_key: Callable[[Any], str | None] | None = None,
    check: Callable[[Any, Config], None] | None = None,
    reconcile_key: Callable[[dict[str, Any], Config], str | None] | None = None,
    description: str | None = None,
    concurrency: int | None = None,
    concurrency_key: str | Callable[[Any], Any] | None = None,
    rate: str | tuple[int, float] | None = None,
) -> Callable[[H], H]:
    """Declare the decorated `def`/`async def handler(payload: Model, ctx)` as job type `name`.

    Defaults are those of `JobType`; `description` defaults to the docstring's first line.
    """
    if not isinstance(name, str) or not name:
        raise JobTypeDeclarationError(f"@job_type needs a non-empty name, got {name!r}")
    try:
        check_declaration(name, concurrency, concurrency_key, rate)
    except InvalidPayload as exc:
        raise JobTypeDeclarationError(f"@job_type({name!r}): {exc}") from None

    def declare(handler: H) -> H:
        doc = inspect.getdoc(handler) or ""
        declared = JobType(
            name=name,
            payload_model=payload_model_of(handler),
            handler=handler,
            max_attempts=max_attempts,
            timeout=timeout,
            backoff_base=backoff_base,
            backoff_cap=backoff_cap,
            queue=queue,
            idempotency_key=idempotency_key,
            check=check,
            reconcile_key=reconcile_key,
            description=description if description is not None else doc.split("\n", 1)[0],
            concurrency=concurrency,
            concurrency_key=concurrency_key,
            rate=rate,
        )
        module = sys.modules.get(getattr(handler, "__module__", ""))
        if module is None:
            raise JobTypeDeclarationError(
                f"@job_type({name!r}): the handler's module is not imported"
            )
        types: list[JobType] = module.__dict__.setdefault(DECLARED, [])
        index = next((i for i, other in enumerate(types) if other.name == name), None)
        if index is None:
            types.append(declared)
        elif _qualname(types[index].handler) == _qualname(handler):
            types[index] = declared  # the module ran again (importlib.reload): the new one
        else:
            raise JobTypeDeclarationError(
                f"@job_type({name!r}) is declared twice in {module.__name__}; rename one"
            )
        if "jobcore_register_job_types" not in module.__dict__:
            module.__dict__["jobcore_register_job_types"] = _register_hook(types)
        return handler

    return declare


def _qualname(handler: Callable[..., Any]) -> str:
    return str(getattr(handler, "__qualname__", repr(handler)))


def _register_hook(types: list[JobType]) -> Callable[..., None]:
    @hookimpl
    def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
        for declared in types:
            register(declared)

    jobcore_register_job_types.__jobcore_declared__ = True  # type: ignore[attr-defined]
    return jobcore_register_job_types


def adopt_declared(plugin: Any) -> None:
    """Keep a module's `@job_type` declarations when it also defines its own hook.

    A module that declares job types and defines `jobcore_register_job_types`
    itself replaced the hook the decorator made; its own hook is wrapped so that
    the declared types it does not register itself are registered after it.
    """
    types = getattr(plugin, DECLARED, None) if inspect.ismodule(plugin) else None
    own = getattr(plugin, "jobcore_register_job_types", None)
    if not types or own is None or getattr(own, "__jobcore_declared__", False):
        return

    @hookimpl
    def jobcore_register_job_types(register: Callable[[JobType], None]) -> None:
        seen: set[str] = set()

        def tracking(job_type: JobType) -> None:
            seen.add(job_type.name)
            register(job_type)

        own(register=tracking)
        for declared in types:
            if declared.name not in seen:
                register(declared)

    jobcore_register_job_types.__jobcore_declared__ = True  # type: ignore[attr-defined]
    plugin.jobcore_register_job_types = jobcore_register_job_types


__all__ = ["JobTypeDeclarationError", "adopt_declared", "job_type", "payload_model_of"]
