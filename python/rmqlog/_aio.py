"""asyncio: the coroutines behind ``CommitLog.wait_async``, ``Consumer.poll_async``,
``Consumer.stream`` (``async for batch in consumer``) and ``async for`` over a ``scan``.

None of them blocks its event loop. A coroutine looks without waiting (``wait(offset, 0)``,
``poll(timeout=0)``, the record a scan has at hand); when there is nothing yet, it awaits the
store's next change. Each open log has one thread, in Rust (``src/python/aio.rs``), that sleeps
on the store's control page, the futex every append of every process wakes, while coroutines
wait on the log; at each change it signals an eventfd of each event loop with waiters, whose
reader callback wakes them all, and each looks again. The thread never takes the GIL.

No change is missed: a loop's eventfd is subscribed (the thread registered in the page) before
the look that counts, and the look and the registration of the coroutine's future happen with no
``await`` between them, so a change after the look runs the callback after the future is there.

A forked child forgets the parent's subscriptions: the parent's logs are closed there (a wait
raises ``ClosedError``), and a log the child opens has its own thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterator
from typing import Any

from rmqlog._native import CommitLog, CommitLogError, Consumer, ScanIterator


class _Subscription:
    """The coroutines of one event loop waiting on one log: an eventfd the log's thread
    signals at each change of the store, read by the loop's reader callback."""

    def __init__(self, loop: asyncio.AbstractEventLoop, log: CommitLog) -> None:
        self.loop = loop
        self.log = log
        self.users = 0
        self.futures: set[asyncio.Future[None]] = set()
        self.fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        try:
            log._aio_subscribe(self.fd)  # the thread is registered in the page when it returns
            loop.add_reader(self.fd, self._changed)
        except BaseException:
            log._aio_unsubscribe(self.fd)
            os.close(self.fd)
            raise

    def _changed(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.fd)
        futures, self.futures = self.futures, set()
        for f in futures:
            _resolve(f)

    async def change(self, timeout: float | None) -> None:
        """Returns at the store's next change (or a close, or a follower's time to look again),
        or after ``timeout`` seconds. Called right after a look, before any other ``await``."""
        fut = self.loop.create_future()
        self.futures.add(fut)
        timer = None if timeout is None else self.loop.call_later(timeout, _resolve, fut)
        try:
            await fut
        finally:
            self.futures.discard(fut)
            if timer is not None:
                timer.cancel()

    def close(self) -> None:
        self.loop.remove_reader(self.fd)
        self.log._aio_unsubscribe(self.fd)
        os.close(self.fd)


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


# (id(loop), id(log)) -> its subscription, while a coroutine of that loop waits on that log (the
# subscription holds both, so neither id is reused meanwhile).
_subscriptions: dict[tuple[int, int], _Subscription] = {}

os.register_at_fork(after_in_child=_subscriptions.clear)


@contextlib.contextmanager
def _subscribed(log: CommitLog) -> Iterator[_Subscription]:
    """The running loop's subscription to ``log``, for one waiting coroutine."""
    loop = asyncio.get_running_loop()
    key = (id(loop), id(log))
    sub = _subscriptions.get(key)
    if sub is None:
        sub = _Subscription(loop, log)
        _subscriptions[key] = sub
    sub.users += 1
    try:
        yield sub
    finally:
        sub.users -= 1
        if sub.users == 0:
            del _subscriptions[key]
            sub.close()


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())


def _deadline(timeout: float | None) -> float | None:
    return None if timeout is None else asyncio.get_running_loop().time() + timeout


async def wait_async(log: CommitLog, offset: int, timeout: float | None, durable: bool) -> int:
    """``CommitLog.wait_async``: ``wait`` awaited."""
    end = log.wait(offset, 0, durable=durable)
    if end > offset or timeout == 0:
        return end
    deadline = _deadline(timeout)
    with _subscribed(log) as sub:
        while True:
            end = log.wait(offset, 0, durable=durable)
            left = _left(deadline)
            if end > offset or left == 0:
                return end
            await sub.change(left)


async def poll_async(
    consumer: Consumer,
    log: CommitLog,
    timeout: float | None,
    relook: float | None,
    options: dict[str, Any],
) -> list[Any]:
    """``Consumer.poll_async``: ``poll`` awaited. ``relook``: it polls again this often without
    a store event (claims of other opens lapse, a nack's delay ends, another task seeks)."""
    records: list[Any] = consumer.poll(timeout=0, **options)
    if records or timeout == 0:
        return records
    deadline = _deadline(timeout)
    with _subscribed(log) as sub:
        while True:
            records = consumer.poll(timeout=0, **options)
            left = _left(deadline)
            if records or left == 0:
                return records
            if consumer._has_more_now():
                # A filtered poll stepped over as many refused records as one may, and more are
                # there: on through them, letting the loop run in between.
                await asyncio.sleep(0)
                continue
            if relook is not None:
                left = relook if left is None else min(left, relook)
            await sub.change(left)


async def stream(
    consumer: Consumer, log: CommitLog, relook: float | None, options: dict[str, Any]
) -> AsyncIterator[list[Any]]:
    """``Consumer.stream``: each non-empty poll, until the consumer or its log closes."""
    while True:
        try:
            batch = await poll_async(consumer, log, None, relook, options)
        except CommitLogError:
            if consumer.closed or log.closed:
                return
            raise
        yield batch


async def scan_next(scan: ScanIterator[Any], log: CommitLog, idle: float | None) -> Any:
    """``ScanIterator.__anext__``: the next record; a following scan at the end of the records
    waits for one, and ends after ``idle`` seconds without one or at the log's close."""
    rec = scan._next_now()
    if rec is not None:
        return rec
    deadline = _deadline(idle)
    with _subscribed(log) as sub:
        while True:
            rec = scan._next_now()
            if rec is not None:
                return rec
            left = _left(deadline)
            if left == 0:
                raise StopAsyncIteration
            await sub.change(left)
            if log.closed:
                raise StopAsyncIteration
