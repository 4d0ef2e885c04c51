"""A guard for tests of code that must never block: the test fails instead of hanging."""

from __future__ import annotations

import contextlib
import signal
from typing import Iterator


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
