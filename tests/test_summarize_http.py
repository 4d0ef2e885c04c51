"""The HTTP summarizers (``summarize-openai``, ``summarize-anthropic``) against a real HTTP server
on 127.0.0.1 (:mod:`fake_provider`): success, every fault with its outcome, the retry policy,
the prompt, connection reuse, and the API key never leaking."""

from __future__ import annotations

import asyncio
import base64
import gc
import json
import logging
import os
import re
import time
import warnings
from pathlib import Path
from typing import Any

import httpx
import pytest

from fake_provider import (
    FULL_ROUNDS,
    SOFT_ROUNDS,
    Behaviour,
    FakeProvider,
    compactor_settings,
    stalled_listener,
    synthetic_history,
)
from progressive_compactor import EMERGENCY_ERROR, CompactionTier, ConfigError, ProgressiveCompactor, SummarizerError
from progressive_compactor.anchors import parse_markdown
from progressive_compactor.http.prompt import PLACEHOLDERS, build_prompt, load_template
from progressive_compactor.http.retry import (
    HttpResponse,
    RetryPolicy,
    Send,
    Sleep,
    Timeouts,
    backoff_delay,
    exchange,
    parse_retry_after,
)
from progressive_compactor.integrations.common import SOURCE
from progressive_compactor.messages import message_from_dict, to_anthropic, view_problems
from progressive_compactor.models import AnchorType, CompactionRecord, Facts, Message, SummaryRequest
from progressive_compactor.plugins.summarize_anthropic import AnthropicSummarizer
from progressive_compactor.plugins.summarize_openai import OpenAISummarizer
from progressive_compactor.testing import compaction_message
from timeouts import forked_while_held

PROTOCOLS = ["openai", "anthropic"]
MODES = ["sync", "async"]
PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}


@pytest.fixture
def fake():
    with FakeProvider() as server:
        yield server


def make(fake_url: str, protocol: str, tmp_path: Path, **block: Any) -> ProgressiveCompactor:
    window = block.pop("context_window", 2000)
    return ProgressiveCompactor(
        "default", **compactor_settings(fake_url, protocol, tmp_path, context_window=window, **block)
    )


def run(
    compactor: ProgressiveCompactor, history: list[dict], sid: str, mode: str
) -> tuple[list[dict], CompactionRecord]:
    """One turn through the sync or the async API; the async one closes its client after."""
    if mode == "sync":
        return compactor.compact_with_record(history, sid)

    async def turn():
        try:
            return await compactor.acompact_with_record(history, sid)
        finally:
            await compactor.aclose()

    return asyncio.run(turn())


def add_rounds(history: list[dict], rounds: range) -> None:
    """Append a ``make step{i}`` tool call and its result to ``history`` for each ``i``."""
    for i in rounds:
        arguments = json.dumps({"command": f"make step{i}"})
        call = {"id": f"c{i}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
        history.append({"role": "assistant", "content": f"Round {i}.", "tool_calls": [call]})
        history.append({"role": "tool", "tool_call_id": f"c{i}", "content": f"step {i} done\n" * 25})


def failure_of(record: CompactionRecord) -> str:
    """The summarizer's failure: the record's first error, followed by the fallback's own entry."""
    assert record.fallback
    failure, fallback = record.errors
    assert fallback == EMERGENCY_ERROR
    assert failure.startswith("summarizer failed: ")
    return failure


def assert_valid(view: list[dict]) -> None:
    messages = [message_from_dict(m, i) for i, m in enumerate(view)]
    assert view_problems(messages) == []
    assert messages[0].role == "system"


# --- success ----------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_success_stores_usage_and_anchors(fake, tmp_path, protocol, mode):
    compactor = make(fake.base_url, protocol, tmp_path, model="test-model")
    view, record = run(compactor, synthetic_history("SESSION-MARKER-ok", FULL_ROUNDS), "s1", mode)
    compactor.close()

    assert record.tier is CompactionTier.FULL
    assert record.errors == ()
    assert len(fake.requests) == 1
    sent = fake.requests[0]
    assert sent.path == PATHS[protocol]
    assert sent.usage is not None and sent.usage[0] > 0
    assert (record.summarizer_tokens_in, record.summarizer_tokens_out) == sent.usage
    assert record.summarizer_calls == 1
    anchors = {a.type: a.content for a in record.anchors}
    assert "SESSION-MARKER-ok" in anchors[AnchorType.USER_INTENT]
    assert "regex: failed on nested quotes" in anchors[AnchorType.TRIED_SOLUTION]
    assert "SESSION-MARKER-ok" in record.summary_text
    assert record.tokens_after < record.tokens_before
    assert_valid(view)
    assert "[Context Compaction]" in compaction_message(view)["content"]


@pytest.mark.parametrize("mode", MODES)
def test_openai_content_parts_skip_a_part_without_text(fake, tmp_path, mode):
    """Content parts whose ``text`` is null are skipped; the others are the summary."""
    fake.push(Behaviour("parts"))
    compactor = make(fake.base_url, "openai", tmp_path)
    view, record = run(compactor, synthetic_history("SESSION-MARKER-p", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert record.tier is CompactionTier.FULL and record.errors == ()
    assert "SESSION-MARKER-p" in record.summary_text
    assert_valid(view)


def test_openai_request_shape(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_OPENAI_KEY", "sk-shape-0123456789")
    compactor = make(
        fake.base_url,
        "openai",
        tmp_path,
        model="m1",
        api_key_env="TEST_OPENAI_KEY",
        temperature=None,
        max_output_tokens=321,
        max_tokens_field="max_completion_tokens",
        extra_headers={"x-team": "compaction"},
        extra_body={"seed": 7},
    )
    compactor.compact_with_record(synthetic_history("SESSION-MARKER-a", FULL_ROUNDS), "s")
    compactor.close()
    sent = fake.requests[0]
    assert sent.headers["authorization"] == "Bearer sk-shape-0123456789"
    assert sent.headers["x-team"] == "compaction"
    body = sent.body
    assert body["model"] == "m1" and body["seed"] == 7 and body["stream"] is False
    assert body["max_completion_tokens"] == 321 and "max_tokens" not in body
    assert "temperature" not in body
    assert [m["role"] for m in body["messages"]] == ["system", "user"]
    assert "## Tried Solutions" in body["messages"][0]["content"]


def test_anthropic_request_shape(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("TEST_ANTHROPIC_KEY", "sk-ant-shape-0123456789")
    compactor = make(
        fake.base_url,
        "anthropic",
        tmp_path,
        model="claude-x",
        api_key_env="TEST_ANTHROPIC_KEY",
        anthropic_version="2024-01-01",
    )
    compactor.compact_with_record(synthetic_history("SESSION-MARKER-a", FULL_ROUNDS), "s")
    compactor.close()
    sent = fake.requests[0]
    assert sent.headers["x-api-key"] == "sk-ant-shape-0123456789"
    assert sent.headers["anthropic-version"] == "2024-01-01"
    assert "authorization" not in sent.headers
    body = sent.body
    assert body["model"] == "claude-x" and body["max_tokens"] == 4096 and body["temperature"] == 0.0
    assert "## User Intent" in body["system"]
    assert [m["role"] for m in body["messages"]] == ["user"]
    assert "SESSION-MARKER-a" in body["messages"][0]["content"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cache_friendly_request_repeats_the_agents_view_and_reads_the_cache(fake, tmp_path, protocol):
    """The agent sends its view to the provider; the next turn's summary request starts with
    that same view, so the provider serves it from its prompt cache, and the record says so."""
    fake.cache_min_tokens = 200
    settings = compactor_settings(fake.base_url, protocol, tmp_path, model="m")
    compactor = ProgressiveCompactor("classic", summary_requests="cache-friendly", **settings)
    history = synthetic_history("SESSION-MARKER-c", 12)
    view, first = compactor.compact_with_record(history, "s")
    assert first.tier is CompactionTier.NONE
    if protocol == "openai":  # the agent's own call
        agent_body: dict[str, Any] = {"model": "m", "messages": view}
    else:
        system, messages = to_anthropic(view)
        agent_body = {"model": "m", "system": system, "messages": messages, "max_tokens": 100}
    httpx.post(fake.base_url + PATHS[protocol].removeprefix("/v1"), json=agent_body).raise_for_status()
    add_rounds(history, range(100, 106))
    _, record = compactor.compact_with_record(history, "s")
    compactor.close()

    assert record.tier >= CompactionTier.SOFT and record.errors == () and record.summarizer_calls == 1
    sent = fake.requests[-1]
    body_messages = sent.body["messages"]
    if protocol == "openai":
        assert body_messages[: len(view)] == view  # the view first, as the agent sent it
        assert len(body_messages) == len(history) + 1
    else:
        assert sent.body["system"] == agent_body["system"]
        assert body_messages[: len(agent_body["messages"]) - 1] == agent_body["messages"][:-1]
    instruction = body_messages[-1]
    assert instruction["role"] == "user"
    text = json.dumps(instruction["content"])
    assert "oldest messages of the conversation above" in text and "## Tried Solutions" in text
    assert sent.cached > 0 and sent.usage is not None
    assert record.summarizer_tokens_in_cached == sent.cached
    assert record.summarizer_tokens_in == sent.usage[0]  # cached tokens are input too


def test_a_cache_friendly_openai_request_sends_no_blocks_kept_for_anthropic(fake, tmp_path):
    from progressive_compactor.http import Prompt
    from progressive_compactor.messages import ANTHROPIC_KEY

    compactor = ProgressiveCompactor("classic", **compactor_settings(fake.base_url, "openai", tmp_path))
    plugin = compactor.pm.get_plugin("summarize-openai")
    carried = {"role": "assistant", "content": "ok", ANTHROPIC_KEY: {"blocks": [[0, {"type": "thinking"}]]}}
    body = plugin.build_body(Prompt(system="", user="summarize"), [{"role": "user", "content": "go"}, carried])
    compactor.close()
    assert body["messages"] == [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "ok"},
        {"role": "user", "content": "summarize"},
    ]


def test_a_cache_friendly_openai_request_sends_parts_as_chat_completions_takes_them(fake, tmp_path):
    """The parts the agent sent stay as they were (the provider's cache reads them); a part Chat
    Completions has no type for in that role (an integration's image placeholder, an image in a
    tool result, a framework's block) goes as text."""
    from progressive_compactor.http import Prompt

    compactor = ProgressiveCompactor("classic", **compactor_settings(fake.base_url, "openai", tmp_path))
    plugin = compactor.pm.get_plugin("summarize-openai")
    image = {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}}
    asked = {"role": "user", "content": [{"type": "text", "text": "what is this?"}, image]}
    placeholder = {"role": "user", "content": [{"type": "text", "text": "and this"}, {"type": "image"}]}
    shot = {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "page"}, image]}
    thought = {"role": "assistant", "content": [{"type": "reasoning", "summary": []}, {"type": "file"}]}
    body = plugin.build_body(Prompt(system="", user="summarize"), [asked, placeholder, shot, thought])
    compactor.close()
    assert body["messages"][0] == asked
    assert body["messages"][1]["content"] == [{"type": "text", "text": "and this"}, {"type": "text", "text": "[image]"}]
    assert body["messages"][2]["content"] == [{"type": "text", "text": "page"}, {"type": "text", "text": "[image]"}]
    assert body["messages"][3]["content"] == [{"type": "text", "text": "[file]"}]


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_cache_friendly_request_sends_no_key_private_to_an_integration(fake, tmp_path, protocol):
    """The integrations keep the framework's own message in each dict under a private key (a
    framework object, no JSON): the view the provider got never held it, and neither may the
    summary request that repeats the view."""
    settings = compactor_settings(fake.base_url, protocol, tmp_path, model="m")
    compactor = ProgressiveCompactor("classic", summary_requests="cache-friendly", **settings)
    history = [{**m, SOURCE: object()} for m in synthetic_history("SESSION-MARKER-p", FULL_ROUNDS)]
    _, record = compactor.compact_with_record(history, "s")
    compactor.close()
    assert record.tier >= CompactionTier.SOFT and record.summarizer_calls == 1
    assert record.errors == () and not record.fallback
    assert SOURCE not in json.dumps(fake.requests[-1].body)


def test_lean_requests_do_not_send_the_view(fake, tmp_path):
    settings = compactor_settings(fake.base_url, "openai", tmp_path)
    compactor = ProgressiveCompactor("classic", **settings)
    assert compactor.config.summary_requests == "lean"
    compactor.compact_with_record(synthetic_history("SESSION-MARKER-l", FULL_ROUNDS), "s")
    compactor.close()
    assert [m["role"] for m in fake.requests[0].body["messages"]] == ["system", "user"]


@pytest.mark.parametrize("requests, mode", [("lean", "delta"), ("lean", "whole"), ("cache-friendly", "whole")])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_requests_never_send_a_registered_secret(fake, tmp_path, monkeypatch, protocol, requests, mode):
    """A password the compactor knows (here a state store's, named by dsn_env) is masked in what
    the provider is sent, as in the view's summary and the records: the request, later
    instructions, tool calls and results, the previous summary, the view of a cache-friendly one."""
    secret = "Pg-Pr0d-Passw0rd-77-registered"
    monkeypatch.setenv("APP_DSN", f"postgresql://app:{secret}@db.internal:5432/app")
    settings = compactor_settings(fake.base_url, protocol, tmp_path, model="m", mode=mode)
    settings["config"]["state-postgres"] = {"dsn_env": "APP_DSN"}
    compactor = ProgressiveCompactor("classic", summary_requests=requests, **settings)
    history = synthetic_history("SESSION-MARKER-dsn", FULL_ROUNDS)
    history[1]["content"] += f" The database password is {secret} in case you need it."
    history[2]["tool_calls"][0]["function"]["arguments"] = json.dumps({"command": f"psql --password {secret}"})
    history[3]["content"] = f"connected with {secret}\n" + history[3]["content"]
    history[4:4] = [{"role": "user", "content": f"Use {secret} for the staging database too."}]
    _, first = compactor.compact_with_record(history, "s")
    add_rounds(history, range(100, 110))
    _, second = compactor.compact_with_record(history, "s")
    compactor.close()

    assert first.errors == () and first.summarizer_calls == 1 and second.summarizer_calls == 1
    if requests == "cache-friendly":  # the second request repeats the view, which holds the secret
        assert len(fake.requests[-1].body["messages"]) > 2
    bodies = [r.raw.decode("utf-8") for r in fake.requests]
    assert all("[REDACTED]" in body for body in bodies)
    for body in bodies:
        assert secret not in body and secret[:10] not in body and secret[-10:] not in body


class Text(str):
    """A string of a type of its own, as an application's message objects may hold (a template
    engine's safe string, ``numpy.str_``): a string all the same, the compactor takes it."""


@pytest.mark.parametrize("requests", ["lean", "cache-friendly"])
def test_a_secret_in_text_of_a_string_subclass_is_masked_in_requests(fake, tmp_path, monkeypatch, requests):
    secret = "Pg-Pr0d-Passw0rd-88-subclassed"
    monkeypatch.setenv("APP_DSN", f"postgresql://app:{secret}@db.internal:5432/app")
    settings = compactor_settings(fake.base_url, "openai", tmp_path, model="m")
    settings["config"]["state-postgres"] = {"dsn_env": "APP_DSN"}
    compactor = ProgressiveCompactor("classic", summary_requests=requests, **settings)
    history = synthetic_history("SESSION-MARKER-sub", FULL_ROUNDS)
    history[1]["content"] = Text(f"{history[1]['content']} The database password is {secret}.")
    history[2]["content"] = [{"type": "text", "text": Text(f"Connecting with {secret}.")}]
    history[2]["tool_calls"][0]["function"]["arguments"] = Text(json.dumps({"command": f"psql --password {secret}"}))
    history[3]["content"] = Text(f"connected with {secret}\n" + history[3]["content"])
    _, record = compactor.compact_with_record(history, "s")
    compactor.close()

    assert record.errors == () and record.summarizer_calls == 1
    (body,) = [r.raw.decode("utf-8") for r in fake.requests]
    assert "[REDACTED]" in body
    assert secret not in body and secret[:10] not in body and secret[-10:] not in body


# --- faults -----------------------------------------------------------------------------------

FAULTS = [
    # (id, behaviours queued, requests expected, cause expected in the summarizer's failure)
    ("malformed-json", [Behaviour("malformed")], 1, "malformed JSON in the reply"),
    ("missing-fields", [Behaviour("missing")], 1, "missing field"),
    ("error-in-200", [Behaviour("error200")], 1, "the reply is an error, not a summary: upstream model unavailable"),
    ("empty-reply", [Behaviour("empty")], 1, "empty reply"),
    ("cut-off", [Behaviour("length")], 1, "reply cut off by the token limit"),
    ("refused", [Behaviour("refused")], 1, "reply refused or filtered by the provider"),
    ("oversized", [Behaviour("oversized")], 1, "reply larger than the text it replaces"),
    ("http-400", [Behaviour("status", status=400)], 1, "HTTP 400"),
    ("http-401", [Behaviour("status", status=401)], 1, "HTTP 401"),
    ("http-404", [Behaviour("status", status=404)], 1, "HTTP 404"),
    ("http-408", [Behaviour("status", status=408)] * 3, 3, "HTTP 408"),
    ("http-500", [Behaviour("status", status=500)] * 3, 3, "HTTP 500"),
    ("http-502", [Behaviour("status", status=502)] * 3, 3, "HTTP 502"),
    ("http-429", [Behaviour("status", status=429, retry_after="0")] * 3, 3, "HTTP 429"),
    ("reset", [Behaviour("reset")] * 3, 3, "connection reset"),
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("behaviours, expected_requests, cause", [f[1:] for f in FAULTS], ids=[f[0] for f in FAULTS])
def test_fault_falls_back_with_its_cause(fake, tmp_path, protocol, mode, behaviours, expected_requests, cause):
    fake.push(*behaviours)
    compactor = make(fake.base_url, protocol, tmp_path)
    view, record = run(compactor, synthetic_history("SESSION-MARKER-f", FULL_ROUNDS), "s", mode)
    compactor.close()

    assert len(fake.requests) == expected_requests
    assert record.tier is CompactionTier.EMERGENCY
    assert record.requested_tier is CompactionTier.FULL
    failure = failure_of(record)
    assert failure.startswith(f"summarizer failed: summarize-{protocol}: ")
    assert cause in failure
    if expected_requests > 1:
        assert failure.endswith(f"(gave up after {expected_requests} attempts)")
    assert_valid(view)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("kind", ["length", "refused", "oversized"])
def test_a_rejected_reply_carries_the_usage_the_provider_billed(fake, tmp_path, protocol, kind):
    fake.push(Behaviour(kind))
    compactor = make(fake.base_url, protocol, tmp_path)
    plugin = compactor.pm.get_plugin(f"summarize-{protocol}")
    with pytest.raises(SummarizerError) as raised:
        plugin.summarize(_request())
    compactor.close()
    usage = fake.requests[0].usage
    assert usage is not None and usage[0] > 0
    assert (raised.value.tokens_in, raised.value.tokens_out) == usage


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_the_record_counts_the_tokens_of_a_rejected_reply(fake, tmp_path, protocol, mode):
    fake.push(Behaviour("length"))
    compactor = make(fake.base_url, protocol, tmp_path)
    _, record = run(compactor, synthetic_history("SESSION-MARKER-u", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert "reply cut off by the token limit" in failure_of(record)
    assert record.summarizer_calls == 1
    assert (record.summarizer_tokens_in, record.summarizer_tokens_out) == fake.requests[0].usage


def test_fault_causes_are_distinct():
    """Each fault reads differently in the record: no cause is a prefix of another's text."""
    causes = [f[3] for f in FAULTS]
    for a in causes:
        assert [b for b in causes if a in b] == [a]


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "first",
    [Behaviour("reset"), Behaviour("status", status=500), Behaviour("status", status=529)],
    ids=["reset", "500", "529"],
)
def test_transient_fault_then_success(fake, tmp_path, protocol, first):
    fake.push(first)
    compactor = make(fake.base_url, protocol, tmp_path)
    view, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-t", FULL_ROUNDS), "s")
    compactor.close()
    assert len(fake.requests) == 2
    assert record.tier is CompactionTier.FULL
    assert record.errors == ()
    assert (record.summarizer_tokens_in, record.summarizer_tokens_out) == fake.requests[1].usage
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_connection_reset_mid_body_is_retried_and_says_what_happened(fake, tmp_path, caplog, protocol, mode):
    caplog.set_level(logging.INFO, logger="progressive_compactor.http")
    fake.push(Behaviour("cut"))
    compactor = make(fake.base_url, protocol, tmp_path)
    _, record = run(compactor, synthetic_history("SESSION-MARKER-cut", FULL_ROUNDS), "s", mode)
    fake.push(*[Behaviour("cut")] * 3)
    _, failed = run(compactor, synthetic_history("SESSION-MARKER-cut2", FULL_ROUNDS), "s2", mode)
    compactor.close()
    assert record.tier is CompactionTier.FULL and record.errors == ()
    assert "connection reset: " in caplog.text
    failure = failure_of(failed)
    assert failure.endswith("(gave up after 3 attempts)")
    reason = failure.partition("connection reset: ")[2].removesuffix(" (gave up after 3 attempts)")
    assert reason.strip(), f"the cause says nothing of the reset: {failure!r}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("status", [429, 503, 500, 529])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_retry_after_is_honoured(fake, tmp_path, protocol, status, mode):
    fake.push(Behaviour("status", status=status, retry_after="0.2"))
    compactor = make(fake.base_url, protocol, tmp_path)  # backoff alone would wait about 0.01 s
    view, record = run(compactor, synthetic_history("SESSION-MARKER-r", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert len(fake.requests) == 2
    assert fake.requests[1].at - fake.requests[0].at >= 0.2
    assert record.tier is CompactionTier.FULL and record.errors == ()


def test_retry_after_past_the_deadline_gives_up_at_once(fake, tmp_path):
    fake.push(Behaviour("status", status=429, retry_after="60"))
    compactor = make(fake.base_url, "anthropic", tmp_path, deadline=5.0)
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-d", FULL_ROUNDS), "s")
    compactor.close()
    assert len(fake.requests) == 1
    assert record.tier is CompactionTier.EMERGENCY
    failure = failure_of(record)
    assert "HTTP 429" in failure and "Retry-After 60s would pass the 5s deadline" in failure


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_read_timeout_is_retried_then_falls_back(fake, tmp_path, protocol, mode):
    fake.default = Behaviour("hang", delay=2.0)
    compactor = make(fake.base_url, protocol, tmp_path, max_attempts=2, timeout={"connect": 2.0, "read": 0.2})
    view, record = run(compactor, synthetic_history("SESSION-MARKER-h", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert len(fake.requests) == 2
    assert record.tier is CompactionTier.EMERGENCY
    assert failure_of(record).endswith("read timeout: no reply within 0.2s (gave up after 2 attempts)")
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
def test_connect_timeout(tmp_path, mode):
    with stalled_listener() as url:
        compactor = make(url, "openai", tmp_path, max_attempts=2, timeout={"connect": 0.2, "read": 5.0})
        view, record = run(compactor, synthetic_history("SESSION-MARKER-c", FULL_ROUNDS), "s", mode)
        compactor.close()
    assert record.tier is CompactionTier.EMERGENCY
    assert failure_of(record).endswith("connect timeout: no connection within 0.2s (gave up after 2 attempts)")
    assert_valid(view)


def test_connection_refused(tmp_path):
    with FakeProvider() as closed:
        url = closed.base_url
    compactor = make(url, "anthropic", tmp_path, max_attempts=2)
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-c", FULL_ROUNDS), "s")
    compactor.close()
    assert record.tier is CompactionTier.EMERGENCY
    failure = failure_of(record)
    assert "connection failed" in failure and failure.endswith("(gave up after 2 attempts)")


@pytest.mark.parametrize("mode", MODES)
def test_a_request_the_client_refuses_to_send_is_not_retried(fake, tmp_path, monkeypatch, mode):
    """httpx refuses a header value with a line break before anything is sent: every attempt
    would fail the same way, so the first failure is final."""
    monkeypatch.setenv("BROKEN_KEY", "sk-BROKEN-0123456789\nabcdef0123456789")
    compactor = make(fake.base_url, "openai", tmp_path, api_key_env="BROKEN_KEY", max_attempts=4)
    view, record = run(compactor, synthetic_history("SESSION-MARKER-b", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert fake.requests == []
    failure = failure_of(record)
    assert "the HTTP client refused to send the request (LocalProtocolError" in failure
    assert "attempt" not in failure  # not "gave up after 4 attempts"
    assert "sk-BROKEN" not in failure and "abcdef0123456789" not in failure
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
def test_deadline_cuts_a_hanging_attempt(fake, tmp_path, mode):
    fake.default = Behaviour("hang", delay=3.0)
    compactor = make(fake.base_url, "openai", tmp_path, deadline=0.3, timeout={"connect": 2.0, "read": 10.0})
    _, record = run(compactor, synthetic_history("SESSION-MARKER-d", FULL_ROUNDS), "s", mode)
    compactor.close()
    assert len(fake.requests) == 1
    # the read timeout and the attempt's limit are both cut to the deadline: either ends the wait
    assert re.search(r"deadline of 0.3s passed while waiting \((read|reply) timeout", failure_of(record))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_deadline_cuts_a_trickling_reply(fake, tmp_path, protocol, mode):
    """A reply that sends a byte every 0.25 s never trips the read timeout (it limits each read
    of the socket, not the whole reply); the attempt still ends when the deadline passes."""
    fake.default = Behaviour("trickle", delay=20.0)
    compactor = make(fake.base_url, protocol, tmp_path, deadline=2.0, timeout={"connect": 1.0, "read": 1.5})
    started = time.monotonic()
    view, record = run(compactor, synthetic_history("SESSION-MARKER-d", FULL_ROUNDS), "s", mode)
    elapsed = time.monotonic() - started
    compactor.close()
    assert elapsed < 6.0  # the server would trickle for 20 s
    assert len(fake.requests) == 1
    assert "deadline of 2s passed while waiting (reply timeout" in failure_of(record)
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
def test_a_trickling_reply_times_out_and_is_retried(fake, tmp_path, mode):
    """An attempt may take the connect and the read timeout together, then it is retried."""
    fake.default = Behaviour("trickle", delay=20.0)
    compactor = make(fake.base_url, "openai", tmp_path, max_attempts=2, timeout={"connect": 0.5, "read": 1.0})
    started = time.monotonic()
    view, record = run(compactor, synthetic_history("SESSION-MARKER-t", FULL_ROUNDS), "s", mode)
    elapsed = time.monotonic() - started
    compactor.close()
    assert elapsed < 10.0
    assert len(fake.requests) == 2
    assert failure_of(record).endswith("reply timeout: no complete reply within 1.5s (gave up after 2 attempts)")
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
def test_interim_responses_that_hold_the_headers_back_time_the_attempt_out(fake, tmp_path, mode):
    """A gateway that keeps the connection alive with ``102 Processing`` while its upstream works:
    every read of the socket gets something and the reply's headers never come, so only the
    attempt's own limit (connect + read) ends it."""
    fake.default = Behaviour("processing", delay=30.0, interval=0.2)
    compactor = make(fake.base_url, "openai", tmp_path, max_attempts=2, timeout={"connect": 0.5, "read": 1.0})
    started = time.monotonic()
    view, record = run(compactor, synthetic_history("SESSION-MARKER-p", FULL_ROUNDS), "s", mode)
    elapsed = time.monotonic() - started
    compactor.close()
    assert elapsed < 6.0, f"the turn took {elapsed:.1f} s"  # the server would hold each attempt 30 s
    assert len(fake.requests) == 2
    assert failure_of(record).endswith("reply timeout: no complete reply within 1.5s (gave up after 2 attempts)")
    assert_valid(view)


def test_soft_tier_summarizes_half_the_head(fake, tmp_path):
    compactor = make(fake.base_url, "openai", tmp_path)
    view, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-s", SOFT_ROUNDS), "s")
    compactor.close()
    assert record.tier is CompactionTier.SOFT and record.errors == ()
    assert 0 < record.summarized < 2 * SOFT_ROUNDS
    assert record.summarizer_tokens_in == fake.requests[0].usage[0]
    assert_valid(view)


# --- the prompt -------------------------------------------------------------------------------


def test_incremental_update_sends_previous_summary_and_only_new_messages(fake, tmp_path):
    compactor = make(fake.base_url, "openai", tmp_path, mode="whole")
    history = synthetic_history("SESSION-MARKER-i", FULL_ROUNDS)
    _, first = compactor.compact_with_record(history, "s")
    assert first.tier is CompactionTier.FULL
    add_rounds(history, range(100, 112))
    _, second = compactor.compact_with_record(history, "s")
    compactor.close()
    assert second.summarizer_calls == 1 and len(fake.requests) == 2
    user = fake.requests[1].body["messages"][1]["content"]
    previous = user.split("<previous_summary>")[1].split("</previous_summary>")[0]
    assert "The agent worked on the parser for SESSION-MARKER-i" in previous
    assert "## Tried Solutions" in previous
    new = user.split("<new_messages")[1]
    assert "make step100" in new
    assert 'pytest tests/test_parser.py -k case_0"' not in new  # covered by the first summary


@pytest.mark.parametrize("mode", ["delta", "whole"])
def test_a_later_instruction_stays_though_the_summaries_leave_it_out(fake, tmp_path, mode):
    """The provider's summaries (``summary_text``) never mention the user's later instruction: the
    core keeps it in the intent all the same, through a second compaction that merges another summary."""
    instruction = "Also keep the old tokenize() signature working; do not rename it."
    history = synthetic_history("SESSION-MARKER-l", FULL_ROUNDS)
    history.insert(8, {"role": "user", "content": instruction})
    compactor = make(fake.base_url, "openai", tmp_path, mode=mode)
    view, first = compactor.compact_with_record(history, "s")
    assert first.tier is CompactionTier.FULL and first.errors == ()
    assert f"- Later instruction: {instruction}" in compaction_message(view)["content"]
    sent = fake.requests[0].body["messages"][1]["content"]
    assert f"Later instructions from the user: {instruction}" in sent  # the summarizer saw it as a fact
    add_rounds(history, range(100, 112))
    view, second = compactor.compact_with_record(history, "s")
    compactor.close()
    assert second.summarizer_calls == 1 and second.errors == () and len(fake.requests) == 2
    assert compaction_message(view)["content"].count(f"- Later instruction: {instruction}") == 1
    assert all(m.get("content") != instruction for m in view)  # compacted: the summary is all that holds it


def test_delta_request_is_lean(fake, tmp_path):
    """The default (delta) request: no previous summary, the user's request once and cut to
    twice the message length, messages cut to max_message_chars, tool results shorter."""
    history = synthetic_history("SESSION-MARKER-d", FULL_ROUNDS)
    history[1] = {**history[1], "content": history[1]["content"] + " Details: " + "context " * 400}
    history[3] = {**history[3], "content": "RESULT-HEAD " + "r" * 3000 + " RESULT-TAIL"}
    compactor = make(
        fake.base_url, "openai", tmp_path, context_window=4000, max_message_chars=500, max_result_chars=400
    )
    _, record = compactor.compact_with_record(history, "s")
    compactor.close()
    assert record.summarizer_calls == 1
    system, user = (m["content"] for m in fake.requests[0].body["messages"])
    assert "<previous_summary>" not in user and "only what the new messages add" in system
    request = user.split("<user_request>")[1].split("</user_request>")[0]
    assert request.strip().startswith("Please fix the parser bug for SESSION-MARKER-d")
    assert "characters omitted" in request and len(request) < 1100
    assert user.count("Please fix the parser bug") == 1  # not repeated among the messages
    assert "[1] user:\n(the user's request, shown above)" in user
    assert "RESULT-HEAD" in user and "RESULT-TAIL" in user and "r" * 350 not in user


def test_large_tool_results_are_sent_as_placeholders(fake, tmp_path):
    history = synthetic_history("SESSION-MARKER-p", FULL_ROUNDS)
    big = "\n".join(f"BIGLINE-{i:04d} " + "x" * 30 for i in range(150))
    history[5] = {**history[5], "content": big}  # the result of the second tool call
    compactor = make(fake.base_url, "openai", tmp_path, context_window=4000)
    _, record = compactor.compact_with_record(history, "s")
    compactor.close()
    assert record.tier >= CompactionTier.SOFT and record.errors == ()
    assert len(record.offloaded) == 1
    sent = fake.requests[0].body["messages"][1]["content"]
    assert "[Tool result offloaded" in sent and record.offloaded[0].handle in sent
    assert "BIGLINE-0001" in sent  # the preview
    assert "BIGLINE-0120" not in sent


def _request(**changes: Any) -> SummaryRequest:
    values = dict(
        messages=(
            Message("user", "Rename the module foo to bar and keep the tests green."),
            Message("tool", "E" * 50_000, tool_call_id="call_9", name="bash"),
        ),
        previous_summary="Earlier the agent read README.md.",
        previous_anchors=(),
        facts=Facts(
            user_request="Rename the module foo to bar and keep the tests green.",
            files_edited=("src/bar.py",),
            failed_commands=("pytest -> ImportError: foo",),
        ),
        session_id="s9",
        tier=CompactionTier.FULL,
        max_summary_tokens=4000,
        replaced_tokens=12_000,
    )
    values.update(changes)
    return SummaryRequest(**values)


def test_prompt_asks_for_the_anchor_format_and_the_facts():
    prompt = build_prompt(_request(), max_message_chars=1000)
    headings = [line for line in prompt.system.splitlines() if line.startswith("## ")]
    assert headings == [
        "## User Intent",
        "## Execution Progress",
        "## Key Decisions",
        "## Tried Solutions",
        "## Next Steps",
        "## Summary",
    ]
    assert "verbatim" in prompt.system and "why it failed" in prompt.system
    assert "Rename the module foo to bar and keep the tests green." in prompt.user
    assert "src/bar.py" in prompt.user and "pytest -> ImportError: foo" in prompt.user
    assert "Earlier the agent read README.md." in prompt.user
    assert "[2] tool result of call_9 (bash)" in prompt.user
    assert len(prompt.user) < 4000  # the 50 000-character result is bounded
    # what the prompt asks for is what the core reads
    assert parse_markdown("\n".join(h + "\nx" for h in headings)).missing == ()


def test_a_delta_prompt_shows_every_fact_the_core_adds_and_asks_not_to_copy_them():
    facts = Facts(
        user_request="Rename the module foo to bar and keep the tests green.",
        files_edited=("src/bar.py",),
        failed_commands=("pytest -> ImportError: foo",),
        decisions=("I will keep a shim module named foo.",),
        next_step="Next, I will run the tests.",
        instructions=("Keep the old import path working.",),
    )
    delta = build_prompt(_request(facts=facts), delta=True)
    assert "Never copy the facts" in delta.system and "do not copy them" in delta.user
    assert "original request" not in delta.user  # shown once, in <user_request>
    facts_shown = ("src/bar.py", "pytest -> ImportError: foo", "I will keep a shim module named foo.", "Next, I will")
    for fact in (*facts_shown, "Later instructions from the user: Keep the old import path working."):
        assert fact in delta.user
    whole = build_prompt(_request(facts=facts))  # a whole summary keeps the facts, as it always did
    assert "keep every one of them" in whole.user and "Decisions stated" not in whole.user
    assert "Later instructions from the user: Keep the old import path working." in whole.user


def test_prompt_says_first_summary_when_there_is_none():
    prompt = build_prompt(_request(previous_summary=None))
    assert "None: this is the first summary" in prompt.user


def test_custom_prompt_template_from_file(fake, tmp_path):
    template = tmp_path / "prompt.txt"
    template.write_text(
        "CUSTOM-SYSTEM for $session_id; stay under $target_words words, costs $$0.\n"
        "=== user ===\nCUSTOM-USER $message_count messages:\n$messages\nRequest: $user_request\n"
    )
    compactor = make(fake.base_url, "anthropic", tmp_path, prompt_template=str(template))
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-tpl", FULL_ROUNDS), "tpl")
    compactor.close()
    body = fake.requests[0].body
    assert body["system"].startswith("CUSTOM-SYSTEM for tpl; stay under ")
    assert "costs $0." in body["system"]
    assert body["messages"][0]["content"].startswith("CUSTOM-USER ")
    assert "SESSION-MARKER-tpl" in body["messages"][0]["content"]
    assert record.errors == ()


@pytest.mark.parametrize("mode", ["delta", "whole"])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_custom_prompt_template_in_a_cache_friendly_request(fake, tmp_path, protocol, mode):
    template = tmp_path / "prompt.txt"
    template.write_text("CUSTOM-SYSTEM for $session_id.\n=== user ===\nCUSTOM-USER: $messages\n")
    settings = compactor_settings(fake.base_url, protocol, tmp_path, prompt_template=str(template), mode=mode)
    compactor = ProgressiveCompactor("default", summary_requests="cache-friendly", **settings)
    compactor.compact_with_record(synthetic_history("SESSION-MARKER-tpl", FULL_ROUNDS), "tpl")
    compactor.close()
    instruction = json.dumps(fake.requests[0].body["messages"][-1]["content"])
    assert "CUSTOM-SYSTEM for tpl." in instruction
    assert "CUSTOM-USER: (not repeated here: they are the " in instruction
    assert "## User Intent" not in instruction  # the built-in template is not sent


def test_system_only_template_keeps_the_default_user_part(tmp_path):
    template = tmp_path / "system.txt"
    template.write_text("Summarize tersely.")
    loaded = load_template(str(template))
    prompt = build_prompt(_request(), loaded)
    assert prompt.system == "Summarize tersely."
    assert "<new_messages" in prompt.user


@pytest.mark.parametrize(
    "text, problem",
    [
        ("Use $nope here.\n=== user ===\n$messages", "unknown placeholder(s) $nope"),
        ("Just this.\n=== user ===\nNo messages at all.", "never uses $messages"),
        ("Costs $5.", "starts no placeholder"),
    ],
    ids=["unknown", "no-messages", "stray-dollar"],
)
def test_bad_prompt_template_is_a_config_error(fake, tmp_path, text, problem):
    template = tmp_path / "bad.txt"
    template.write_text(text)
    with pytest.raises(ConfigError) as info:
        make(fake.base_url, "openai", tmp_path, prompt_template=str(template))
    assert problem in str(info.value)
    assert "@ $.config.summarize-openai.prompt_template" in str(info.value)


def test_missing_prompt_template_file(fake, tmp_path):
    with pytest.raises(ConfigError, match="cannot read prompt template .*nowhere.txt"):
        make(fake.base_url, "openai", tmp_path, prompt_template=str(tmp_path / "nowhere.txt"))


def test_every_placeholder_is_documented_and_usable():
    from progressive_compactor.http.prompt import PromptTemplate, check_template

    text = " ".join(f"${name}" for name in PLACEHOLDERS)
    check_template(PromptTemplate(text, text))
    rendered = build_prompt(_request(), PromptTemplate(text, text))
    assert "$" not in rendered.system.replace("$0", "")


# --- config and keys --------------------------------------------------------------------------


def test_missing_api_key_names_the_variable(fake, tmp_path, monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ConfigError) as info:
        make(fake.base_url, "anthropic", tmp_path, api_key_env="NO_SUCH_KEY_VAR")
    assert "NO_SUCH_KEY_VAR" in str(info.value)
    assert "@ $.config.summarize-anthropic.api_key_env" in str(info.value)


def test_key_removed_after_start_fails_the_call_with_a_clear_cause(fake, tmp_path, monkeypatch):
    monkeypatch.setenv("ROTATING_KEY", "sk-rotating-0123456789")
    compactor = make(fake.base_url, "openai", tmp_path, api_key_env="ROTATING_KEY")
    monkeypatch.delenv("ROTATING_KEY")
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-k", FULL_ROUNDS), "s")
    compactor.close()
    assert fake.requests == []
    assert "environment variable ROTATING_KEY (api_key_env) is not set" in failure_of(record)


@pytest.mark.parametrize(
    "block, problem",
    [
        (
            {"base_url": "localhost:8080/v1"},
            "base_url must start with http:// or https://, got 'localhost:8080/v1' @ $.config.summarize-openai.base_url",
        ),
        ({"max_attempts": 0}, "max_attempts must be 1 or more @ $.config.summarize-openai.max_attempts"),
        ({"timeout": {"connect": 0.0, "read": 1.0}}, "timeout.connect must be positive"),
        ({"timeout": {"connect": "fast"}}, "@ $.config.summarize-openai.timeout.connect"),
        ({"timeout": 30}, "expected a mapping, got int 30 @ $.config.summarize-openai.timeout"),
        (
            {"api_key": "sk-inline"},
            ("unknown setting 'api_key'; did you mean 'api_key_env'? (settings: ", "@ $.config.summarize-openai"),
        ),
        (
            {"extra_body": {"stream": True}},
            "extra_body.stream: the summarizer reads one JSON reply, not a stream; remove stream "
            "@ $.config.summarize-openai.extra_body.stream",
        ),
        (
            {"max_tokens_field": ""},
            "max_tokens_field must name the body's output limit (max_tokens, or max_completion_tokens for newer "
            "OpenAI models) @ $.config.summarize-openai.max_tokens_field",
        ),
    ],
    ids=["scheme", "attempts", "timeout", "timeout-type", "timeout-number", "inline-key", "stream", "no-limit-field"],
)
def test_config_problems_name_the_field(tmp_path, block, problem):
    block = dict(block)
    with pytest.raises(ConfigError) as info:
        make(block.pop("base_url", "http://127.0.0.1:9/v1"), "openai", tmp_path, **block)
    parts = (problem,) if isinstance(problem, str) else problem
    assert any(all(part in line for part in parts) for line in info.value.problems), info.value.problems


def test_api_key_never_leaks(fake, tmp_path, monkeypatch, caplog):
    key = "sk-LEAKCHECK-7f3a9c1e5b2d4680"
    monkeypatch.setenv("LEAK_TEST_KEY", key)
    caplog.set_level(logging.DEBUG)
    history = synthetic_history("SESSION-MARKER-leak", FULL_ROUNDS)
    # the agent printed its environment: a large tool result that will be offloaded to a file
    history[5] = {**history[5], "content": f"LEAK_TEST_KEY={key}\n" + "PATH=/usr/bin\n" * 400}
    compactor = make(
        fake.base_url, "openai", tmp_path, context_window=4000, api_key_env="LEAK_TEST_KEY", max_attempts=2
    )
    # a retried 500 (logged) then a final 401, both quoting the key back, as some providers do
    fake.push(Behaviour("status", status=500, echo_key=True), Behaviour("status", status=401, echo_key=True))
    _, failed = compactor.compact_with_record(history, "fails")
    _, succeeded = compactor.compact_with_record(history, "works")
    plugin = compactor.pm.get_plugin("summarize-openai")
    fake.push(Behaviour("status", status=400, echo_key=True))
    with pytest.raises(SummarizerError) as raised:
        plugin.summarize(_request())
    compactor.close()

    # the key did reach the server (so the checks below could fail), and came back in errors
    assert fake.requests[0].headers["authorization"] == f"Bearer {key}"
    assert failed.tier is CompactionTier.EMERGENCY and "HTTP 401" in failure_of(failed)
    assert "[REDACTED]" in failure_of(failed)
    assert "HTTP 500" in caplog.text and "retrying" in caplog.text and "[REDACTED]" in caplog.text
    assert raised.value.__context__ is None and raised.value.__cause__ is None
    assert succeeded.errors == () and succeeded.offloaded
    texts = {
        "exception": f"{raised.value} {raised.value.cause} {raised.value!r}",
        "log": caplog.text,
        "repr": repr(plugin) + repr(plugin.config) + repr(compactor.config),
        "records": repr(failed) + repr(succeeded),
    }
    from progressive_compactor.config import config_to_dict

    texts["config"] = json.dumps(config_to_dict(compactor.config))
    for path in tmp_path.rglob("*"):
        if path.is_file():
            texts[str(path)] = path.read_text("utf-8", "replace")
    assert any("records" in name for name in texts) and any("tool_results" in name for name in texts)
    for where, text in texts.items():
        assert key not in text, f"the API key leaked into {where}"
    offloaded = Path(succeeded.offloaded[0].path).read_text()
    assert "LEAK_TEST_KEY=[REDACTED]" in offloaded


@pytest.mark.parametrize("header, value", [("authorization", "Bearer {key}"), ("x-api-key", "{key}")])
def test_a_key_given_in_extra_headers_never_leaks(fake, tmp_path, caplog, header, value):
    # no api_key_env: the key reaches the provider only through extra_headers (a proxy, Azure)
    key = "proxy-HEADERKEY-7f3a9c1e5b2d4680"
    caplog.set_level(logging.DEBUG)
    compactor = make(
        fake.base_url,
        "openai",
        tmp_path,
        max_attempts=2,
        extra_headers={header: value.format(key=key)},
    )
    fake.push(Behaviour("status", status=500, echo_key=True), Behaviour("status", status=401, echo_key=True))
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-header", FULL_ROUNDS), "s1")
    compactor.close()

    assert fake.requests[0].headers[header] == value.format(key=key)  # sent as configured
    assert "HTTP 401" in failure_of(record) and "[REDACTED]" in failure_of(record)
    assert "retrying" in caplog.text and "[REDACTED]" in caplog.text
    written = {str(p): p.read_text("utf-8") for p in tmp_path.rglob("*") if p.is_file()}
    assert any("records" in name for name in written)
    for where, text in {**written, "log": caplog.text, "record": repr(record)}.items():
        assert key not in text, f"the key leaked into {where}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_password_in_base_url_never_leaks(fake, tmp_path, caplog, protocol, mode):
    # a proxy behind basic auth, its credentials written in the URL: sent, and shown nowhere
    password = "PROXY-pw-7f3a9c1e5b2d"
    caplog.set_level(logging.DEBUG)  # httpx logs every request's URL at INFO
    url = fake.base_url.replace("http://", f"http://agent:{password}@")
    compactor = make(url, protocol, tmp_path)
    _, record = run(compactor, synthetic_history("SESSION-MARKER-userinfo", FULL_ROUNDS), "s", mode)
    plugin = compactor.pm.get_plugin(f"summarize-{protocol}")
    compactor.close()

    assert record.tier is CompactionTier.FULL and record.errors == ()
    sent = fake.requests[0]
    expected = "Basic " + base64.b64encode(f"agent:{password}".encode()).decode()
    assert [v for k, v in sent.header_lines if k.lower() == "authorization"] == [expected]
    assert "HTTP Request: POST" in caplog.text  # the URL was logged (without its password)
    for where, text in {"log": caplog.text, "repr": repr(plugin), "record": repr(record)}.items():
        assert password not in text, f"the URL's password leaked into {where}"


@pytest.mark.parametrize(
    "base_url",
    ["ftp://agent:PROXY-pw-7f3a9c1e5b2d@proxy.example/v1", "agent:PROXY-pw-7f3a9c1e5b2d@proxy.example:8080/v1"],
    ids=["another-scheme", "no-scheme"],
)
def test_a_bad_base_url_is_reported_without_its_password(tmp_path, base_url):
    with pytest.raises(ConfigError) as info:
        make(base_url, "openai", tmp_path)
    assert "PROXY-pw-7f3a9c1e5b2d" not in str(info.value) and "agent:***@proxy.example" in str(info.value)
    assert "base_url must start with http:// or https://" in str(info.value)
    assert "@ $.config.summarize-openai.base_url" in str(info.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize(
    "pasted",
    ["sk-proj-Zq3x9T0kLm2Nb7Vc4Xr1Ws8Ye5Ua6Io", "AIzaSyD4f7Gh2Jk9Lm3Np6Qr8St1Uv5Wx0YzAbC"],
    ids=["key", "google"],
)
def test_a_key_pasted_into_api_key_env_is_never_quoted(tmp_path, protocol, pasted):
    """``api_key_env`` names a variable; a user who pastes the key itself there gets an error that
    says so, naming the setting, never the key (a Google key is a valid variable name: it is
    masked in the message that says the variable is not set)."""
    with pytest.raises(ConfigError) as info:
        make("http://127.0.0.1:9", protocol, tmp_path, api_key_env=pasted)
    assert pasted not in str(info.value)
    assert f"@ $.config.summarize-{protocol}.api_key_env" in str(info.value)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_query_in_base_url_stays_after_the_path(fake, tmp_path, protocol):
    # Azure OpenAI's api-version, a gateway's routing parameter
    compactor = make(fake.base_url + "/?api-version=2024-06-01", protocol, tmp_path)
    _, record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-query", FULL_ROUNDS), "s")
    compactor.close()
    assert fake.requests[0].path == PATHS[protocol] + "?api-version=2024-06-01"
    assert record.errors == ()


@pytest.mark.parametrize(
    "protocol, header, value",
    [
        ("openai", "Authorization", "Bearer proxy-key-0123456789"),
        ("anthropic", "X-Api-Key", "proxy-key-0123456789"),
        ("anthropic", "Anthropic-Version", "2099-01-01"),
    ],
)
def test_extra_headers_replace_the_plugins_own_whatever_their_case(
    fake, tmp_path, monkeypatch, protocol, header, value
):
    monkeypatch.setenv("CASE_TEST_KEY", "sk-from-the-environment-0123")
    compactor = make(fake.base_url, protocol, tmp_path, api_key_env="CASE_TEST_KEY", extra_headers={header: value})
    compactor.compact_with_record(synthetic_history("SESSION-MARKER-case", FULL_ROUNDS), "s")
    compactor.close()
    sent = [v for k, v in fake.requests[0].header_lines if k.lower() == header.lower()]
    assert sent == [value]


@pytest.mark.parametrize("mode", MODES)
def test_an_anthropic_reply_cut_off_by_a_full_context_window_is_not_used(fake, tmp_path, mode):
    fake.push(Behaviour("window"))
    compactor = make(fake.base_url, "anthropic", tmp_path)
    view, record = run(compactor, synthetic_history("SESSION-MARKER-window", FULL_ROUNDS), "s", mode)
    compactor.close()
    failure = failure_of(record)
    assert "reply cut off" in failure and "'model_context_window_exceeded'" in failure
    assert "raise max_output_tokens" not in failure  # more output room would not help
    assert (record.summarizer_tokens_in, record.summarizer_tokens_out) == fake.requests[0].usage
    assert_valid(view)


@pytest.mark.parametrize("mode", MODES)
def test_an_openai_refusal_is_reported_as_one(fake, tmp_path, mode):
    fake.push(Behaviour("declined"))
    compactor = make(fake.base_url, "openai", tmp_path)
    view, record = run(compactor, synthetic_history("SESSION-MARKER-refusal", FULL_ROUNDS), "s", mode)
    compactor.close()
    failure = failure_of(record)
    assert "reply refused or filtered by the provider" in failure
    assert "I'm sorry, I can't help with that." in failure
    assert_valid(view)


def test_config_show_does_not_print_the_key(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from progressive_compactor.cli.app import cli

    key = "sk-SHOWCHECK-0123456789abcdef"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    result = CliRunner().invoke(cli, ["config", "show", "openai"])
    if result.exit_code == 2 and "No such command" in result.output:
        pytest.skip("the CLI has no `config show` command")
    assert result.exit_code == 0, result.output
    assert "OPENAI_API_KEY" in result.output
    assert key not in result.output


# --- clients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_sync_client_is_reused_and_closed(fake, tmp_path, protocol):
    with make(fake.base_url, protocol, tmp_path) as compactor:
        for sid in ("a", "b", "c"):
            _, record = compactor.compact_with_record(synthetic_history(f"SESSION-MARKER-{sid}", FULL_ROUNDS), sid)
            assert record.errors == ()
        plugin = compactor.pm.get_plugin(f"summarize-{protocol}")
        sender = plugin._sync
        assert sender is not None
    assert len(fake.requests) == 3
    assert len({r.client_port for r in fake.requests}) == 1  # one pooled connection
    assert plugin._sync is None and sender.client.is_closed and not sender._thread.is_alive()


def test_sync_turns_of_many_threads_share_one_client_and_run_at_once(fake, tmp_path):
    import threading

    fake.default = Behaviour(delay=0.3)  # hold each reply so that the requests overlap
    results: dict[str, CompactionRecord] = {}
    with make(fake.base_url, "openai", tmp_path) as compactor:

        def serve(sid: str) -> None:
            results[sid] = compactor.compact_with_record(synthetic_history(f"SESSION-MARKER-{sid}", FULL_ROUNDS), sid)[
                1
            ]

        threads = [threading.Thread(target=serve, args=(f"t{n}",)) for n in range(8)]
        started = time.monotonic()
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        elapsed = time.monotonic() - started
    assert sorted(results) == [f"t{n}" for n in range(8)]
    for sid, record in results.items():
        assert record.errors == () and f"SESSION-MARKER-{sid}" in record.summary_text
    assert fake.peak_in_flight > 1 and elapsed < 8 * 0.3


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_forked_worker_summarizes_through_a_client_of_its_own(fake, tmp_path):
    """The sync API's requests run on a thread of the plugin's, which does not run in a forked
    child: the child makes its own, and its turn is summarized."""
    import signal

    with make(fake.base_url, "anthropic", tmp_path) as compactor:
        assert compactor.compact_with_record(synthetic_history("SESSION-MARKER-p", FULL_ROUNDS), "p")[1].errors == ()
        pid = os.fork()
        if pid == 0:  # the child: exit status 0 when its turn was summarized
            code = 2
            try:
                signal.alarm(20)
                record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-c", FULL_ROUNDS), "c")[1]
                code = 0 if record.errors == () and record.tier is CompactionTier.FULL else 1
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(fake.requests) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
def test_a_worker_forked_while_a_thread_makes_a_client_summarizes(fake, tmp_path):
    """Forked while another thread makes the plugin's client (holding its lock while httpx loads
    the certificates): the child's turn is summarized."""
    with make(fake.base_url, "anthropic", tmp_path) as compactor:

        def child_turn() -> list[object]:
            record = compactor.compact_with_record(synthetic_history("SESSION-MARKER-c", FULL_ROUNDS), "c")[1]
            return [record.tier.name, list(record.errors)]

        lock = compactor.pm.get_plugin("summarize-anthropic")._lock
        assert forked_while_held(lock, child_turn) == ["FULL", []]


def test_async_client_is_reused_and_closed(fake, tmp_path):
    async def main():
        async with make(fake.base_url, "anthropic", tmp_path) as compactor:
            for sid in ("a", "b", "c"):
                _, record = await compactor.acompact_with_record(
                    synthetic_history(f"SESSION-MARKER-{sid}", FULL_ROUNDS), sid
                )
                assert record.errors == ()
            plugin = compactor.pm.get_plugin("summarize-anthropic")
            (client, _), *others = plugin._aclients.values()
            assert others == []
        return plugin, client

    plugin, client = asyncio.run(main())
    assert len({r.client_port for r in fake.requests}) == 1
    assert plugin._aclients == {} and client.is_closed


def test_async_client_follows_a_new_event_loop(fake, tmp_path):
    compactor = make(fake.base_url, "openai", tmp_path)
    for sid in ("a", "b"):  # two asyncio.run calls: two loops, without aclose in between
        _, record = asyncio.run(
            compactor.acompact_with_record(synthetic_history(f"SESSION-MARKER-{sid}", FULL_ROUNDS), sid)
        )
        assert record.errors == ()
    compactor.close()
    assert len(fake.requests) == 2


def test_async_clients_are_closed_with_their_event_loops(fake, tmp_path):
    """One asyncio.run per turn and no aclose: each loop's client is closed as the loop shuts
    down, in that loop, so no connection stays open and nothing is left for the garbage collector."""
    compactor = make(fake.base_url, "openai", tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for sid in ("a", "b", "c", "d"):
            _, record = asyncio.run(
                compactor.acompact_with_record(synthetic_history(f"SESSION-MARKER-{sid}", FULL_ROUNDS), sid)
            )
            assert record.errors == ()
        compactor.close()
        gc.collect()
    assert len({r.client_port for r in fake.requests}) == 4  # a client, and a connection, per loop
    started = time.monotonic()
    while fake.connections and time.monotonic() - started < 5.0:  # the server notices the close
        time.sleep(0.01)
    assert fake.connections == 0
    assert [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)] == []


def test_close_closes_the_async_client_of_a_loop_that_is_not_running(fake, tmp_path):
    compactor = make(fake.base_url, "anthropic", tmp_path)
    loop = asyncio.new_event_loop()
    try:
        _, record = loop.run_until_complete(
            compactor.acompact_with_record(synthetic_history("SESSION-MARKER-l", FULL_ROUNDS), "s")
        )
        assert record.errors == () and fake.connections == 1
        compactor.close()
        started = time.monotonic()
        while fake.connections and time.monotonic() - started < 5.0:
            time.sleep(0.01)
        assert fake.connections == 0
    finally:
        loop.close()


# --- the retry loop, without I/O --------------------------------------------------------------


def _response(status: int, body: bytes = b"{}", **headers: str) -> HttpResponse:
    return HttpResponse(status, "", {k.replace("_", "-"): v for k, v in headers.items()}, body)


def test_exchange_steps_without_io():
    clock = iter([0.0, 0.0, 0.0, 0.5, 0.5, 0.5]).__next__
    policy = RetryPolicy(max_attempts=3, backoff_base=1.0)
    steps = exchange(policy, Timeouts(2.0, 9.0), lambda r: r.status, clock=clock, rng=lambda: 0.0)
    assert next(steps) == Send(2.0, 9.0, 11.0)
    assert steps.send(_response(503, retry_after="1.5")) == Sleep(1.5)
    assert steps.send(None) == Send(2.0, 9.0, 11.0)
    assert steps.send(_response(500)) == Sleep(1.0)  # backoff for attempt 2, no jitter: 2 s / 2
    assert steps.send(None) == Send(2.0, 9.0, 11.0)
    with pytest.raises(StopIteration) as done:
        steps.send(_response(200))
    assert done.value.value == 200


def test_exchange_does_not_retry_client_errors():
    steps = exchange(RetryPolicy(max_attempts=5), Timeouts(), lambda r: r.status)
    next(steps)
    with pytest.raises(SummarizerError) as info:
        steps.send(_response(422, b'{"error": {"message": "bad model"}}'))
    assert info.value.status == 422 and not info.value.retryable


@pytest.mark.parametrize(
    "value, expected",
    [("3", 3.0), ("0.25", 0.25), ("-4", 0.0), ("soon", None), (None, None), ("Wed, 21 Oct 2015 07:28:00 GMT", 10.0)],
)
def test_parse_retry_after(value, expected):
    from email.utils import parsedate_to_datetime

    now = parsedate_to_datetime("Wed, 21 Oct 2015 07:27:50 GMT").timestamp()
    assert parse_retry_after(value, now=now) == expected


def test_backoff_grows_with_jitter_and_is_capped():
    policy = RetryPolicy(backoff_base=0.5, backoff_max=4.0)
    assert [backoff_delay(policy, n, rng=lambda: 0.0) for n in (1, 2, 3, 4, 5)] == [0.25, 0.5, 1.0, 2.0, 2.0]
    assert [backoff_delay(policy, n, rng=lambda: 1.0) for n in (1, 2, 3, 4, 5)] == [0.5, 1.0, 2.0, 4.0, 4.0]


def test_plugins_are_classes_with_config_and_context():
    for cls, version in ((OpenAISummarizer, None), (AnthropicSummarizer, "2023-06-01")):
        config = cls.Config(api_key_env=None)
        assert getattr(config, "anthropic_version", None) == version
        plugin = cls(config)
        assert plugin.config.model and plugin.url.startswith("https://")
