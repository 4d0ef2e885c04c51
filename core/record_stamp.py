"""What a new record is stamped with: its id and the time, made cheaply (every call makes a record).

Record ids are 128 random bits, unique but not secret: a system random number per record cost
more than the rest of the record. They come from a generator seeded from ``os.urandom``, and again
in a forked child, so two workers never draw the same ids (a database store keys records on them).
"""

from __future__ import annotations

import os
import random
import time

_ids = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ids.seed)


def new_record_id() -> str:
    """A new record id: 32 hexadecimal digits."""
    return f"{_ids.getrandbits(128):032x}"


_second: tuple[int, str] = (-1, "")
"""The last whole second a record was stamped at, written out (once a second, not once a call)."""


def record_timestamp() -> str:
    """Now in ISO 8601, UTC, to the millisecond: what ``datetime.now(timezone.utc).isoformat(
    timespec="milliseconds")`` writes, in a third of its time."""
    global _second
    now = time.time()
    whole = int(now)
    second = _second  # one read: another thread may stamp a record
    if second[0] != whole:
        second = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{second[1]}.{int((now - whole) * 1000):03d}+00:00"
