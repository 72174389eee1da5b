"""The event loop of a worker's `async def` handlers, beside its executor threads (DESIGN §15).

`MixedExecutors` is the executor pool of a worker that has async job types: sync
attempts go to the executor threads as before, async ones to `AsyncHandlers`,
one event loop in its own thread with up to `async_concurrency` handler tasks.
Each async attempt follows the phases of `jobcore.inflight` exactly as a sync one
does: it is begun when a slot is free, its handler starts only once its start
marker committed (crash accounting), and it reports its outcome to the worker's
loop, which records it. A stop request cancels the handler's task at once; a
task still running `stop_grace` later is cancelled again and abandoned (its slot
freed; whatever it reports later is dropped). A watchdog thread warns, naming
the jobs on the loop, when the loop has not ticked for `loop_block_warning`.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any, cast

from jobcore.async_handlers import is_async_handler, run_attempt
from jobcore.attempt import AttemptRunner
from jobcore.errors import JobcoreError
from jobcore.executors import Executors
from jobcore.group_commit import GroupCommit
from jobcore.inflight import Attempt, InFlight, Phase
from jobcore.models import Outcome
from jobcore.queue import Queue

if TYPE_CHECKING:
    from jobcore.worker import Worker

log = logging.getLogger("jobcore.worker")

HELD = (Phase.CLAIMED, Phase.STARTING, Phase.STARTED, Phase.STOPPING)


class _Mailbox:
    """Work handed to the loop from other threads, delivered in batches: one
    `call_soon_threadsafe` (a write to the loop's self-pipe, a syscall) per batch rather
    than per attempt, for the claims of one commit and the start markers it confirmed."""

    __slots__ = ("_items", "_loop", "_posted")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._items: collections.deque[Callable[[], None]] = collections.deque()
        self._posted = False

    def post(self, item: Callable[[], None]) -> None:
        """Run `item()` on the loop soon; RuntimeError if the loop is closed."""
        self._items.append(item)  # deque appends and pops are atomic
        if not self._posted:
            self._posted = True
            try:
                self._loop.call_soon_threadsafe(self._deliver)
            except RuntimeError:
                self._posted = False
                raise

    def _deliver(self) -> None:
        self._posted = False  # before taking: what is posted from now on posts again
        items = self._items
        while items:
            items.popleft()()


class _LoopWaiter:
    """What `InFlight` sets (from any thread) when a starting attempt may go on: wakes its
    coroutine on the loop. Duck-types the `set()` of the `threading.Event` executors use,
    without its lock and condition (memory per in-flight job, DESIGN §15)."""

    __slots__ = ("_flag", "_future", "_mailbox")

    def __init__(self, mailbox: _Mailbox) -> None:
        self._mailbox = mailbox
        self._flag = False
        self._future: asyncio.Future[None] | None = None

    def set(self) -> None:
        self._flag = True
        with contextlib.suppress(RuntimeError):  # the loop closed: nobody waits any more
            self._mailbox.post(self._wake)

    def _wake(self) -> None:
        future = self._future
        if future is not None and not future.done():
            future.set_result(None)

    async def wait_async(self) -> None:
        """Until `set()` was called (at once if it was since the last wait)."""
        if not self._flag:
            self._future = asyncio.get_running_loop().create_future()
            await self._future
            self._future = None
        self._flag = False


class AsyncHandlers:
    """One event loop thread running async attempts, at most `concurrency` at once."""

    def __init__(
        self,
        inflight: InFlight,
        attempts: AttemptRunner,
        *,
        concurrency: int,
        block_warning: float,
    ) -> None:
        self.inflight = inflight
        self.attempts = attempts
        self.concurrency = concurrency
        self.block_warning = block_warning
        self.loop: asyncio.AbstractEventLoop  # made by `start`: a worker never run holds none
        self._mailbox: _Mailbox
        self._began_loop = False
        self._waiting: collections.deque[Attempt] = collections.deque()
        self._running: dict[Attempt, asyncio.Future[Any] | None] = {}  # hold a slot
        self._handlers: dict[asyncio.Future[Any], Attempt] = {}  # handler task -> attempt
        self._tasks: set[asyncio.Task[None]] = set()  # each attempt's own task
        self._ticked = time.monotonic()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name="jobcore-async", daemon=True)
        self._watchdog = threading.Thread(
            target=self._watch, name="jobcore-async-watch", daemon=True
        )

    # -- from the worker's threads ------------------------------------------------------

    def start(self) -> None:
        if not self._began_loop:
            self._began_loop = True
            self.loop = asyncio.new_event_loop()
            self._mailbox = _Mailbox(self.loop)
            self._thread.start()
            self._watchdog.start()

    def submit(self, attempt: Attempt) -> None:
        self.start()  # the worker starts it with its executors; this is a guard
        try:
            self._mailbox.post(partial(self._arrive, attempt))
        except RuntimeError:  # the loop is gone (stopping): the worker gives the job back
            log.warning("job %s: the event loop has stopped; not starting it", attempt.job.id)

    def abandon(self, attempt: Attempt) -> None:
        """Its handler outlived its stop grace: cancel its task again and free its slot."""
        if not self._began_loop:
            return
        with contextlib.suppress(RuntimeError):  # the loop is gone, and the task with it
            self.loop.call_soon_threadsafe(self._abandon, attempt)

    def stop(self, timeout: float = 2.0) -> None:
        """Cancel what still runs on the loop (abandoned handlers) and end its thread."""
        self._done.set()
        if not self._began_loop or not self._thread.is_alive():
            return
        self.loop.call_soon_threadsafe(self._shutdown)
        self._thread.join(timeout)
        if self._thread.is_alive():
            log.warning("the event loop of async handlers did not stop within %gs", timeout)

    # -- on the loop ------------------------------------------------------------------------

    def _main(self) -> None:
        asyncio.set_event_loop(self.loop)
        tick = self.loop.create_task(self._tick())
        try:
            while True:
                self.loop.run_forever()
                if self._done.is_set():
                    break
                # only `stop()` ends the loop: a handler that called loop.stop() would
                # otherwise leave every job on it, and every later one, claimed for good
                log.error(
                    "a handler stopped the event loop of async handlers (loop.stop()); "
                    "running it again: %s",
                    self._on_loop(),
                )
        finally:
            tick.cancel()
            pending = [task for task in asyncio.all_tasks(self.loop) if not task.done()]
            for task in pending:
                task.cancel()
            if pending:  # give cancelled tasks a moment to unwind (a bounded one)
                self.loop.run_until_complete(asyncio.wait(pending, timeout=0.5))
            # handlers left behind (they ignored every cancellation): closed now, so their
            # `finally` blocks run before the worker's last hooks (a wrapper's span ends
            # before its export), not at the interpreter's exit
            for handler, attempt in list(self._handlers.items()):
                close_left_behind(handler, attempt)
            self.loop.close()

    def _shutdown(self) -> None:
        for task in list(self._handlers):
            task.cancel()
        self.loop.stop()

    async def _tick(self) -> None:
        interval = min(0.25, self.block_warning / 4)
        while True:
            self._ticked = time.monotonic()
            await asyncio.sleep(interval)

    def _arrive(self, attempt: Attempt) -> None:
        self._waiting.append(attempt)
        self._fill()

    def _fill(self) -> None:
        while self._waiting and len(self._running) < self.concurrency:
            attempt = self._waiting.popleft()
            waiter = _LoopWaiter(self._mailbox)
            if not self.inflight.begin(attempt, cast(threading.Event, waiter)):
                continue  # released or cancelled while it waited for a slot
            if self.inflight.self_noting:  # start slots are the executor threads': the
                self.inflight.needs_marker(attempt)  # loop's next commit marks this start
            self._running[attempt] = None
            task = self.loop.create_task(self._attempt(attempt, waiter))
            self._tasks.add(task)  # the loop holds tasks weakly
            task.add_done_callback(self._tasks.discard)

    def _abandon(self, attempt: Attempt) -> None:
        task = self._running.pop(attempt, None)
        if task is not None:
            task.cancel()
            log.warning(
                "job %s: its async handler ignored cancellation for its stop grace; "
                "cancelled it again and left it behind",
                attempt.job.id,
            )
        self._fill()

    async def _attempt(self, attempt: Attempt, waiter: _LoopWaiter) -> None:
        try:
            if not await self._started(attempt, waiter):
                return
            outcome = await run_attempt(self.attempts, attempt, self._track(attempt))
        finally:
            task = self._running.pop(attempt, None)
            if task is not None:
                self._handlers.pop(task, None)
            self._fill()  # the next attempt begins before this report: one commit for both
        reported, _ = self.inflight.report(attempt, outcome)
        if not reported:
            log.info(
                "job %s finished after it was given up (%s); outcome dropped",
                attempt.job.id,
                attempt.ctx.stop_reason,
            )

    def _track(self, attempt: Attempt) -> Any:
        def started(task: asyncio.Future[Any]) -> None:
            if attempt in self._running:
                self._running[attempt] = task
            self._handlers[task] = attempt
            task.add_done_callback(lambda done: self._handlers.pop(done, None))

        return started

    async def _started(self, attempt: Attempt, waiter: _LoopWaiter) -> bool:
        """Wait until its start marker committed (True) or the worker let it go (False)."""
        while True:
            state = self.inflight.start(attempt)
            if state is not None:
                return state
            if self._done.is_set():
                return False
            await waiter.wait_async()

    # -- the watchdog thread ------------------------------------------------------------

    def _watch(self) -> None:
        warned = False
        interval = min(0.25, self.block_warning / 4)
        while not self._done.wait(interval):
            stalled = time.monotonic() - self._ticked
            if stalled < self.block_warning:
                warned = False
                continue
            if warned:
                continue
            warned = True
            log.warning(
                "the event loop of async handlers has not ticked for %.1fs: a handler blocks "
                "it (a blocking call in an async def handler?); %s",
                stalled,
                self._on_loop(),
            )

    def _on_loop(self) -> str:
        current = asyncio.current_task(self.loop)
        handlers = dict(self._handlers)
        attempt = handlers.get(current) if current is not None else None
        if attempt is not None:
            return f"running now: job {attempt.job.id} ({attempt.job.type})"
        ids = ", ".join(f"{a.job.id} ({a.job.type})" for a in handlers.values())
        return f"jobs on the loop: {ids or 'none'}"


class MixedExecutors(Executors):
    """Executor threads for sync handlers plus one event loop for async ones."""

    def __init__(
        self,
        queue: Queue,
        inflight: InFlight,
        attempts: AttemptRunner,
        *,
        async_types: frozenset[str],
        sync_types: tuple[str, ...],
        async_concurrency: int,
        block_warning: float,
    ) -> None:
        super().__init__(queue, inflight, attempts)
        self.async_types = async_types
        self.sync_types = sync_types
        self.async_concurrency = async_concurrency
        self.handlers = AsyncHandlers(
            inflight, attempts, concurrency=async_concurrency, block_warning=block_warning
        )
        self._async_held: set[Attempt] = set()

    def spawn(self) -> None:
        self.handlers.start()
        super().spawn()

    def submit(self, attempt: Attempt) -> None:
        if attempt.job.type in self.async_types:
            self._async_held.add(attempt)
            self.handlers.submit(attempt)
        else:
            super().submit(attempt)

    def stop(self) -> None:
        super().stop()
        self.handlers.stop()

    def abandon(self, attempt: Attempt) -> bool:
        """An async attempt outlived its stop grace: cancel it again, free its slot (True)."""
        if attempt not in self._async_held:
            return False
        self.handlers.abandon(attempt)
        return True

    def free(
        self, sync_room: int, busy: int, all_types: tuple[str, ...]
    ) -> tuple[int, tuple[str, ...]]:
        """Free slots of both kinds, and the types to claim: only the kind that has room."""
        self._async_held = {a for a in self._async_held if a.phase is not Phase.DONE}
        async_busy = sum(1 for a in self._async_held if a.phase in HELD)
        sync_free = max(0, sync_room - (busy - async_busy))
        async_free = max(0, self.async_concurrency - async_busy)
        async_types = tuple(sorted(self.async_types))
        if not self.sync_types or not sync_free:
            return async_free, async_types
        if not async_free:
            return sync_free, self.sync_types
        return sync_free + async_free, all_types


def executors_for(worker: Worker, async_concurrency: int | None) -> Executors:
    """The worker's executor pool: `MixedExecutors` when any type it claims is async."""
    queue, inflight, attempts, types = worker.queue, worker.inflight, worker.attempts, worker.types
    async_types = frozenset(
        name
        for name in types
        if (job_type := queue.registry.get(name)) and is_async_handler(job_type.handler)
    )
    if async_concurrency is not None and async_concurrency < 1:
        raise JobcoreError(f"async_concurrency must be at least 1, got {async_concurrency}")
    if not async_types:
        return Executors(queue, inflight, attempts)
    core = queue.config.core
    return MixedExecutors(
        queue,
        inflight,
        attempts,
        async_types=async_types,
        sync_types=tuple(name for name in types if name not in async_types),
        async_concurrency=async_concurrency or core.async_concurrency,
        block_warning=core.loop_block_warning,
    )


class LoopThread:
    """An event loop in a thread of its own for a caller that runs each attempt on a thread
    and waits there (a remote agent): async handlers run on the loop, sync ones in place.

    The same judgement and cancellation as in a worker (`run_attempt`); `abandon` cancels
    a task again once its stop grace passed (the caller gave up its slot already).
    """

    def __init__(self, attempts: AttemptRunner) -> None:
        self.attempts = attempts
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: dict[Attempt, asyncio.Future[Any]] = {}

    def execute(self, attempt: Attempt) -> Outcome:
        if not is_async_handler(attempt.ctx.job_type.handler):
            return self.attempts.execute(attempt)
        loop = self._running_loop()

        def started(task: asyncio.Future[Any]) -> None:
            self._tasks[attempt] = task

        future = asyncio.run_coroutine_threadsafe(
            run_attempt(self.attempts, attempt, started), loop
        )
        try:
            return future.result()
        finally:
            self._tasks.pop(attempt, None)

    def abandon(self, attempt: Attempt) -> None:
        task = self._tasks.get(attempt)
        if task is not None and self._loop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(task.cancel)

    def close(self, timeout: float = 2.0) -> None:
        """Close the handlers left behind (they ignored every cancellation), on the loop,
        so their `finally` blocks run now (a wrapper's span ends before the SDK's last
        export), not when the process exits. For the end of the caller's run; each one that
        will not close, or a loop blocked past `timeout`, is logged with its job."""
        with self._lock:
            loop = self._loop
        left = [(a, t) for a, t in list(self._tasks.items()) if isinstance(t, asyncio.Task)]
        if loop is None or not left:
            return

        async def close_left() -> None:
            for attempt, task in left:
                close_left_behind(task, attempt)

        try:
            asyncio.run_coroutine_threadsafe(close_left(), loop).result(timeout)
        except TimeoutError:
            for attempt, _ in left:
                log.warning(
                    "job %s: its async handler blocks the event loop (time.sleep or other "
                    "blocking work?); not closed within %.0fs, exiting without it",
                    attempt.job.id,
                    timeout,
                )
        except Exception as exc:
            log.warning("could not close the async handlers left behind: %r", exc)

    def _running_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=_run_for_good, args=(loop,), name="jobcore-async", daemon=True
                ).start()
                self._loop = loop
            return self._loop


def close_left_behind(task: asyncio.Future[Any], attempt: Attempt) -> None:
    """Close the coroutine of a handler's task left behind (it ignored every cancellation),
    on its loop, so its `finally` blocks run now (a wrapper's span ends); one that will not
    close is logged with its job."""
    if not isinstance(task, asyncio.Task) or task.done():
        return
    try:
        task.get_coro().close()
    except RuntimeError:  # it awaited in a `finally` or an except
        log.warning(
            "job %s: its async handler awaited while being closed (in a finally block?); "
            "left unfinished",
            attempt.job.id,
        )
    except Exception:
        log.warning("job %s: closing its handler raised", attempt.job.id)


def _run_for_good(loop: asyncio.AbstractEventLoop) -> None:
    """Run `loop` until the process ends: a handler's loop.stop() would otherwise leave
    every attempt on it, and every later one, waiting for good."""
    asyncio.set_event_loop(loop)
    while True:
        loop.run_forever()
        log.error(
            "a handler stopped the event loop of async handlers (loop.stop()); running it again"
        )


def claim_room(
    executors: Executors, commit: GroupCommit, free: int, busy: int, types: tuple[str, ...]
) -> int:
    """The worker's free slots with the async ones counted; claims only the kinds with room."""
    if not isinstance(executors, MixedExecutors):
        return free
    free, commit.types = executors.free(free + busy, busy, types)
    return free


def abandoned(executors: Executors, attempt: Attempt) -> bool:
    """An async attempt past its stop grace was cancelled again and its slot freed."""
    return isinstance(executors, MixedExecutors) and executors.abandon(attempt)


__all__ = [
    "AsyncHandlers",
    "LoopThread",
    "MixedExecutors",
    "abandoned",
    "claim_room",
    "executors_for",
]
