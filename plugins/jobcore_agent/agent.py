"""The agent: claims from the hub, runs handlers like a local worker, reports through the outbox.

Threads: a claimer (long-polls `POST /api/jobs/claim` while slots are
free), one executor thread per claimed job (the core's `AttemptRunner`, so a
handler sees the same `JobContext` and its outcome is decided by the same
rules as in a local worker), a supervisor (heartbeats at the hub's interval,
timeouts) and a reporter (delivers outcomes from the local outbox, backing
off with jitter while the hub is away). The main thread waits for a stop.

Crash accounting (DESIGN §6): a claim asks the hub to mark started only the
jobs that have an executor at once (`start`); the others are read-ahead, and
an executor that takes one sends a `start` report (riding with the outcomes
of the reporter's next batch) and begins the handler only once the hub
answered that the start is durable. So an agent killed with read-ahead jobs
is charged nothing for them, and one attempt for each job that was running.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
import uuid
from collections.abc import Sequence
from dataclasses import replace
from types import FrameType
from typing import Any

from jobcore.async_loop import LoopThread
from jobcore.attempt import AttemptRunner
from jobcore.concurrency import declared_limits
from jobcore.errors import JobcoreError, UnknownJobType
from jobcore.inflight import Attempt
from jobcore.models import Failed, Outcome, Released
from jobcore.owned import own
from jobcore.queue import Queue
from jobcore.rates import declared_rates
from jobcore.timeutil import now_ms
from jobcore_agent.cache import ArtifactCache
from jobcore_agent.capabilities import capabilities
from jobcore_agent.claims import AgentContext, Claim
from jobcore_agent.client import (
    Backoff,
    HubAuthError,
    HubClient,
    HubError,
    HubRejected,
    HubUnavailable,
    Intervals,
    NoBatchRoute,
    OldHubSchema,
    Reported,
    StaleReport,
)
from jobcore_agent.exec_job import ArtifactSource
from jobcore_agent.outbox import Outbox, Pending
from jobcore_agent.wire import job_from_json, make_lease, report_of, sendable

log = logging.getLogger("jobcore.agent")

DELIVERY_GRACE = 5.0  # seconds a stopping agent keeps trying to deliver before leaving them queued
MAX_BATCH = 500  # outcomes in one batched report (the hub takes up to 1000 items)


class AgentFatal(JobcoreError):
    """The agent cannot go on (its token was refused)."""


class Agent:
    """Runs jobs of `queue`'s registered types claimed from the hub behind `client`."""

    def __init__(
        self,
        queue: Queue,
        client: HubClient,
        *,
        worker_id: str,
        cache_dir: str,
        types: tuple[str, ...] = (),
        queues: tuple[str, ...] = (),
        tags: tuple[str, ...] = (),
        concurrency: int = 4,
        shutdown_timeout: float = 30.0,
        max_backoff: float = 30.0,
        install_signal_handlers: bool = False,
    ) -> None:
        unknown = [name for name in types if name not in queue.registry]
        if unknown:
            known = ", ".join(sorted(t.name for t in queue.registry))
            raise JobcoreError(
                f"no plugin here provides job type(s) {', '.join(unknown)} (installed: {known})"
            )
        self.queue = queue
        self.client = client
        self.worker_id = worker_id
        self.types = types or tuple(sorted(t.name for t in queue.registry))
        self.queues = queues
        self.tags = tags
        self.concurrency = concurrency
        self.shutdown_timeout = shutdown_timeout
        self.max_backoff = max_backoff
        self.install_signal_handlers = install_signal_handlers
        core = queue.config.core
        self.attempts = AttemptRunner(
            queue, max_result_bytes=core.max_result_bytes, max_retry_delay=core.max_retry_delay
        )
        self.attempts.timeout_label = "max_runtime_exceeded"  # the hub's word for it (§11)
        self.attempts.pushes_rates = False  # RetryAfter(limit=True): the report carries it
        self._said_no_rates = False  # an older hub without declared rates: warned once
        self.loop = LoopThread(self.attempts)  # `async def` handlers (DESIGN §15)
        self.stop_grace = core.stop_grace
        # claimed ahead only while jobs are short; at most one more batch, as each is heartbeated
        self.prefetch = min(core.prefetch, 4 * concurrency)
        self.prefetch_below_ms = core.prefetch_below * 1000
        self.prefetch_wait = core.prefetch_wait  # read-ahead waiting longer behind busy slots
        self._recent_ms: float | None = None  # moving average of attempt durations
        self._slots = threading.BoundedSemaphore(concurrency)
        own(cache_dir, "folder")  # outbox and cached executables: never a files job's target
        self.outbox = Outbox(cache_dir)
        self.source = ArtifactSource(ArtifactCache(cache_dir), client)
        self.intervals = Intervals(heartbeat_interval=10.0, lease=60.0, poll_wait=25.0)
        self._cond = threading.Condition()
        self._claims: dict[str, Claim] = {}  # by key
        self._outbox_ready = threading.Event()
        self._ready: list[Pending] = []  # settled outcomes not yet in the outbox (the next batch)
        self._batched = True  # the hub has `POST /api/jobs/reports` (False after a 404/405)
        self._read_ahead = True  # the hub takes a claim's `start` (False after it refused it)
        self._reports_seen = False  # the hub answered a batched report: it can take starts
        self._starts: list[Claim] = []  # read-ahead claims whose executor waits for a start
        self._unsaved: dict[str, Pending] = {}  # outcomes the outbox could not take, by key
        self._outbox_broken = False  # an outbox write failed (logged once)
        self._hub_away = False  # the reporter's last delivery failed: leave delivery to it
        self._heartbeat_requested = False
        self._stopping = False
        self._stop_deadline: float | None = None  # monotonic; None while draining
        self._released = False
        self._closed = False
        self._fatal: str | None = None
        self.stats: dict[str, int] = {"claimed": 0, "delivered": 0, "stale": 0}

    # -- control ---------------------------------------------------------------------

    def stop(self, *, graceful: bool = True) -> None:
        """Stop claiming; running jobs get `shutdown_timeout` (0: now), then they are released."""
        with self._cond:
            now = time.monotonic()
            if not graceful or (self._stopping and self._stop_deadline is not None):
                self._stop_deadline = now  # a second request stops now
            else:  # the first request, or a SIGTERM while draining
                self._stop_deadline = now + self.shutdown_timeout
            self._stopping = True
            self._cond.notify_all()
        self.client.end_claims()  # the open long-poll ends now: no job for a stopping agent

    def drain(self) -> None:
        """The hub asked: stop claiming, finish every running job, then exit."""
        with self._cond:
            if not self._stopping:
                log.warning(
                    "the hub asked this agent to drain: finishing running jobs, then exiting"
                )
                self._stopping = True
                self._stop_deadline = None
                self._cond.notify_all()
        self.client.end_claims()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        log.warning(
            "received %s: %s",
            signal.Signals(signum).name,
            "stopping now"
            if self._stopping
            else f"finishing running jobs (up to {self.shutdown_timeout:g}s; again to stop now)",
        )
        self.stop()

    def _set_fatal(self, exc: HubAuthError) -> None:
        with self._cond:
            if self._fatal is None:
                # a 403 names its own fix (a token bound to another worker id, a scope too
                # small); a 401 is a token the hub does not know (revoked, mistyped)
                self._fatal = f"the hub refused this agent's token ({exc})" + (
                    ""
                    if exc.status == 403
                    else "; create a new agent token with `jobcore tokens create --scope agent`"
                )
            self._cond.notify_all()

    # -- main --------------------------------------------------------------------------

    def run(self) -> int:
        """Register, work until stopped, deliver what is left; returns 0 (raises AgentFatal)."""
        previous = self._install_signals()
        threads: list[threading.Thread] = []
        try:
            if not self._register_until_ok():
                return self._finish()
            self._outbox_ready.set()  # deliver what an earlier run left in the outbox
            for target, name in (
                (self._reporter_main, "agent-reporter"),
                (self._supervisor_main, "agent-supervisor"),
                (self._claimer_main, "agent-claimer"),
            ):
                thread = threading.Thread(target=target, name=name, daemon=True)
                thread.start()
                threads.append(thread)
            log.info(
                "agent %s working for %s: concurrency %d, types %s, queues %s",
                self.worker_id,
                self.client.base,
                self.concurrency,
                ",".join(self.types),
                ",".join(self.queues) or "all",
            )
            self._wait_until_done()
            return self._finish()
        finally:
            with self._cond:
                self._closed = True
                self._cond.notify_all()
            self._outbox_ready.set()
            self._restore_signals(previous)
            for thread in threads:
                if thread.name != "agent-claimer":  # may sit in a long-poll; it is a daemon
                    thread.join(timeout=5)
            self._save_ready()  # settled after the reporter's last batch: kept for the next run
            self._outbox_call(self.outbox.close)
            self.loop.close()  # async handlers left behind end now, their spans with them

    def _finish(self) -> int:
        if self._fatal is not None:
            with self._cond:
                for claim in self._claims.values():
                    claim.run.ctx.request_stop("shutdown")
            raise AgentFatal(self._fatal)
        self._save_ready()
        try:
            left = self.outbox.count(self.worker_id)
        except Exception as exc:
            self._outbox_trouble(exc)
            left = 0
        with self._cond:
            lost = sorted(row.job_id for row in self._unsaved.values())
        if lost:
            log.error(
                "%d outcome(s) neither saved in the outbox nor delivered (jobs %s); those jobs "
                "run again once their leases expire",
                len(lost),
                ", ".join(lost),
            )
        if left:
            log.warning(
                "%d outcome(s) not delivered yet; kept in %s for the next start",
                left,
                self.outbox.path,
            )
        log.info(
            "agent %s stopped: %s",
            self.worker_id,
            ", ".join(f"{k} {v}" for k, v in self.stats.items() if v) or "no jobs",
        )
        return 0

    def _wait_until_done(self) -> None:
        grace_until: float | None = None
        with self._cond:
            while self._fatal is None:
                now = time.monotonic()
                if self._stopping:
                    waiting = [
                        c for c in self._claims.values() if not c.settled and not c.run.began_at
                    ]
                    if waiting:  # prefetched, not begun: they will not start now
                        self._cond.release()
                        try:
                            for claim in waiting:
                                self._settle(claim, Released(lease=claim.run.lease))
                        finally:
                            self._cond.acquire()
                        continue
                    deadline = self._stop_deadline
                    if deadline is not None and now >= deadline and not self._released:
                        self._cond.release()
                        try:
                            self._release_rest()
                        finally:
                            self._cond.acquire()
                        grace_until = time.monotonic() + DELIVERY_GRACE
                        continue
                    if not any(not c.settled for c in self._claims.values()):
                        if grace_until is None:
                            grace_until = now + DELIVERY_GRACE
                        if not self._claims or now >= grace_until:
                            return
                    wait = 0.5 if deadline is None else max(0.0, min(deadline - now, 0.5))
                else:
                    wait = 1.0
                self._cond.wait(wait)

    def _register_until_ok(self) -> bool:
        backoff = Backoff(self.max_backoff)
        body = capabilities(worker_id=self.worker_id, types=self.types, tags=self.tags)
        while True:
            try:
                self.intervals, drain = self.client.register(body)
            except HubAuthError as exc:
                self._set_fatal(exc)
                return False
            except HubError as exc:
                delay = backoff.next()
                log.error("cannot register with the hub (%s); retrying in %.1fs", exc, delay)
                if self._sleep(delay):
                    return False
                continue
            if drain:
                self.drain()
            log.info(
                "registered as %s: heartbeat every %gs, lease %gs, long-poll %gs",
                self.worker_id,
                self.intervals.heartbeat_interval,
                self.intervals.lease,
                self.intervals.poll_wait,
            )
            try:  # before the first claim, as a worker at start (DESIGN §16)
                self._declare_limits()
            except HubUnavailable as exc:
                delay = backoff.next()
                log.error("cannot declare limits to the hub (%s); retrying in %.1fs", exc, delay)
                if self._sleep(delay):
                    return False
                continue
            except HubError as exc:  # not this agent's to fix by waiting: work without them
                log.error(
                    "the hub refused the concurrency limits this agent's job types declare "
                    "(%s); working without them (set them with `jobcore limit`)",
                    exc,
                )
            return True

    def _declare_limits(self) -> None:
        """Send the concurrency and rate limits this agent's job types declare
        (`concurrency=`, `rate=`), so that every claimer on the store respects them, as a
        worker writes its own at start; a limit or rate set at run time stays. An older hub
        without the route, or without `rates` in it: said once."""
        # each type once: the hub refuses a body naming one twice (`--types a,a`)
        registered = [self.queue.registry.get(name) for name in dict.fromkeys(self.types)]
        types = [t for t in registered if t is not None]
        declared, unlimited = declared_limits(types)
        rated, unrated = declared_rates(types)
        limits = [
            {"scope": limit.scope, "name": limit.name, "concurrency": limit.concurrency}
            for limit in declared
        ]
        rates = [
            {"scope": r.scope, "name": r.name, "rate": r.rate, "period": r.period_ms / 1000}
            for r in rated
        ]
        try:
            answer = self.client.declare_limits(self.worker_id, limits, unlimited, rates, unrated)
        except OldHubSchema as exc:  # knows declared limits but not rates: send those alone
            log_once = log.debug if self._said_no_rates else log.warning
            self._said_no_rates = True
            if rated:
                log_once(
                    "the hub does not take declared rate limits (an older hub: %s): the rates "
                    "of %s are not written by this agent; a worker with these types writes "
                    "them at start, or set them with `jobcore limit --rate`",
                    exc,
                    ", ".join(f"{r.name} ({r.text()})" for r in rated),
                )
            else:
                log.debug("the hub does not take declared rate limits (an older hub)")
            answer = self.client.declare_limits(self.worker_id, limits, unlimited)
        if answer is None:
            if declared or rated:
                log.warning(
                    "the hub has no route for declared limits (an older hub): the limits "
                    "of %s are not written by this agent; a worker with these types writes "
                    "them at start, or set them with `jobcore limit`",
                    ", ".join(
                        [f"{limit.name} ({limit.concurrency})" for limit in declared]
                        + [f"{r.name} ({r.text()})" for r in rated]
                    ),
                )
            else:
                log.debug("the hub has no route for declared limits (an older hub)")
            return
        ignored = answer.get("ignored") or []
        if ignored:
            log.warning(
                "the hub left the declared limits of %s as they are: this agent's token may "
                "not use those types",
                ", ".join(map(str, ignored)),
            )

    def _sleep(self, seconds: float) -> bool:
        """Wait up to `seconds`; True when the agent is stopping (or closed) meanwhile."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._stopping or self._closed or bool(self._fatal), seconds
            )
            return self._stopping or self._closed or bool(self._fatal)

    # -- claiming ------------------------------------------------------------------------

    def _free_slots(self) -> int:
        """How many jobs to claim: slots not taken by a claim the hub has no outcome of yet.

        While the hub is away, undelivered outcomes count too: an agent that cannot
        report does not claim jobs whose leases would lapse. While recent attempts
        are short, up to `prefetch` more are claimed ahead (they wait for a slot),
        so one claim request brings several jobs.
        """
        return max(0, self._room() - self._held())

    def _room(self) -> int:
        short = self._recent_ms is not None and self._recent_ms < self.prefetch_below_ms
        ahead = short and not self._slots_stuck(time.monotonic())
        return self.concurrency + (self.prefetch if ahead else 0)

    def _slots_stuck(self, now: float) -> bool:
        """Every slot runs a handler that began over `prefetch_wait` ago: jobs read ahead would
        wait behind them while other agents may be idle (caller holds the lock)."""
        running = [c.run.began_at for c in self._claims.values() if c.holds_slot]
        return len(running) >= self.concurrency and all(
            began and now - began > self.prefetch_wait for began in running
        )

    def _give_back_read_ahead(self, now: float) -> None:
        """While every slot is stuck, jobs waiting for one longer than `prefetch_wait` go back
        to the hub (`release`: no attempt spent), for an agent with a free slot."""
        with self._cond:  # under the lock: none of them begins meanwhile (a reentrant lock)
            if not self._slots_stuck(now):
                return
            for claim in list(self._claims.values()):
                if (
                    not claim.settled
                    and not claim.holds_slot
                    and not claim.run.began_at
                    and now - claim.run.claimed_at > self.prefetch_wait
                ):
                    log.info(
                        "job %s waited %.1fs behind running jobs; giving it back",
                        claim.run.job.id,
                        now - claim.run.claimed_at,
                    )
                    self._settle(claim, Released(lease=claim.run.lease))

    def _held(self) -> int:
        if self._hub_away:
            return len(self._claims)
        return sum(1 for claim in self._claims.values() if not claim.settled)

    def _claim_due(self) -> bool:
        """Claim when half the room is free, or when no claimed job waits for a slot (the
        executors would run dry before an answer comes): a claim brings a batch of jobs,
        not one per finished job, and goes out before the last job of the batch ends."""
        free = self._free_slots()
        if free <= 0:
            return False
        if free * 2 >= self._room():
            return True
        waiting = sum(1 for c in self._claims.values() if not c.settled and not c.run.began_at)
        return waiting == 0

    def _free_slot(self, claim: Claim) -> None:
        """Give back the executor slot a claim holds (under the lock, once)."""
        if claim.holds_slot:
            claim.holds_slot = False
            self._slots.release()

    def _claimer_main(self) -> None:
        backoff = Backoff(self.max_backoff)
        outage = False
        key = uuid.uuid4().hex  # kept until a claim is answered: a lost answer is asked again
        while True:
            with self._cond:
                self._cond.wait_for(
                    lambda: self._stopping or self._closed or self._fatal or self._claim_due()
                )
                if self._stopping or self._closed or self._fatal:
                    return
                free = self._free_slots()
                start = self._start_now(free)
            try:
                claimed = self.client.claim(
                    worker_id=self.worker_id,
                    types=self.types,
                    queues=self.queues,
                    max_jobs=free,
                    wait=self.intervals.poll_wait,
                    start=start,
                    key=key,
                )
            except HubAuthError as exc:
                self._set_fatal(exc)
                return
            except HubRejected as exc:
                if start is not None and exc.status in (400, 422) and "start" in str(exc):
                    log.info("the hub takes no read-ahead starts (%s); every claim starts", exc)
                    self._read_ahead = False
                    continue
                if self._stopping:
                    return
                delay = backoff.next()
                log.error("claim failed (%s); retrying in %.1fs", exc, delay)
                self._sleep(delay)
                continue
            except HubError as exc:
                if self._stopping:
                    return
                delay = backoff.next()
                if not outage or backoff.failures <= 2:
                    log.error("claim failed (%s); retrying in %.1fs", exc, delay)
                outage = outage or isinstance(exc, HubUnavailable)
                self._sleep(delay)
                continue
            key = uuid.uuid4().hex
            backoff.reset()
            if outage:
                outage = False
                log.info("the hub is reachable again")
                with self._cond:
                    self._hub_away = False
                self._outbox_ready.set()
                self._reregister()
            for data in claimed.jobs:
                try:
                    self._start(data)
                except Exception:  # a malformed job must not end the claimer
                    log.exception(
                        "cannot start claimed job %r; its lease will lapse", data.get("id")
                    )
            if claimed.drain:
                self.drain()

    def _start_now(self, free: int) -> int | None:
        """How many of the next claim's jobs begin at once (idle executors; the hub marks them
        started in the claim's transaction), or None when the hub cannot take `start` reports
        (every job is then marked started by its claim, as before read-ahead starts), or
        before it answered a batched report (an older hub, or a proxy without the route)."""
        if not (self._read_ahead and self._batched and self._reports_seen):
            return None
        running = sum(1 for claim in self._claims.values() if not claim.settled)
        return max(0, min(free, self.concurrency - running))

    def _reregister(self) -> None:
        try:
            self.intervals, drain = self.client.register(
                capabilities(worker_id=self.worker_id, types=self.types, tags=self.tags)
            )
        except HubAuthError as exc:
            self._set_fatal(exc)
        except HubError as exc:
            log.warning("re-registering failed (%s); carrying on", exc)
        else:
            if drain:
                self.drain()

    def _start(self, data: dict[str, Any]) -> None:
        job = job_from_json(data)
        lease_id = str(data["lease_id"]) if data.get("lease_id") else None
        key = f"{job.id}:{lease_id or job.attempts}"  # unique even if a hub's lease ids are not
        lease = make_lease(job, lease_id=key, worker=self.worker_id)
        self.stats["claimed"] += 1
        try:
            job_type = self.queue.job_type(job.type)
        except UnknownJobType as exc:
            job_type = None
            problem: str | None = str(exc)
        else:
            problem = None
        ctx = AgentContext(
            job=job,
            job_type=job_type,  # type: ignore[arg-type]  # None only when reported failed below
            payload=None,
            worker=self.worker_id,
            config=self.queue.config,
            build_child=self.queue.build,
            request_heartbeat=self._request_heartbeat,
        )
        ctx.artifact_source = self.source
        attempt = Attempt(job=job, lease=lease, ctx=ctx, claimed_at=time.monotonic())
        # not started by its claim: read-ahead, started by a `start` report before it runs
        claim = Claim(run=attempt, key=key, lease_id=lease_id, needs_start=job.started_at is None)
        with self._cond:
            self._claims[key] = claim
            stopping = self._stopping
        if stopping:  # claimed while the stop began: give it straight back
            self._settle(claim, Released(lease=lease))
            return
        if problem is not None:
            self._settle(claim, Failed(lease=lease, error=problem))
            return
        threading.Thread(
            target=self._execute, args=(claim,), name=f"agent-job-{job.id}", daemon=True
        ).start()

    def _execute(self, claim: Claim) -> None:
        run = claim.run
        self._slots.acquire()  # prefetched jobs wait here for one of `concurrency` slots
        with self._cond:
            claim.holds_slot = True
            if claim.settled:  # released (stopping) or lost while it waited
                self._free_slot(claim)
                return
        if claim.needs_start and not self._started(claim):
            with self._cond:
                self._free_slot(claim)
            return
        with self._cond:
            # released or lost while its start was asked for; or the agent is stopping: a job
            # not begun yet is given back by `_wait_until_done`, never begun after it looked
            if claim.settled or self._stopping:
                self._free_slot(claim)
                return
            run.began_at = time.monotonic()
            self._cond.notify_all()  # the claimer may claim once no claimed job waits
            if run.job.timeout_ms is not None:  # the timeout counts from the handler's start
                run.deadline = run.began_at + run.job.timeout_ms / 1000
        outcome = self.loop.execute(run)  # validates the payload, runs, judges; never raises
        duration_ms = (time.monotonic() - run.began_at) * 1000
        with self._cond:
            recent = self._recent_ms
            self._recent_ms = duration_ms if recent is None else 0.9 * recent + 0.1 * duration_ms
        if not self._settle(claim, outcome):
            log.info(
                "job %s finished after it was given up (%s); outcome dropped",
                run.job.id,
                run.ctx.stop_reason,
            )

    def _started(self, claim: Claim) -> bool:
        """Ask the hub to mark a read-ahead job started (with the reporter's next batch) and
        wait for its durable answer: True, run the handler; False, it does not start (lost,
        cancelled, released meanwhile; whoever decided that settled it)."""
        with self._cond:
            if claim.lease_id is None:  # no lease id, no `start` report: it cannot start safely
                can = False
            else:
                can = True
                self._starts.append(claim)
        if not can:
            log.error(
                "job %s was claimed without a start and without a lease id; released",
                claim.run.job.id,
            )
            self._settle(claim, Released(lease=claim.run.lease))
            return False
        self._outbox_ready.set()
        claim.answered.wait()
        with self._cond:
            return claim.started and not claim.settled

    def _request_heartbeat(self) -> None:
        with self._cond:
            if not self._heartbeat_requested:  # one pending request wakes; more add nothing
                self._heartbeat_requested = True
                self._cond.notify_all()

    # -- outcomes ---------------------------------------------------------------------

    def _settle(self, claim: Claim, outcome: Outcome | None) -> bool:
        """Record the claim's one outcome in the outbox (None: forget it); False if already settled.
        A `RetryAfter(limit=True)` hold of this claim goes with its fail report, or nowhere."""
        # every call drops the claim's hold: one recorded after the claim was settled (a
        # handler given up on that raised later) must not stay behind in memory
        hold = self.attempts.rate_holds.pop(claim.run.lease, None)
        with self._cond:
            if claim.settled:
                return False
            claim.settled = True
            self._free_slot(claim)  # a handler given up on keeps running, but not in a slot
            claim.answered.set()  # an executor waiting for its start leaves
            self._cond.notify_all()
        if outcome is None:
            return True
        kind, body = report_of(outcome, worker_id=self.worker_id, lease_id=claim.lease_id)
        if hold is not None and kind == "fail":  # RetryAfter(limit=True): the hub holds it
            body["hold_limit"] = hold
        body = sendable(kind, body)
        row = Pending(
            lease_id=claim.key,
            job_id=claim.run.job.id,
            worker_id=self.worker_id,
            kind=kind,
            body=body,
            recorded_at=now_ms(),
            tries=0,
        )
        with self._cond:  # the reporter saves and sends it with the others of its batch
            self._ready.append(row)
        self._outbox_ready.set()
        return True

    def _forget(self, key: str) -> None:
        with self._cond:
            self._claims.pop(key, None)
            self._unsaved.pop(key, None)
            self._cond.notify_all()

    def _outbox_trouble(self, exc: BaseException) -> None:
        """An outbox read or write failed: say so once; outcomes then go straight to the hub."""
        with self._cond:
            first, self._outbox_broken = not self._outbox_broken, True
        if first:
            log.error(
                "cannot write the outbox %s (%s: %s); outcomes now go straight to the hub and "
                "are kept in memory until it takes them (lost if this agent stops first): "
                "free space on that disk or fix its permissions",
                self.outbox.path,
                type(exc).__name__,
                exc,
            )
        else:
            log.debug("outbox still failing: %s", exc)

    def _outbox_call(self, method: Any, *args: Any, **kwargs: Any) -> None:
        """Update the outbox where losing the update costs nothing but a repeated delivery."""
        try:
            method(*args, **kwargs)
        except Exception as exc:
            self._outbox_trouble(exc)

    def _save_ready(self) -> None:
        """Write the outcomes settled since the last batch to the outbox, in one transaction."""
        with self._cond:
            fresh, self._ready = self._ready, []
        if not fresh:
            return
        try:
            self.outbox.add_many(fresh)
        except Exception as exc:  # disk full, read-only, I/O error: the hub may still take them
            self._outbox_trouble(exc)
            with self._cond:
                for row in fresh:  # heartbeated and retried until delivered
                    self._unsaved.setdefault(row.lease_id, row)

    def _pending_rows(self) -> list[Pending]:
        """Undelivered outcomes: the outbox's rows and those it could not take (oldest first)."""
        try:
            saved = self.outbox.pending(self.worker_id, limit=MAX_BATCH)
        except Exception as exc:
            self._outbox_trouble(exc)
            saved = []
        with self._cond:
            rows = {row.lease_id: row for row in saved}
            for key, row in self._unsaved.items():
                if len(rows) >= MAX_BATCH:
                    break
                rows.setdefault(key, row)
        return list(rows.values())

    def _release_rest(self) -> None:
        """Shutdown's deadline passed: stop what still runs and give those jobs back."""
        with self._cond:
            self._released = True
            open_claims = [claim for claim in self._claims.values() if not claim.settled]
        for claim in open_claims:
            log.warning(
                "job %s still running at the shutdown deadline; asking it to stop, then releasing it",
                claim.run.job.id,
            )
            self._ask_to_stop(claim, "shutdown", Released(lease=claim.run.lease))

    def _ask_to_stop(self, claim: Claim, reason: str, fallback: Outcome) -> None:
        """Ask the handler to stop; its own outcome wins if it comes within `stop_grace`."""
        claim.run.ctx.request_stop(reason)
        with self._cond:
            if claim.fallback is None:
                claim.fallback = fallback
                claim.stop_until = time.monotonic() + self.stop_grace
            claim.run.deadline = None
            self._cond.notify_all()

    def _reporter_main(self) -> None:
        """Save what settled to the outbox and send it, a batch at a time: the outcomes that
        settle while one report is in flight go in the next one."""
        backoff = Backoff(self.max_backoff)
        while not self._closed:
            self._outbox_ready.wait(timeout=30.0)
            self._outbox_ready.clear()
            while not self._closed and not self._fatal:
                self._save_ready()
                rows = self._pending_rows()
                starts = self._waiting_starts()
                if not rows and not starts:
                    break
                if self._deliver_batch(rows, starts):
                    backoff.reset()
                    with self._cond:
                        self._hub_away = False
                        self._cond.notify_all()
                    continue
                with self._cond:
                    self._hub_away = True
                delay = backoff.next()
                if backoff.failures <= 3 or backoff.failures % 10 == 0:
                    log.warning(
                        "%d outcome(s) and %d start(s) not delivered yet (the hub is "
                        "unreachable or failing); retrying in %.1fs",
                        len(rows),
                        len(starts),
                        delay,
                    )
                self._wait_to_retry(delay)
        self._end_starts()

    def _waiting_starts(self) -> list[Claim]:
        """Read-ahead claims whose executor waits for the hub to mark them started (those
        settled meanwhile, released or lost, are dropped: they will not start)."""
        with self._cond:
            self._starts = [claim for claim in self._starts if not claim.settled]
            return list(self._starts)

    def _answer_start(self, claim: Claim, started: bool) -> None:
        """The hub answered `claim`'s start: its executor runs the handler or leaves."""
        with self._cond:
            if claim in self._starts:
                self._starts.remove(claim)
            claim.started = started
            claim.answered.set()

    def _end_starts(self) -> None:
        """The reporter ends (the agent is closing): executors waiting for a start leave."""
        with self._cond:
            waiting, self._starts = self._starts, []
        for claim in waiting:
            self._answer_start(claim, False)

    def _wait_to_retry(self, delay: float) -> None:
        """Back off before the next delivery, saving outcomes that settle meanwhile (they
        must survive a restart during the outage); the claimer seeing the hub again ends it."""
        until = time.monotonic() + delay
        while not self._closed and not self._fatal:
            left = until - time.monotonic()
            if left <= 0:
                return
            self._outbox_ready.wait(left)
            self._outbox_ready.clear()
            self._save_ready()
            with self._cond:
                if not self._hub_away:  # set back by the claimer: the hub answers again
                    return

    def _deliver_batch(self, rows: list[Pending], starts: Sequence[Claim] = ()) -> bool:
        """Send `starts` and `rows` in one `POST /api/jobs/reports` (single routes to a hub
        without it, and for rows without a lease id); False when the hub is unavailable (the
        rows and the starts stay)."""
        single = [row for row in rows if not self._batched or "lease_id" not in row.body]
        batch = [row for row in rows if row not in single]
        if starts and not self._batched:
            self._no_starts(starts, "the hub has no batched reports route")
            starts = []
        if batch or starts:
            items = [_start_item(claim) for claim in starts] + [_item(row) for row in batch]
            try:
                answer = self.client.reports(self.worker_id, items)
                self._reports_seen = True
            except NoBatchRoute as exc:
                log.info("%s; reporting one outcome per request", exc)
                self._batched = False
                self._no_starts(starts, str(exc))
                single.extend(batch)
            except HubUnavailable as exc:
                self._outbox_call(self.outbox.tried_many, [row.lease_id for row in batch])
                log.debug("cannot deliver %d report(s) yet (%s)", len(items), exc)
                return False
            except HubAuthError as exc:
                self._set_fatal(exc)
                return False
            except HubError as exc:  # the batch itself refused (too big?): one at a time
                log.warning("batched report refused (%s); reporting one outcome per request", exc)
                if starts and not self._deliver_starts(starts):
                    return False
                single.extend(batch)
            else:
                news = len(starts)
                self._start_answers(starts, answer.results[:news])
                self._settle_answers(batch, replace(answer, results=answer.results[news:]))
        return all([self._deliver(row) for row in single])

    def _deliver_starts(self, starts: Sequence[Claim]) -> bool:
        """Send starts alone (their batch with outcomes was refused whole); False when the hub
        is unavailable (they stay)."""
        try:
            answer = self.client.reports(self.worker_id, [_start_item(c) for c in starts])
        except HubUnavailable:
            return False
        except HubAuthError as exc:
            self._set_fatal(exc)
            return False
        except HubError as exc:
            self._no_starts(starts, str(exc))
            return True
        self._start_answers(starts, answer.results)
        if answer.drain:
            self.drain()
        return True

    def _start_answers(self, starts: Sequence[Claim], results: list[dict[str, Any]]) -> None:
        """Act on the hub's answers to `start` items: run, drop a lost lease, or give back."""
        for claim, result in zip(starts, results, strict=True):
            state = result.get("state")
            if state in ("recorded", "already"):
                self._answer_start(claim, True)
                continue
            self._answer_start(claim, False)
            if state == "stale":
                self._lease_lost(claim, "the hub answered its start: not this agent's live claim")
            elif result.get("cancel_requested"):
                log.info("job %s was cancelled before it began; giving it back", claim.run.job.id)
                self._settle(claim, Released(lease=claim.run.lease))
            else:
                self._no_starts([claim], str(result.get("error") or state))

    def _no_starts(self, starts: Sequence[Claim], why: str) -> None:
        """Read-ahead jobs the hub cannot mark started: they go back unrun (no attempt spent),
        and later claims are all started by the hub."""
        if not starts:
            return
        self._read_ahead = False
        log.error(
            "the hub did not take the start of %d read-ahead job(s) (%s); giving them back",
            len(starts),
            why,
        )
        for claim in starts:
            self._answer_start(claim, False)
            self._settle(claim, Released(lease=claim.run.lease))

    def _settle_answers(self, rows: list[Pending], answer: Reported) -> None:
        """Act on the hub's answer per row: delivered or stale rows leave the outbox (in one
        transaction); a refused result becomes a failure sent with the next batch."""
        done: list[str] = []
        for row, result in zip(rows, answer.results, strict=True):
            state = result.get("state")
            if state in ("recorded", "already"):
                self.stats["delivered"] += 1
            elif state == "stale":
                self.stats["stale"] += 1
                log.warning(
                    "stale %s of job %s dropped: not this agent's live claim", row.kind, row.job_id
                )
            elif row.kind == "result":
                self._refail(row, str(result.get("error") or state))
                continue
            else:
                log.error(
                    "the hub refused %s of job %s (%s); dropped",
                    row.kind,
                    row.job_id,
                    result.get("error") or state,
                )
            done.append(row.lease_id)
        if done:
            self._outbox_call(self.outbox.delete_many, done)
            for key in done:
                self._forget(key)
        if answer.drain:
            self.drain()

    def _deliver(self, row: Pending) -> bool:
        """Send one outbox row; False when the hub is unavailable (the row stays)."""
        try:
            self.client.report(row.kind, row.job_id, sendable(row.kind, row.body), key=row.lease_id)
        except HubUnavailable as exc:
            self._outbox_call(self.outbox.tried, row.lease_id)
            log.debug("cannot deliver %s of job %s yet (%s)", row.kind, row.job_id, exc)
            return False
        except HubAuthError as exc:
            if exc.status == 403 and row.kind == "result":
                # the claim was this token's, so the content is refused: children of a type
                # or queue beyond a limited token. The job fails; the agent goes on.
                return self._fail_rejected(row, exc)
            self._set_fatal(exc)
            return False
        except StaleReport as exc:
            self.stats["stale"] += 1
            log.warning("stale %s of job %s dropped: %s", row.kind, row.job_id, exc)
        except HubRejected as exc:
            if row.kind == "result":
                return self._fail_rejected(row, exc)
            log.error("the hub rejected %s of job %s (%s); dropped", row.kind, row.job_id, exc)
        else:
            self.stats["delivered"] += 1
        self._outbox_call(self.outbox.delete, row.lease_id)
        self._forget(row.lease_id)
        return True

    def _refail(self, row: Pending, why: str) -> Pending:
        """The hub refused a result: the row becomes a permanent failure (sent next)."""
        log.error("the hub rejected the result of job %s (%s); failing it", row.job_id, why)
        body = {
            "worker_id": row.body.get("worker_id", self.worker_id),
            "lease_id": row.body.get("lease_id"),
            "reason": f"the hub rejected the result: {why}",
            "retryable": False,
        }
        body = {key: value for key, value in body.items() if value is not None}
        failing = replace(row, kind="fail", body=body)
        with self._cond:
            if row.lease_id in self._unsaved:
                self._unsaved[row.lease_id] = failing
        self._outbox_call(self.outbox.replace, row.lease_id, kind="fail", body=body)
        return failing

    def _fail_rejected(self, row: Pending, exc: Exception) -> bool:
        """The hub refused a result: report the job failed for good instead."""
        log.error("the hub rejected the result of job %s (%s); failing it", row.job_id, exc)
        body = {
            "worker_id": row.body.get("worker_id", self.worker_id),
            "lease_id": row.body.get("lease_id"),
            "reason": f"the hub rejected the result: {exc}",
            "retryable": False,
        }
        failing = replace(row, kind="fail", body=body)
        with self._cond:
            if row.lease_id in self._unsaved:
                self._unsaved[row.lease_id] = failing
        self._outbox_call(self.outbox.replace, row.lease_id, kind="fail", body=body)
        return self._deliver(failing)

    # -- heartbeats and timeouts ----------------------------------------------------------

    def _supervisor_main(self) -> None:
        next_beat = time.monotonic() + self.intervals.heartbeat_interval
        last_beat = float("-inf")  # ctx.heartbeat() requests coalesce: one beat per lease/20
        while True:
            with self._cond:
                if self._closed or self._fatal:
                    return
                deadlines = [
                    when
                    for c in self._claims.values()
                    if not c.settled
                    for when in (c.run.deadline, c.stop_until)
                    if when is not None
                ]
                coalesced = last_beat + self.intervals.lease / 20
                until = min([next_beat, *deadlines])
                if self._heartbeat_requested:
                    until = min(until, coalesced)
                remaining = until - time.monotonic()
                if remaining > 0:
                    self._cond.wait(min(remaining, 1.0))
                now = time.monotonic()
                beat = now >= next_beat or (self._heartbeat_requested and now >= coalesced)
                if beat:
                    self._heartbeat_requested = False
            self._check_timeouts(now)
            self._give_back_read_ahead(now)
            if beat:
                last_beat = now
                self._heartbeat()
                next_beat = time.monotonic() + self.intervals.heartbeat_interval

    def _check_timeouts(self, now: float) -> None:
        with self._cond:
            timed_out = [
                c
                for c in self._claims.values()
                if not c.settled and c.run.deadline is not None and now >= c.run.deadline
            ]
            given_up = [
                c
                for c in self._claims.values()
                if not c.settled and c.stop_until is not None and now >= c.stop_until
            ]
        for claim in timed_out:
            run = claim.run
            log.warning(
                "job %s (%s) timed out after %gs; asking its handler to stop",
                run.job.id,
                run.job.type,
                (run.job.timeout_ms or 0) / 1000,
            )
            self._ask_to_stop(claim, "timeout", self.attempts.timeout_outcome(run))
        for claim in given_up:
            if claim.fallback is not None and self._settle(claim, claim.fallback):
                self.loop.abandon(claim.run)  # an async handler: cancelled again, left behind
                log.warning(
                    "job %s did not stop within %gs (%s); its slot is given up",
                    claim.run.job.id,
                    self.stop_grace,
                    claim.run.ctx.stop_reason,
                )

    def _heartbeat(self) -> None:
        with self._cond:
            claims = list(self._claims.values())
        batch = [c for c in claims if self._batched and c.lease_id is not None]
        if batch and not self._heartbeat_batch(batch):
            batch = []  # the hub has no batched route: these go one per request too
        for claim in claims:
            if claim not in batch and not self._heartbeat_one(claim):
                return

    def _heartbeat_batch(self, claims: list[Claim]) -> bool:
        """Extend every lease in one `POST /api/jobs/reports`; False if the hub lacks it."""
        items = [
            {"job_id": c.run.job.id, "lease_id": c.lease_id, "kind": "heartbeat"} for c in claims
        ]
        try:
            answer = self.client.reports(self.worker_id, items)
            self._reports_seen = True
        except NoBatchRoute:
            self._batched = False
            return False
        except HubUnavailable as exc:
            log.debug("heartbeats failed (%s); the jobs keep running", exc)
            return True
        except HubAuthError as exc:
            self._set_fatal(exc)
            return True
        except HubError as exc:
            log.error("heartbeats rejected: %s", exc)
            return True
        for claim, result in zip(claims, answer.results, strict=True):
            state = result.get("state")
            if result.get("cancel_requested") and not claim.settled:
                if claim.run.ctx.stop_reason is None:
                    log.info("cancel requested for job %s; stopping it", claim.run.job.id)
                claim.run.ctx.request_stop("cancel")
            elif state == "stale":
                self._lease_lost(claim, "the hub answered: not this agent's live claim")
            elif state == "refused":
                log.error("heartbeat of job %s refused: %s", claim.run.job.id, result.get("error"))
        if answer.drain:
            self.drain()
        return True

    def _heartbeat_one(self, claim: Claim) -> bool:
        """`POST /api/jobs/{id}/heartbeat`; False when the token was refused (stop beating)."""
        job_id = claim.run.job.id
        try:
            answer = self.client.heartbeat(
                job_id, worker_id=self.worker_id, lease_id=claim.lease_id
            )
        except HubUnavailable as exc:
            log.debug("heartbeat of job %s failed (%s); the job keeps running", job_id, exc)
            return True
        except HubAuthError as exc:
            self._set_fatal(exc)
            return False
        except StaleReport as exc:
            self._lease_lost(claim, str(exc))
            return True
        except HubRejected as exc:
            log.error("heartbeat of job %s rejected: %s", job_id, exc)
            return True
        if answer.get("cancel_requested") and not claim.settled:
            if claim.run.ctx.stop_reason is None:
                log.info("cancel requested for job %s; stopping it", job_id)
            claim.run.ctx.request_stop("cancel")
        if answer.get("drain"):
            self.drain()
        return True

    def _lease_lost(self, claim: Claim, why: str) -> None:
        run = claim.run
        run.ctx.request_stop("lease lost")
        if self._settle(claim, None):
            log.error("lost the lease of job %s (%s); stopping it", run.job.id, why)
        with self._cond:
            self._claims.pop(claim.key, None)
            self._cond.notify_all()

    # -- signals -------------------------------------------------------------------------

    def _install_signals(self) -> dict[int, Any]:
        if (
            not self.install_signal_handlers
            or threading.current_thread() is not threading.main_thread()
        ):
            return {}
        return {
            signum: signal.signal(signum, self._on_signal)
            for signum in (signal.SIGINT, signal.SIGTERM)
        }

    def _restore_signals(self, previous: dict[int, Any]) -> None:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _start_item(claim: Claim) -> dict[str, Any]:
    """A `start` item of `POST /api/jobs/reports`: mark this read-ahead job started."""
    return {"job_id": claim.run.job.id, "lease_id": claim.lease_id, "kind": "start"}


def _item(row: Pending) -> dict[str, Any]:
    """An outbox row as an item of `POST /api/jobs/reports` (its single route's body, with
    `job_id` and `kind`; the worker id is the batch's)."""
    body = sendable(row.kind, row.body)
    item = {key: value for key, value in body.items() if key != "worker_id"}
    item["job_id"] = row.job_id
    item["kind"] = row.kind
    return item


__all__ = ["Agent", "AgentContext", "AgentFatal", "Backoff", "Claim"]
