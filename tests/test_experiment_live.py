"""Live traffic under an experiment: a session's variant is decided once and kept for life, and
``ExperimentCompactor`` is a drop-in wherever a ``ProgressiveCompactor`` is used."""

from __future__ import annotations

import asyncio
import textwrap
import threading
from pathlib import Path

import pytest

from progressive_compactor import AsyncSession, CompactorError, ProgressiveCompactor, Session, SessionState
from progressive_compactor.converters import read_records_file, state_from_json, state_to_json
from progressive_compactor.lab.experiment import ExperimentCompactor, group_records, load_experiment
from progressive_compactor.testing import build_history

SESSIONS = [f"ticket-{i}" for i in range(22)]


def experiment_file(tmp_path: Path, name: str, weights: tuple[float, float], extra: str = "") -> Path:
    """Two variants over state in files under ``tmp_path`` (shared by every process)."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            context_window: 4000
            data_dir: {tmp_path / "data"}
            plugins: {{state: state-files}}
            config:
              store-jsonl: {{record_none: true}}
            experiment:
              name: {name}
              variants:
                wide: {{weight: {weights[0]}}}
                narrow: {{weight: {weights[1]}, overrides: {{min_tail_messages: 4}}}}
            {extra}
            """
        ),
        "utf-8",
    )
    return path


def turns(compactor: ExperimentCompactor, sid: str, sizes: list[int], after: int = 0) -> None:
    """A turn before each assistant message of a synthetic history, skipping the first ``after``."""
    history = build_history(sizes, id_prefix=f"{sid}_")
    for end in range(3 + 2 * after, len(history) + 1, 2):
        compactor.compact_with_record(history[:end], sid)


def records_of(tmp_path: Path, sid: str):
    return list(read_records_file(tmp_path / "data" / "records" / f"{sid}.jsonl"))


def test_weights_changed_and_experiment_renamed_mid_run_leave_every_session_on_its_first_variant(tmp_path):
    first = experiment_file(tmp_path, "trial", (0.5, 0.5))
    with ExperimentCompactor(first) as compactor:
        for sid in SESSIONS:
            turns(compactor, sid, [1500] * 3)
        started = {sid: compactor.variant_of(sid) for sid in SESSIONS}
    assert set(started.values()) == {"wide", "narrow"}
    # A new name (the default salt) and new weights: new sessions would mostly go elsewhere...
    second = experiment_file(tmp_path, "trial-renamed", (0.1, 0.9))
    renamed = load_experiment(second)
    moved = [sid for sid in SESSIONS if renamed.assign(sid) != started[sid]]
    assert len(moved) >= 5
    # ...but a session that has started stays where it started, in a new process as much as here.
    with ExperimentCompactor(second) as compactor:
        for sid in SESSIONS:
            turns(compactor, sid, [1500] * 6, after=3)
            assert compactor.variant_of(sid) == started[sid]
            assert compactor.state(sid).variant == started[sid]
    for sid in SESSIONS:
        records = records_of(tmp_path, sid)
        assert len(records) == 3 + 3  # three turns before the change, three after
        assert {r.variant for r in records} == {started[sid]}, sid
    # and a new session goes by the new weights
    with ExperimentCompactor(second) as compactor:
        turns(compactor, "brand-new", [1500])
        assert compactor.variant_of("brand-new") == renamed.assign("brand-new")


def test_the_variant_is_stored_with_the_state_and_kept_when_the_state_starts_over(tmp_path):
    path = experiment_file(tmp_path, "trial", (0.5, 0.5))
    with ExperimentCompactor(path) as compactor:
        turns(compactor, "s", [4000] * 4)  # compacts: the state is saved by the core
        variant = compactor.variant_of("s")
        state = compactor.state("s")
        assert state.variant == variant and state.covered > 0
        # another history under the same id: the core starts the state over, the variant stays
        _, record = compactor.compact_with_record(build_history([100, 100], request="Another task."), "s")
        assert any("started over" in e for e in record.errors)
        assert compactor.state("s").variant == variant and compactor.state("s").covered == 0
    assert state_from_json(state_to_json(state)).variant == variant
    assert state_from_json('{"summary": null, "version": 3}') == SessionState(version=3)  # older files


def test_two_workers_starting_the_same_sessions_at_once_agree(tmp_path):
    """Two workers with different salts start the same sessions concurrently: the first to save
    the variant wins (compare-and-set), the other reads it."""
    one = ExperimentCompactor(experiment_file(tmp_path, "one", (0.5, 0.5)))
    two = ExperimentCompactor(experiment_file(tmp_path, "two", (0.5, 0.5)))
    seen: dict[tuple[int, str], str] = {}

    def work(index: int, compactor: ExperimentCompactor) -> None:
        for sid in SESSIONS:
            seen[(index, sid)] = compactor.variant_of(sid)

    threads = [threading.Thread(target=work, args=(i, c)) for i, c in enumerate((one, two))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert any(one.experiment.assign(s) != two.experiment.assign(s) for s in SESSIONS)  # the salts disagree
    for sid in SESSIONS:
        assert seen[(0, sid)] == seen[(1, sid)] == one.state(sid).variant
    one.close()
    two.close()


def test_a_session_whose_variant_was_removed_is_served_by_the_control_and_left_out(tmp_path, caplog):
    path = experiment_file(tmp_path, "trial", (0.0, 1.0))  # everything to "narrow"
    with ExperimentCompactor(path) as compactor:
        turns(compactor, "s", [1500] * 2)
    path.write_text(path.read_text("utf-8").replace("narrow:", "narrower:"), "utf-8")
    with ExperimentCompactor(path) as compactor:
        assert compactor.experiment.control == "wide"
        turns(compactor, "s", [1500] * 5, after=2)
        assert compactor.variant_of("s") == "narrow"  # the stored variant is not rewritten
    assert "has no variant 'narrow' any more" in caplog.text
    records = records_of(tmp_path, "s")
    assert [r.variant for r in records] == ["narrow", "narrow", "wide", "wide", "wide"]
    grouped = group_records([("", records)])
    assert grouped.mixed == ("s",) and grouped.sessions == {}


def test_a_variant_from_another_config_file_writes_its_records_where_the_base_says(tmp_path):
    elsewhere = tmp_path / "elsewhere"
    (tmp_path / "other.yaml").write_text(
        f"min_tail_messages: 2\ndata_dir: {elsewhere}\nplugins: {{state: state-memory}}\n"
        f"config: {{store-jsonl: {{directory: {elsewhere}/records, record_none: false}}}}\n",
        "utf-8",
    )
    path = experiment_file(tmp_path, "trial", (0.0, 0.0)).read_text("utf-8")
    path = path.replace("wide: {weight: 0.0}", "other: {weight: 1, config: other.yaml}")
    (tmp_path / "exp.yaml").write_text(path, "utf-8")
    with ExperimentCompactor(tmp_path / "exp.yaml") as compactor:
        assert compactor.experiment.variant("other").config.min_tail_messages == 2
        for sid in ("a", "b", "c"):
            turns(compactor, sid, [500, 500])
            assert compactor.variant_of(sid) == "other"
    assert not elsewhere.exists()
    for sid in ("a", "b", "c"):
        records = records_of(tmp_path, sid)  # under the base's data folder, tier-None turns included
        assert [r.tier.label for r in records] == ["None", "None"] and {r.variant for r in records} == {"other"}
    assert (tmp_path / "data" / "state" / "a.json").is_file()  # the base's state store


def experiment_with_thresholds(tmp_path: Path) -> Path:
    path = tmp_path / "exp.yaml"
    path.write_text(
        textwrap.dedent(
            f"""
            context_window: 4000
            data_dir: {tmp_path / "data"}
            config: {{store-jsonl: {{record_none: true}}}}
            experiment:
              variants:
                eager: {{weight: 1, overrides: {{tool_result_threshold: 100}}}}
                lazy: {{weight: 1, overrides: {{tool_result_threshold: 1000000}}}}
            """
        ),
        "utf-8",
    )
    return path


def find_session(compactor: ExperimentCompactor, variant: str) -> str:
    return next(f"s{i}" for i in range(100) if compactor.experiment.assign(f"s{i}") == variant)


def test_a_drop_in_under_session(tmp_path):
    compactor = ExperimentCompactor(experiment_with_thresholds(tmp_path))
    assert isinstance(compactor, ProgressiveCompactor)
    with compactor:
        eager = Session(compactor, find_session(compactor, "eager"))
        lazy = Session(compactor, find_session(compactor, "lazy"))
        for session in (eager, lazy):
            session.append({"role": "user", "content": "Read the log."})
            assert session.view()[-1]["content"] == "Read the log."
            session.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "cat", "arguments": "{}"}}],
                }
            )
            session.add_tool_result("c1", "error: disk full\n" * 40)  # 680 characters
        # each session's variant offloads by its own threshold
        assert eager.history[-1]["content"].startswith("[Tool result offloaded")
        assert lazy.history[-1]["content"] == "error: disk full\n" * 40
        handle = f"{eager.session_id}/c1"
        assert compactor.read_tool_result(handle) == "error: disk full\n" * 40
        assert compactor.read_tool_result(handle, lines=(2, 3)) == "error: disk full\nerror: disk full"
        eager.view()
        assert {r.variant for r in eager.records} == {"eager"} and eager.last_record.variant == "eager"
        assert compactor.state(eager.session_id).variant == "eager"
        assert [r.variant for r in compactor.records(eager.session_id)] == ["eager", "eager"]
        assert {s.session_id for s in compactor.sessions()} >= {eager.session_id, lazy.session_id}
        assert compactor.compact_force(eager.history, eager.session_id)[-1]["role"] == "tool"
        assert eager.delete() == []
        assert compactor.state(eager.session_id) == SessionState()
        assert compactor.records(eager.session_id) is None  # no records file any more
        assert eager.session_id not in {s.session_id for s in compactor.sessions()}
        with pytest.raises(CompactorError, match="no offloaded tool result"):
            compactor.read_tool_result(handle)


def test_a_drop_in_under_async_session(tmp_path):
    async def run() -> tuple[list[str | None], str | None]:
        async with ExperimentCompactor(experiment_with_thresholds(tmp_path)) as compactor:
            session = AsyncSession(compactor, "async-1")
            session.append({"role": "system", "content": "sys"}, {"role": "user", "content": "go"})
            for i in range(4):
                await session.view()
                session.append({"role": "assistant", "content": f"step {i} " + "x" * 3000})
            forced = await compactor.acompact_force(session.history, "async-1")
            view = await compactor.acompact(session.history, "async-1")
            assert forced and view
            return [r.variant for r in session.records], compactor.state("async-1").variant

    variants, stored = asyncio.run(run())
    assert len(set(variants)) == 1 and variants[0] == stored and stored in ("eager", "lazy")


def test_session_compact_now_runs_the_sessions_variant_sync_and_async(tmp_path):
    path = experiment_file(tmp_path, "trial", (0.5, 0.5))
    with ExperimentCompactor(path) as compactor:
        session = Session(compactor, "now-1")
        session.extend(build_history([500] * 3, id_prefix="n_"))
        session.view()
        session.compact_now()
        variant = compactor.variant_of("now-1")
        assert [r.variant for r in session.records] == [variant, variant]
        assert [r.variant for r in compactor.records("now-1") or []] == [variant, variant]

    async def run() -> list[str | None]:
        async with ExperimentCompactor(path) as compactor:
            session = AsyncSession(compactor, "now-2")
            session.extend(build_history([500] * 3, id_prefix="a_"))
            await session.view()
            await session.compact_now()
            return [r.variant for r in session.records]

    variants = asyncio.run(run())
    assert len(variants) == 2 and variants[0] == variants[1] is not None


def test_observed_usage_anchors_the_token_counts_of_the_sessions_variant(tmp_path):
    with ExperimentCompactor(experiment_file(tmp_path, "trial", (0.5, 0.5))) as compactor:
        assert compactor.observe_usage("usage-0", 1000) is None  # no view yet: no variant decided for it
        assert compactor.state("usage-0").variant is None
        session = Session(compactor, "usage-1")
        session.extend(build_history([500] * 3, id_prefix="u_"))
        session.view()
        assert session.last_record.token_correction == 1.0
        assert session.observe_usage(2 * session.last_record.tokens_after) is not None
        session.view()
        assert session.last_record.token_correction > 1.1 or session.last_record.token_offset > 0


def test_closing_closes_each_shared_plugin_once(tmp_path):
    closed: list[str] = []

    class Store:
        def save(self, record):  # noqa: ANN001 - a record_store keyword plugin
            pass

    class Offloader:
        def close(self) -> None:
            closed.append("offloader")

    compactor = ExperimentCompactor(experiment_with_thresholds(tmp_path), record_store=Store(), offloader=Offloader())
    for i in range(10):
        compactor.compact(build_history([100]), f"s{i}")  # builds both variants' compactors
    assert len(compactor._variants) == 2
    compactor.close()
    assert closed == ["offloader"]


def test_a_session_id_is_required_as_for_any_compactor(tmp_path):
    with ExperimentCompactor(experiment_with_thresholds(tmp_path)) as compactor:
        with pytest.raises(CompactorError, match="session_id must be a non-empty string"):
            compactor.compact(build_history([100]), "")


def test_live_records_price_the_summarizer_as_a_replay_does(tmp_path):
    """The offline summarizer reports no tokens: live records carry the replay's estimate."""
    from progressive_compactor.lab.replay import replay_session

    path = experiment_file(tmp_path, "trial", (1.0, 0.0))
    history = build_history([2000] * 10, id_prefix="s_")
    history.append({"role": "assistant", "content": "Done."})
    with ExperimentCompactor(path) as compactor:  # a view before each assistant message, as a replay
        for end in range(2, len(history), 2):
            compactor.compact_with_record(history[:end], "live")
    live = [r for r in records_of(tmp_path, "live") if r.summarizer_calls]
    assert live and all(r.summarizer_tokens_in > 0 and r.summarizer_tokens_out > 0 for r in live)
    config = load_experiment(path).variant("wide").config
    with ProgressiveCompactor(config, data_dir=str(tmp_path / "replay")) as plain:
        replayed = replay_session(history, plain, "live")
    summarized = [t.record for t in replayed.turns if t.summarizer_calls]
    assert [(r.summarizer_tokens_in, r.summarizer_tokens_out) for r in summarized] == [
        (r.summarizer_tokens_in, r.summarizer_tokens_out) for r in live
    ]


def test_live_records_count_cached_summarizer_input_per_session_as_a_replay_does(tmp_path):
    """A cache-friendly summary request repeats the view: live records count the part the
    provider cached on the session's previous call, as a replay does, with sessions interleaved."""
    from progressive_compactor.lab.replay import replay_session

    experiment = load_experiment(experiment_file(tmp_path, "trial", (1.0, 0.0)))
    experiment = experiment.with_overrides(summary_requests="cache-friendly")
    histories = {}
    for sid, size in (("first", 2000), ("second", 1200)):
        histories[sid] = build_history([size] * 10, id_prefix=f"{sid}_")
        histories[sid].append({"role": "assistant", "content": "Done."})
    with ExperimentCompactor(experiment) as compactor:  # the two sessions' turns alternate
        for end in range(2, len(histories["first"]), 2):
            for sid, history in histories.items():
                compactor.compact_with_record(history[:end], sid)
    for sid, history in histories.items():
        live = [r for r in records_of(tmp_path, sid) if r.summarizer_calls]
        with ProgressiveCompactor(experiment.variant("wide").config, data_dir=str(tmp_path / sid)) as plain:
            replayed = [t.record for t in replay_session(history, plain, sid).turns if t.summarizer_calls]
        counts = [(r.summarizer_tokens_in, r.summarizer_tokens_in_cached, r.summarizer_tokens_out) for r in live]
        assert counts == [
            (r.summarizer_tokens_in, r.summarizer_tokens_in_cached, r.summarizer_tokens_out) for r in replayed
        ]
        assert live and all(0 < r.summarizer_tokens_in_cached < r.summarizer_tokens_in for r in live), sid
