"""The ``otel`` plugin, checked with the OpenTelemetry SDK's in-memory span exporter and metric
reader: one span per turn that changed the view, with the record's fields as attributes; the
tokens saved, the compactions by tier and the summarizer's latency as metrics."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the [otel] extra is not installed")

from opentelemetry.sdk.metrics import MeterProvider  # noqa: E402
from opentelemetry.sdk.metrics.export import InMemoryMetricReader  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402
from opentelemetry.sdk.trace.export import SimpleSpanProcessor  # noqa: E402
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter  # noqa: E402
from opentelemetry.trace import StatusCode  # noqa: E402

from progressive_compactor import CompactionTier  # noqa: E402
from progressive_compactor.plugin import PluginContext  # noqa: E402
from progressive_compactor.plugins.otel import OtelTelemetry, changed_the_view  # noqa: E402
from progressive_compactor.testing import ListStore, RecordingSummarizer, build_history, failing_summarizer  # noqa: E402
from progressive_compactor.validation import load_config  # noqa: E402


@pytest.fixture
def telemetry():
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    context = PluginContext(load_config("default"))  # the summarizer it names is the default's
    plugin = OtelTelemetry(context=context, tracer_provider=tracer_provider, meter_provider=meter_provider)
    yield plugin, spans, reader, tracer_provider
    tracer_provider.shutdown()
    meter_provider.shutdown()


def points(reader, name):
    """The data points of instrument ``name``: a list of (attributes, value or histogram point)."""
    found = []
    data = reader.get_metrics_data()
    for resource in data.resource_metrics if data else []:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    for point in metric.data.data_points:
                        found.append((dict(point.attributes), getattr(point, "value", point)))
    return found


def compactor_with(make_compactor, plugin, **overrides):
    store = ListStore()
    compactor = make_compactor(
        plugins={"extra": ["otel"]}, extra_plugins=[("otel", plugin), ("list-store", store)], **overrides
    )
    return compactor, store


def replay(compactor, history, sid="s"):
    for i, message in enumerate(history):
        if message["role"] == "assistant" and i > 2:
            compactor.compact_with_record(history[:i], sid)


def test_one_span_per_turn_that_changed_the_view(make_compactor, telemetry):
    plugin, spans, reader, _ = telemetry
    history = build_history([5000] * 30)
    compactor, store = compactor_with(make_compactor, plugin, context_window=16_000)
    replay(compactor, history)
    changed = [r for r in store.records if changed_the_view(r)]
    tiers = Counter(r.tier for r in changed)
    assert tiers[CompactionTier.WARN] and tiers[CompactionTier.SOFT]  # the session exercises several tiers
    assert len(store.records) > len(changed)  # and turns that changed nothing, which get no span
    finished = spans.get_finished_spans()
    assert [s.attributes["compactor.record_id"] for s in finished] == [r.id for r in changed]
    for span, record in zip(finished, changed):
        a = span.attributes
        assert span.name == "compact_context"
        assert a["gen_ai.operation.name"] == "compact_context"
        assert a["gen_ai.conversation.id"] == "s"
        assert a["compactor.tier"] == record.tier.name.lower()
        assert (a["compactor.tokens_before"], a["compactor.tokens_after"]) == (
            record.tokens_before,
            record.tokens_after,
        )
        assert (a["compactor.messages_before"], a["compactor.messages_after"]) == (
            record.msgs_before,
            record.msgs_after,
        )
        assert a["compactor.offloads"] == len(record.offloaded)
        assert a["compactor.offloaded_chars"] == sum(e.chars for e in record.offloaded)
        assert a["compactor.summarized"] == record.summarized
        assert a["compactor.preserved_tail"] == record.preserved_tail
        assert a["compactor.anchors"] == len(record.anchors)
        assert a["compactor.context_window"] == 16_000
        assert (a["compactor.token_correction"], a["compactor.token_offset"]) == (1.0, 0)
        assert a["compactor.token_method"] == "tokens-chars"
        assert a["compactor.fallback"] == record.fallback
        if record.summarizer_calls:
            assert a["compactor.summarizer"] == "summarize-extractive"
            assert a["compactor.summarizer.calls"] == record.summarizer_calls
            assert a["gen_ai.usage.input_tokens"] == record.summarizer_tokens_in
        else:
            assert "gen_ai.usage.input_tokens" not in a
        assert "compactor.summary" not in a  # only with capture_summary
        assert span.end_time - span.start_time == pytest.approx(record.duration_ms * 1e6, abs=1000)
        assert span.status.status_code is not StatusCode.ERROR
    saved = points(reader, "compactor.tokens.saved")
    assert sum(v for _, v in saved) == sum(r.tokens_before - r.tokens_after for r in changed)
    by_tier = {a["compactor.tier"]: v for a, v in points(reader, "compactor.compactions")}
    assert by_tier == {tier.name.lower(): n for tier, n in tiers.items()}
    latency = points(reader, "compactor.summarizer.duration")
    assert sum(p.count for _, p in latency) == sum(r.summarizer_calls for r in store.records) > 0
    assert all(a == {"compactor.summarizer": "summarize-extractive"} for a, _ in latency)


def test_spans_are_children_of_the_current_span(make_compactor, telemetry):
    plugin, spans, _, tracer_provider = telemetry
    history = build_history([3000] * 12)
    compactor, _ = compactor_with(make_compactor, plugin, context_window=10_000)
    with tracer_provider.get_tracer("agent").start_as_current_span("agent turn") as parent:
        compactor.compact_force(history, "s")
    compaction = next(s for s in spans.get_finished_spans() if s.name == "compact_context")
    assert compaction.parent.span_id == parent.get_span_context().span_id
    assert compaction.attributes["compactor.tier"] == "emergency"
    assert compaction.status.status_code is not StatusCode.ERROR  # a truncation alone is no error


def test_a_failing_summarizer_is_an_error_with_its_latency(make_compactor, telemetry):
    plugin, spans, reader, _ = telemetry
    history = build_history([3000] * 12)
    summarizer = failing_summarizer("HTTP 503 from the summarizer")
    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.pm.register(summarizer, "failing")
    compactor.compact_with_record(history, "s")
    record = store.records[-1]
    assert record.errors[0].startswith("summarizer failed")
    span = spans.get_finished_spans()[-1]
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "summarizer_failed"
    assert list(span.attributes["compactor.errors"]) == ["summarizer_failed", "emergency_fallback"]
    latency = points(reader, "compactor.summarizer.duration")
    assert [(a.get("error.type"), p.count) for a, p in latency] == [("SummarizerError", 1)]
    assert points(reader, "compactor.errors") == [({"error.type": "summarizer_failed"}, 1)]


def test_a_span_carries_the_types_of_the_errors_never_their_text(make_compactor, telemetry):
    """An error's text may quote a tool's output or a model's reply: it stays in the record (the
    record store), and the span says only what kind of error it was and which record has it."""
    plugin, spans, _, _ = telemetry
    quoted = "malformed JSON in the reply; it starts with 'Jane Roe, 12 Elm Street, card 4242'"
    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.pm.register(failing_summarizer(quoted), "failing")
    compactor.compact_with_record(build_history([3000] * 12), "s")
    record = store.records[-1]
    assert "Jane Roe" in record.errors[0]
    span = spans.get_finished_spans()[-1]
    assert span.attributes["compactor.record_id"] == record.id
    assert list(span.attributes["compactor.errors"]) == ["summarizer_failed", "emergency_fallback"]
    exported = [*map(str, span.attributes.values()), span.status.description or ""]
    assert not [text for text in exported if "Jane Roe" in text]
    assert span.status.description == "summarizer_failed"


def test_the_async_summarizer_is_timed_too(make_compactor, telemetry):
    plugin, spans, reader, _ = telemetry
    history = build_history([3000] * 12)

    class AsyncSummarizer(RecordingSummarizer):
        from progressive_compactor.plugin import hookimpl

        @hookimpl
        def asummarize(self, request):
            async def answer():
                await asyncio.sleep(0.02)
                return self.summarize(request)

            return answer()

    summarizer = AsyncSummarizer(text="## User Intent\nfix it\n\nThe summary.")
    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.pm.register(summarizer, "async-summarizer")
    asyncio.run(compactor.acompact_with_record(history, "s"))
    assert summarizer.calls == store.records[-1].summarizer_calls >= 1
    latency = points(reader, "compactor.summarizer.duration")
    assert sum(p.count for _, p in latency) == summarizer.calls
    assert min(p.min for _, p in latency) >= 0.02  # the await, not just creating the coroutine
    tokens = {a["gen_ai.token.type"]: v for a, v in points(reader, "compactor.summarizer.tokens")}
    assert tokens["input"] == store.records[-1].summarizer_tokens_in > 0


def test_capture_summary_and_the_entry_point(make_compactor):
    """Selected by name it uses the global (here no-op) providers and changes nothing."""
    history = build_history([3000] * 12)
    compactor = make_compactor(
        context_window=int(9000 / 0.85), plugins={"extra": ["otel"]}, config={"otel": {"capture_summary": True}}
    )
    view, record = compactor.compact_with_record(history, "s")
    assert record.tier is CompactionTier.FULL
    assert record.errors == ()
    plugin = compactor.pm.get_plugin("otel")
    assert isinstance(plugin, OtelTelemetry) and plugin.config.capture_summary is True
    assert plugin.attributes(record, [])["compactor.summary"] == record.summary_text


def test_a_registered_secret_in_the_session_id_is_masked_in_the_conversation_id(make_compactor):
    """The session id is the caller's: one that holds a secret has it masked on the span, as in
    the records the stores write."""
    key = "Zq9-session-secret-0123456789"
    compactor = make_compactor(context_window=int(9000 / 0.85), plugins={"extra": ["otel"]})
    compactor.secrets.add(key)
    _, record = compactor.compact_with_record(build_history([3000] * 12), f"team-{key}")
    assert record.tier is CompactionTier.FULL
    attributes = compactor.pm.get_plugin("otel").attributes(record, [])
    assert attributes["gen_ai.conversation.id"] == "team-[REDACTED]"
    assert not [value for value in map(str, attributes.values()) if key[:10] in value or key[-10:] in value]


class UnreadableState:
    from progressive_compactor.plugin import hookimpl

    @hookimpl(tryfirst=True)
    def load_state(self, session_id):
        raise OSError("the state's disk is gone")


class BrokenCounter:
    from progressive_compactor.plugin import hookimpl

    @hookimpl(tryfirst=True)
    def estimate_tokens(self, messages):
        raise RuntimeError("the counter broke")


def test_a_turn_that_went_wrong_has_a_span_even_when_the_view_is_unchanged(make_compactor, telemetry):
    """A trace shows every turn where something failed: the state that could not be read on a turn
    that needed no compaction, and a compaction that failed outright (the integration sent the
    input as it was)."""
    from progressive_compactor.integrations.common import Compaction

    plugin, spans, reader, _ = telemetry
    compactor, store = compactor_with(make_compactor, plugin)
    compactor.pm.register(UnreadableState(), "unreadable")
    compactor.compact_with_record(build_history([100] * 3), "s")
    (record,) = store.records
    assert record.tier is CompactionTier.NONE and not changed_the_view(record)
    (span,) = spans.get_finished_spans()
    assert span.attributes["compactor.record_id"] == record.id
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "state_load_failed"

    compactor, store = compactor_with(make_compactor, plugin)
    compactor.pm.register(BrokenCounter(), "broken")
    outcome = Compaction(compactor).compact(build_history([100] * 3), "t")
    assert outcome.failed
    span = spans.get_finished_spans()[-1]
    assert span.attributes["gen_ai.conversation.id"] == "t"
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes["error.type"] == "compaction_failed"
    assert ({"error.type": "compaction_failed"}, 1) in points(reader, "compactor.errors")


def test_an_async_summarizer_that_fails_before_its_await_is_timed_as_a_failure(make_compactor, telemetry):
    plugin, spans, reader, _ = telemetry
    history = build_history([3000] * 12)

    class Refusing:
        from progressive_compactor.plugin import hookimpl

        @hookimpl(tryfirst=True)
        def asummarize(self, request):
            raise ConnectionError("no route to the summarizer")

    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.pm.register(Refusing(), "refusing")
    asyncio.run(compactor.acompact_with_record(history, "s"))
    assert store.records[-1].errors[0].startswith("summarizer failed")
    latency = points(reader, "compactor.summarizer.duration")
    assert [(a.get("error.type"), p.count) for a, p in latency] == [("ConnectionError", 1)]
    assert spans.get_finished_spans()[-1].attributes["error.type"] == "summarizer_failed"


def test_the_summarizer_latency_histogram_has_buckets_for_seconds(make_compactor, telemetry):
    """A summary takes from tens of milliseconds to a minute: the histogram in ``s`` tells them
    apart (the SDK's default buckets, 0 5 10 25 ... 10000, are for milliseconds and put every
    call under 5 s in one bucket)."""
    import time

    plugin, _, reader, _ = telemetry
    history = build_history([3000] * 12)

    def slow(request):
        time.sleep(0.3)
        return "## User Intent\nfix it\n\nThe summary."

    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.pm.register(RecordingSummarizer(text=slow), "slow")
    compactor.compact_with_record(history, "s")
    ((_, point),) = points(reader, "compactor.summarizer.duration")
    bounds = list(point.explicit_bounds)
    assert 0 < bounds[0] <= 0.01 and bounds[-1] >= 60  # from 10 ms to over a minute
    (bucket,) = [i for i, count in enumerate(point.bucket_counts) if count]
    assert 0.3 <= bounds[bucket] <= 0.64  # the 0.3 s call, told apart from a 3 s one


def test_every_cause_the_core_reports_has_its_own_error_type(make_compactor, telemetry):
    """A state that covers more than the history sent (an earlier turn sent again) or messages it
    went on without is a state mismatch, as one that did not match at all: never ``_OTHER``."""
    from progressive_compactor.plugins.otel import error_type

    plugin, spans, reader, _ = telemetry
    history = build_history([3000] * 12)
    compactor, store = compactor_with(make_compactor, plugin, context_window=int(9000 / 0.85))
    compactor.compact_with_record(history, "s")
    compactor.compact_with_record(history[:4], "s")  # an earlier turn sent again
    assert store.records[-1].errors[0].startswith("session state covers more messages")
    assert spans.get_finished_spans()[-1].attributes["error.type"] == "state_mismatch"
    assert points(reader, "compactor.errors") == [({"error.type": "state_mismatch"}, 1)]
    rewound = "session state covers messages this history went on without (rewound); started over"
    assert error_type(rewound) == "state_mismatch"
    assert error_type("loop guard: a summary of these messages came back larger than them") == "loop_guard"
    # a window too small for what truncation must keep: each of the record's causes is typed
    _, record = make_compactor("default", context_window=10).compact_with_record(build_history([300] * 4), "t")
    assert [error_type(e) for e in record.errors] == [
        "emergency_fallback",
        "newest_exchange_dropped",
        "view_over_window",
    ]
