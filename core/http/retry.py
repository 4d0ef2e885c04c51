"""Retrying one HTTP exchange with an LLM provider, written once for the sync and the async API.

The retry logic is sans-IO: :func:`exchange` is a generator that yields what to do next
(:class:`Send` a request, or :class:`Sleep`) and is sent back what happened (an
:class:`HttpResponse` or the transport's exception). :func:`run_sync` answers it with a blocking
transport and ``time.sleep``, :func:`run_async` with an ``httpx.AsyncClient`` and
``asyncio.sleep``; nothing else differs between the two, so they cannot drift apart.

Policy:

- connect and read timeouts, connection resets and failures, HTTP 408, 429 and 5xx are retried,
  up to ``max_attempts`` attempts in all and never past the overall ``deadline``;
- an attempt as a whole (waiting for a pooled connection, connecting, sending, reading the whole
  reply) ends after the connect and the read timeout together, or when the deadline passes: a
  reply that trickles in, a byte now and then (or interim ``102 Processing`` responses while its
  headers never come), never trips the read timeout, which limits each read of the socket; such
  an attempt fails with a reply timeout and is retried;
- between attempts: exponential backoff with jitter, or exactly what ``Retry-After`` says on any
  status that is retried (seconds or an HTTP date), as the providers' own clients do;
- any other 4xx, a request the HTTP client refuses to send, and every problem with the reply's
  content, fail at once: asking again would get the same answer.

Every failure is a :class:`~progressive_compactor.errors.SummarizerError` whose ``cause`` is one
readable line that goes into the record's ``errors``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import random
import time
from email.utils import parsedate_to_datetime
from typing import Any, Awaitable, Callable, Generator, Mapping, TypeVar

import attrs

from ..errors import SummarizerError

log = logging.getLogger("progressive_compactor.http")
T = TypeVar("T")

RETRYABLE_STATUSES = frozenset({408, 429})
"""Besides every 5xx: request timeout and rate limit."""


@attrs.frozen
class Timeouts:
    """Seconds to wait for a connection, and for the reply once connected. An attempt as a whole
    may take both together (see :attr:`Send.limit`)."""

    connect: float = 10.0
    read: float = 120.0


@attrs.frozen
class RetryPolicy:
    max_attempts: int = 4
    """Attempts in all, the first included."""
    backoff_base: float = 0.5
    """Delay before the second attempt; doubled for each further one (with jitter)."""
    backoff_max: float = 20.0
    deadline: float = 300.0
    """Seconds from the first attempt after which no new attempt starts and no wait runs past."""


@attrs.frozen
class HttpCall:
    """One POST to send, already serialised (built by a pure function, sent by either client)."""

    url: str
    headers: Mapping[str, str] = attrs.field(repr=False)
    """Holds the API key: never shown."""
    body: bytes = attrs.field(repr=False)


@attrs.frozen
class HttpResponse:
    """What the exchange needs of a response, independent of the client that got it."""

    status: int
    reason: str
    headers: Mapping[str, str]
    """Lower-case names."""
    body: bytes


@attrs.frozen
class Send:
    """Send the call once, with these timeouts (already cut to what the deadline leaves)."""

    connect_timeout: float
    read_timeout: float
    limit: float = math.inf
    """Seconds the whole attempt may take, from the wait for a pooled connection to the last
    byte of the reply; past it the transport raises :class:`ReplyTimeout`."""


class ReplyTimeout(Exception):
    """Raised by a transport when an attempt ran past its :attr:`Send.limit`."""


@attrs.frozen
class Sleep:
    seconds: float


Step = Send | Sleep
Exchange = Generator[Step, "HttpResponse | BaseException | None", T]


# --- pure pieces ------------------------------------------------------------------------------


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait (delta seconds or an HTTP date), or None."""
    if value is None:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        seconds = when.timestamp() - (time.time() if now is None else now)
    if seconds != seconds:  # NaN
        return None
    return max(seconds, 0.0)


def backoff_delay(policy: RetryPolicy, attempt: int, rng: Callable[[], float] = random.random) -> float:
    """Delay after failed attempt number ``attempt`` (1-based): "equal jitter" exponential backoff,
    so retries of many sessions spread out but never shrink to nothing."""
    ceiling = min(policy.backoff_max, policy.backoff_base * 2 ** (attempt - 1))
    return ceiling / 2 + rng() * ceiling / 2


def status_error(response: HttpResponse, describe: Callable[[bytes], str] = lambda body: "") -> SummarizerError | None:
    """The error for a non-2xx response, or None. ``describe`` extracts the provider's message."""
    status = response.status
    if 200 <= status < 300:
        return None
    retryable = status in RETRYABLE_STATUSES or status >= 500
    detail = describe(response.body)
    cause = f"HTTP {status} {response.reason}".rstrip()
    if detail:
        cause += f": {detail}"
    if status in (401, 403):
        cause += " (check the API key and its permissions)"
    return SummarizerError(cause, retryable=retryable, status=status)


def transport_error(exc: BaseException, step: Send) -> SummarizerError:
    """A readable, classified cause for an exception raised while sending."""
    import httpx

    if isinstance(exc, ReplyTimeout):
        return SummarizerError(f"reply timeout: no complete reply within {step.limit:g}s", retryable=True)
    if isinstance(exc, httpx.PoolTimeout):
        return SummarizerError(f"pool timeout: no free connection within {step.limit:g}s", retryable=True)
    if isinstance(exc, httpx.ConnectTimeout):
        return SummarizerError(f"connect timeout: no connection within {step.connect_timeout:g}s", retryable=True)
    if isinstance(exc, httpx.ReadTimeout):
        return SummarizerError(f"read timeout: no reply within {step.read_timeout:g}s", retryable=True)
    if isinstance(exc, httpx.TimeoutException):
        return SummarizerError(f"{type(exc).__name__}: timed out", retryable=True)
    if isinstance(exc, httpx.RemoteProtocolError):
        return SummarizerError(
            f"connection reset: the server closed the connection without a complete reply ({exc})", retryable=True
        )
    if isinstance(exc, (httpx.ReadError, httpx.WriteError)):
        return SummarizerError(f"connection reset: {str(exc) or type(exc).__name__}", retryable=True)
    if isinstance(exc, httpx.ConnectError):
        return SummarizerError(f"connection failed: {str(exc) or type(exc).__name__}", retryable=True)
    if isinstance(exc, (httpx.LocalProtocolError, httpx.UnsupportedProtocol)):
        # httpx would not send it (a line break in a header value, a URL it cannot use): every
        # attempt would fail the same way
        return SummarizerError(
            f"the HTTP client refused to send the request ({type(exc).__name__}: {exc}); check base_url, "
            "extra_headers and the API key",
            retryable=False,
        )
    if isinstance(exc, httpx.TransportError):
        return SummarizerError(f"transport error: {type(exc).__name__}: {exc}", retryable=True)
    return SummarizerError(f"{type(exc).__name__}: {exc}", retryable=False)


def decode_json(body: bytes) -> Any:
    """The reply's JSON, or a 'malformed JSON' failure quoting the start of the body."""
    try:
        return json.loads(body)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        start = body[:80].decode("utf-8", "replace")
        raise SummarizerError(f"malformed JSON in the reply ({exc}); it starts with {start!r}") from None


def exchange(
    policy: RetryPolicy,
    timeouts: Timeouts,
    parse: Callable[[HttpResponse], T],
    *,
    describe: Callable[[bytes], str] = lambda body: "",
    label: str = "summarizer",
    redact: Callable[[str], str] = lambda text: text,
    clock: Callable[[], float] = time.monotonic,
    rng: Callable[[], float] = random.random,
) -> Exchange[T]:
    """The retry loop as a generator: yields :class:`Send` / :class:`Sleep`, returns ``parse``'s
    result for the first 2xx response, raises :class:`SummarizerError` when it gives up.

    ``parse`` raises :class:`SummarizerError` for a reply it rejects; such failures are final
    unless ``parse`` marks them retryable. ``redact`` masks secrets in what is logged.
    """
    started = clock()
    attempt = 0
    while True:
        attempt += 1
        remaining = policy.deadline - (clock() - started)
        attempt_time = timeouts.connect + timeouts.read
        capped = {
            "connect timeout": remaining < timeouts.connect,
            "read timeout": remaining < timeouts.read,
            "reply timeout": remaining < attempt_time,
            "pool timeout": remaining < attempt_time,
        }
        step = Send(
            connect_timeout=max(min(timeouts.connect, remaining), 0.001),
            read_timeout=max(min(timeouts.read, remaining), 0.001),
            limit=max(min(attempt_time, remaining), 0.001),
        )
        outcome = yield step
        retry_after: float | None = None
        try:
            if isinstance(outcome, BaseException):
                error = transport_error(outcome, step)
                if any(cut and error.cause.startswith(kind) for kind, cut in capped.items()):
                    error = SummarizerError(
                        f"deadline of {policy.deadline:g}s passed while waiting ({error.cause})", retryable=False
                    )
                raise error
            if not isinstance(outcome, HttpResponse):
                raise SummarizerError(f"transport gave {type(outcome).__name__}, not a response")
            failure = status_error(outcome, describe)
            if failure is not None:
                if failure.retryable:  # a 500 or Anthropic's 529 may say how long too
                    retry_after = parse_retry_after(outcome.headers.get("retry-after"))
                raise failure
            return parse(outcome)
        except SummarizerError as error:
            if not error.retryable:
                if attempt > 1:
                    raise _final(error, f"after {attempt} attempts") from None
                raise
            if attempt >= policy.max_attempts:
                raise _final(error, f"gave up after {attempt} attempt{'s' if attempt > 1 else ''}") from None
            delay = retry_after if retry_after is not None else backoff_delay(policy, attempt, rng)
            elapsed = clock() - started
            if elapsed + delay >= policy.deadline:
                wait = f"Retry-After {delay:g}s" if retry_after is not None else f"a {delay:.2f}s backoff"
                raise _final(
                    error,
                    f"gave up after {attempt} attempt{'s' if attempt > 1 else ''}: {wait} would pass "
                    f"the {policy.deadline:g}s deadline",
                ) from None
            why = f"Retry-After {delay:g}s" if retry_after is not None else f"backoff {delay:.2f}s"
            log.info(
                "%s: %s; retrying (attempt %d of %d, %s)",
                label,
                redact(error.cause),
                attempt + 1,
                policy.max_attempts,
                why,
            )
        yield Sleep(delay)


def _final(error: SummarizerError, note: str) -> SummarizerError:
    return error.with_cause(f"{error.cause} ({note})", retryable=False)


# --- drivers ----------------------------------------------------------------------------------


def run_sync(steps: Exchange[T], send: Callable[[Send], HttpResponse]) -> T:
    """Drive :func:`exchange` with a blocking transport."""
    outcome: Any = None
    try:
        step = next(steps)
        while True:
            if isinstance(step, Sleep):
                time.sleep(step.seconds)
                outcome = None
            else:
                try:
                    outcome = send(step)
                except Exception as exc:  # noqa: BLE001 - classified by the exchange
                    outcome = exc
            step = steps.send(outcome)
    except StopIteration as stop:
        return stop.value


async def run_async(steps: Exchange[T], send: Callable[[Send], Awaitable[HttpResponse]]) -> T:
    """Drive :func:`exchange` with an asyncio transport."""
    outcome: Any = None
    try:
        step = next(steps)
        while True:
            if isinstance(step, Sleep):
                await asyncio.sleep(step.seconds)
                outcome = None
            else:
                try:
                    outcome = await send(step)
                except Exception as exc:  # noqa: BLE001 - classified by the exchange
                    outcome = exc
            step = steps.send(outcome)
    except StopIteration as stop:
        return stop.value


def httpx_timeout(step: Send) -> Any:
    """httpx's timeouts for one attempt. Waiting for a free pooled connection is not a failure to
    connect (many sessions share one client): it may take as long as the attempt itself, which is
    at most the connect and the read timeout together."""
    import httpx

    return httpx.Timeout(
        connect=step.connect_timeout,
        read=step.read_timeout,
        write=step.read_timeout,
        pool=min(step.limit, step.connect_timeout + step.read_timeout),
    )


def as_response(response: Any, body: bytes | None = None) -> HttpResponse:
    """An :class:`HttpResponse` from an ``httpx.Response``: ``body``, or the body it has read."""
    return HttpResponse(
        status=response.status_code,
        reason=response.reason_phrase or "",
        headers={k.lower(): v for k, v in response.headers.items()},
        body=response.content if body is None else body,
    )
