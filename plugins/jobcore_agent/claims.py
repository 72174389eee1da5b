"""What the agent holds for each claimed job, and the context its handler gets."""

from __future__ import annotations

from dataclasses import dataclass

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
