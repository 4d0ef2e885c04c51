"""Locks a forked child makes anew: a worker process may fork (a prefork server, ``multiprocessing``
with "fork") while another of its threads holds a lock, and that thread does not run in the
child, so nothing would ever release the lock there; the child's first use of it would wait
forever."""

from __future__ import annotations

import os
import threading
import weakref
from typing import Any, Callable

_RENEWED: weakref.WeakKeyDictionary[Any, Callable[[], Any]] = weakref.WeakKeyDictionary()


def renew_lock_after_fork(owner: Any, make: Callable[[], Any] = threading.Lock) -> None:
    """Give ``owner`` a new ``_lock`` (made by ``make``) in a forked child: one of the parent's
    threads may hold it at the fork (for an instant, or while it connects to a server), and that
    thread does not run in the child."""
    _RENEWED[owner] = make


def _forked() -> None:
    for owner, make in list(_RENEWED.items()):
        owner._lock = make()


if hasattr(os, "register_at_fork"):  # before the handlers of the modules that import this one
    os.register_at_fork(after_in_child=_forked)


__all__ = ["renew_lock_after_fork"]
