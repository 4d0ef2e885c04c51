"""Secrets that must never be written anywhere: records, logs, offloaded files, session state.

A plugin that reads an API key registers it with the compactor's :class:`SecretRegistry`; every
writer passes its text through :meth:`SecretRegistry.redact` before it leaves the process. Keys
reach text in more ways than verbatim: an ``env`` dump in a tool result, a provider that echoes
the ``Authorization`` header (sometimes upper-cased), a truncation that cut the key in two and
kept its start before the cut and its end after it. So a key is masked wherever it appears in any
letter case, and so is any piece of it of at least :data:`MIN_PIECE` characters that starts or
ends it.

Credentials nobody registered are masked too, by their well-known formats
(:func:`mask_credentials`): an agent's tool prints an ``env`` dump, a ``.env`` file or a
connection string, and the offloaded copy of it should not be a new copy of the user's keys. The
patterns are conservative (a known prefix, a private key block, a URL's password, or the value of
a setting named like a secret that holds a digit or a symbol); ``mask_credentials: false`` in the
config turns them off.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Any
from urllib.parse import quote, quote_plus, unquote

import attrs

MASK = "[REDACTED]"
MIN_SECRET = 4
"""Shorter values are not registered: masking them would mangle ordinary text."""
MIN_PIECE = 10
"""A start or an end of a key this long is masked too (truncation may have cut the rest)."""


class SecretRegistry:
    """Values that must never be written anywhere (API keys); :meth:`redact` masks them, and
    (``patterns``, the default) every credential of a well-known format (:func:`credential_spans`)."""

    def __init__(self, values: Iterable[str] = (), *, patterns: bool = True) -> None:
        self._values: list[str] = []
        self._pattern: re.Pattern[str] | None = None
        self.patterns = patterns
        for value in values:
            self.add(value)

    def add(self, value: str | None) -> None:
        """Register ``value`` (shorter than :data:`MIN_SECRET` characters: ignored), as it is and
        as JSON and URLs write it (a quote or a backslash escaped, a symbol percent-encoded): a
        tool result that is JSON or a URL holds it so."""
        if value and len(value) >= MIN_SECRET and value not in self._values:
            for form in (value, *_written(value)):
                if form not in self._values:
                    self._values.append(form)
            pieces = set()
            for secret in self._values:
                key = secret.lower()
                piece = min(MIN_PIECE, len(key))
                pieces.add(re.escape(key[:piece]))
                pieces.add(re.escape(key[-piece:]))
            self._pattern = re.compile("|".join(sorted(pieces, key=len, reverse=True)))

    def __bool__(self) -> bool:
        return bool(self._values)

    def __len__(self) -> int:
        """How many secrets are registered (text masked with fewer may need masking again)."""
        return len(self._values)

    def redact(self, text: str) -> str:
        """``text`` with every registered secret, and every start or end of one, masked in any
        letter case; with ``patterns``, every credential of a well-known format as well."""
        if not text or (self._pattern is None and not self.patterns):
            return text
        lowered = _lowered(text)
        spans = credential_spans(text, lowered) if self.patterns else []
        return _masked(text, spans + self._registered_spans(lowered))

    def redact_registered(self, text: str) -> str:
        """``text`` with the registered secrets masked (not the credentials by format): for text
        made of parts :meth:`redact` has masked already (a record, a session's state, the
        compaction message), in which only a secret registered since may be new."""
        if not text or self._pattern is None:
            return text
        return _masked(text, self._registered_spans(_lowered(text)))

    def _registered_spans(self, lowered: str) -> list[tuple[int, int]]:
        spans: list[tuple[int, int]] = []
        if self._pattern is not None and self._pattern.search(lowered) is not None:
            for secret in self._values:
                key = secret.lower()
                piece = min(MIN_PIECE, len(key))
                spans += _prefix_spans(lowered, key, piece)
                spans += _suffix_spans(lowered, key, piece)
        return spans


def _written(value: str) -> list[str]:
    """The other forms in which text may hold ``value``: JSON-escaped (``ensure_ascii`` or not)
    and percent-encoded (``%20`` or ``+`` for a space)."""
    forms = [json.dumps(value)[1:-1], json.dumps(value, ensure_ascii=False)[1:-1]]
    forms += [quote(value, safe=""), quote_plus(value, safe="")]
    return [form for form in dict.fromkeys(forms) if form != value]


def _lowered(text: str) -> str:
    """``text`` in lower case, each character at its place (the few that lower-case to two stay)."""
    lowered = text.lower()
    if len(lowered) != len(text):
        lowered = "".join(c.lower() if len(c.lower()) == 1 else c for c in text)
    return lowered


def _masked(text: str, spans: list[tuple[int, int]]) -> str:
    """``text`` with each of ``spans`` (overlapping or not) replaced by :data:`MASK`."""
    if not spans:
        return text
    out, last = [], 0
    for start, end in _merged(spans):
        out.append(text[last:start])
        out.append(MASK)
        last = end
    out.append(text[last:])
    return "".join(out)


def _prefix_spans(text: str, key: str, piece: int) -> list[tuple[int, int]]:
    """Spans of ``text`` that are a start of ``key`` at least ``piece`` long (the whole key too)."""
    spans = []
    start = text.find(key[:piece])
    while start != -1:
        length = piece
        while length < len(key) and start + length < len(text) and text[start + length] == key[length]:
            length += 1
        spans.append((start, start + length))
        start = text.find(key[:piece], start + 1)
    return spans


def _suffix_spans(text: str, key: str, piece: int) -> list[tuple[int, int]]:
    """Spans of ``text`` that are an end of ``key`` at least ``piece`` long."""
    spans = []
    tail = key[-piece:]
    found = text.find(tail)
    while found != -1:
        end = found + piece
        length = piece
        while length < len(key) and end - length - 1 >= 0 and text[end - length - 1] == key[-length - 1]:
            length += 1
        spans.append((end - length, end))
        found = text.find(tail, found + 1)
    return spans


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


# --- credentials nobody registered, by their format --------------------------------------------

_VALUE = r"""[^\s"'`,;&<>(){}\[\]\\]"""
"""A character of a secret's value: never a quote or a backslash, so that masking JSON text
(a record, a state file) never breaks one of its strings or escapes."""
_SETTING_VALUE = (
    r"""\\?["']?[ \t]*[=:][ \t]*\\?["']?"""  # = or :, quoted or not, on the same line
    r"(?=[a-z_.-]{0,256}[0-9!#$%*+/:=?@^|~])"  # a digit or a symbol: not a word, not an identifier
    rf"(?!(?:[a-z_][a-z0-9_]{{0,64}}\.){{1,8}}[a-z_][a-z0-9_]{{0,64}}(?!{_VALUE}))"  # not module.attribute
    rf"(?!\*+(?!{_VALUE}))"  # not masked already (********)
    rf"(?=(?P<value>{_VALUE}{{8,256}}))(?P<secret>(?P=value))(?![(\[])"  # not a call or an index
)
# Each pattern starts with a literal, which Python's re finds fast, and scans a bounded length
# from it (the time stays linear in the text's length whatever it holds); the text is masked in
# group ``secret``. The first are matched against the text as it is, the others in lower case.
# Each comes with a literal the text must hold for it to match: most texts hold none, and looking
# for a literal costs a fraction of starting a pattern's search.
_CASED = tuple(
    (literal, re.compile(pattern))
    for literal, pattern in (
        # the key of a PEM private key block (its BEGIN and END lines are kept); of a block cut
        # before its END line (head -5 id_rsa, a tool's output limit), its lines of base64 up to the cut
        (
            "PRIVATE KEY-----",
            r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----(?P<secret>"
            r"[^\"-]*(?:-(?!----)[^\"-]*)*(?=-----END (?:[A-Z0-9]+ )*PRIVATE KEY-----)"
            r"|(?:\r?\n|(?:\\r)?\\n)[ \t]*[A-Za-z0-9+/=]{16,}(?:(?:\r?\n|(?:\\r)?\\n)[ \t]*[A-Za-z0-9+/=]+)*)",
        ),
        # the password of a URL: postgresql://user:secret@host/db (not one masked already, user:***@),
        # up to the last "@" before the host, as URL parsers split: a password may hold an "@"
        ("://", r"://[^\s:/@\"'\\<>]{0,256}:(?!\*+@)(?P<secret>[^\s/\"'\\<>]{1,256})@"),
        # provider keys and tokens by their prefixes: OpenAI and Anthropic (sk-, sk-proj-, sk-ant-), GitHub,
        # GitLab, Slack, AWS access key ids, Google API keys, Stripe, Hugging Face, npm; JSON Web Tokens
        *(
            (prefix, rf"(?P<secret>{prefix}(?<![A-Za-z0-9_-]{prefix}){rest})(?![A-Za-z0-9_-])")
            for prefix, rest in (
                ("sk-", r"(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"),
                ("gh", r"[pousr]_[A-Za-z0-9]{36,}"),
                ("github_pat_", r"[A-Za-z0-9_]{22,}"),
                ("glpat-", r"[A-Za-z0-9_-]{20,}"),
                ("xox", r"[abposr]-[A-Za-z0-9-]{10,}"),
                ("AKIA", r"[0-9A-Z]{16}"),
                ("ASIA", r"[0-9A-Z]{16}"),
                ("AIza", r"[0-9A-Za-z_-]{35}"),
                ("sk_", r"(?:live|test)_[0-9A-Za-z]{20,}"),
                ("rk_", r"(?:live|test)_[0-9A-Za-z]{20,}"),
                ("hf_", r"[A-Za-z0-9]{34,}"),
                ("npm_", r"[A-Za-z0-9]{36}"),
                ("eyJ", r"[A-Za-z0-9_-]{10,}\.eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}"),
            )
        ),
    )
)
_FOLDED = tuple(
    (literal, re.compile(pattern))
    for literal, pattern in (
        # an Authorization header's credentials: Bearer, Basic, Token (GitHub's)
        *(
            (scheme, rf"{scheme}(?<![a-z0-9_]{scheme})[ \t]+(?=[a-z._~+/-]*[0-9])(?P<secret>[a-z0-9._~+/-]{{16,}}=*)")
            for scheme in ("bearer", "basic", "token")
        ),
        # the value of a setting named like a secret (PASSWORD=..., "api_key": "...", client_secret: ...):
        # at least 8 characters on the same line, with a digit or a symbol; code is left alone
        # (password=password, token: str, secret=get_secret(), api_key=os.environ["API_KEY"])
        *(
            (literal, rf"{name}(?![a-z0-9_]){_SETTING_VALUE}")
            for literal, name in (
                ("password", "password"),
                ("passwd", "passwd"),
                ("secret", "secret(?:[_-]?key)?"),
                ("token", "token"),
                ("api", "api[_-]?key"),
                ("access", "access[_-]?key"),
                ("private", "private[_-]?key"),
            )
        ),
    )
)


def credential_spans(text: str, lowered: str | None = None) -> list[tuple[int, int]]:
    """Where ``text`` holds a credential of a well-known format: a private key block, a URL's
    password, a provider key or token by its prefix (``sk-``, ``ghp_``, ``AKIA``...), the
    credentials of an ``Authorization`` header, the value of a setting named like a secret.
    ``lowered``: ``text`` in lower case, each character at its place (computed when not given)."""
    lowered = _lowered(text) if lowered is None else lowered
    spans = [m.span("secret") for literal, pattern in _CASED if literal in text for m in pattern.finditer(text)]
    spans += [m.span("secret") for literal, pattern in _FOLDED if literal in lowered for m in pattern.finditer(lowered)]
    return spans


def mask_credentials(text: str) -> str:
    """``text`` with every credential :func:`credential_spans` finds masked."""
    return _masked(text, credential_spans(text))


def redact_data(value: Any, redact: Callable[[str], str]) -> Any:
    """``value`` with ``redact`` applied to every string in it: the values of mappings, lists and
    tuples and the fields of attrs instances, walked recursively (mapping keys and other values
    as they are). Data is redacted this way *before* it is serialised: JSON escapes ``"`` and
    ``\\``, HTML ``& < > " '``, and a secret holding one no longer matches once escaped. Its
    strings are looked at together first, one a line: most data holds no secret, and then
    ``value`` itself comes back."""
    strings: list[str] = []
    _strings(value, strings)
    joined = "\n".join(strings)
    return value if redact(joined) == joined else _redact_each(value, redact)


def _strings(value: Any, out: list[str]) -> None:
    if isinstance(value, str):  # a subclass too: an application's message may hold one
        out.append(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _strings(v, out)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, out)
    elif attrs.has(type(value)):
        for f in attrs.fields(type(value)):
            if f.init:
                _strings(getattr(value, f.name), out)


def _redact_each(value: Any, redact: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {k: _redact_each(v, redact) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # a subclass (a named tuple) comes back as a plain one
        return (list if isinstance(value, list) else tuple)(_redact_each(v, redact) for v in value)
    if attrs.has(type(value)):
        fields = attrs.fields(type(value))
        return attrs.evolve(value, **{f.alias: _redact_each(getattr(value, f.name), redact) for f in fields if f.init})
    return value


URL_PASSWORD = re.compile(r"://[^:/@\s]*:([^@\s]+)@")
"""The password of a connection string (``postgresql://user:secret@host/db``)."""
KEY_PASSWORD = re.compile(r"""(?i)\bpassword\s*=\s*('(?:[^'\\]|\\.)*'|(?:[^\s\\'"&]|\\.?)+)""")
"""A ``password=...`` setting: libpq's ``host=db password=secret`` (a backslash escapes the
character after it, a space included, quoted or not) or a URL's ``?password=secret``."""
_ESCAPE = re.compile(r"\\(.?)", re.DOTALL)
PASSWORD_MASK = "***"  # noqa: S105 - the mask, not a password


def connection_passwords(text: str) -> list[str]:
    """The passwords a connection string holds (URL ``user:password@`` and ``password=``), each as
    written and as libpq reads it: percent-decoded, quotes and backslash escapes removed, and,
    when psycopg is installed, the password libpq itself parses of ``text``."""
    found = []
    for value in URL_PASSWORD.findall(text):
        found += [value, unquote(value)]
    for value in KEY_PASSWORD.findall(text):
        found.append(_ESCAPE.sub(r"\1", value[1:-1] if value.startswith("'") else value))
    if found:
        found.append(_libpq_password(text))
    return [p for p in dict.fromkeys(found) if p]


def _libpq_password(text: str) -> str:
    """The password libpq reads in ``text``; empty when psycopg is not installed or ``text`` is
    not one connection string libpq reads."""
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return ""
    try:
        return str(conninfo_to_dict(text).get("password") or "")
    except Exception:  # noqa: BLE001 - not a connection string: the patterns above found what there is
        return ""


def mask_passwords(text: str) -> str:
    """``text`` with the password of every connection string in it replaced by ``***``, for
    messages and where-strings that name a server (``postgresql://app:***@db:5432/agents``)."""
    text = URL_PASSWORD.sub(lambda m: m.group(0).replace(f":{m.group(1)}@", f":{PASSWORD_MASK}@"), text)
    return KEY_PASSWORD.sub(lambda m: m.group(0)[: m.start(1) - m.start(0)] + PASSWORD_MASK, text)


SECRET_KEY = re.compile(r"(?i)^(?:.*[_-])?(?:api[_-]?key|key|secret|password|passwd|token|credentials?|authorization)$")
"""Setting (and header) names whose values are secrets: registered by :func:`config_secrets`,
masked by ``config show``. ``api_key_env`` is not one: such settings hold the *name* of an
environment variable, never its value."""


def secret_setting(key: str, parent: str = "") -> bool:
    """Whether the setting ``key`` of the mapping ``parent`` holds a secret: a secret-looking name
    (:data:`SECRET_KEY`), or any header of ``extra_headers`` (an Azure ``api-key``, a proxy's
    ``Authorization``, whatever its name)."""
    return parent == "extra_headers" or bool(SECRET_KEY.match(key))


_AUTH_SCHEME = re.compile(r"(?i)^(?:bearer|basic)\s+")


def _credential(value: str) -> str:
    """A header or setting value without its ``Bearer ``/``Basic `` scheme: the key itself."""
    return _AUTH_SCHEME.sub("", value.strip())


def config_secrets(config: Any) -> list[str]:
    """The secrets a config names: the values of the environment variables its plugin blocks
    name in ``*_env`` settings (``api_key_env: OPENAI_API_KEY``, ``dsn_env: ...``), the values of
    settings and ``extra_headers`` entries with a secret-looking name (:data:`SECRET_KEY`: an
    Azure ``api-key``, a proxy's ``Authorization``) or a ``Bearer``/``Basic`` value (without the
    scheme), and the passwords of connection strings written in it. Other headers (a beta flag,
    a content type) are not: a start or end of a registered value is masked in all text. Registered by every compactor, so that they
    are masked even where the plugin that reads them is not loaded (a command that only reads
    records)."""
    found: list[str] = []

    def walk(value: Any, key: str = "", parent: str = "") -> None:
        if isinstance(value, Mapping):
            for k, v in value.items():
                walk(v, str(k), key)
        elif isinstance(value, (list, tuple)):
            for v in value:
                walk(v, key, parent)
        elif isinstance(value, str):
            if key.endswith("_env") and os.environ.get(value):
                found.append(os.environ[value])
                found.extend(connection_passwords(os.environ[value]))
            if SECRET_KEY.match(key) or (parent == "extra_headers" and _AUTH_SCHEME.match(value)):
                found.append(_credential(value))
            found.extend(connection_passwords(value))

    walk(getattr(config, "config", {}))
    return found


def config_registry(config: Any) -> SecretRegistry:
    """The registry of a compactor built from ``config``: the secrets it names
    (:func:`config_secrets`), and the credential patterns unless ``mask_credentials`` is false."""
    return SecretRegistry(config_secrets(config), patterns=getattr(config, "mask_credentials", True))


__all__ = [
    "MASK",
    "SECRET_KEY",
    "SecretRegistry",
    "config_registry",
    "config_secrets",
    "connection_passwords",
    "credential_spans",
    "mask_credentials",
    "mask_passwords",
    "redact_data",
    "secret_setting",
]
