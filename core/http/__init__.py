"""Summaries from a provider over HTTP: the declared API for summarizer plugins that call one.

``summarize-openai`` and ``summarize-anthropic`` are built on it, and so can a third party's
summarizer for another protocol: subclass :class:`HttpSummarizer` and give the URL path, the
headers, the JSON body and how to read the reply; the prompt, the API key and its redaction, the
checks of every reply, retries with backoff and ``Retry-After``, and pooled sync and async clients
come with it. :func:`exchange` with :func:`run_sync` / :func:`run_async` is the retry loop alone,
for a plugin that talks HTTP some other way.

Importing this package does not import httpx; the clients are created on first use. It needs the
``[http]`` extra: ``pip install 'progressive-compactor[http]'``.
"""

from .prompt import DEFAULT_TEMPLATE, PLACEHOLDERS, Prompt, PromptTemplate, build_prompt, load_template
from .retry import HttpCall, HttpResponse, RetryPolicy, Timeouts, exchange, run_async, run_sync
from .summarizer import (
    HttpSummarizer,
    HttpSummarizerConfig,
    Reply,
    api_key_env_field,
    as_int,
    dig,
    provider_message,
    require,
)

__all__ = [
    "DEFAULT_TEMPLATE",
    "PLACEHOLDERS",
    "HttpCall",
    "HttpResponse",
    "HttpSummarizer",
    "HttpSummarizerConfig",
    "Prompt",
    "PromptTemplate",
    "Reply",
    "RetryPolicy",
    "Timeouts",
    "api_key_env_field",
    "as_int",
    "build_prompt",
    "dig",
    "exchange",
    "load_template",
    "provider_message",
    "require",
    "run_async",
    "run_sync",
]
