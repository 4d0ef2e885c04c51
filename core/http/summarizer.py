"""What the HTTP summarizer plugins (``summarize-openai``, ``summarize-anthropic``) share.

A plugin subclasses :class:`HttpSummarizer` and gives three pure functions: the URL path, the
headers and the JSON body of a request (:meth:`~HttpSummarizer.build_body`,
:meth:`~HttpSummarizer.build_headers`), and how to read a decoded reply
(:meth:`~HttpSummarizer.read_reply`). Everything else is here, once: the prompt, the API key, the
checks every reply goes through, the retry loop (:mod:`progressive_compactor.http.retry`), and the
transport: an ``httpx.AsyncClient``, created on first use and reused across calls (connection
pooling); ``summarize`` waits in the caller's thread for one that runs on an event loop in a
thread of the plugin's own (:class:`SyncSender`), so an attempt ends at its limit for the sync
API as for the async one. An ``AsyncClient``'s
connections belong to the event loop that opened them, so there is one per loop, closed by
``aclose()`` in that loop, or else as the loop shuts down (``asyncio.run`` does that) or by
``close()`` when the loop is no longer running.

The API key is read from the environment variable named by ``api_key_env`` and registered with
the compactor's :class:`~progressive_compactor.plugin.SecretRegistry`, which masks it in
records and offloaded files; the plugin masks it in its own error messages as well. It is never
stored in the config, so no repr or ``config show`` can print it. What a request sends of the
history (messages, the view of a cache-friendly request, the previous summary, the facts) has
the registry's secrets masked too.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import re
import threading
from typing import Any, AsyncGenerator, Callable, ClassVar, Coroutine, Mapping
from urllib.parse import unquote, urlsplit, urlunsplit

import attrs

from ..converters import setting_check
from ..errors import ConfigError, SummarizerError
from ..forks import INHERITED, reset_after_fork
from ..hookspecs import hookimpl
from ..messages import as_sent, message_to_dict
from ..models import SummaryRequest, SummaryResult
from ..plugin_manager import PluginContext
from ..redaction import PASSWORD_MASK, SecretRegistry, mask_passwords, redact_data
from .prompt import (
    CHARS_PER_TOKEN,
    MAX_MESSAGE_CHARS,
    MAX_RESULT_CHARS,
    Prompt,
    build_instruction,
    build_prompt,
    load_template,
    replaced_budget_tokens,
)
from .retry import (
    HttpCall,
    HttpResponse,
    ReplyTimeout,
    RetryPolicy,
    Send,
    Timeouts,
    as_response,
    decode_json,
    exchange,
    httpx_timeout,
    run_async,
    run_sync,
)

MISSING = object()


@attrs.frozen
class Reply:
    """What a provider answered, read from its JSON by the plugin's :meth:`read_reply`."""

    text: str
    cut_off: bool
    """The reply stopped at the output token limit."""
    refused: bool = False
    """The provider's safety system stopped the reply (a refusal, a content filter): what text
    it has is partial, or not a summary at all."""
    stop_reason: str | None = None
    tokens_in: int | None = None
    tokens_out: int | None = None
    model: str | None = None
    tokens_in_cached: int | None = None
    """Of ``tokens_in``, those the provider read from its prompt cache."""
    refusal: str | None = None
    """What the model said when it refused, where the protocol gives it apart (OpenAI's
    ``message.refusal``); makes the reply ``refused``."""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""What an environment variable's name is made of (a key pasted in its place is not)."""


def api_key_env_field(default: str | None) -> Any:
    """The ``api_key_env`` setting, with ``default``: an environment variable's name or null; a
    key pasted in its place is a config error that does not quote it."""
    return attrs.field(
        default=default,
        validator=setting_check(
            lambda v: v is None or _ENV_NAME.fullmatch(v) is not None,
            "api_key_env must name the environment variable that holds the API key (letters, digits and _, "
            "such as OPENAI_API_KEY), not hold the key itself: export the key and name its variable here",
        ),
    )


@attrs.frozen
class HttpSummarizerConfig:
    """Settings every HTTP summarizer takes; each plugin's ``Config`` sets its own defaults."""

    model: str = ""
    base_url: str = ""
    api_key_env: str | None = api_key_env_field(None)
    """Name of the environment variable holding the API key; null for an endpoint without one."""
    temperature: float | None = 0.0
    """Null leaves it out of the request (some reasoning models reject it)."""
    max_output_tokens: int = 4096
    extra_headers: dict[str, str] = attrs.field(factory=dict)
    extra_body: dict[str, Any] = attrs.field(factory=dict)
    """Merged into the JSON body as given (provider-specific options)."""
    timeout: Timeouts = Timeouts()
    max_attempts: int = 4
    backoff_base: float = 0.5
    backoff_max: float = 20.0
    deadline: float = 300.0
    mode: str = "delta"
    """``delta``: the model writes only what the new messages add, and the core merges that into
    the previous summary (anchors as a union, prose appended): shorter requests and replies.
    ``whole``: it rewrites the whole summary from the previous one and the new messages."""
    prompt_template: str | None = None
    """Path of a prompt template file (see :mod:`progressive_compactor.http.prompt`)."""
    max_message_chars: int = MAX_MESSAGE_CHARS
    """Each message is cut to this many characters in the prompt (head and tail kept)."""
    max_result_chars: int = MAX_RESULT_CHARS
    """A tool result, shorter still: its facts (files, the error line) are sent apart."""


def dig(data: Any, *path: str | int) -> Any:
    """``data[path[0]][path[1]]...``; :data:`MISSING` when any step is absent or of the wrong type."""
    for key in path:
        if isinstance(key, int):
            if not isinstance(data, list) or len(data) <= key:
                return MISSING
        elif not isinstance(data, Mapping) or key not in data:
            return MISSING
        data = data[key]
    return data


def field_name(*path: str | int) -> str:
    text = ""
    for key in path:
        text += f"[{key}]" if isinstance(key, int) else (f".{key}" if text else key)
    return text


def require(data: Any, *path: str | int) -> Any:
    value = dig(data, *path)
    if value is MISSING:
        raise SummarizerError(f"missing field {field_name(*path)} in the reply")
    return value


def as_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


_USERINFO = re.compile(r"^([^:/@\s]*):[^/@\s]+@")
"""``user:password@`` at the start of a base URL written without its scheme, where neither a URL
parser nor :func:`~progressive_compactor.redaction.mask_passwords` finds a password."""


def _shown_url(base_url: str) -> str:
    """``base_url`` as an error message may quote it: its password masked, scheme or none."""
    shown = mask_passwords(base_url)
    return shown if "://" in shown else _USERINFO.sub(rf"\1:{PASSWORD_MASK}@", shown)


def endpoint(base_url: str, path: str) -> tuple[str, str | None]:
    """The URL to post to, ``path`` added to ``base_url``'s path (its query, an Azure
    ``api-version``, stays after it), and the ``Authorization`` value of the credentials written
    in it (``user:password@``), which leave the URL: httpx logs every request's URL."""
    parts = urlsplit(base_url)
    netloc, auth = parts.netloc, None
    if "@" in netloc:
        userinfo, _, netloc = netloc.rpartition("@")
        user, _, password = userinfo.partition(":")
        auth = "Basic " + base64.b64encode(f"{unquote(user)}:{unquote(password)}".encode()).decode("ascii")
    return urlunsplit(parts._replace(netloc=netloc, path=parts.path.rstrip("/") + path)), auth


def provider_message(body: bytes) -> str:
    """The provider's own error message from an error body (OpenAI and Anthropic both nest it
    under ``error.message``), else the start of the body; one line, bounded."""
    try:
        data = json.loads(body)
    except (UnicodeDecodeError, ValueError):
        data = None
    message = dig(data, "error", "message")
    if not isinstance(message, str):
        message = dig(data, "error")
        if not isinstance(message, str):
            message = body[:200].decode("utf-8", "replace")
    return " ".join(message.split())[:300]


class SyncSender:
    """Sends the sync API's requests with an ``httpx.AsyncClient`` on an event loop in a thread of
    its own, and waits for each attempt in the caller's thread: ``asyncio.wait_for`` ends an
    attempt at its limit wherever it waits, reply headers included (a sync ``httpx.Client`` can
    only look at the clock between the chunks of a body). One per plugin and process; its
    connections are pooled, shared by the caller's threads."""

    def __init__(self, asend: Callable[[Any, HttpCall, Send], Coroutine[Any, Any, HttpResponse]]):
        import httpx

        self._asend = asend
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="progressive-compactor-http", daemon=True)
        self._thread.start()
        self.client = httpx.AsyncClient(follow_redirects=False)

    def send(self, call: HttpCall, step: Send) -> HttpResponse:
        """One attempt; :class:`ReplyTimeout` past ``step.limit`` (the loop ends it there; this
        thread stops waiting a second later whatever happens)."""
        attempt = asyncio.run_coroutine_threadsafe(self._asend(self.client, call, step), self._loop)
        try:
            return attempt.result(step.limit + 1.0)
        except concurrent.futures.TimeoutError:
            attempt.cancel()
            raise ReplyTimeout() from None

    def close(self) -> None:
        """End the attempts under way, close the client and the loop, and end the thread (a forked
        child never closes its parent's: :meth:`HttpSummarizer._forked`)."""
        if self._loop.is_closed():
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shut(), self._loop).result(5.0)
        except concurrent.futures.TimeoutError:  # the loop is stopped all the same
            pass
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5.0)
        if not self._thread.is_alive():
            self._loop.close()

    async def _shut(self) -> None:
        under_way = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
        for task in under_way:
            task.cancel()
        await asyncio.gather(*under_way, return_exceptions=True)
        await self.client.aclose()


class HttpSummarizer:
    """Base of the HTTP summarizer plugins; see the module docstring."""

    plugin_name: ClassVar[str] = "summarize-http"
    path: ClassVar[str] = ""
    Config: ClassVar[type] = HttpSummarizerConfig

    def __init__(self, config: Any = None, context: PluginContext | None = None):
        self.config = config if config is not None else self.Config()
        self.context = context or PluginContext()
        self.secrets: SecretRegistry = self.context.secrets
        where = f"$.config.{self.plugin_name}"
        self._check_config(where)
        self.template = load_template(self.config.prompt_template, f"{where}.prompt_template")
        self.policy = RetryPolicy(
            max_attempts=self.config.max_attempts,
            backoff_base=self.config.backoff_base,
            backoff_max=self.config.backoff_max,
            deadline=self.config.deadline,
        )
        self.url, self._url_auth = endpoint(self.config.base_url, self.path)
        password = urlsplit(self.config.base_url).password or ""
        self.secrets.add(password)  # masked in error messages as written and as sent
        self.secrets.add(unquote(password))
        self._sync: SyncSender | None = None
        self._aclients: dict[asyncio.AbstractEventLoop, tuple[Any, AsyncGenerator[None, None]]] = {}
        """Each event loop's ``AsyncClient``, with the generator that closes it (see
        :meth:`_async_client`)."""
        self._lock = threading.Lock()
        reset_after_fork(self, HttpSummarizer._forked)
        if self.config.api_key_env and not os.environ.get(self.config.api_key_env):
            raise ConfigError(
                [
                    f"{self.plugin_name} reads its API key from the environment variable "
                    f"{self.secrets.redact(self.config.api_key_env)}, which is not set; export it, or set api_key_env to "
                    f"null for an endpoint without a key @ {where}.api_key_env"
                ]
            )
        self._api_key()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.config.model!r}, url={self.url!r})"

    def _check_config(self, where: str) -> None:
        c = self.config
        problems = []
        scheme = urlsplit(c.base_url).scheme
        if scheme not in ("http", "https"):
            problems.append(
                f"base_url must start with http:// or https://, got {_shown_url(c.base_url)!r} @ {where}.base_url"
            )
        if not c.model:
            problems.append(f"model must name the model to call @ {where}.model")
        if c.max_attempts < 1:
            problems.append(f"max_attempts must be 1 or more @ {where}.max_attempts")
        if c.max_output_tokens < 1:
            problems.append(f"max_output_tokens must be 1 or more @ {where}.max_output_tokens")
        if c.mode not in ("whole", "delta"):
            problems.append(f"mode must be whole or delta, got {c.mode!r} @ {where}.mode")
        if c.extra_body.get("stream"):  # the reply would be server-sent events: every call would fail
            problems.append(
                f"extra_body.stream: the summarizer reads one JSON reply, not a stream; remove stream "
                f"@ {where}.extra_body.stream"
            )
        for name in ("max_message_chars", "max_result_chars"):
            if getattr(c, name) < 200:
                problems.append(f"{name} must be 200 or more @ {where}.{name}")
        for name in ("connect", "read"):
            if getattr(c.timeout, name) <= 0:
                problems.append(f"timeout.{name} must be positive (seconds) @ {where}.timeout.{name}")
        for name in ("backoff_base", "backoff_max", "deadline"):
            if getattr(c, name) < 0 or (name == "deadline" and c.deadline == 0):
                problems.append(f"{name} must be positive (seconds) @ {where}.{name}")
        if problems:
            raise ConfigError(problems)

    # --- what a plugin provides (pure) --------------------------------------------------------

    def build_headers(self, api_key: str | None) -> dict[str, str]:
        raise NotImplementedError

    def build_body(self, prompt: Prompt, conversation: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """The JSON body: ``prompt`` as a system and a user message, or, for a cache-friendly
        request, ``conversation`` (the agent's view, OpenAI chat dicts) followed by ``prompt``
        as one closing user message."""
        raise NotImplementedError

    def read_reply(self, data: Any) -> Reply:
        raise NotImplementedError

    # --- shared, pure -------------------------------------------------------------------------

    def _api_key(self) -> str | None:
        """The key, read now (so a rotated key is picked up) and registered as a secret."""
        name = self.config.api_key_env
        if not name:
            return None
        key = (os.environ.get(name) or "").strip()  # a stray newline would break the header
        if not key:
            raise SummarizerError(
                f"environment variable {self.secrets.redact(name)} (api_key_env) is not set; export the API key there"
            )
        self.secrets.add(key)
        return key

    def build_call(self, request: SummaryRequest) -> HttpCall:
        api_key = self._api_key()  # registered before the request is masked: a key in the history is too
        # the provider gets the history as the records and the view's summary have it: secrets masked
        request = redact_data(request, self.secrets.redact)
        delta = self.config.mode == "delta"
        if request.view:  # cache-friendly: the view again, then the instruction
            conversation = [as_sent(message_to_dict(m)) for m in request.view]  # as the agent sent it
            instruction = build_instruction(
                request, self.template, max_message_chars=self.config.max_message_chars, delta=delta
            )
            body = self.build_body(Prompt(system="", user=instruction), conversation)
        else:
            prompt = build_prompt(
                request,
                self.template,
                max_message_chars=self.config.max_message_chars,
                max_result_chars=self.config.max_result_chars,
                delta=delta,
            )
            body = self.build_body(prompt)
        body = {**body, **self.config.extra_body}
        headers: dict[str, str] = {}
        own = {"content-type": "application/json", "accept": "application/json", **self.build_headers(api_key)}
        if self._url_auth:  # as httpx would for credentials in the URL: they win over the key
            own["authorization"] = self._url_auth
        for name, value in [*own.items(), *self.config.extra_headers.items()]:
            # a name is one header whatever its case: extra_headers' Authorization replaces ours
            for same in [k for k in headers if k.lower() == name.lower()]:
                del headers[same]
            headers[name] = value
        return HttpCall(self.url, headers, json.dumps(body, ensure_ascii=False).encode("utf-8"))

    def parse(self, request: SummaryRequest, response: HttpResponse) -> SummaryResult:
        """Check a 2xx reply; each way it can be unusable has its own cause. A rejected reply's
        usage goes with the failure: the provider bills it all the same."""
        data = decode_json(response.body)
        if isinstance(data, dict) and isinstance(data.get("error"), dict):  # a proxy's error, sent as 200 OK
            raise SummarizerError(f"the reply is an error, not a summary: {provider_message(response.body)}")
        reply = self.read_reply(data)

        def rejected(cause: str) -> SummarizerError:
            return SummarizerError(
                cause, tokens_in=reply.tokens_in, tokens_out=reply.tokens_out, tokens_in_cached=reply.tokens_in_cached
            )

        text = reply.text.strip()
        if reply.cut_off and reply.stop_reason == "model_context_window_exceeded":  # more output room won't help
            raise rejected(
                f"reply cut off before its end (stop reason {reply.stop_reason!r}): the request and the reply "
                "did not fit the model's context window; use a model with a larger one"
            )
        if reply.cut_off:
            raise rejected(
                f"reply cut off by the token limit (stop reason {reply.stop_reason!r} at "
                f"max_output_tokens={self.config.max_output_tokens}); raise max_output_tokens"
            )
        if reply.refused or reply.refusal:
            said = f": {' '.join(reply.refusal.split())[:200]!r}" if reply.refusal else ""
            raise rejected(f"reply refused or filtered by the provider (stop reason {reply.stop_reason!r}){said}")
        if not text:
            raise rejected(f"empty reply: the model returned no text (stop reason {reply.stop_reason!r})")
        budget = replaced_budget_tokens(request)
        size = len(text) // CHARS_PER_TOKEN
        if size >= budget:
            raise rejected(
                f"reply larger than the text it replaces: about {size} tokens for {budget} tokens of "
                "messages and previous summary"
            )
        return SummaryResult(
            text=text,
            tokens_in=reply.tokens_in,
            tokens_out=reply.tokens_out,
            model=reply.model,
            tokens_in_cached=reply.tokens_in_cached,
            delta=self.config.mode == "delta",
        )

    def _exchange(self, request: SummaryRequest) -> Any:
        return exchange(
            self.policy,
            self.config.timeout,
            lambda response: self.parse(request, response),
            describe=provider_message,
            label=self.plugin_name,
            redact=self.secrets.redact,
        )

    def _redacted(self, error: SummarizerError) -> SummarizerError:
        return error.with_cause(self.secrets.redact(f"{self.plugin_name}: {error.cause}"))

    # --- hooks and transports -----------------------------------------------------------------

    # The redacted error is raised outside the ``except`` block, so that it carries no
    # ``__context__`` holding the unredacted one.

    @hookimpl
    def summarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            call = self.build_call(request)
            sender = self._sync_sender()
            return run_sync(self._exchange(request), lambda step: sender.send(call, step))
        except SummarizerError as error:
            failure = self._redacted(error)
        raise failure

    @hookimpl
    def asummarize(self, request: SummaryRequest) -> Any:
        return self._asummarize(request)

    async def _asummarize(self, request: SummaryRequest) -> SummaryResult:
        try:
            call = self.build_call(request)
            client = await self._async_client()
            return await run_async(self._exchange(request), lambda step: self._asend(client, call, step))
        except SummarizerError as error:
            failure = self._redacted(error)
        raise failure

    # httpx's timeouts limit each operation (one read of the socket, say), not an attempt as a
    # whole: a reply that trickles in, or interim ``102 Processing`` responses that a gateway
    # sends while the reply's headers never come, would keep an attempt going past the deadline.
    # ``asyncio.wait_for`` ends it at ``step.limit`` wherever it waits, so the sync API sends
    # through an ``AsyncClient`` too (:class:`SyncSender`).

    @staticmethod
    async def _asend(client: Any, call: HttpCall, step: Send) -> HttpResponse:
        headers, timeout = dict(call.headers), httpx_timeout(step)
        try:
            response = await asyncio.wait_for(
                client.post(call.url, headers=headers, content=call.body, timeout=timeout), step.limit
            )
        except asyncio.TimeoutError:
            raise ReplyTimeout() from None
        return as_response(response)

    def _forked(self) -> None:
        """In a forked child: a lock of its own, and no sync sender (its thread does not run here;
        the parent's is kept referenced, never used nor closed)."""
        self._lock = threading.Lock()
        if self._sync is not None:
            INHERITED.append(self._sync)
            self._sync = None

    def _sync_sender(self) -> SyncSender:
        """The sync API's sender, made on first use (anew in a forked child: :meth:`_forked`)."""
        with self._lock:
            if self._sync is None:
                self._sync = SyncSender(self._asend)
            return self._sync

    async def _async_client(self) -> Any:
        """The running loop's ``AsyncClient``. Pooled connections belong to the loop that opened
        them, so each loop has its own, and it must be closed in that loop, while the loop still
        runs. A loop has no hook for "about to close" but one: ``loop.shutdown_asyncgens()``
        (called by ``asyncio.run`` before it closes the loop) closes every async generator still
        suspended. So each client comes with one, suspended until then, that closes it."""
        loop = asyncio.get_running_loop()
        with self._lock:
            entry = self._aclients.get(loop)
            if entry is not None:
                return entry[0]
            for old in [old for old in self._aclients if old.is_closed()]:
                del self._aclients[old]  # closed without shutdown_asyncgens: nothing left to do
            import httpx

            client = httpx.AsyncClient(follow_redirects=False)
            closer = self._close_with_loop(loop, client)
            self._aclients[loop] = (client, closer)
        await closer.asend(None)  # runs to its yield, and the loop now knows it
        return client

    async def _close_with_loop(self, loop: asyncio.AbstractEventLoop, client: Any) -> AsyncGenerator[None, None]:
        try:
            yield
        finally:
            with self._lock:
                if self._aclients.get(loop, (None,))[0] is client:
                    del self._aclients[loop]
            await client.aclose()

    def close(self) -> None:
        """Close the sync API's client, and the async clients of loops that are not running (a
        running loop's client is closed by ``aclose()`` in it or as that loop shuts down)."""
        with self._lock:
            sync, self._sync = self._sync, None
        if sync is not None:
            sync.close()
        with self._lock:
            idle = [(loop, closer) for loop, (_, closer) in self._aclients.items() if not loop.is_running()]
        for loop, closer in idle:
            if loop.is_closed():
                with self._lock:
                    self._aclients.pop(loop, None)
            else:
                loop.run_until_complete(closer.aclose())

    async def aclose(self) -> None:
        """Close the running loop's async client."""
        with self._lock:
            entry = self._aclients.get(asyncio.get_running_loop())
        if entry is not None:
            await entry[1].aclose()
