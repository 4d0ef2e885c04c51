"""``summarize-anthropic``: summaries from Anthropic's Messages API.

``POST {base_url}/messages`` with ``x-api-key`` and ``anthropic-version`` headers and the system
prompt as the top-level ``system`` field. The reply's text blocks are the summary,
``stop_reason == "max_tokens"`` or ``"model_context_window_exceeded"`` means it was cut off,
``"refusal"`` that the model refused (either way it is not used), and ``usage.input_tokens`` (plus cache reads
and writes) / ``usage.output_tokens`` go into the record. Transport, retries and the checks of
the reply are shared with ``summarize-openai`` (:mod:`progressive_compactor.http`).
"""

from __future__ import annotations

from typing import Any

import attrs

from progressive_compactor.http import (
    HttpSummarizer,
    HttpSummarizerConfig,
    Prompt,
    Reply,
    api_key_env_field,
    as_int,
    dig,
    require,
)
from progressive_compactor.plugin import SummarizerError, to_anthropic

CONTEXT_FULL = "model_context_window_exceeded"
"""The stop reason of a reply the model ended because its context window was full: cut off too."""


class AnthropicSummarizer(HttpSummarizer):
    plugin_name = "summarize-anthropic"
    path = "/messages"

    @attrs.frozen
    class Config(HttpSummarizerConfig):
        model: str = "claude-3-5-haiku-latest"
        base_url: str = "https://api.anthropic.com/v1"
        api_key_env: str | None = api_key_env_field("ANTHROPIC_API_KEY")
        anthropic_version: str = "2023-06-01"

    def build_headers(self, api_key: str | None) -> dict[str, str]:
        headers = {"anthropic-version": self.config.anthropic_version}
        if api_key:
            headers["x-api-key"] = api_key
        return headers

    def build_body(self, prompt: Prompt, conversation: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        system: str | None = prompt.system
        messages: list[dict[str, Any]] = [{"role": "user", "content": prompt.user}]
        if conversation is not None:  # the agent's view as it sent it, then the instruction
            system, messages = to_anthropic(conversation)
            instruction = {"type": "text", "text": prompt.user}
            if messages and messages[-1]["role"] == "user":
                messages[-1]["content"].append(instruction)
            else:
                messages.append({"role": "user", "content": [instruction]})
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            "max_tokens": self.config.max_output_tokens,
        }
        if system:
            body["system"] = system
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        return body

    def read_reply(self, data: Any) -> Reply:
        blocks = require(data, "content")
        if not isinstance(blocks, list):
            raise SummarizerError(
                f"missing field content in the reply (it is a {type(blocks).__name__}, not a list of blocks)"
            )
        text = "\n".join(
            b["text"]
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
        )
        stop = dig(data, "stop_reason")
        usage = dig(data, "usage")
        usage = usage if isinstance(usage, dict) else {}
        tokens_in = as_int(usage.get("input_tokens"))
        if tokens_in is not None:  # cached prompt tokens are input too, billed differently
            tokens_in += sum(
                as_int(usage.get(k)) or 0 for k in ("cache_read_input_tokens", "cache_creation_input_tokens")
            )
        model = dig(data, "model")
        return Reply(
            text=text,
            cut_off=stop in ("max_tokens", CONTEXT_FULL),
            refused=stop == "refusal",
            stop_reason=stop if isinstance(stop, str) else None,
            tokens_in=tokens_in,
            tokens_out=as_int(usage.get("output_tokens")),
            model=model if isinstance(model, str) else None,
            tokens_in_cached=as_int(usage.get("cache_read_input_tokens")),
        )
