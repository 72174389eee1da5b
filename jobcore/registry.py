"""Job types: a name, a pydantic payload model, a handler and per-type defaults."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from jobcore.concurrency import check_declaration
from jobcore.errors import InvalidPayload, JobcoreError
from jobcore.limits import check_duration

if TYPE_CHECKING:
    from jobcore.config import Config
    from jobcore.context import JobContext


class Payload(BaseModel):
    """Base for payload models: unknown fields are rejected."""

    model_config = ConfigDict(extra="forbid")


Handler = Callable[[Any, "JobContext"], Any]


@dataclass(frozen=True, kw_only=True)
class JobType:
    """A job type as a plugin registers it.

    `handler(payload, ctx)` receives the validated payload model instance and a
    `JobContext`; its return value (JSON-serialisable) becomes the job's result.
    Defaults left as None fall back to `[types.NAME]` config, then core config.
    `idempotency_key(payload)` may derive a key when the caller gives none.
    `check(payload, config)` runs at enqueue for rules that need settings (a
    files root, say); it raises `InvalidPayload` to reject the job.
    `reconcile_key(payload, config)` names what a job's effect lives at (a file,
    a resource; a stored payload dict): `reconcile` checks only the latest
    completed job of each key, as later jobs on the same thing supersede it.
    `concurrency`: at most this many of its jobs claimed at once in the whole
    store; with `concurrency_key` (a payload field name or a callable of the
    payload) at most that many per key instead (DESIGN §16, `jobcore.concurrency`).
    `rate`: at most N claims per sliding period in the whole store, as `"N/PERIOD"`
    (`"50/1m"`, `"10/s"`) or `(N, seconds)`; per key when `concurrency_key` is given
    (`jobcore.rates`).
    """

    name: str
    payload_model: type[BaseModel]
    handler: Handler
    max_attempts: int | None = None
    timeout: float | None = None
    backoff_base: float | None = None
    backoff_cap: float | None = None
    queue: str | None = None
    idempotency_key: Callable[[Any], str | None] | None = None
    check: Callable[[Any, Config], None] | None = None
    reconcile_key: Callable[[dict[str, Any], Config], str | None] | None = None
    description: str = ""
    concurrency: int | None = None
    concurrency_key: str | Callable[[Any], Any] | None = None
    rate: str | tuple[int, float] | None = None


class DuplicateJobType(JobcoreError):
    """Two plugins registered the same job type name."""


class JobTypeRegistry:
    """Job types collected from `jobcore_register_job_types`, with the plugin that gave each."""

    def __init__(self) -> None:
        self._types: dict[str, JobType] = {}
        self._owners: dict[str, str] = {}

    def register(self, job_type: JobType, *, plugin: str) -> None:
        for name in ("timeout", "backoff_base", "backoff_cap"):
            value = getattr(job_type, name)
            try:
                if value is not None:
                    check_duration(float(value), positive=name == "timeout")
            except (TypeError, ValueError) as exc:
                raise JobcoreError(
                    f"job type {job_type.name!r} from plugin {plugin!r}: bad default {name}: {exc}"
                ) from None
        try:
            check_declaration(
                job_type.name, job_type.concurrency, job_type.concurrency_key, job_type.rate
            )
        except InvalidPayload as exc:
            raise JobcoreError(f"job type from plugin {plugin!r}: {exc}") from None
        key = job_type.concurrency_key
        if isinstance(key, str) and key not in job_type.payload_model.model_fields:
            raise JobcoreError(
                f"job type {job_type.name!r} from plugin {plugin!r}: concurrency_key {key!r} "
                "is not a field of its payload model; name a field or give a callable"
            )
        if job_type.name in self._types:
            raise DuplicateJobType(
                f"job type {job_type.name!r} is registered by both "
                f"{self._owners[job_type.name]!r} and {plugin!r}; disable one of them"
            )
        self._types[job_type.name] = job_type
        self._owners[job_type.name] = plugin

    def get(self, name: str) -> JobType | None:
        return self._types.get(name)

    def owner(self, name: str) -> str:
        return self._owners[name]

    def names_by_plugin(self, plugin: str) -> list[str]:
        return sorted(name for name, owner in self._owners.items() if owner == plugin)

    def __contains__(self, name: object) -> bool:
        return name in self._types

    def __iter__(self) -> Iterator[JobType]:
        return iter(self._types.values())
