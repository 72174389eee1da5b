"""Pydantic models of every request and response body, so `/openapi.json` is exact."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from jobcore_http.tokens import Scope

INT32 = 2**31 - 1
TEN_YEARS = 10 * 365 * 86400.0


def _no_surrogates(text: str) -> str:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("text contains a lone surrogate; send valid UTF-8") from None
    return text


def _plain(text: str) -> str:
    """Names, ids, filters: valid UTF-8 without NUL (no store takes NUL in a text column)."""
    if "\x00" in text:
        raise ValueError("text contains a NUL character (\\u0000); names and ids cannot hold one")
    return _no_surrogates(text)


MAX_PROGRESS_DEPTH = 32  # nesting of a heartbeat's `progress`
MAX_PROGRESS_BYTES = 64 * 1024  # its JSON encoding


def json_depth(value: Any, limit: int) -> bool:
    """Whether `value` (parsed JSON) nests at most `limit` arrays and objects deep; walked
    without recursion, so any depth is answered."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return False
            children = item.values() if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return True


def _progress(value: Any) -> Any:
    """A heartbeat's `progress` is kept in memory and shown by `GET /api/workers` to every
    reader: small and shallow, or the listing itself failed (500) for everyone."""
    if value is None:
        return value
    if not json_depth(value, MAX_PROGRESS_DEPTH):
        raise ValueError(f"nests deeper than {MAX_PROGRESS_DEPTH} arrays or objects")
    size = len(json.dumps(value, ensure_ascii=False).encode())
    if size > MAX_PROGRESS_BYTES:
        raise ValueError(f"is {size} bytes of JSON, over the limit of {MAX_PROGRESS_BYTES}")
    return value


Progress = Annotated[Any, AfterValidator(_progress)]
Text = Annotated[str, AfterValidator(_plain)]
Name = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_plain)]
LongText = Annotated[str, Field(max_length=65536), AfterValidator(_no_surrogates)]


def _a_number(value: Any) -> Any:
    """Limits and holds (DESIGN §16) are JSON numbers: `true` is not 1, nor `"5"` five."""
    if isinstance(value, bool | str):
        raise ValueError(f"must be a JSON number, not {value!r}")
    return value


Number = BeforeValidator(_a_number)


class Strict(BaseModel):
    """Request bodies: unknown fields are an error (400), not silently dropped."""

    model_config = ConfigDict(extra="forbid")


# -- requests ---------------------------------------------------------------------


class EnqueueIn(Strict):
    """A job to enqueue. `params` is the fleet hub's name for `payload`; `max_runtime_ms`
    its name for `timeout` (in ms); `solver_url`/`solver_checksum` become the payload's
    `url`/`sha256` (the `exec` job type's fields) with the params under `params`."""

    type: Name
    payload: dict[str, Any] | None = None
    params: dict[str, Any] | None = None
    queue: Name | None = None
    priority: Annotated[int, Field(ge=-INT32 - 1, le=INT32)] | None = None
    delay: Annotated[float, Field(ge=0, le=TEN_YEARS)] | Text | None = Field(
        default=None, description="seconds, or a duration such as 30s, 5m, 2h"
    )
    run_at: datetime | None = Field(default=None, description="ISO-8601; UTC if no offset")
    max_attempts: Annotated[int, Field(ge=1, le=1_000_000)] | None = None
    timeout: Annotated[float, Field(gt=0, le=TEN_YEARS)] | None = Field(
        default=None, description="max runtime of one attempt, seconds"
    )
    max_runtime_ms: Annotated[int, Field(gt=0, le=int(TEN_YEARS * 1000))] | None = None
    idempotency_key: Annotated[Text, Field(min_length=1, max_length=1000)] | None = None
    solver_url: Annotated[Text, Field(max_length=4096)] | None = None
    solver_checksum: Annotated[Text, Field(max_length=128)] | None = None


class BatchIn(Strict):
    jobs: Annotated[list[EnqueueIn], Field(min_length=1, max_length=10_000)]


Filter = Text | list[Text] | None


class BulkIn(Strict):
    """Which jobs a bulk retry/cancel acts on: the filters of `GET /api/jobs` (at least one),
    or `"all": true`."""

    status: Filter = None
    type: Filter = None
    queue: Filter = None
    worker: Text | None = None
    q: Text | None = None
    all: bool = Field(
        default=False,
        description="act on every job (of the action's default statuses) when no filter is given;"
        " without a filter and without this the request is a 400",
    )


class RegisterIn(Strict):
    worker_id: Name
    name: Annotated[Text, Field(max_length=200)] | None = None
    cores: Annotated[int, Field(ge=0, le=1_000_000)] | None = None
    ram_gb: Annotated[float, Field(ge=0, le=1e9)] | None = None
    tags: Annotated[list[Name], Field(max_length=1000)] = []
    types: Annotated[list[Name], Field(max_length=1000)] = []


class ClaimIn(Strict):
    worker_id: Name
    types: Annotated[list[Name], Field(max_length=1000)] = []
    queues: Annotated[list[Name], Field(max_length=1000)] = []
    max_jobs: Annotated[int, Field(ge=1, le=1000)] | None = Field(
        default=None, description="when given, the answer is an array of up to this many jobs"
    )
    wait: Annotated[float, Field(ge=0, le=30)] = Field(
        default=0, description="seconds to wait for a claimable job (long-poll)"
    )
    start: Annotated[int, Field(ge=0, le=1000)] | None = Field(
        default=None,
        description="how many of the claimed jobs begin at once: they are marked started in "
        "the claim's transaction. The others are read-ahead (`started_at` null): their "
        "handlers begin only once a `start` item of `POST /api/jobs/reports` was answered "
        "`recorded`, so an agent that dies first is charged no attempt for them. Omitted: "
        "every claimed job is marked started",
    )


class HeartbeatIn(Strict):
    worker_id: Name
    lease_id: Name | None = None
    progress: Progress = None


class ResultIn(Strict):
    worker_id: Name
    lease_id: Name | None = None
    result: Any = None
    result_hash: Annotated[Text, Field(max_length=200)] | None = None
    children: Annotated[list[EnqueueIn], Field(max_length=10_000)] | None = Field(
        default=None, description="jobs to enqueue with the completion (parent_id = this job)"
    )


class FailIn(Strict):
    worker_id: Name
    lease_id: Name | None = None
    reason: LongText = "failed"
    retryable: bool = True
    retry_in: Annotated[float, Field(ge=0, le=TEN_YEARS)] | None = Field(
        default=None, description="seconds until the next attempt (instead of the hub's policy)"
    )
    hold_limit: Annotated[float, Field(gt=0, le=86_400), Number] | None = Field(
        default=None,
        description="seconds the job's narrowest rate limit (its key's, else its type's, else "
        "its queue's) is held full: a handler's `RetryAfter(s, limit=True)` (DESIGN §16)",
    )


class ReleaseIn(Strict):
    worker_id: Name
    lease_id: Name | None = None


MAX_REPORTS = 1000  # items in one `POST /api/jobs/reports`


class ReportIn(Strict):
    """One item of a batched report: what the single route of `kind` takes, with `job_id`
    and a required `lease_id` (the batched route serves agents that got lease ids).
    `start` (no single route) marks a read-ahead job started: its handler may begin once
    the item is answered `recorded` (see `ClaimIn.start`)."""

    job_id: Name
    lease_id: Name
    kind: Literal["result", "fail", "release", "heartbeat", "start"]
    result: Any = None
    result_hash: Annotated[Text, Field(max_length=200)] | None = None
    children: Annotated[list[EnqueueIn], Field(max_length=10_000)] | None = None
    reason: LongText = "failed"
    retryable: bool = True
    retry_in: Annotated[float, Field(ge=0, le=TEN_YEARS)] | None = None
    hold_limit: Annotated[float, Field(gt=0, le=86_400), Number] | None = None
    progress: Progress = None


class ReportsIn(Strict):
    """Many reports of one agent. Items are checked one by one (a malformed item is
    answered `refused` alone), so they are taken here as plain objects."""

    worker_id: Name
    reports: Annotated[list[ReportIn | Any], Field(max_length=MAX_REPORTS)] = Field(
        description="`ReportIn` items, answered in order"
    )


class QueueAddIn(Strict):
    """The simple JSON queue's job: `data` is the payload."""

    type: Annotated[Text, Field(min_length=1, max_length=100)]
    data: Any = Field(description="the payload: any JSON value (an object is the payload itself)")


class QueueUpdateIn(Strict):
    status: Literal["completed", "failed"]
    result: Any = None
    error: LongText | None = None


class TokenCreateIn(Strict):
    name: Name
    scope: Scope
    agent_id: Name | None = None
    types: Annotated[list[Text], Field(max_length=1000)] | None = Field(
        default=None, description="job types it may use (produce and agent tokens); null: any"
    )
    queues: Annotated[list[Text], Field(max_length=1000)] | None = Field(
        default=None, description="queues it may use (produce and agent tokens); null: any"
    )


# -- responses --------------------------------------------------------------------


class ErrorOut(BaseModel):
    error: str


class ErrorEntryOut(BaseModel):
    model_config = ConfigDict(extra="allow")
    attempt: int | None = None
    error: str | None = None
    worker: str | None = None
    at: str | None = None


class AttemptOut(BaseModel):
    """One attempt of a job: who ran it, when, and how it ended."""

    model_config = ConfigDict(extra="allow")
    attempt: int | None = None
    lease_id: str | None = None
    worker: str | None = None
    started_at: str | None = None
    ended_at: str | None = None
    outcome: Literal[
        "running", "completed", "retrying", "failed", "reclaimed", "released", "cancelled"
    ]
    error: str | None = None


class JobOut(BaseModel):
    """A job (DESIGN §8 shape), plus the fleet hub's names `params`, `worker_id`,
    `max_runtime_ms` for its clients."""

    model_config = ConfigDict(extra="allow")
    id: str
    type: str
    queue: str
    payload: dict[str, Any]
    status: Literal["scheduled", "pending", "claimed", "completed", "failed", "cancelled"]
    priority: int
    attempts: int
    max_attempts: int
    timeout: float | None
    idempotency_key: str | None
    locked_by: str | None
    cancel_requested: bool
    last_error: str | None
    errors: list[ErrorEntryOut]
    result: Any = None
    parent_id: str | None
    meta: dict[str, Any]
    run_at: str | None
    locked_at: str | None
    lease_expires_at: str | None
    heartbeat_at: str | None
    created_at: str | None
    claimed_at: str | None
    completed_at: str | None
    updated_at: str | None
    lease_id: str | None = None
    started_at: str | None = None
    history: list[AttemptOut] = Field(default=[], description="every ended attempt")
    params: dict[str, Any]
    worker_id: str | None
    max_runtime_ms: int | None


class JobCreatedOut(JobOut):
    created: bool


class JobDetailOut(JobOut):
    attempts_detail: list[AttemptOut]


class JobListOut(BaseModel):
    jobs: list[JobOut]
    next_cursor: str | None = Field(description="pass as `cursor` for the next page")


class BatchOut(BaseModel):
    jobs: list[JobCreatedOut]


class BulkOut(BaseModel):
    matched: int
    changed: int


class StatsOut(BaseModel):
    """`jobcore stats --json`; plugins add keys of their own (hook `jobcore_stats`)."""

    model_config = ConfigDict(extra="allow")

    counts: dict[str, int]
    by_type: dict[str, dict[str, int]]
    failures: list[dict[str, Any]]
    stuck: list[dict[str, Any]]
    durations: dict[str, dict[str, float | int | None]]
    last_hour: dict[str, int]
    duplicates: list[dict[str, Any]]
    paused: list[PauseOut] = []
    limits: list[LimitOut] = []
    schedules: list[dict[str, Any]] | None = Field(
        None,
        description="with the cron plugin: each schedule's next and last run, "
        "due_at, lag_seconds and health (ok, overdue, failed, not_started)",
    )


class HealthOut(BaseModel):
    status: str


class RegisterOut(BaseModel):
    """Intervals chosen by the hub, in seconds."""

    heartbeat_interval: float
    lease: float
    poll_wait: float


class WorkerOut(BaseModel):
    worker_id: str
    name: str | None
    cores: int | None
    ram_gb: float | None
    tags: list[str]
    types: list[str]
    registered_at: str | None
    last_seen: str | None
    state: Literal["active", "idle", "lost"]
    current_jobs: list[str]
    progress: dict[str, Any] = Field(description="the last progress each current job reported")
    draining: bool


class WorkersOut(BaseModel):
    workers: list[WorkerOut]


class HeartbeatOut(BaseModel):
    lease_expires_at: str | None
    cancel_requested: bool
    drain: bool = Field(default=False, description="stop claiming, finish running jobs, exit")


class ReportOut(BaseModel):
    job_id: str
    state: Literal["recorded", "already", "stale", "refused"] = Field(
        description="recorded: applied now (a `start`: the start is durable, run the "
        "handler); already: this lease's same report was recorded before; stale: not this "
        "agent's live claim, nothing changed; refused: the item is malformed or not allowed "
        "(see `error`), nothing changed"
    )
    error: str | None = None
    cancel_requested: bool | None = Field(
        default=None,
        description="heartbeat items: stop the job (cancelled or timed out); start items: "
        "the job was cancelled before it began (the item is `refused`): release it",
    )


class ReportsOut(BaseModel):
    results: list[ReportOut]
    drain: bool = Field(default=False, description="the hub asks this agent to drain")


class QueueAddOut(BaseModel):
    id: str
    status: str


class QueueJobOut(BaseModel):
    id: str
    type: str
    data: Any = None


class SuccessOut(BaseModel):
    success: bool


class TokenOut(BaseModel):
    name: str
    scope: str
    agent_id: str | None
    types: list[str] | None = Field(description="job types it may use; null: any")
    queues: list[str] | None = Field(description="queues it may use; null: any")
    created_at: str | None
    revoked_at: str | None


class TokensOut(BaseModel):
    tokens: list[TokenOut]


class TokenCreatedOut(TokenOut):
    token: str = Field(description="shown once; only its SHA-256 is stored")


# -- operating a queue (DESIGN §16) ---------------------------------------------------


class PauseIn(Strict):
    """Why the queue or type is paused (shown by `jobcore queues`, stats, the dashboard)."""

    reason: Annotated[Text, Field(max_length=500)] = ""


class LimitIn(Strict):
    """At most `concurrency` jobs claimed at once, and/or at most `rate` claimed per sliding
    `period` seconds (DESIGN §16): at least one of the two; what is left out stays as is."""

    concurrency: Annotated[int, Number] | None = Field(None, ge=1, le=1_000_000)
    rate: Annotated[int, Number] | None = Field(None, ge=1, le=1_000_000)
    period: Annotated[float, Number] | None = Field(
        None, gt=0, le=86_400, allow_inf_nan=False, description="seconds, with `rate`"
    )

    @model_validator(mode="after")
    def _one_given(self) -> LimitIn:
        if self.concurrency is None and self.rate is None:
            raise ValueError("give concurrency, or rate and period, or both")
        if (self.rate is None) != (self.period is None):
            raise ValueError("rate and period go together (N starts per period seconds)")
        return self


class LimitOut(BaseModel):
    scope: str = Field(description="queue, type, or key (per concurrency key of a type)")
    name: str
    concurrency: int | None = Field(None, description="a concurrency limit's N (else null)")
    source: str = Field(description="set (at run time) or declared (by the job type)")
    held: int | None = Field(
        0, description="jobs claimed now under it; for a key limit, its keys at the limit"
    )
    rate: int | None = Field(None, description="a rate limit's N starts per period (else null)")
    period: float | None = Field(None, description="a rate limit's period, seconds")
    used: int | None = Field(
        None,
        description="real starts in the current window (a hold is none); for a key limit, "
        "its keys at the rate",
    )
    held_until: str | None = Field(
        None,
        description="until when a RetryAfter(..., limit=True) holds this rate limit full "
        "(ISO-8601 UTC; for a key limit, the latest of its keys'); null when nothing does",
    )


class LimitSetOut(BaseModel):
    scope: str
    name: str
    source: str = "set"
    concurrency: int | None = None
    rate: int | None = None
    period: float | None = None


class LimitsOut(BaseModel):
    limits: list[LimitOut]


class DeclaredLimitIn(Strict):
    """A limit a job type declares (`concurrency=`; with `concurrency_key=`: scope key)."""

    scope: Literal["type", "key"]
    name: Name
    concurrency: Annotated[int, Number] = Field(ge=1, le=1_000_000)


class DeclaredRateIn(Strict):
    """A rate limit a job type declares (`rate="50/1m"`; with `concurrency_key=`: scope key):
    at most `rate` starts in any `period` seconds."""

    scope: Literal["type", "key"]
    name: Name
    rate: Annotated[int, Number] = Field(ge=1, le=1_000_000)
    period: Annotated[float, Number] = Field(
        gt=0, le=86_400, allow_inf_nan=False, description="seconds"
    )


class DeclaredLimitsIn(Strict):
    """What an agent's job types declare, written as a worker does at start: only types the
    agent registered; a limit set at run time stays."""

    worker_id: Name
    limits: Annotated[list[DeclaredLimitIn], Field(max_length=1000)] = []
    unlimited: Annotated[list[Name], Field(max_length=1000)] = Field(
        default=[], description="registered types that declare no limit (their declared one goes)"
    )
    rates: Annotated[list[DeclaredRateIn], Field(max_length=1000)] | None = Field(
        default=None,
        description="the rate limits its types declare; left out (an older agent): the "
        "declared rate limits stay as they are",
    )
    unrated: Annotated[list[Name], Field(max_length=1000)] | None = Field(
        default=None,
        description="registered types that declare no rate limit (their declared one goes)",
    )


class DeclaredLimitsOut(BaseModel):
    changed: bool = Field(description="false when the store already held exactly these")
    ignored: list[str] = Field(
        default=[], description="types left as they are: the agent's token may not use them"
    )


class LimitClearedOut(BaseModel):
    scope: str
    name: str
    cleared: bool = Field(description="false when there was no such limit")


class PauseOut(BaseModel):
    kind: str
    name: str
    reason: str
    since: str
    by: str


class PausedOut(PauseOut):
    created: bool = Field(description="false when it was paused already (nothing changed)")


class ResumedOut(BaseModel):
    kind: str
    name: str
    resumed: bool = Field(description="false when it was not paused")


class QueueOut(BaseModel):
    queue: str
    scheduled: int
    pending: int
    claimed: int
    paused: bool
    reason: str | None
    since: str | None
    by: str | None
    concurrency: int | None = None  # its concurrency limit, if any (DESIGN §16)


class QueuesOut(BaseModel):
    queues: list[QueueOut]
    paused_types: list[PauseOut]
