"""`Hub`: everything one `jobcore serve` process runs besides HTTP.

The queue and its store, the hub's own store (tokens, workers), the single
writer (`Engine`), the change waiter, the event feed, the workers registry,
and a maintenance thread that enforces remote claims' timeouts, sweeps
expired leases every lease/2 and marks silent agents lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from jobcore import wakeup
from jobcore.clockjump import FirstSweep, SweepGuard
from jobcore.errors import JobTimeout
from jobcore.models import Failed, Job, Lease, Released, Retrying
from jobcore.queue import Queue
from jobcore.storage.base import Claim
from jobcore_http import schedules
from jobcore_http.claim_replays import ClaimReplays
from jobcore_http.engine import Engine
from jobcore_http.events import REREAD, EventFeed
from jobcore_http.grants import Limits
from jobcore_http.retries import retry_delay_ms
from jobcore_http.settings import HttpSettings
from jobcore_http.signal import AsyncSignal
from jobcore_http.store import hub_store_for
from jobcore_http.tokens import Principal, token_hash
from jobcore_http.waiter import ChangeWaiter
from jobcore_http.workers import Registry

log = logging.getLogger("jobcore.http")

MAX_RUNTIME_EXCEEDED = "max_runtime_exceeded"

Resolver = Callable[[Any], Principal | None]


class Hub:
    def __init__(self, queue: Queue, settings: HttpSettings, *, lease: float) -> None:
        self.queue = queue
        self.settings = settings
        self.storage = queue.storage
        self.lease_ms = int(lease * 1000)
        self.store = hub_store_for(self.storage)
        self.store.migrate()
        self.engine = Engine(queue, lease_ms=self.lease_ms)
        self.waiter = ChangeWaiter(
            self.storage, queue.wake_key, interval=queue.config.core.wake_check_interval
        )
        self.feed = EventFeed(self.storage, self.store)
        self.registry = Registry(self.store, self.storage, lease_ms=self.lease_ms)
        self.sweep_guard = SweepGuard(self.storage.now, lease, logger=log)
        self.sweep_guard.check()  # the first reading: a step of the clock from now on is seen
        self.stopping = threading.Event()
        self.stop_signal = AsyncSignal()
        self.longpolls: dict[str, int] = {}  # agent -> claims waiting now (event loop only)
        self.claim_replays = ClaimReplays()  # a claim retried after its answer was lost
        self.principal_resolvers: list[Resolver] = []  # e.g. the dashboard's session cookie
        self._maintenance = threading.Thread(
            target=self._maintain, name="hub-maintenance", daemon=True
        )
        self._halt = threading.Event()
        self.started = False
        self.loop: asyncio.AbstractEventLoop | None = None

    # -- lifecycle ------------------------------------------------------------------

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.stop_signal.bind(loop)
        self.feed.signal.bind(loop)
        self.registry.load()
        self.waiter.subscribe(self.engine.changed)
        self.engine.claim_ended.append(self.registry.claim_ended)
        self.waiter.subscribe(self.feed.changed, every=REREAD)
        self.engine.start()
        self.waiter.start()
        self._maintenance.start()
        schedules.start(self.queue)  # recurring jobs, when the cron plugin is loaded
        self.started = True

    def request_shutdown(self) -> None:
        """From a signal handler: schedule `begin_shutdown` on the event loop (takes no lock)."""
        loop = self.loop
        if loop is None:
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self.begin_shutdown)

    def begin_shutdown(self) -> None:
        """SIGTERM: long-polls answer now, event streams end; writes in flight still commit."""
        if self.stopping.is_set():
            return
        self.stopping.set()
        self.engine.no_more_waiting()
        self.stop_signal.fire()
        self.feed.signal.fire()  # event streams wake up, see `stopping` and end

    def close(self) -> None:
        self.begin_shutdown()
        self._halt.set()
        schedules.stop(self.queue)
        if self._maintenance.is_alive():
            self._maintenance.join(10)
        self.engine.stop()
        self.waiter.stop()
        try:
            self.registry.flush()
        except Exception as exc:
            log.warning("saving workers' last-seen times failed: %s", exc)
        self.store.close()
        self.queue.close()

    def now(self) -> int:
        return self.storage.now()

    # -- auth -------------------------------------------------------------------------

    def authenticate(self, token: str) -> Principal | None:
        """The principal of a bearer token, or None (unknown or revoked)."""
        digest = token_hash(token)
        record = self.store.token_by_hash(digest)
        if record is None or not record.matches(digest):
            return None
        agent = record.agent_id or (record.name if record.scope == "agent" else None)
        return Principal(
            name=record.name,
            scope=record.scope,  # type: ignore[arg-type]
            agent_id=agent,
            limits=record.limits,
        )

    def token_lookup(self, digest: str) -> tuple[str, str, Limits] | None:
        """(name, scope, limits) of the active token with this SHA-256 hex digest (the
        dashboard's)."""
        record = self.store.token_by_hash(digest)
        if record is None or not record.matches(digest):
            return None
        return record.name, record.scope, record.limits

    def workers(self) -> list[dict[str, Any]]:
        """The workers registry as `GET /api/workers` lists it."""
        self.registry.flush()  # agents seen since the last flush are listed too
        claims = self.store.claims_by_worker()
        self.registry.forget_progress({i for ids in claims.values() for i in ids})
        return self.registry.listing(self.now(), claims)

    # -- maintenance ------------------------------------------------------------------

    def _maintain(self) -> None:
        interval = self.settings.timeout_check_interval
        sweep_every = self.lease_ms / 2000
        next_sweep = time.monotonic()
        first_sweep = FirstSweep(self.lease_ms / 1000, log)  # looks, then confirms
        while not self._halt.wait(interval):
            try:
                self.registry.flush()
                self.enforce_timeouts()
                self.sweep_guard.check()  # a forward step of the store's clock holds the sweep
                if time.monotonic() >= next_sweep and self.sweep_guard.may_sweep():
                    wait = first_sweep.wait(self.queue.expired_claims)
                    if wait:
                        next_sweep = time.monotonic() + wait
                        continue
                    next_sweep = time.monotonic() + sweep_every
                    self.sweep(only=first_sweep.only())
            except Exception as exc:
                log.warning("hub maintenance failed (will retry): %s", exc)

    def sweep(self, only: list[Claim] | None = None) -> None:
        swept = self.storage.sweep(hold_ms=self.lease_ms // 2 + 1000, only=only)
        for item in swept:
            self.queue.announce_swept(item)
            self.registry.claim_ended(item.job.id)
        if self.registry.progress:  # a heartbeat's progress that raced its claim's end
            claims = self.store.claims_by_worker()
            self.registry.forget_progress({i for ids in claims.values() for i in ids})
        if any(item.action in ("reclaimed", "released") for item in swept):
            wakeup.notify(self.queue.wake_key)
        if swept:
            log.info("sweep: %d expired leases handled", len(swept))
        self.registry.sweep_lost(self.now())

    def enforce_timeouts(self) -> list[Job]:
        """End remote claims that ran past their timeout (`max_runtime_exceeded`). A read-ahead
        job that never started (counted from its claim) is given back instead: it did not run,
        so it costs no attempt (DESIGN §6); the agent's start then answers `stale`."""
        remote = self.registry.ids()
        if not remote:
            return []
        now = self.now()
        overdue = [job for job in self.store.overdue_claims(now) if job.locked_by in remote]
        ended = []
        for job in overdue:
            if job.started_at is None:
                outcome: Any = Released(Lease.of(job))
                what = "waited past its timeout without starting: given back"
            else:
                outcome = self.timeout_outcome(job, now)
                what = "ran past its timeout: ended"
            result = self.engine.record(outcome).result(30)
            if result.job is not None:
                log.info("job %s %s on %s", job.id, what, job.locked_by)
                ended.append(result.job)
        return ended

    def timeout_outcome(self, job: Job, now: int) -> Any:
        """The attempt ran past its timeout: `max_runtime_exceeded: timed out after Ns`, the
        reason the agent gives when it notices first."""
        error = f"{MAX_RUNTIME_EXCEEDED}: timed out after {(job.timeout_ms or 0) / 1000:g}s"
        delay_ms = retry_delay_ms(self.queue, job, JobTimeout(error))
        lease = Lease.of(job)
        if delay_ms is None:
            return Failed(lease, error)
        return Retrying(lease, error, delay_ms)
