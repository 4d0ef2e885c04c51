"""``tokens-tiktoken``: exact counts of OpenAI encodings, from BPE files shipped in the package.

tiktoken downloads its BPE files at run time; this plugin must never do so. The files it ships
are checked against tiktoken's own definition of each encoding (the SHA-256 it expects of the
download, its split pattern and special tokens), and a fresh interpreter with the network cut off
and an empty tiktoken cache counts a whole compaction.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

tiktoken = pytest.importorskip("tiktoken", reason="the [tiktoken] extra is not installed")

from progressive_compactor import CompactionTier  # noqa: E402
from progressive_compactor.errors import ConfigError  # noqa: E402
from progressive_compactor.messages import message_from_dict  # noqa: E402
from progressive_compactor.plugins import tokens_tiktoken  # noqa: E402
from progressive_compactor.plugins.tokens_tiktoken import ENCODINGS, TiktokenTokens, bpe_file, encoding  # noqa: E402
from progressive_compactor.testing import build_history, problems  # noqa: E402
from timeouts import forked_while_held  # noqa: E402

SAMPLES = [
    "hello world",
    "def parse(text: str) -> list[int]:\n    return [int(x) for x in text.split(',')]\n",
    "Ünïcödé, 日本語のテキスト, emoji 🎉 and <|endoftext|> as plain text",
    "   leading spaces\n\n\ttabs\r\nand CRLF   ",
    '{"command": "pytest -q tests/test_io.py::test_flaky", "timeout": 120}',
]


def tiktoken_definition(name: str, monkeypatch):
    """tiktoken's own constructor of ``name`` (``tiktoken_ext.openai_public``), with its
    download replaced by our file: what it asks for and what it builds."""
    from tiktoken_ext import openai_public

    asked = {}

    def load(blobpath, expected_hash=None):
        asked.update(blobpath=blobpath, expected_hash=expected_hash)
        return encoding(name)._mergeable_ranks

    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", load)
    return getattr(openai_public, name)(), asked


@pytest.mark.parametrize("name", sorted(ENCODINGS))
def test_the_shipped_encodings_are_tiktokens_own(name, monkeypatch):
    definition, asked = tiktoken_definition(name, monkeypatch)
    assert asked["blobpath"].endswith(f"/{name}.tiktoken")
    assert asked["expected_hash"] == ENCODINGS[name]["sha256"]  # the file is the one tiktoken downloads
    ours = encoding(name)
    assert ours._pat_str == definition["pat_str"]
    assert ours._special_tokens == definition["special_tokens"]
    theirs = tiktoken.Encoding(
        name=f"{name}-reference",
        pat_str=definition["pat_str"],
        mergeable_ranks=definition["mergeable_ranks"],
        special_tokens=definition["special_tokens"],
    )
    for text in SAMPLES:
        assert ours.encode_ordinary(text) == theirs.encode_ordinary(text)
    assert len(bpe_file(name)) > 1_000_000


def test_known_token_ids():
    assert encoding("o200k_base").encode_ordinary("hello world") == [24912, 2375]
    assert encoding("cl100k_base").encode_ordinary("hello world") == [15339, 1917]


def test_messages_count_with_the_chat_format_overhead():
    plugin = TiktokenTokens()
    enc = encoding("o200k_base")

    def n(text):
        return len(enc.encode_ordinary(text))

    user = message_from_dict({"role": "user", "content": "hello world"})
    named = message_from_dict({"role": "user", "name": "alice", "content": "hello world"})
    call = message_from_dict(
        {
            "role": "assistant",
            "content": "Let me look.",
            "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": '{"command": "ls"}'}}
            ],
        }
    )
    parts = message_from_dict(
        {
            "role": "user",
            "content": [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": "x"}}],
        }
    )
    counts = plugin.estimate_tokens([user, named, call, parts])
    assert counts[0] == 3 + n("user") + n("hello world") == 6
    assert counts[1] == 3 + n("user") + n("hello world") + 1 + n("alice")
    assert counts[2] == 3 + n("assistant") + n("Let me look.") + 3 + n("bash") + n('{"command": "ls"}')
    assert counts[3] == 3 + n("user") + n("what is this?") + 85
    cl100k = TiktokenTokens(TiktokenTokens.Config(encoding="cl100k_base", tokens_per_message=4))
    assert cl100k.estimate_tokens([user])[0] == 4 + len(encoding("cl100k_base").encode_ordinary("user")) + 2


def test_text_the_estimate_gets_wrong_is_counted_exactly():
    """Characters ÷ 4 is far off on some text; the exact count is what the model sees."""
    plugin = TiktokenTokens()
    digits = message_from_dict({"role": "user", "content": "7" * 3000})
    cjk = message_from_dict({"role": "user", "content": "日本語のテキスト" * 300})
    assert plugin.estimate_tokens([digits])[0] == 3 + 1 + 1000  # three digits to a token: 1000, not 750
    assert plugin.estimate_tokens([cjk])[0] != 2400 // 4


@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork on this platform")
@pytest.mark.parametrize("lock", ["encoding", "counts"])
def test_a_worker_forked_while_a_thread_holds_a_lock_counts(lock):
    """Forked while another thread builds an encoding (a fraction of a second) or keeps a count:
    the child counts."""
    plugin = TiktokenTokens()
    held = tokens_tiktoken._lock if lock == "encoding" else plugin._lock
    digits = message_from_dict({"role": "user", "content": "7" * 3000})
    assert forked_while_held(held, lambda: plugin.estimate_tokens([digits])[0]) == 3 + 1 + 1000


def test_lone_surrogates_are_counted_not_raised():
    message = message_from_dict({"role": "user", "content": "bad \ud800 text"})
    assert TiktokenTokens().estimate_tokens([message])[0] > 3


def test_a_compactor_counts_with_it(make_compactor):
    history = build_history([3000] * 12)
    plugin = TiktokenTokens()
    messages = [message_from_dict(m, i) for i, m in enumerate(history)]
    exact = sum(plugin.estimate_tokens(messages))
    compactor = make_compactor(context_window=int(exact / 0.85), plugins={"tokens": "tokens-tiktoken"})
    view, record = compactor.compact_with_record(history, "s")
    assert record.token_method == "tokens-tiktoken"
    assert record.tokens_before == exact
    assert record.tier is CompactionTier.FULL
    assert problems(view) == []
    assert record.tokens_after == sum(plugin.estimate_tokens([message_from_dict(m, i) for i, m in enumerate(view)]))


def test_an_unknown_encoding_is_refused(make_compactor):
    with pytest.raises(ConfigError, match="encoding must be o200k_base or cl100k_base, got p50k_base"):
        make_compactor(plugins={"tokens": "tokens-tiktoken"}, config={"tokens-tiktoken": {"encoding": "p50k_base"}})


def test_the_cache_does_not_keep_the_texts_it_counted():
    """A process that compacts many sessions counts many large tool results: the cache holds a
    count per text, not the texts (their memory goes with the sessions)."""
    import gc
    import tracemalloc

    plugin = TiktokenTokens()
    plugin.count_text("warm up")  # the encoding is built before the measure
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        counts = [plugin.count_text(f"result {i}: " + "word " * 40_000) for i in range(20)]
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert counts[0] == len(encoding("o200k_base").encode_ordinary("result 0: " + "word " * 40_000))
    assert kept < 500_000  # 20 texts of 200,000 characters: 4 MB if the cache kept them
    assert plugin.count_text("result 3: " + "word " * 40_000) == counts[3]


def test_without_tiktoken_the_config_is_refused_when_it_loads(make_compactor, monkeypatch):
    """Not at the first compaction, in the middle of an agent's run."""
    monkeypatch.setitem(sys.modules, "tiktoken", None)
    with pytest.raises(
        ConfigError, match=r"tokens-tiktoken needs tiktoken: pip install 'progressive-compactor\[tiktoken\]'"
    ):
        make_compactor(plugins={"tokens": "tokens-tiktoken"})


NETWORK_OFF = r"""
import json, os, socket, sys
attempts = []
def refuse(*args, **kwargs):
    attempts.append(repr(args[:2]))
    raise OSError("network is off in this test")
socket.socket.connect = refuse
socket.socket.connect_ex = refuse
socket.create_connection = refuse
socket.getaddrinfo = refuse
import tiktoken.load
def no_download(blobpath):
    attempts.append(blobpath)
    raise OSError("tiktoken tried to download " + blobpath)
tiktoken.load.read_file = no_download
from progressive_compactor import ProgressiveCompactor
history = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
counts = {}
for name in ("o200k_base", "cl100k_base"):
    compactor = ProgressiveCompactor("default", context_window=8000, data_dir=sys.argv[2],
                                     plugins={"tokens": "tokens-tiktoken"},
                                     config={"tokens-tiktoken": {"encoding": name}})
    view, record = compactor.compact_with_record(history, "offline")
    counts[name] = [record.tokens_before, record.tier.name, record.token_method]
print(json.dumps({"attempts": attempts, "counts": counts, "cache": os.listdir(os.environ["TIKTOKEN_CACHE_DIR"])}))
"""


def test_it_works_with_the_network_off(tmp_path):
    history = build_history([3000] * 10)
    source = tmp_path / "history.jsonl"
    source.write_text("\n".join(json.dumps(m) for m in history), "utf-8")
    cache = tmp_path / "tiktoken-cache"
    cache.mkdir()
    env = {k: v for k, v in __import__("os").environ.items() if not k.endswith("_PROXY") and not k.endswith("_proxy")}
    env["TIKTOKEN_CACHE_DIR"] = str(cache)
    out = subprocess.run(
        [sys.executable, "-c", NETWORK_OFF, str(source), str(tmp_path / "data")],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    )
    result = json.loads(out.stdout)
    assert result["attempts"] == []
    assert result["cache"] == []  # tiktoken's download cache was never written either
    messages = [message_from_dict(m, i) for i, m in enumerate(history)]
    for name in ("o200k_base", "cl100k_base"):
        plugin = TiktokenTokens(TiktokenTokens.Config(encoding=name))
        assert result["counts"][name] == [sum(plugin.estimate_tokens(messages)), "EMERGENCY", "tokens-tiktoken"]


def test_the_files_and_their_license_are_package_data():
    folder = Path(tokens_tiktoken.__file__).parent / "tiktoken"
    assert sorted(p.name for p in folder.iterdir()) == ["LICENSE", "cl100k_base.tiktoken.gz", "o200k_base.tiktoken.gz"]
    assert "MIT License" in (folder / "LICENSE").read_text("utf-8")
    pyproject = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text("utf-8")
    assert '"progressive_compactor.plugins" = ["tiktoken/*.tiktoken.gz", "tiktoken/LICENSE"]' in pyproject


def test_blocks_and_parts_that_are_not_text_count_by_what_they_send():
    """A thinking block carried for Anthropic counts as its text, a PDF's data by its size, a
    refusal by its text: neither nothing nor one image each, as the character estimate counts them."""
    from progressive_compactor.messages import from_anthropic, messages_from_dicts

    plugin = TiktokenTokens()
    enc = encoding("o200k_base")

    def n(text):
        return len(enc.encode_ordinary(text))

    thinking = "Let me weigh the options before I call the tool. " * 400
    pdf = "JVBERi0xLjcKJcfsj6IK" * 1000
    turn = [
        {
            "role": "user",
            "content": [
                {"type": "document", "source": {"type": "base64", "media_type": "application/pdf", "data": pdf}},
                {"type": "text", "text": "Check it"},
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": thinking, "signature": "EqQB" * 25},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {}},
            ],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.py"}]},
    ]
    user, thinker, result = messages_from_dicts(from_anthropic(turn))
    counts = plugin.estimate_tokens([user, thinker, result])
    assert counts[0] == 3 + n("user") + 85 + len(pdf) // 4 + n("application/pdf") + n("Check it")
    assert counts[1] == 3 + n("assistant") + n(thinking) + 100 // 4 + 3 + n("bash") + n("{}")
    assert counts[1] > len(thinking) // 5
    refusal = "I can't help with that. " * 200
    parts = message_from_dict({"role": "assistant", "content": [{"type": "refusal", "refusal": refusal}]})
    assert plugin.estimate_tokens([parts])[0] == 3 + n("assistant") + n(refusal)


def test_what_a_message_sends_in_keys_of_its_own_is_counted():
    plugin = TiktokenTokens()
    enc = encoding("o200k_base")
    reasoning = "First, check the imports. " * 800
    plain = message_from_dict({"role": "assistant", "content": "Done."})
    thinker = message_from_dict({"role": "assistant", "content": "Done.", "reasoning_content": reasoning})
    counts = plugin.estimate_tokens([plain, thinker])
    assert counts[1] == counts[0] + len(enc.encode_ordinary(reasoning)) > 4000
