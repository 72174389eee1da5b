"""What the agent holds for each claimed job, and the context its handler gets."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from jobcore.context import JobContext
from jobcore.inflight import Attempt
from jobcore.models import Outcome
from jobcore_agent.exec_job import ArtifactSource


class AgentContext(JobContext):
    """A `JobContext` that also knows where `exec` gets executables (the hub, the cache)."""

    artifact_source: ArtifactSource | None = None


@dataclass(eq=False)
class Claim:
    """A job this agent claimed, from the claim until the hub has its outcome."""

    run: Attempt
    key: str  # the outbox key: `job_id:lease_id` (`job_id:attempt` from a hub without lease ids)
    lease_id: str | None
    settled: bool = False  # an outcome is recorded in the outbox (or the lease is gone)
    holds_slot: bool = False  # its executor thread holds one of the `concurrency` slots
    fallback: Outcome | None = None  # recorded at `stop_until` if the handler asked to stop has not
    stop_until: float | None = None  # monotonic
    # read-ahead: the hub did not mark it started at claim; its handler begins only once a
    # `start` report was answered `recorded` (`started`), never on the agent's word alone
    needs_start: bool = False
    started: bool = False  # the hub's durable answer to its `start` report
    answered: threading.Event = field(default_factory=threading.Event)  # start answered, or
    # the claim settled (released, lost) while it waited: its executor goes on or leaves
