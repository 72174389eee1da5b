"""Building a job from enqueue arguments: its payload validated and its options settled.

`Queue.build` and `Queue.enqueue_many` use these; each enqueued job passes here once.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from jobcore.concurrency import key_of
from jobcore.errors import InvalidPayload
from jobcore.limits import MAX_KEY_BYTES, check_bytes
from jobcore.models import NewJob, new_job_from_fields
from jobcore.payload_codec import PayloadCodec
from jobcore.registry import JobType


def describe_validation_error(type_name: str, exc: ValidationError) -> str:
    """One line naming each bad field: `payload for 'shell': command: Field required`."""
    parts = []
    for error in exc.errors():
        where = ".".join(str(item) for item in error["loc"]) or "(payload)"
        message = "unknown field" if error["type"] == "extra_forbidden" else error["msg"]
        parts.append(f"{where}: {message}")
    return f"invalid payload for {type_name!r}: " + "; ".join(parts)


@dataclass(frozen=True, slots=True)
class Settled:
    """An enqueue call's options, checked and resolved; the same for all its payloads."""

    job_type: JobType
    queue: str
    priority: int
    max_attempts: int
    run_at: int | None
    delay_ms: int
    timeout_ms: int | None
    idempotency_key: str | None
    parent_id: str | None
    meta: dict[str, Any] | None

    def new_job(
        self, type: str, job_id: str, model: BaseModel, stored: Any, encoded: str
    ) -> NewJob:
        """The job of one validated payload (`stored`, JSON `encoded`) with these options."""
        key = self.idempotency_key
        if key is None and self.job_type.idempotency_key is not None:
            key = self.job_type.idempotency_key(model)
            check_bytes("idempotency_key", key, MAX_KEY_BYTES)
        by = self.job_type.concurrency_key
        limit_key = None if by is None else key_of(type, by, model)
        return new_job_from_fields(
            *(job_id, type, self.queue, stored, self.priority),
            *(self.max_attempts, self.run_at, self.timeout_ms, key, self.parent_id),
            *({} if self.meta is None else dict(self.meta), self.delay_ms, encoded, limit_key),
        )


@dataclass(frozen=True, slots=True)
class Repeated:
    """A payload object validated once for the items of a batch that repeat it in a row.

    Only for a pure model (`jobcore.payload_codec`: validating the same object again
    gives an equal answer and runs none of its code), without a `check` (which may read
    settings or the model), whose JSON values are flat (each job gets its own copy of
    the dict; no nested value is shared between jobs).
    """

    payload: Any
    settled: Settled
    model: BaseModel
    stored: dict[str, Any]  # a copy of the first job's: hooks may change that one
    encoded: str

    def job(self, type: str, job_id: str) -> NewJob:
        """The job of the next item repeating `payload`, as `Queue._build` would make it."""
        return self.settled.new_job(type, job_id, self.model, self.stored.copy(), self.encoded)


def validated(job_type: JobType, codec: PayloadCodec, payload: Any) -> BaseModel:
    """`payload` validated by `job_type`'s model, else `InvalidPayload` naming each problem."""
    if not isinstance(payload, dict):
        raise InvalidPayload(
            f"payload for {job_type.name!r} must be a JSON object, not {type(payload).__name__}"
        )
    try:
        return codec.validate(payload)
    except ValidationError as exc:
        raise InvalidPayload(describe_validation_error(job_type.name, exc)) from None


_FLAT_TYPES = frozenset((str, int, float, bool, type(None)))


def flat_json_values(stored: Any) -> bool:
    """True if `stored` is a dict whose values are all JSON scalars (copied whole by `.copy()`)."""
    return type(stored) is dict and all(type(v) in _FLAT_TYPES for v in stored.values())


def no_lone_surrogates(type: str, payload: Any) -> None:
    """A lone surrogate (e.g. an undecodable file name) cannot be sent as UTF-8 JSON."""
    try:
        json.dumps(payload, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidPayload(
            f"payload for {type!r} holds a lone surrogate (\\uD800-\\uDFFF); "
            "it could not be sent as JSON: use valid Unicode text"
        ) from None
