"""The async API against a real local HTTP server: many sessions at once through one compactor
(one pooled ``httpx.AsyncClient``), each getting its own summary, every view valid."""

from __future__ import annotations

import asyncio
import os
import re
import signal

import pytest

from fake_provider import FULL_ROUNDS, MARKER, Behaviour, FakeProvider, compactor_settings, synthetic_history
from progressive_compactor import EMERGENCY_ERROR, AsyncSession, CompactionTier, ProgressiveCompactor
from progressive_compactor.messages import message_from_dict, view_problems
from progressive_compactor.testing import compaction_message
from timeouts import child_exit_code

SESSIONS = 50


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def marker(i: int) -> str:
    return f"SESSION-MARKER-n{i}x"


def valid(view: list[dict]) -> bool:
    return view_problems([message_from_dict(m, i) for i, m in enumerate(view)]) == []


async def compact_all(compactor: ProgressiveCompactor, count: int):
    histories = {f"session-{i}": synthetic_history(marker(i), FULL_ROUNDS) for i in range(count)}
    results = await asyncio.gather(*(compactor.acompact_with_record(h, sid) for sid, h in histories.items()))
    return dict(zip(histories, results))


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
def test_fifty_sessions_each_get_their_own_summary(fake, tmp_path, protocol):
    fake.default = Behaviour(delay=0.05)  # hold each reply so that the requests overlap

    async def main():
        async with ProgressiveCompactor(
            "default", **compactor_settings(fake.base_url, protocol, tmp_path)
        ) as compactor:
            return await compact_all(compactor, SESSIONS)

    results = asyncio.run(main())

    assert len(fake.requests) == SESSIONS
    assert fake.peak_in_flight > 1  # the sessions really were summarized concurrently
    assert all(len(r.markers) == 1 for r in fake.requests)  # each prompt holds one session only
    for i, (sid, (view, record)) in enumerate(sorted(results.items(), key=lambda kv: int(kv[0].split("-")[1]))):
        own = marker(i)
        assert record.session_id == sid
        assert record.tier is CompactionTier.FULL and record.errors == ()
        assert set(MARKER.findall(record.summary_text)) == {own}
        compaction = compaction_message(view)["content"]
        assert "[Context Compaction]" in compaction
        assert set(MARKER.findall(compaction)) == {own}
        assert record.summarizer_tokens_in > 0 and record.summarizer_tokens_out > 0
        assert valid(view)
    usage = {r.markers[0]: r.usage for r in fake.requests}
    for i, (_, (_, record)) in enumerate(sorted(results.items(), key=lambda kv: int(kv[0].split("-")[1]))):
        assert (record.summarizer_tokens_in, record.summarizer_tokens_out) == usage[marker(i)]


def test_sessions_waiting_for_a_pooled_connection_are_not_timed_out(fake, tmp_path):
    """More sessions than the client's pool has connections (100): the last ones wait for a free
    connection; that wait is bounded by the read timeout and the deadline, not the connect one."""
    fake.default = Behaviour("hang", delay=1.5)
    settings = compactor_settings(
        fake.base_url, "openai", tmp_path, max_attempts=1, timeout={"connect": 1.0, "read": 10.0}
    )

    async def main():
        async with ProgressiveCompactor("default", **settings) as compactor:
            return await compact_all(compactor, 150)

    results = asyncio.run(main())
    assert fake.peak_in_flight == 100  # the pool's limit: the last 50 did wait
    assert len(fake.requests) == 150
    assert [r.errors for _, r in results.values() if r.errors] == []
    assert all(r.tier is CompactionTier.FULL for _, r in results.values())


def test_concurrent_failures_all_fall_back_validly(fake, tmp_path):
    fake.default = Behaviour("status", status=503)
    count = 20

    async def main():
        async with ProgressiveCompactor(
            "default", **compactor_settings(fake.base_url, "openai", tmp_path)
        ) as compactor:
            return await compact_all(compactor, count)

    results = asyncio.run(main())
    for view, record in results.values():
        assert record.tier is CompactionTier.EMERGENCY
        assert record.fallback
        failure, fallback = record.errors
        assert failure.startswith("summarizer failed: summarize-openai: ") and fallback == EMERGENCY_ERROR
        assert "HTTP 503 Service Unavailable" in failure and failure.endswith("(gave up after 3 attempts)")
        assert valid(view)
    assert len(fake.requests) == count * 3  # max_attempts each


def test_async_session_compacts_incrementally(fake, tmp_path):
    async def main():
        compactor = ProgressiveCompactor("default", **compactor_settings(fake.base_url, "anthropic", tmp_path))
        async with compactor:
            session = AsyncSession(compactor, "async-session")
            session.extend(synthetic_history("SESSION-MARKER-as", FULL_ROUNDS))
            first = await session.view()
            after_first = len(fake.requests)
            session.append({"role": "user", "content": "Also run the linter."})
            second = await session.view()  # a small step: no new summary needed
            forced = await session.compact_now()
        return session, first, second, forced, after_first

    session, first, second, forced, after_first = asyncio.run(main())
    assert after_first == 1
    assert len(fake.requests) == 1  # neither the small step nor the forced compaction called the LLM
    assert [r.tier for r in session.records] == [CompactionTier.FULL, CompactionTier.NONE, CompactionTier.EMERGENCY]
    assert re.search("SESSION-MARKER-as", first[1]["content"])
    assert second[-1]["content"] == "Also run the linter."
    assert all(valid(v) for v in (first, second, forced))


def test_sync_and_async_give_the_same_view(fake, tmp_path):
    history = synthetic_history("SESSION-MARKER-same", FULL_ROUNDS)
    settings = compactor_settings(fake.base_url, "openai", tmp_path)
    with ProgressiveCompactor("default", **settings) as sync_compactor:
        sync_view, sync_record = sync_compactor.compact_with_record(history, "same")

    async def main():
        async with ProgressiveCompactor("default", **settings) as compactor:
            return await compactor.acompact_with_record(history, "same")

    async_view, async_record = asyncio.run(main())
    assert async_view == sync_view
    assert (async_record.tier, async_record.summarized, async_record.tokens_after) == (
        sync_record.tier,
        sync_record.summarized,
        sync_record.tokens_after,
    )
    assert fake.requests[0].body == fake.requests[1].body


class CancelledUnderneath:
    """A summarizer whose awaitable is cancelled by someone else (a shared in-flight request that
    another caller cancelled, a client library that reports a call the server cancelled so)."""

    from progressive_compactor.plugin import hookimpl

    @hookimpl(tryfirst=True)
    def asummarize(self, request):
        async def answer():
            call = asyncio.get_running_loop().create_task(asyncio.sleep(30))
            asyncio.get_running_loop().call_later(0.02, call.cancel)
            return await call

        return answer()


def test_a_summarizer_cancelled_underneath_falls_back_as_any_failure(tmp_path):
    """The turn itself was not cancelled: the summarizer failed, and the turn falls back as the
    sync API does for any summarizer failure, instead of raising ``CancelledError`` to the agent."""
    history = synthetic_history("SESSION-MARKER-under", FULL_ROUNDS)
    compactor = ProgressiveCompactor(
        "classic", context_window=2000, data_dir=str(tmp_path), extra_plugins=[("under", CancelledUnderneath())]
    )
    view, record = asyncio.run(asyncio.wait_for(compactor.acompact_with_record(history, "s"), 5))
    assert record.tier is CompactionTier.EMERGENCY and record.fallback
    assert record.errors == ("summarizer failed: CancelledError: no message", EMERGENCY_ERROR)
    assert valid(view)
    assert compactor.state("s").covered > 0 and compactor._memory._locks == {}


def test_a_cancelled_turn_still_stops_and_leaves_the_session_usable(fake, tmp_path):
    """Cancelled while its summary request is in flight (a task cancelled, a ``wait_for`` timed
    out): the turn stops at once, saves nothing, holds no lock; the next turn of the session
    summarizes and gives a valid view."""
    fake.push(Behaviour("hang", delay=1.0), Behaviour("hang", delay=1.0))  # then the default: a summary

    async def main():
        async with ProgressiveCompactor(
            "default", **compactor_settings(fake.base_url, "openai", tmp_path)
        ) as compactor:
            history = synthetic_history("SESSION-MARKER-cancel", FULL_ROUNDS)
            with pytest.raises(asyncio.TimeoutError):
                await asyncio.wait_for(compactor.acompact_with_record(history, "s"), 0.2)
            task = asyncio.create_task(compactor.acompact_with_record(history, "s"))
            while len(fake.requests) < 2:  # its summary request is in flight
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            assert compactor.state("s").version == 0  # nothing half-saved
            assert compactor._memory._locks == {}
            return await asyncio.wait_for(compactor.acompact_with_record(history, "s"), 5)

    view, record = asyncio.run(main())
    assert record.tier is CompactionTier.FULL and record.errors == ()
    assert valid(view) and set(MARKER.findall(compaction_message(view)["content"])) == {"SESSION-MARKER-cancel"}


def test_messages_appended_while_a_summary_is_awaited_count_as_new_at_the_next_turn(tmp_path):
    """The agent appends to an ``AsyncSession``'s history while a view is being computed: the
    state records where the compaction landed as the history the view was made from, so the next
    turn counts the appended messages as grown since (``policy-cost`` prices growth by them)."""
    from progressive_compactor.plugin import hookimpl

    class AppendsMeanwhile:
        @hookimpl(tryfirst=True)
        def asummarize(self, request):
            async def answer():
                session.append({"role": "user", "content": "meanwhile"}, {"role": "assistant", "content": "ok"})
                return compactor.hooks.summarize(request)  # the offline summarizer's answer

            return answer()

    compactor = ProgressiveCompactor(
        "default", context_window=2000, data_dir=str(tmp_path), extra_plugins=[("meanwhile", AppendsMeanwhile())]
    )
    session = AsyncSession(compactor, "s")
    session.extend(synthetic_history("SESSION-MARKER-meanwhile", FULL_ROUNDS))
    before = len(session.history)
    view = asyncio.run(session.view())
    assert session.last_record.tier is CompactionTier.FULL and valid(view)
    assert len(session.history) == before + 2 and view[-1]["content"] != "ok"
    assert compactor.state("s").landed_messages == before


def test_a_turn_waiting_on_its_stores_leaves_the_event_loop_free(tmp_path):
    """The stores of a fleet wait on servers (a state store across the network, a record store
    that takes a second to answer): an async turn waits for them off the event loop, so the
    loop's other work (other sessions, the agent's own requests) goes on meanwhile."""
    import time

    from progressive_compactor.plugin import hookimpl

    class SlowStateStore:
        @hookimpl(tryfirst=True)
        def load_state(self, session_id):
            time.sleep(0.3)  # a server slow to answer
            return None

    async def main():
        gaps: list[float] = []

        async def ticker(stop: asyncio.Event) -> None:
            last = time.monotonic()
            while not stop.is_set():
                await asyncio.sleep(0.01)
                now = time.monotonic()
                gaps.append(now - last)
                last = now

        stop = asyncio.Event()
        with ProgressiveCompactor("classic", data_dir=str(tmp_path), extra_plugins=[("slow", SlowStateStore())]) as c:
            ticking = asyncio.create_task(ticker(stop))
            await asyncio.sleep(0.02)
            views = await asyncio.gather(*(c.acompact(synthetic_history(marker(i), 3), f"s{i}") for i in range(2)))
            stop.set()
            await ticking
        return gaps, views

    gaps, views = asyncio.run(main())
    assert all(valid(view) for view in views)
    assert len(gaps) >= 10 and max(gaps) < 0.2, f"the loop was held for {max(gaps):.2f} s"


def test_a_turn_cancelled_while_its_store_works_lets_the_store_finish_first(tmp_path):
    """Cancelled while a step runs in its thread (a state save on its way to the server): the
    cancellation waits for the step, so the session's lock is never released while a turn of the
    session still runs; the next turn is served as usual."""
    import threading
    import time

    from progressive_compactor.plugin import hookimpl

    running = threading.Event()
    finished: list[float] = []

    class SlowStateStore:
        @hookimpl(tryfirst=True)
        def load_state(self, session_id):
            running.set()
            time.sleep(0.3)
            finished.append(time.monotonic())
            return None

    async def main():
        with ProgressiveCompactor("classic", data_dir=str(tmp_path), extra_plugins=[("slow", SlowStateStore())]) as c:
            history = synthetic_history(marker(0), 3)
            task = asyncio.create_task(c.acompact(history, "s"))
            while not running.is_set():
                await asyncio.sleep(0.01)
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            cancelled_at = time.monotonic()
            assert finished and finished[0] <= cancelled_at  # the step ended first
            assert c._memory._locks == {}
            return await c.acompact(history, "s")

    assert valid(asyncio.run(main()))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_serves_async_turns_with_a_thread_of_its_own(tmp_path):
    """A server that forks its workers after the compactor served (a preloaded app): the child's
    async turns do not wait for the parent's step thread, which does not run in the child."""
    with ProgressiveCompactor("classic", data_dir=str(tmp_path)) as compactor:
        assert valid(asyncio.run(compactor.acompact(synthetic_history(marker(0), 3), "parent")))
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when its turn was served
            try:
                signal.alarm(20)
                view = asyncio.run(compactor.acompact(synthetic_history(marker(1), 3), "child"))
                os._exit(0 if valid(view) else 1)
            finally:
                os._exit(2)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_worker_forked_while_a_thread_serves_a_session_serves_that_session(tmp_path, mode):
    """Forked while another thread's turn of the session waits for its summary: that turn does not
    run in the child, so neither does anything hold the session there; the child's turn of it is
    served (it used to wait for the parent's lock forever)."""
    import threading

    from progressive_compactor.plugin import hookimpl

    parent, asked, answer = os.getpid(), threading.Event(), threading.Event()

    class SlowSummarizer:
        @hookimpl(tryfirst=True)
        def summarize(self, request):
            if os.getpid() == parent:
                asked.set()
                answer.wait(20)
            return None  # the configured summarizer answers

    history = synthetic_history(marker(0), FULL_ROUNDS)
    settings = {"context_window": 2000, "data_dir": str(tmp_path), "extra_plugins": [("slow", SlowSummarizer())]}
    with ProgressiveCompactor("classic", **settings) as compactor:
        serving = threading.Thread(target=compactor.compact, args=(history, "s"))
        serving.start()
        assert asked.wait(10)
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when its turn of the session was served
            code = 2
            try:
                if mode == "sync":
                    view, record = compactor.compact_with_record(history, "s")
                else:
                    view, record = asyncio.run(compactor.acompact_with_record(history, "s"))
                code = 0 if valid(view) and record.tier is CompactionTier.FULL else 1
            finally:
                os._exit(code)
        answer.set()
        serving.join()
        assert child_exit_code(pid, what="the forked worker's turn of the session hung") == 0


@pytest.mark.parametrize("threads", [1, 4])
def test_async_turns_of_other_sessions_wait_on_their_stores_together(tmp_path, threads):
    """``async_threads`` turns of other sessions wait on their stores at once (a state store across
    the network answers each in its own time), never more: a store slow to answer does not make
    every session of the process wait in line."""
    import threading
    import time

    from progressive_compactor.plugin import hookimpl

    waiting = [0, 0]  # now, at most
    guard = threading.Lock()

    class SlowStateStore:
        @hookimpl(tryfirst=True)
        def load_state(self, session_id):
            with guard:
                waiting[0] += 1
                waiting[1] = max(waiting)
            time.sleep(0.2)  # a server slow to answer
            with guard:
                waiting[0] -= 1

    async def main():
        with ProgressiveCompactor(
            "classic", data_dir=str(tmp_path), async_threads=threads, extra_plugins=[("slow", SlowStateStore())]
        ) as c:
            return await asyncio.gather(*(c.acompact(synthetic_history(marker(i), 3), f"s{i}") for i in range(8)))

    views = asyncio.run(main())
    assert all(valid(view) for view in views)
    assert waiting[1] == threads
