"""``summarize-openai``: summaries from any endpoint that speaks OpenAI's Chat Completions.

One ``base_url`` serves OpenAI, vLLM, Ollama, llama.cpp's server, LM Studio and LiteLLM
proxies. The request is ``POST {base_url}/chat/completions`` with a system and a user message;
the reply's ``choices[0].message.content`` is the summary, ``finish_reason == "length"`` means it
was cut off, ``"content_filter"`` that it was filtered, and a ``message.refusal`` that the model refused
(in each case it is not used), and ``usage.prompt_tokens`` / ``usage.completion_tokens`` go into the record.
Transport, retries and the checks of the reply are shared with ``summarize-anthropic``
(:mod:`progressive_compactor.http`).
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
from progressive_compactor.plugin import ANTHROPIC_KEY, DOCUMENT_TYPES, IMAGE_TYPES, SummarizerError, setting_check


class OpenAISummarizer(HttpSummarizer):
    plugin_name = "summarize-openai"
    path = "/chat/completions"

    @attrs.frozen
    class Config(HttpSummarizerConfig):
        model: str = "gpt-4o-mini"
        base_url: str = "https://api.openai.com/v1"
        api_key_env: str | None = api_key_env_field("OPENAI_API_KEY")
        max_tokens_field: str = attrs.field(
            default="max_tokens",
            validator=setting_check(
                lambda v: bool(v.strip()),
                "max_tokens_field must name the body's output limit (max_tokens, or max_completion_tokens "
                "for newer OpenAI models)",
            ),
        )
        """Name of the output limit in the body; newer OpenAI models want ``max_completion_tokens``."""

    def build_headers(self, api_key: str | None) -> dict[str, str]:
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    def build_body(self, prompt: Prompt, conversation: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        messages = [{"role": "system", "content": prompt.system}, {"role": "user", "content": prompt.user}]
        if conversation is not None:  # the agent's view as it sent it, then the instruction
            messages = [*map(_sendable, conversation), {"role": "user", "content": prompt.user}]
        body: dict[str, Any] = {
            "model": self.config.model,
            "messages": messages,
            self.config.max_tokens_field: self.config.max_output_tokens,
            "stream": False,
        }
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        return body

    def read_reply(self, data: Any) -> Reply:
        content = require(data, "choices", 0, "message", "content")
        if isinstance(content, list):  # some compatible servers answer with content parts
            content = "\n".join(p["text"] for p in content if isinstance(p, dict) and isinstance(p.get("text"), str))
        if content is not None and not isinstance(content, str):
            raise SummarizerError(
                f"missing field choices[0].message.content in the reply (it is a {type(content).__name__}, not text)"
            )
        finish = dig(data, "choices", 0, "finish_reason")
        usage = dig(data, "usage")
        usage = usage if isinstance(usage, dict) else {}
        model = dig(data, "model")
        refusal = dig(data, "choices", 0, "message", "refusal")  # newer models refuse apart from content
        return Reply(
            text=content or "",
            cut_off=finish == "length",
            refused=finish == "content_filter",
            stop_reason=finish if isinstance(finish, str) else None,
            tokens_in=as_int(usage.get("prompt_tokens")),
            tokens_out=as_int(usage.get("completion_tokens")),
            model=model if isinstance(model, str) else None,
            tokens_in_cached=as_int(dig(data, "usage", "prompt_tokens_details", "cached_tokens")),
            refusal=refusal if isinstance(refusal, str) and refusal.strip() else None,
        )


_PARTS = {
    "user": {"text": "text", "image_url": "image_url", "input_audio": "input_audio", "file": "file"},
    "assistant": {"text": "text", "refusal": "refusal"},
}
"""The content parts Chat Completions takes in a message of each role (of the others, text
alone), each with the field it needs."""


def _sendable(message: dict[str, Any]) -> dict[str, Any]:
    """A view message as Chat Completions takes it: without the blocks ``from_anthropic`` keeps
    for ``to_anthropic``, and a part it has no type for (an integration's placeholder of an image,
    a framework's block) as text: ``[image]`` for an image, ``[file]`` for a file, others left out."""
    sent = {key: value for key, value in message.items() if key != ANTHROPIC_KEY}
    content = sent.get("content")
    if isinstance(content, list):
        allowed = _PARTS.get(str(sent.get("role")), {"text": "text"})
        parts = []
        for part in content:
            kind = part.get("type") if isinstance(part, dict) else None
            if kind in allowed and allowed[kind] in part:
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append({"type": "text", "text": part["text"]})
            elif kind in IMAGE_TYPES or kind in DOCUMENT_TYPES:
                parts.append({"type": "text", "text": "[image]" if kind in IMAGE_TYPES else "[file]"})
        sent["content"] = parts or ""
    return sent
