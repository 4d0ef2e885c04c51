"""``otel``: OpenTelemetry spans and metrics for every compaction (extra ``[otel]``).

Select it as an extra plugin (``plugins: {extra: [otel]}``). It uses the tracer and meter
providers the application set up (``opentelemetry.trace.set_tracer_provider`` and
``opentelemetry.metrics.set_meter_provider``, or an SDK configured from the environment); with
none set up, OpenTelemetry's no-op providers make it cost next to nothing.

**One span per turn that changed the view** (a tier was carried out and the view's tokens or
messages changed) or in which something went wrong (a compaction that failed and sent the input
as it was, a session state that could not be read...), named ``compact_context``, a child of
whatever span is current (the agent framework's model call, for example), timed by the record (it ends at ``record.timestamp`` and
lasts ``record.duration_ms``). It follows the OpenTelemetry GenAI semantic conventions where they
apply: ``gen_ai.operation.name`` (``compact_context``, an operation of our own),
``gen_ai.conversation.id`` (the session id, a registered secret in it masked),
``gen_ai.usage.input_tokens`` and ``gen_ai.usage.output_tokens`` (what the summarizer's provider reported, when a summary was
made), ``error.type`` and an error status when something went wrong (an emergency truncation alone
is not an error), described by its ``error.type``. The record's fields are the ``compactor.*``
attributes: ``compactor.tier``, ``compactor.requested_tier``, ``compactor.tokens_before``,
``compactor.tokens_after``, ``compactor.messages_before``, ``compactor.messages_after``,
``compactor.compression_ratio``, ``compactor.offloads``, ``compactor.offloaded_chars``,
``compactor.summarized``, ``compactor.preserved_tail``, ``compactor.anchors``,
``compactor.summarizer``, ``compactor.summarizer.calls``, ``compactor.fallback``,
``compactor.escalations``, ``compactor.errors`` (the errors' types, below),
``compactor.token_correction``, ``compactor.token_offset``,
``compactor.cache_stable_prefix_tokens``, ``compactor.context_window``,
``compactor.token_method``, ``compactor.variant``, ``compactor.record_id``. The summary text goes in only with ``capture_summary: true`` (secrets
are masked either way).

**Errors go out as their types, never their text.** An entry of ``record.errors`` may quote a
tool's output, a model's reply (the start of a malformed one) or a plugin's exception: secrets are
masked, other user data is not. The span's ``compactor.errors`` is the list of their types, in
order, and ``error.type`` and the status's description the first one's; the text stays in the
record, which the record store keeps under ``compactor.record_id``. The type is that of the first
of :data:`ERROR_TYPES` whose opening words the entry starts with, ``_OTHER`` for none.

**Metrics** (the meter ``progressive_compactor``):

| instrument | kind, unit | attributes |
|---|---|---|
| ``compactor.tokens.saved`` | counter, ``{token}`` | ``compactor.tier`` |
| ``compactor.compactions`` | counter, ``{compaction}`` | ``compactor.tier`` |
| ``compactor.summarizer.duration`` | histogram, ``s`` (buckets 0.01 to 81.92) | ``compactor.summarizer``, ``error.type`` when it failed |
| ``compactor.summarizer.tokens`` | counter, ``{token}`` | ``gen_ai.token.type`` (``input``, ``output``) |
| ``compactor.errors`` | counter, ``{error}`` | ``error.type`` |

The summarizer's latency is measured around every ``summarize`` and ``asummarize`` call (this
plugin wraps both hooks), whichever plugin answers.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Generator
from datetime import datetime
from typing import Any

import attrs

from progressive_compactor.plugin import (
    CompactionRecord,
    CompactionTier,
    PluginContext,
    PluginError,
    SecretRegistry,
    SummaryRequest,
    SummaryResult,
    hookimpl,
    setting_check,
)

DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48, 40.96, 81.92)
"""Bucket bounds in seconds of ``compactor.summarizer.duration``: the GenAI conventions' for the
duration of a model call (the SDK's default bounds are for milliseconds)."""
EMERGENCY_NOTE = "emergency fallback: forced truncation"
ERROR_TYPES = (
    ("compaction failed", "compaction_failed"),
    ("summarizer failed", "summarizer_failed"),
    ("offload of ", "offload_failed"),
    ("saving session state failed", "state_save_failed"),
    ("loading session state failed", "state_load_failed"),
    ("session state did not match", "state_mismatch"),
    ("session state covers", "state_mismatch"),
    ("loop guard", "loop_guard"),
    ("repaired view", "repaired_view"),
    ("anchor parsing incomplete", "anchors_incomplete"),
    ("the newest exchange", "newest_exchange_dropped"),
    ("the view cannot fit", "view_over_window"),
    (EMERGENCY_NOTE, "emergency_fallback"),  # an error only in ``compactor.errors``, not the span's status
)
"""(opening words of an entry of ``record.errors``, its ``error.type``)."""


def error_type(cause: str) -> str:
    """A low-cardinality ``error.type`` for one entry of ``record.errors``."""
    for prefix, kind in ERROR_TYPES:
        if cause.startswith(prefix):
            return kind
    return "_OTHER"


def changed_the_view(record: CompactionRecord) -> bool:
    return record.tier is not CompactionTier.NONE and (
        record.tokens_after != record.tokens_before
        or record.msgs_after != record.msgs_before
        or bool(record.offloaded)
        or record.summarized > 0
    )


def end_ns(record: CompactionRecord) -> int:
    try:
        return int(datetime.fromisoformat(record.timestamp).timestamp() * 1e9)
    except ValueError:
        return time.time_ns()


class OtelTelemetry:
    @attrs.frozen
    class Config:
        tracer_name: str = attrs.field(
            default="progressive_compactor",
            validator=setting_check(lambda v: v.strip() != "", "tracer_name must not be empty"),
        )
        span_name: str = attrs.field(
            default="compact_context", validator=setting_check(lambda v: v.strip() != "", "span_name must not be empty")
        )
        capture_summary: bool = False
        """Put the summary text (secrets masked) on the span as ``compactor.summary``."""

    def __init__(
        self,
        config: Config | None = None,
        context: PluginContext | None = None,
        *,
        tracer_provider: Any = None,
        meter_provider: Any = None,
    ):
        try:
            from opentelemetry import metrics, trace
        except ImportError as exc:
            raise PluginError(
                "the otel plugin needs opentelemetry: pip install 'progressive-compactor[otel]'", "otel"
            ) from exc
        self.config = config or self.Config()
        self.summarizer = context.config.plugins.roles().get("summarizer", "") if context is not None else ""
        self.secrets = context.secrets if context is not None else SecretRegistry()
        self.tracer = trace.get_tracer(self.config.tracer_name, tracer_provider=tracer_provider)
        meter = metrics.get_meter("progressive_compactor", meter_provider=meter_provider)
        self.saved = meter.create_counter(
            "compactor.tokens.saved", "{token}", "Tokens a compaction removed from the view"
        )
        self.compactions = meter.create_counter("compactor.compactions", "{compaction}", "Turns that changed the view")
        self.latency = meter.create_histogram(
            "compactor.summarizer.duration",
            "s",
            "Time of one summarizer call",
            explicit_bucket_boundaries_advisory=DURATION_BUCKETS,
        )
        self.summary_tokens = meter.create_counter(
            "compactor.summarizer.tokens", "{token}", "Tokens the summarizer's provider reported"
        )
        self.errors = meter.create_counter(
            "compactor.errors", "{error}", "Causes of something that went wrong in a turn"
        )
        self._status = trace.Status
        self._error = trace.StatusCode.ERROR

    # --- spans and counters, from the record -------------------------------------------------

    @hookimpl
    def persist_record(self, record: CompactionRecord) -> None:
        causes = [e for e in record.errors if e != EMERGENCY_NOTE]
        for cause in causes:
            self.errors.add(1, {"error.type": error_type(cause)})
        if record.summarizer_tokens_in:
            self.summary_tokens.add(record.summarizer_tokens_in, {"gen_ai.token.type": "input"})
        if record.summarizer_tokens_out:
            self.summary_tokens.add(record.summarizer_tokens_out, {"gen_ai.token.type": "output"})
        if changed_the_view(record):
            tier = record.tier.name.lower()
            self.compactions.add(1, {"compactor.tier": tier})
            self.saved.add(max(record.tokens_before - record.tokens_after, 0), {"compactor.tier": tier})
        elif not causes:
            return
        end = end_ns(record)
        span = self.tracer.start_span(
            self.config.span_name,
            start_time=end - int(record.duration_ms * 1e6),
            attributes=self.attributes(record, causes),
        )
        if causes:
            span.set_status(self._status(self._error, error_type(causes[0])))
        span.end(end_time=end)

    def attributes(self, record: CompactionRecord, causes: list[str]) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            "gen_ai.operation.name": "compact_context",
            # the caller's id, a secret it holds masked (as the stores write it)
            "gen_ai.conversation.id": self.secrets.redact_registered(record.session_id),
            "compactor.record_id": record.id,
            "compactor.tier": record.tier.name.lower(),
            "compactor.tokens_before": record.tokens_before,
            "compactor.tokens_after": record.tokens_after,
            "compactor.messages_before": record.msgs_before,
            "compactor.messages_after": record.msgs_after,
            "compactor.compression_ratio": record.compression_ratio,
            "compactor.offloads": len(record.offloaded),
            "compactor.offloaded_chars": sum(e.chars for e in record.offloaded),
            "compactor.summarized": record.summarized,
            "compactor.preserved_tail": record.preserved_tail,
            "compactor.anchors": len(record.anchors),
            "compactor.summarizer.calls": record.summarizer_calls,
            "compactor.fallback": record.fallback,
            "compactor.token_correction": record.token_correction,
            "compactor.token_offset": record.token_offset,
            "compactor.cache_stable_prefix_tokens": record.cache_stable_prefix_tokens,
            "compactor.context_window": record.context_window,
            "compactor.token_method": record.token_method,
        }
        if record.requested_tier is not None:
            attributes["compactor.requested_tier"] = record.requested_tier.name.lower()
        if record.summarizer_calls:
            attributes["compactor.summarizer"] = record.plugins.get("summarizer", self.summarizer)
            attributes["gen_ai.usage.input_tokens"] = record.summarizer_tokens_in
            attributes["gen_ai.usage.output_tokens"] = record.summarizer_tokens_out
        if record.escalations:
            attributes["compactor.escalations"] = list(record.escalations)
        if record.errors:
            attributes["compactor.errors"] = [error_type(e) for e in record.errors]  # never their text
        if causes:
            attributes["error.type"] = error_type(causes[0])
        if record.variant:
            attributes["compactor.variant"] = record.variant
        if self.config.capture_summary and record.summary_text:
            attributes["compactor.summary"] = record.summary_text
        return attributes

    # --- the summarizer's latency ------------------------------------------------------------

    def _timed(self, started: float, failure: str | None) -> None:
        attributes = {"compactor.summarizer": self.summarizer or "unknown"}
        if failure:
            attributes["error.type"] = failure
        self.latency.record(time.perf_counter() - started, attributes)

    @hookimpl(wrapper=True)
    def summarize(self, request: SummaryRequest) -> Generator[None, Any, SummaryResult | None]:
        started = time.perf_counter()
        try:
            result: SummaryResult | None = yield
        except Exception as exc:
            self._timed(started, type(exc).__name__)
            raise
        if result is not None:
            self._timed(started, None)
        return result

    @hookimpl(wrapper=True)
    def asummarize(self, request: SummaryRequest) -> Generator[None, Any, Awaitable[SummaryResult] | None]:
        started = time.perf_counter()
        try:
            pending: Awaitable[SummaryResult] | None = yield
        except Exception as exc:  # it failed before giving anything to await
            self._timed(started, type(exc).__name__)
            raise
        if pending is None:
            return None

        async def timed() -> SummaryResult:
            try:
                result = await pending
            except Exception as exc:
                self._timed(started, type(exc).__name__)
                raise
            self._timed(started, None)
            return result

        return timed()
