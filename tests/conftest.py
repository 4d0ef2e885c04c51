"""Shared fixtures: compactors whose files live in ``tmp_path``, the corpus, synthetic histories.

The factory and the small test plugins come from :mod:`progressive_compactor.testing`, the module
plugin authors use too, so the library's own tests exercise what we ship for them.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
from pathlib import Path
from typing import Any, Callable

import pytest

pytest.register_assert_rewrite("progressive_compactor.testing")

from progressive_compactor import CompactorConfig, ProgressiveCompactor  # noqa: E402
from progressive_compactor.testing import RecordingSummarizer, make_config  # noqa: E402

pytest_plugins = ["progressive_compactor.testing", "hook_recorder", "servers"]
"""``hook_recorder`` notes every hook the core calls during the run, for ``test_meta.py``;
``servers`` starts PostgreSQL and Redis for the tests of the database stores."""

CORPUS_ENV = "COMPACTOR_CORPUS"
CLASSIC = "classic"


def corpus_path() -> Path:
    """``$COMPACTOR_CORPUS``, else a ``shared/corpus`` folder beside the repository."""
    env = os.environ.get(CORPUS_ENV)
    return Path(env) if env else Path(__file__).resolve().parents[2] / "shared" / "corpus"


@pytest.fixture(scope="session")
def corpus_dir() -> Path:
    path = corpus_path()
    if not path.is_dir() or not any(path.glob("*.jsonl")):
        pytest.skip(
            f"agent-trajectory corpus not found at {path}: set {CORPUS_ENV} to a folder of *.jsonl "
            "chat histories to run the corpus tests"
        )
    return path


@pytest.fixture
def tmp_config(tmp_path: Path) -> CompactorConfig:
    """The default config with offloads, records and state under ``tmp_path``."""
    return make_config(tmp_path)


@pytest.fixture
def make_compactor(compactor_factory) -> Callable[..., ProgressiveCompactor]:
    """``make_compactor(**overrides)``: a compactor with every file under this test's ``tmp_path``.

    The ``compactor_factory`` fixture that plugin authors get (see
    :func:`progressive_compactor.testing.make_compactor` for what ``overrides`` may hold), on the
    ``classic`` config: most tests put a history at a share of the window to reach a tier, which
    is what classic decides by. Tests of the default config ask for it by name.
    """

    def factory(config=CLASSIC, **overrides):
        return compactor_factory(config, base=CLASSIC, **overrides)

    return factory


@pytest.fixture
def recording_summarizer() -> RecordingSummarizer:
    """A summarizer that counts its calls and delegates to the offline one."""
    return RecordingSummarizer()


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    """A config YAML for the CLI tests with every file root under ``tmp_path``."""
    from cli_helpers import write_config

    return write_config(tmp_path)


@pytest.fixture
def session(tmp_path: Path) -> Path:
    """A synthetic session file for the CLI tests."""
    from cli_helpers import synthetic_history, write_jsonl

    return write_jsonl(tmp_path / "sess.jsonl", synthetic_history())


@pytest.fixture
def secret_cfg(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A CLI config that registers ``cli_helpers.SECRET`` as a secret."""
    from cli_helpers import SECRET, secret_config

    monkeypatch.setenv("TEST_DB_PASSWORD", SECRET)
    return secret_config(tmp_path)


@pytest.fixture
def secret_session(tmp_path: Path) -> Path:
    """A synthetic session file whose later instructions quote ``cli_helpers.SECRET``."""
    from cli_helpers import secret_history, write_jsonl

    return write_jsonl(tmp_path / "sess.jsonl", secret_history())


@pytest.fixture
def in_time() -> Callable[..., Any]:
    """``run(fn, *args)``: ``fn(*args)`` in a forked child that must finish within 20 seconds; its
    result comes back (or its exception is raised). For inputs that once made a pattern backtrack
    for years: the test fails instead of hanging the suite. Where fork does not exist, the call
    runs in the test's own process."""
    if "fork" not in multiprocessing.get_all_start_methods():
        return lambda fn, *args: fn(*args)
    context = multiprocessing.get_context("fork")

    def child(results: Any, fn: Callable[..., Any], args: tuple[Any, ...]) -> None:
        try:
            results.put((True, fn(*args)))
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            results.put((False, exc))

    def run(fn: Callable[..., Any], *args: Any) -> Any:
        results = context.Queue()
        process = context.Process(target=child, args=(results, fn, args), daemon=True)
        process.start()
        try:
            ok, value = results.get(timeout=20)
        except queue.Empty:
            pytest.fail("still running after 20 s: catastrophic backtracking?")
        finally:
            process.kill()
            process.join()
        if not ok:
            raise value
        return value

    return run
