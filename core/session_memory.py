"""What a compactor keeps of its sessions in its own process, bounded.

A session's cache (:class:`~progressive_compactor.session_cache.SessionCache`: what the compactor
has read of its history) holds the history's messages: about half a megabyte for a session of a
few hundred messages. A compactor that serves a long-running worker sees thousands of sessions;
it keeps the caches of the ``cached_sessions`` most recently compacted ones and drops the least
recently compacted beyond that, with its usage correction. A dropped session's next turn reads
its history again and counts without a correction until the provider reports again, as a worker
that never served it would: its state is in the state store, so its view is the same.

Turns of one session are served one at a time, sync and async alike (two at once would race on
its state and its cache): a lock per session, kept while a turn of it is waiting or running, then
dropped. A child forked while other threads served turns holds none of their locks: those turns
do not run in it. A sync call made from a coroutine would wait for an async turn of the same session on its
own loop forever: call the async API there.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import threading
import weakref
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Generic, TypeVar

from .forks import renew_lock_after_fork, reset_after_fork
from .session_cache import SessionCache
from .usage import UsageAnchors

V = TypeVar("V")
Y = TypeVar("Y")
S = TypeVar("S")
R = TypeVar("R")
POLL_SECONDS = 0.002
"""How often an async turn looks whether a sync turn (or another loop's) of its session is done."""


class RecentlyUsed(Generic[V]):
    """Values by session id, for the ``limit`` sessions used most recently (thread-safe, with a
    lock of its own in a forked child); a value dropped beyond the limit is handed to ``on_drop``
    with its session id."""

    def __init__(self, limit: int, on_drop: Callable[[str], None] | None = None):
        self.limit = limit
        self.on_drop = on_drop
        self._values: OrderedDict[str, V] = OrderedDict()
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def __len__(self) -> int:
        return len(self._values)

    def get(self, session_id: str) -> V | None:
        """The session's value, now the most recently used, or None."""
        with self._lock:
            value = self._values.get(session_id)
            if value is not None:
                self._values.move_to_end(session_id)
            return value

    def put(self, session_id: str, value: V) -> None:
        """Keep ``value`` as the session's; drop the least recently used beyond the limit."""
        with self._lock:
            self._values[session_id] = value
            self._values.move_to_end(session_id)
            dropped = [self._values.popitem(last=False)[0] for _ in range(len(self._values) - self.limit)]
        if self.on_drop is not None:
            for each in dropped:
                self.on_drop(each)

    def pop(self, session_id: str) -> None:
        with self._lock:
            self._values.pop(session_id, None)


class SessionMemory:
    """The caches of the ``limit`` most recently compacted sessions, the usage corrections of the same
    sessions, and a lock per session being served (thread-safe)."""

    def __init__(self, limit: int, usage: UsageAnchors, threads: int = 4):
        self.caches: RecentlyUsed[SessionCache] = RecentlyUsed(limit, on_drop=usage.forget)
        self.usage = usage
        self._guard = threading.Lock()
        self._locks: dict[str, tuple[threading.Lock, list[int]]] = {}
        self._alocks: weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, dict[str, tuple[asyncio.Lock, list[int]]]
        ] = weakref.WeakKeyDictionary()
        self._steps: ThreadPoolExecutor | None = None
        self._threads = threads
        reset_after_fork(self, SessionMemory._forked)  # after its caches' and usage anchors' locks

    def _forked(self) -> None:
        """In a forked child, where only the thread that forked runs on: the turns the parent's
        other threads were serving do not, so nothing of theirs may stay held (a turn of their
        session here would wait for it forever), nor kept as they left it, half done (their
        sessions' caches and usage anchors are dropped: the next turn reads the history again)."""
        served = list(self._locks)
        self._guard = threading.Lock()
        self._locks = {}
        self._alocks = weakref.WeakKeyDictionary()
        self._steps = None  # the parent's threads do not run here: the next async turn starts others
        for session_id in served:
            self.forget(session_id)

    def steps(self) -> ThreadPoolExecutor:
        """The threads the async API runs its turns' own steps in (:func:`advanced`): a few
        (``async_threads``), so that turns of other sessions wait on their stores at once, not in
        line; a turn's own work is Python's, which more threads would not speed up. Made anew in a
        forked child (:meth:`_forked`), whose parent's threads do not run."""
        with self._guard:
            if self._steps is None:
                self._steps = ThreadPoolExecutor(self._threads, thread_name_prefix="progressive-compactor")
            return self._steps

    def close(self) -> None:
        """Let the steps' threads end once they are idle (a later async turn starts others)."""
        with self._guard:
            steps, self._steps = self._steps, None
        if steps is not None:
            steps.shutdown(wait=False)

    def keep(self, session_id: str, cache: SessionCache) -> None:
        """Keep the session's cache, and an anchor for its usage reports, dropped with it (the
        anchor first: a cache dropped at once drops it too, and none outlives its cache)."""
        self.usage.open(session_id)
        self.caches.put(session_id, cache)

    def forget(self, session_id: str) -> None:
        """Drop the session's cache and usage correction (a deleted session)."""
        self.caches.pop(session_id)
        self.usage.forget(session_id)

    def enter(self, session_id: str) -> threading.Lock:
        """The session's lock, to hold while a turn of it runs (one turn of a session at a time);
        :meth:`leave` when the turn is done, held or not."""
        with self._guard:
            lock, users = self._locks.get(session_id) or self._locks.setdefault(session_id, (threading.Lock(), [0]))
            users[0] += 1
        return lock

    def leave(self, session_id: str) -> None:
        with self._guard:
            entry = self._locks.get(session_id)
            if entry is None:  # entered before a fork, by the thread that forked: the child made all anew
                return
            users = entry[1]
            users[0] -= 1
            if not users[0]:
                del self._locks[session_id]

    @asynccontextmanager
    async def aserving(self, session_id: str) -> AsyncIterator[None]:
        """Held while an async turn of the session runs: the turns of this event loop queue on a
        lock of the loop, then take the session's lock of the process (:meth:`enter`), which
        sync turns and other loops' turns take too. It is waited for without blocking the loop,
        looked at every :data:`POLL_SECONDS` (a cancelled wait leaves nothing held)."""
        locks = self._alocks.setdefault(asyncio.get_running_loop(), {})
        queue, users = locks.get(session_id) or locks.setdefault(session_id, (asyncio.Lock(), [0]))
        users[0] += 1
        lock = self.enter(session_id)
        try:
            async with queue:
                while not lock.acquire(blocking=False):
                    await asyncio.sleep(POLL_SECONDS)
                try:
                    yield
                finally:
                    lock.release()
        finally:
            self.leave(session_id)
            users[0] -= 1
            if not users[0]:
                del locks[session_id]


class Finished(Generic[R]):
    """What a turn returned, as :func:`advanced` hands it over."""

    def __init__(self, value: R):
        self.value = value


async def advanced(turn: Generator[Y, S, R], answer: S | None, thread: ThreadPoolExecutor) -> Y | Finished[R]:
    """``turn`` sent ``answer`` (None to start it) in ``thread``, in the caller's context:
    what it yielded next, or what it returned (:class:`Finished`). A turn's stores, files and
    records wait on disks and servers, which must not hold up the event loop. When the task is
    cancelled meanwhile, the step still ends before the cancellation goes on: nothing of a turn
    runs once its session's lock is released."""
    context = contextvars.copy_context()
    step = asyncio.get_running_loop().run_in_executor(thread, context.run, _send, turn, answer)
    try:
        return await asyncio.shield(step)
    except asyncio.CancelledError:
        while not step.done():  # waited for, whatever it ends with: the cancellation goes on
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait([step])
        raise


def _send(turn: Generator[Y, S, R], answer: S | None) -> Y | Finished[R]:
    try:
        return turn.send(answer)  # type: ignore[arg-type]  # None starts a generator
    except StopIteration as stop:  # which a future cannot carry
        return Finished(stop.value)


def cancelling() -> bool:
    """Whether the running task is being cancelled (``task.cancel()``, which ``wait_for``, timeouts
    and task groups call), rather than something it awaited: a ``CancelledError`` from a
    summarizer's own call is a failure like any other. Before Python 3.11 it cannot be told: yes."""
    task = asyncio.current_task()
    count = getattr(task, "cancelling", None)
    return count is None or count() > 0


__all__ = ["Finished", "RecentlyUsed", "SessionMemory", "advanced", "cancelling"]
