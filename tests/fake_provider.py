"""A real HTTP server on 127.0.0.1 that speaks OpenAI's ``/v1/chat/completions`` and Anthropic's
``/v1/messages``, and misbehaves on request. Used by the HTTP summarizer tests and benchmarks.

```python
with FakeProvider() as fake:
    fake.push(Behaviour("status", status=503, retry_after="0.2"))   # next request: 503
    ...  # point a summarizer at fake.base_url
    assert len(fake.requests) == 2
```

Each request takes the next queued :class:`Behaviour`, or ``fake.default`` when the queue is
empty. A successful reply is a summary in the anchors format that quotes every
``SESSION-MARKER-...`` string found in the request, so concurrent sessions can check that each got
its own answer. Every request is recorded (path, headers, JSON body, client port, arrival time,
the usage reported back). Like a provider's prompt cache, the server remembers the messages of
the requests it answered and reports the longest prefix of messages it has seen before (from
``cache_min_tokens`` on) as cached input tokens.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import select
import socket
import struct
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

MARKER = re.compile(r"SESSION-MARKER-[A-Za-z0-9]+")
KINDS = (
    "ok",
    "status",
    "malformed",
    "missing",
    "error200",
    "empty",
    "length",
    "refused",
    "window",
    "parts",
    "declined",
    "reset",
    "cut",
    "oversized",
    "hang",
    "trickle",
    "processing",
)


@dataclass(frozen=True)
class Behaviour:
    """What the server does with one request.

    ``ok`` a good summary; ``status`` an error status (``retry_after`` sets the header);
    ``malformed`` a cut-off JSON body; ``missing`` JSON without the reply fields; ``error200`` an
    error body with 200 OK (as some proxies send); ``empty`` an
    empty reply; ``length`` a reply stopped by the token limit; ``refused`` the start of a
    summary stopped by the provider's safety system (OpenAI's ``content_filter``, Anthropic's
    ``refusal``); ``window`` (Anthropic) the start of a summary stopped because the model's
    context window is full (``model_context_window_exceeded``); ``parts`` (OpenAI) a good summary as content parts, the first with ``"text":
    null``; ``declined`` (OpenAI) a refusal as newer models give it: no content, the reason in
    ``message.refusal``, finish reason ``stop``; ``reset`` closes the connection without a response (TCP reset); ``cut`` sends the
    headers of a good reply and half its body, then resets the connection; ``oversized`` a reply
    of ``size`` characters; ``hang`` waits ``delay`` seconds before answering as ``ok``;
    ``trickle`` answers as ``ok`` but sends the body one byte every ``interval`` seconds, for
    ``delay`` seconds before the rest; ``processing`` sends an interim ``102 Processing`` response
    every ``interval`` seconds for ``delay`` seconds (as a gateway keeps a connection alive while
    its upstream works), then answers as ``ok``: the reply's headers never come while it does.
    ``delay`` applies to every other kind.
    """

    kind: str = "ok"
    status: int = 200
    retry_after: str | None = None
    delay: float = 0.0
    size: int = 200_000
    interval: float = 0.25
    echo_key: bool = False
    """Quote the API key the request carried back: in the error message of a ``status`` reply,
    as some providers do, or (``ok``) in the summary text, upper-cased and cut in two by a
    truncation, as a careless proxy that echoes the Authorization header would."""

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown behaviour {self.kind!r}; one of {KINDS}")


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    """Lower-case names; a name sent twice keeps one of its values (see ``header_lines``)."""
    body: Any
    raw: bytes
    client_port: int
    at: float
    """time.monotonic() when the request was read."""
    behaviour: Behaviour
    usage: tuple[int, int] | None = None
    """(input, output) tokens reported back, for a successful reply."""
    cached: int = 0
    """Of the input tokens, those reported as read from the prompt cache."""
    markers: list[str] = field(default_factory=list)
    header_lines: list[tuple[str, str]] = field(default_factory=list)
    """Every header line as sent, duplicates included."""


def summary_text(markers: list[str], extra: str = "") -> str:
    who = ", ".join(markers) or "no marker"
    return (
        f"## User Intent\nFix the parser for {who}.\n\n"
        "## Execution Progress\n- Edited src/parser.py\n\n"
        "## Key Decisions\n- Use a state machine\n\n"
        "## Tried Solutions\n- A regex: failed on nested quotes\n\n"
        "## Next Steps\nRun the tests\n\n"
        f"## Summary\nThe agent worked on the parser for {who}.{extra}"
    )


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out in two writes: no 40 ms delayed-ACK stall
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass

    def setup(self) -> None:
        super().setup()
        self.server.fake._connected(+1)

    def finish(self) -> None:  # the client closed the connection (or the server did)
        try:
            super().finish()
        finally:
            self.server.fake._connected(-1)

    def do_POST(self) -> None:
        fake = self.server.fake
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        behaviour = fake._next()
        record = Recorded(
            path=self.path,
            headers={k.lower(): v for k, v in self.headers.items()},
            body=body,
            raw=raw,
            client_port=self.client_address[1],
            at=time.monotonic(),
            behaviour=behaviour,
            markers=sorted(set(MARKER.findall(raw.decode("utf-8", "replace")))),
            header_lines=list(self.headers.items()),
        )
        fake._enter(record)
        try:
            if behaviour.kind == "processing" and not self._processing(behaviour):
                return
            if behaviour.kind not in ("trickle", "processing") and behaviour.delay and fake._stop.wait(behaviour.delay):
                return
            route = self.path.partition("?")[0]  # a query (Azure's api-version) is not part of the route
            if route.endswith("/chat/completions"):
                self._answer(behaviour, record, anthropic=False)
            elif route.endswith("/messages"):
                self._answer(behaviour, record, anthropic=True)
            else:
                self._send(404, {"error": {"message": f"no route {self.path}"}})
        finally:
            fake._leave()

    def _answer(self, b: Behaviour, record: Recorded, anthropic: bool) -> None:
        refused = None if anthropic else _chat_problem(record.body)
        if refused is not None:  # as the provider refuses a request it cannot read
            self._send(400, {"error": {"message": refused, "type": "invalid_request_error"}})
            return
        if b.kind == "reset":
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
            return
        if b.kind == "status":
            headers = {"retry-after": b.retry_after} if b.retry_after is not None else {}
            message = f"fake status {b.status}"
            if b.echo_key:
                key = record.headers.get("x-api-key") or record.headers.get("authorization", "").removeprefix("Bearer ")
                message += f": incorrect API key provided: {key}"
            if anthropic:
                error = {"type": "error", "error": {"type": "overloaded_error", "message": message}}
            else:
                error = {"error": {"message": message, "type": "server_error"}}
            self._send(b.status, error, headers)
            return
        if b.kind == "malformed":
            self._send_raw(200, b'{"id": "x", "choices": [{"message": {"content": "## User')
            return
        if b.kind == "error200":  # a proxy that answers an upstream failure with 200 OK
            self._send(200, {"error": {"message": "upstream model unavailable", "type": "proxy_error"}})
            return
        if b.kind == "missing":
            self._send(
                200, {"id": "x", "object": "chat.completion"} if not anthropic else {"id": "x", "type": "message"}
            )
            return
        extra = ""
        if b.echo_key:
            key = record.headers.get("x-api-key") or record.headers.get("authorization", "").removeprefix("Bearer ")
            extra = f" Authorization: Bearer {key.upper()} (echoed), {key[:14]}\n[... truncated ...]\n{key[-12:]}"
        text = summary_text(record.markers, extra)
        if b.kind in ("empty", "declined"):
            text = ""
        elif b.kind in ("refused", "window"):
            text = text[:25]
        elif b.kind == "oversized":
            text = summary_text(record.markers, " " + "lorem ipsum " * (b.size // 12))
        tokens_in, tokens_out = len(record.raw) // 4, len(text) // 4
        record.usage = (tokens_in, tokens_out)
        record.cached = self.server.fake._cached_tokens(record.body, tokens_in)
        model = (record.body or {}).get("model", "fake-model") if isinstance(record.body, dict) else "fake-model"
        if anthropic:
            payload = {
                "id": "msg_fake",
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [{"type": "text", "text": text}] if text else [],
                "stop_reason": {
                    "length": "max_tokens",
                    "refused": "refusal",
                    "window": "model_context_window_exceeded",
                }.get(b.kind, "end_turn"),
                "usage": {
                    "input_tokens": tokens_in - record.cached,
                    "cache_read_input_tokens": record.cached,
                    "output_tokens": tokens_out,
                },
            }
        else:
            content: Any = text
            message: dict[str, Any] = {"role": "assistant", "content": content}
            if b.kind == "parts":
                message["content"] = [{"type": "text", "text": None}, {"type": "text", "text": text}]
            elif b.kind == "declined":
                message.update(content=None, refusal="I'm sorry, I can't help with that.")
            payload = {
                "id": "chatcmpl-fake",
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": {"length": "length", "refused": "content_filter"}.get(b.kind, "stop"),
                    }
                ],
                "usage": {
                    "prompt_tokens": tokens_in,
                    "completion_tokens": tokens_out,
                    "total_tokens": tokens_in + tokens_out,
                    "prompt_tokens_details": {"cached_tokens": record.cached},
                },
            }
        if b.kind == "trickle":
            self._trickle(json.dumps(payload).encode(), b)
        elif b.kind == "cut":
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data[: len(data) // 2])
            self.wfile.flush()
            time.sleep(0.05)  # the client reads the half before the reset
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.connection.close()
            self.close_connection = True
        else:
            self._send(200, payload)

    def _processing(self, b: Behaviour) -> bool:
        """``102 Processing`` every ``b.interval`` seconds for ``b.delay`` seconds: whether the
        client is still there to answer."""
        ends = time.monotonic() + b.delay
        try:
            while time.monotonic() < ends:
                self.wfile.write(b"HTTP/1.1 102 Processing\r\n\r\n")
                self.wfile.flush()
                if self.server.fake._stop.wait(b.interval):
                    return False
        except OSError:  # the client gave up and closed the connection
            self.close_connection = True
            return False
        return True

    def _trickle(self, data: bytes, b: Behaviour) -> None:
        """Send the headers, then ``data`` a byte at a time for ``b.delay`` seconds, then the rest:
        every read of the client gets something, so no read timeout fires."""
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        ends = time.monotonic() + b.delay
        sent = 0
        try:
            while time.monotonic() < ends and sent < len(data) - 1:
                self.wfile.write(data[sent : sent + 1])
                self.wfile.flush()
                sent += 1
                if self.server.fake._stop.wait(b.interval):
                    return
            self.wfile.write(data[sent:])
        except OSError:  # the client gave up and closed the connection
            self.close_connection = True

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        self._send_raw(status, json.dumps(payload).encode(), headers)

    def _send_raw(self, status: int, data: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(data)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 256  # many sessions connect at once
    fake: FakeProvider

    def handle_error(self, request: Any, client_address: Any) -> None:  # resets are deliberate
        pass


class FakeProvider:
    """The server; a context manager that starts it on a free port and stops it."""

    def __init__(self) -> None:
        self.default = Behaviour()
        self.requests: list[Recorded] = []
        self.in_flight = 0
        self.peak_in_flight = 0
        self.connections = 0
        """Connections open now."""
        self._queue: list[Behaviour] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.cache_min_tokens = 1024
        """A prefix shorter than this is not cached (as OpenAI's and Anthropic's caches)."""
        self._prefixes: set[str] = set()

    @property
    def port(self) -> int:
        assert self._server is not None, "the server is not running"
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def push(self, *behaviours: Behaviour) -> None:
        """Queue behaviours for the next requests, in order."""
        with self._lock:
            self._queue.extend(behaviours)

    def _cached_tokens(self, body: Any, tokens_in: int) -> int:
        """Tokens of the longest prefix of ``body``'s messages (the system field first) that an
        earlier request sent, then remember this request's prefixes."""
        if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
            return 0
        parts = [json.dumps(body.get("system"))] + [json.dumps(m, sort_keys=True) for m in body["messages"]]
        chain, digests = hashlib.sha256(), []
        for part in parts:  # digests[n] identifies parts[: n + 1]
            chain.update(part.encode() + b"\0")
            digests.append(chain.hexdigest())
        with self._lock:
            seen = max((n + 1 for n, d in enumerate(digests) if d in self._prefixes), default=0)
            self._prefixes.update(digests)
        tokens = sum(len(p) for p in parts[:seen]) // 4
        return min(tokens, tokens_in) if tokens >= self.cache_min_tokens else 0

    def _next(self) -> Behaviour:
        with self._lock:
            return self._queue.pop(0) if self._queue else self.default

    def _enter(self, record: Recorded) -> None:
        with self._lock:
            self.requests.append(record)
            self.in_flight += 1
            self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def _connected(self, change: int) -> None:
        with self._lock:
            self.connections += change

    def _leave(self) -> None:
        with self._lock:
            self.in_flight -= 1

    def start(self) -> FakeProvider:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.02,), name="fake-provider", daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


@contextlib.contextmanager
def stalled_listener() -> Iterator[str]:
    """A base URL on 127.0.0.1 whose TCP connect never completes: a socket that listens with a
    full backlog and never accepts, so new connection attempts hang (a connect timeout)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    try:
        for _ in range(3):
            filler = socket.socket()
            filler.setblocking(False)
            with contextlib.suppress(BlockingIOError):
                filler.connect(("127.0.0.1", port))
            fillers.append(filler)
        # The first filler fills the accept queue; wait until its handshake is done, so that
        # the next attempt (the client under test) is the one that hangs.
        select.select([], fillers[:1], [], 2.0)
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        for filler in fillers:
            filler.close()
        server.close()


# --- driving compactions against the server (shared by tests and benchmarks) -------------------

FAST_RETRIES = {
    "backoff_base": 0.01,
    "backoff_max": 0.05,
    "max_attempts": 3,
    "timeout": {"connect": 2.0, "read": 5.0},
    "deadline": 30.0,
}
"""Retry settings that keep fault tests fast."""

FULL_ROUNDS = 17
"""Rounds of :func:`synthetic_history` that put a 2000-token window at about 82 % (Full)."""
SOFT_ROUNDS = 15
"""About 72 % of a 2000-token window (Soft)."""


def synthetic_history(marker: str, rounds: int, result_chars: int = 300) -> list[dict[str, Any]]:
    """A coding-agent history: the user's request naming ``marker``, then ``rounds`` tool calls
    with their results (each about 94 tokens), then a last assistant message."""
    history: list[dict[str, Any]] = [
        {"role": "system", "content": "You are a coding agent."},
        {
            "role": "user",
            "content": f"Please fix the parser bug for {marker}: nested quotes break tokenize() in src/parser.py.",
        },
    ]
    for i in range(rounds):
        arguments = json.dumps({"command": f"pytest tests/test_parser.py -k case_{i}"})
        history.append(
            {
                "role": "assistant",
                "content": f"Step {i}: checking.",
                "tool_calls": [
                    {"id": f"call_{i}", "type": "function", "function": {"name": "bash", "arguments": arguments}}
                ],
            }
        )
        output = (f"case {i} output line\n" * 200)[:result_chars]
        history.append({"role": "tool", "tool_call_id": f"call_{i}", "content": output})
    history.append({"role": "assistant", "content": "Next I will run the whole suite."})
    return history


def compactor_settings(
    base_url: str, protocol: str, directory: Any, *, context_window: int = 2000, **block: Any
) -> dict[str, Any]:
    """Keyword arguments for ``ProgressiveCompactor("default", **settings)`` that select the
    ``summarize-{protocol}`` plugin against ``base_url`` and keep every file under ``directory``
    (the data folder: ``tool_results/``, ``records/``)."""
    name = f"summarize-{protocol}"
    return {
        "context_window": context_window,
        "data_dir": str(directory),
        "plugins": {"summarizer": name},
        "config": {name: {"base_url": base_url, "api_key_env": None, **FAST_RETRIES, **block}},
    }


_CHAT_PARTS = {
    "user": {"text": "text", "image_url": "image_url", "input_audio": "input_audio", "file": "file"},
    "assistant": {"text": "text", "refusal": "refusal"},
}
"""The content parts Chat Completions takes in a message of each role (the others: text alone),
each with the field it needs."""


def _chat_problem(body: Any) -> str | None:
    """Why Chat Completions would refuse ``body`` for its messages' content parts, or None."""
    messages = body.get("messages") if isinstance(body, dict) else None
    for i, message in enumerate(messages if isinstance(messages, list) else []):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        allowed = _CHAT_PARTS.get(message.get("role"), {"text": "text"})
        for j, part in enumerate(content):
            kind = part.get("type") if isinstance(part, dict) else None
            if kind not in allowed:
                return f"Invalid value: {kind!r}. Supported values are: {', '.join(allowed)}. (messages[{i}].content[{j}].type)"
            if allowed[kind] not in part:
                return f"Missing required parameter: 'messages[{i}].content[{j}].{allowed[kind]}'."
    return None
