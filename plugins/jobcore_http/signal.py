"""`AsyncSignal`: a thread-safe "something happened" that coroutines can await."""

from __future__ import annotations

import asyncio
import contextlib


class AsyncSignal:
    """Fired from any thread; awaited on the event loop it was bound to."""

    def __init__(self) -> None:
        self.generation = 0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._future: asyncio.Future[None] | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._future = loop.create_future()

    def fire(self) -> None:
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):  # the loop is closing
            loop.call_soon_threadsafe(self._fire)

    def _fire(self) -> None:
        self.generation += 1
        future, self._future = self._future, self._loop.create_future() if self._loop else None
        if future is not None and not future.done():
            future.set_result(None)

    async def wait(self, generation: int, timeout: float) -> bool:
        """Wait until fired after `generation` was read, at most `timeout` s; True if fired."""
        if self.generation != generation:
            return True
        if self._future is None or timeout <= 0:
            return False
        try:
            await asyncio.wait_for(asyncio.shield(self._future), timeout)
        except TimeoutError:
            return self.generation != generation
        return True
