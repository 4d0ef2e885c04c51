"""A pytest plugin that records which hooks the core calls while the suite runs.

Every hook the core calls goes through a method of the ``Hooks`` facade named after it, so
wrapping those methods (here, for the test session only) records every hook a test made the
core call. ``tests/test_meta.py::test_every_hook_is_called_by_a_test`` is moved to the end of
the run and checks the record: a hook that no test makes the core call fails it.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest

from progressive_compactor import hookspecs
from progressive_compactor.plugin_manager import Hooks

SPEC_ATTR = f"{hookspecs.PROJECT}_spec"
HOOKS = sorted(name for name, fn in vars(hookspecs).items() if callable(fn) and hasattr(fn, SPEC_ATTR))
CALLED: set[str] = set()
LAST_TEST = "test_every_hook_is_called_by_a_test"


def _recording(name: str, method: Any) -> Any:
    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        CALLED.add(name)
        return method(self, *args, **kwargs)

    return wrapper


def pytest_configure(config: pytest.Config) -> None:
    for name in HOOKS:
        method = getattr(Hooks, name, None)
        if method is not None and not hasattr(method, "__wrapped__"):
            setattr(Hooks, name, _recording(name, method))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    last = [item for item in items if item.name == LAST_TEST]
    items[:] = [item for item in items if item.name != LAST_TEST] + last
