"""``tokens-tiktoken``: exact token counts of OpenAI encodings with tiktoken, offline.

Select it with ``plugins: {tokens: tokens-tiktoken}`` (extra ``[tiktoken]``). It counts with
``o200k_base`` (GPT-4o, GPT-4.1, GPT-5, the o-series) or ``cl100k_base`` (GPT-4, GPT-3.5) and
never touches the network: tiktoken downloads its BPE files at run time, so the two files ship
inside this package (``progressive_compactor/plugins/tiktoken/``, gzip-compressed, under
tiktoken's MIT license, checked against the SHA-256 tiktoken expects) and the encoding is built
from them directly; tiktoken's download and cache are never used.

A message counts as the chat format bills it: ``tokens_per_message`` (3: the start, role
separator and end markers) + the role + the content (text parts; an image part as
``image_tokens``; any other part, and the blocks carried under ``ANTHROPIC_KEY`` such as a
thinking block, by its texts and its opaque data at four characters a token, as
``part_sizes`` reads it) + ``tokens_per_name`` and the name when a message has one + for each
tool call its name, its arguments and ``tokens_per_tool_call`` + what the message's other keys
send back (``reasoning_content``, a ``refusal``), as a part. The text is exact; the overheads are
OpenAI's published chat-format counts, and the tool-call overhead is an approximation (the
format of tool calls is not published). The 3 tokens that prime every reply belong to the
request, not to a message, and are left out. The count of a text is cached (a least-recently
used cache of ``cache_size`` counts, a long text's by its digest: the texts themselves are not
kept).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import sys
import threading
from collections import OrderedDict
from importlib import resources
from typing import Any, Mapping, Sequence

import attrs

from progressive_compactor.plugin import (
    Message,
    PluginError,
    hookimpl,
    part_sizes,
    renew_lock_after_fork,
    sent_extras,
    setting_check,
)

_O200K_PATTERN = "|".join(
    [
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
        r"""\p{N}{1,3}""",
        r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
        r"""\s*[\r\n]+""",
        r"""\s+(?!\S)""",
        r"""\s+""",
    ]
)
_CL100K_PATTERN = r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s"""

ENCODINGS: dict[str, dict[str, Any]] = {
    "o200k_base": {
        "pat_str": _O200K_PATTERN,
        "special_tokens": {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        "sha256": "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d",
    },
    "cl100k_base": {
        "pat_str": _CL100K_PATTERN,
        "special_tokens": {
            "<|endoftext|>": 100257,
            "<|fim_prefix|>": 100258,
            "<|fim_middle|>": 100259,
            "<|fim_suffix|>": 100260,
            "<|endofprompt|>": 100276,
        },
        "sha256": "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7",
    },
}
"""The encodings this plugin carries: tiktoken's own definitions, and the SHA-256 of each BPE
file that tiktoken checks its downloads against."""

CACHED_TEXT = 256
"""A text up to this long is a key of the count cache itself; a longer one by its BLAKE2 digest."""
_loaded: dict[str, Any] = {}
_lock = threading.Lock()
renew_lock_after_fork(sys.modules[__name__])  # this module's _lock


def bpe_file(name: str) -> bytes:
    """The BPE file of encoding ``name`` as shipped in this package, checked against its hash."""
    packed = resources.files("progressive_compactor.plugins") / "tiktoken" / f"{name}.tiktoken.gz"
    data = gzip.decompress(packed.read_bytes())
    if hashlib.sha256(data).hexdigest() != ENCODINGS[name]["sha256"]:
        raise PluginError(f"the bundled BPE file of {name} does not have the expected SHA-256", "tokens-tiktoken")
    return data


def _tiktoken() -> Any:
    try:
        import tiktoken
    except ImportError as exc:
        raise PluginError(
            "tokens-tiktoken needs tiktoken: pip install 'progressive-compactor[tiktoken]'", "tokens-tiktoken"
        ) from exc
    return tiktoken


def encoding(name: str) -> Any:
    """The ``tiktoken.Encoding`` of ``name``, built once per process from the bundled file."""
    with _lock:
        if name not in _loaded:
            tiktoken = _tiktoken()
            ranks = {
                base64.b64decode(token): int(rank)
                for token, rank in (line.split() for line in bpe_file(name).splitlines() if line)
            }
            spec = ENCODINGS[name]
            _loaded[name] = tiktoken.Encoding(
                name=name, pat_str=spec["pat_str"], mergeable_ranks=ranks, special_tokens=spec["special_tokens"]
            )
        return _loaded[name]


class TiktokenTokens:
    @attrs.frozen
    class Config:
        encoding: str = attrs.field(
            default="o200k_base",
            validator=setting_check(
                lambda v: v in ENCODINGS, "encoding must be o200k_base or cl100k_base, got {value}"
            ),
        )
        tokens_per_message: int = attrs.field(
            default=3, validator=setting_check(lambda v: v >= 0, "tokens_per_message must be 0 or more, got {value}")
        )
        tokens_per_name: int = attrs.field(
            default=1, validator=setting_check(lambda v: v >= 0, "tokens_per_name must be 0 or more, got {value}")
        )
        tokens_per_tool_call: int = attrs.field(
            default=3, validator=setting_check(lambda v: v >= 0, "tokens_per_tool_call must be 0 or more, got {value}")
        )
        image_tokens: int = attrs.field(
            default=85, validator=setting_check(lambda v: v >= 0, "image_tokens must be 0 or more, got {value}")
        )
        """An image part (85: one low-detail image; a high-detail one costs more by its size)."""
        cache_size: int = attrs.field(
            default=8192, validator=setting_check(lambda v: v >= 0, "cache_size must be 0 or more, got {value}")
        )

    def __init__(self, config: Config | None = None):
        _tiktoken()  # a missing extra is a config error when the config loads, not at the first count
        self.config = config or self.Config()
        self._encoding: Any = None
        self._cache: OrderedDict[Any, int] = OrderedDict()
        self._lock = threading.Lock()
        renew_lock_after_fork(self)

    def _encode(self, text: str) -> int:
        if self._encoding is None:
            self._encoding = encoding(self.config.encoding)
        try:
            return len(self._encoding.encode_ordinary(text))
        except UnicodeEncodeError:  # lone surrogates: counted as tiktoken counts them
            return len(
                self._encoding.encode_ordinary(text.encode("utf-16", "surrogatepass").decode("utf-16", "replace"))
            )

    def count_text(self, text: str) -> int:
        """Tokens of ``text`` in the configured encoding (special tokens count as text)."""
        if not text:
            return 0
        if not self.config.cache_size:
            return self._encode(text)
        # a long text is kept by its digest: the cache holds counts, not the texts of every session
        key = text if len(text) <= CACHED_TEXT else hashlib.blake2b(text.encode("utf-8", "surrogatepass")).digest()
        with self._lock:
            n = self._cache.get(key)
            if n is not None:
                self._cache.move_to_end(key)
                return n
        n = self._encode(text)
        with self._lock:
            self._cache[key] = n
            if len(self._cache) > self.config.cache_size:
                self._cache.popitem(last=False)
        return n

    def count_message(self, message: Message) -> int:
        c = self.config
        count = self.count_text
        n = c.tokens_per_message + count(message.role)
        content = message.content
        if isinstance(content, str):
            n += count(content)
        elif content:
            for part in content:
                text = part.get("text") if isinstance(part, Mapping) else None
                n += count(text) if isinstance(text, str) else self._count_sizes(part)
        if message.name:
            n += c.tokens_per_name + count(message.name)
        for call in message.tool_calls:
            n += c.tokens_per_tool_call + count(call.name) + count(call.arguments)
        if message.extra:
            n += self._count_sizes(sent_extras(message))
        return n

    def _count_sizes(self, value: Any) -> int:
        """Tokens of a part or block that is not text, as ``part_sizes`` reads it: its texts
        exactly, an image as ``image_tokens``, opaque data at four characters a token."""
        n = 0
        for size in part_sizes(value):
            if isinstance(size, str):
                n += self.count_text(size)
            else:
                n += self.config.image_tokens if size is None else (size + 3) // 4
        return n

    @hookimpl(trylast=True)
    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        return [self.count_message(m) for m in messages]
