"""A guard for tests of code that must never block: the test fails instead of hanging."""

from __future__ import annotations

import contextlib
import signal
from typing import Any, Callable, Iterator


class Blocked(BaseException):
    """Raised in a block that took too long: not an Exception, so no fail-open handler in the
    code under test swallows it."""


@contextlib.contextmanager
def no_hang(seconds: float = 1.0) -> Iterator[None]:
    """Fail with :class:`Blocked` if the block takes more than ``seconds`` (an open of a named pipe
    with no writer blocks forever): SIGALRM interrupts the blocking call in the main thread, and
    again every ``seconds`` until the block ends."""

    def timeout(signum: int, frame: object) -> None:
        raise Blocked(f"blocked for more than {seconds} s")

    previous = signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, seconds, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def child_exit_code(pid: int, seconds: float = 10.0, what: str = "the forked child hung") -> int:
    """The exit code of the forked child ``pid``; killed, and the test failed with ``what``, when
    it has not exited within ``seconds``."""
    import os
    import time

    import pytest

    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    pytest.fail(what)


def forked_answer(work: Callable[[], Any], seconds: float, what: str) -> Any:
    """What ``work()`` returns (anything JSON can carry), run in a forked child; the child killed
    and the test failed with ``what`` when it has not answered within ``seconds``."""
    import json
    import os
    import select
    import warnings

    import pytest

    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with a thread running
        pid = os.fork()
    if pid == 0:
        try:
            os.write(write, json.dumps(work()).encode())
        finally:
            os._exit(0)
    os.close(write)
    try:
        answered = select.select([read], [], [], seconds)[0]
        if not answered:
            os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        if not answered:
            pytest.fail(what)
        return json.loads(os.read(read, 1 << 20))
    finally:
        os.close(read)


def forked_while_held(lock: Any, work: Callable[[], Any], seconds: float = 5.0) -> Any:
    """What ``work()`` returns (as :func:`forked_answer`) in a child forked while another thread
    of the parent holds ``lock``, as any of its threads may at any instant: that thread does not
    run in the child, so the child must not wait for it. The test fails when the child hangs."""
    import threading

    held, forked = threading.Event(), threading.Event()

    def hold() -> None:
        with lock:
            held.set()
            forked.wait()

    holder = threading.Thread(target=hold)
    holder.start()
    held.wait()
    try:
        return forked_answer(work, seconds, "the forked child waited for a lock its parent's thread held")
    finally:
        forked.set()
        holder.join()
