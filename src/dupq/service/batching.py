"""Concurrent requests answered together: one encode and one FAISS call for a group of searches."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import anyio.to_thread

MAX_BATCH = 64  # requests answered by one search or add call


class Batcher:
    """Run ``fn(items) -> results`` in a worker thread for every request waiting, one call at a time.

    A request waits while the previous call runs; then every waiting request (up to ``limit``)
    goes into the next call. Under load the calls grow, so the fixed cost of a call (a torch
    forward pass, a FAISS search, a commit) is shared; with a single request it is one call as
    before. If a call raises, each of its requests is retried alone, so one bad request fails
    only itself; unless ``shared(error)`` says the error is everyone's (a full disk, a busy
    store), which then answers every request of the call at once instead of once per request.
    """

    def __init__(
        self, fn: Callable[[list], list], limit: int = MAX_BATCH, shared: Callable[[Exception], bool] = lambda e: False
    ):
        self.fn, self.limit, self.shared = fn, limit, shared
        self.pending: list[tuple[Any, asyncio.Future]] = []
        self.running = False

    async def submit(self, item: Any) -> Any:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((item, future))
        if not self.running:
            self.running = True
            asyncio.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        try:
            while self.pending:
                batch, self.pending = self.pending[: self.limit], self.pending[self.limit :]
                outcomes = await self._run([item for item, _ in batch])
                for (_, future), (result, error) in zip(batch, outcomes):
                    if future.done():  # the client went away
                        continue
                    if error is not None:
                        future.set_exception(error)
                    else:
                        future.set_result(result)
        finally:
            self.running = False

    async def _run(self, items: list) -> list[tuple[Any, Exception | None]]:
        """``(result, None)`` or ``(None, error)`` for each item."""
        try:
            return [(r, None) for r in await anyio.to_thread.run_sync(self.fn, items)]
        except Exception as e:
            if len(items) == 1 or self.shared(e):
                return [(None, e)] * len(items)
        return [(await self._run([item]))[0] for item in items]
