"""What a forked child makes anew: a worker process may fork (a prefork server, ``multiprocessing``
with "fork") while another of its threads holds a lock or serves a turn, and that thread does not
run in the child, so nothing would ever release the lock there; the child's first use of it would
wait forever. One at-fork handler, in the order the objects asked."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable

INHERITED: list[object] = []
"""What a forked process inherited from its parent and must neither use nor close (connections,
pools, an HTTP sender's loop: closing them from the child could end the parent's sessions): kept
referenced here."""

_RESETS: weakref.WeakKeyDictionary[Any, list[Callable[[Any], None]]] = weakref.WeakKeyDictionary()


def reset_after_fork(owner: Any, reset: Callable[[Any], None]) -> None:
    """Call ``reset(owner)`` in a forked child, for as long as ``owner`` lives; the objects' resets
    run in the order they were asked for (an object made from others is reset after them)."""
    _RESETS.setdefault(owner, []).append(reset)


def renew_lock_after_fork(owner: Any, make: Callable[[], Any] = threading.Lock) -> None:
    """Give ``owner`` a new ``_lock`` (made by ``make``) in a forked child: one of the parent's
    threads may hold it at the fork (for an instant, or while it connects to a server)."""
    reset_after_fork(owner, lambda owned: setattr(owned, "_lock", make()))


def _forked() -> None:
    for owner, resets in list(_RESETS.items()):
        for reset in resets:
            reset(owner)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


__all__ = ["INHERITED", "renew_lock_after_fork", "reset_after_fork"]
