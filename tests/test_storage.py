"""Writing files safely (progressive_compactor.storage) and keeping secrets out of them
(progressive_compactor.redaction): what every file-keeping plugin relies on."""

from __future__ import annotations

import json
import os
import stat
import sys
import time
from pathlib import Path

import pytest

from progressive_compactor import storage
from progressive_compactor.converters import read_records_file
from progressive_compactor.errors import StorageError
from progressive_compactor.models import Anchor, AnchorType
from progressive_compactor.plugin import PLACEHOLDER_PREFIX
from progressive_compactor.redaction import (
    MASK,
    SecretRegistry,
    connection_passwords,
    mask_credentials,
    mask_passwords,
    redact_data,
)
from progressive_compactor.storage import (
    append_line,
    create_private,
    expand_path,
    keep_private,
    private_dir,
    read_private,
    remove,
    safe_name,
    session_name,
    write_file,
    write_private,
)
from timeouts import no_hang

# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["s1", "ticket-42", "call_0", "a.b-c_d", "x" * 128, "console", "com10", "nul_1"])
def test_a_plain_name_is_kept(value):
    assert safe_name(value) == value


def test_a_session_name_differs_in_more_than_letter_case():
    """Where letter case is ignored, ``Alice`` and ``alice`` would name one file."""
    names = {session_name(sid) for sid in ("alice", "Alice", "ALICE")}
    assert len({name.lower() for name in names}) == 3 and session_name("alice") == "alice"
    assert session_name("../x") == safe_name("../x")  # a name that is no plain name is hashed once


@pytest.mark.parametrize(
    "value",
    [
        *["", ".", "..", "a/b", "../../etc", "/abs", "x\x00y", "-rf", "a..b", "x" * 129, "C:\\evil"],
        # Windows drops a name's trailing dot (``abc.`` is ``abc``) and keeps device names in
        # every folder, with any extension (``nul.txt`` is the null device)
        *["abc.", "nul", "NUL", "con", "aux", "prn", "com1", "LPT9", "nul.txt", "Con.json"],
    ],
)
def test_any_other_name_becomes_a_hash(value):
    name = safe_name(value)
    assert name.startswith("_") and len(name) == 41
    assert "/" not in name and "\\" not in name and ".." not in name
    assert safe_name(value) == name and safe_name(value + "!") != name


def test_a_folder_setting_expands_the_data_dir_and_the_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert expand_path("{data_dir}/records", tmp_path / "data") == tmp_path / "data" / "records"
    assert expand_path("~/x", tmp_path) == tmp_path / "home" / "x"


# --- writing under a root -------------------------------------------------------------------------


def test_a_write_that_fails_leaves_the_old_file_and_no_temporary_one(tmp_path, monkeypatch):
    import errno

    root = tmp_path / "root"
    path = root / "file.txt"
    write_private(path, b"old", root)

    def full_disk(fd, data):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(storage.os, "write", full_disk)
    with pytest.raises(OSError, match="No space left"):
        write_private(path, b"new", root)
    with pytest.raises(OSError, match="No space left"):
        create_private(root / "other.txt", b"new", root)
    assert [p.name for p in root.iterdir()] == ["file.txt"] and path.read_bytes() == b"old"


def test_files_are_written_whole_and_private(tmp_path):
    root = tmp_path / "root"
    path = root / "a" / "b" / "file.txt"
    write_private(path, b"one", root)
    write_private(path, b"two", root)
    assert path.read_bytes() == b"two"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    for folder in (root, root / "a", root / "a" / "b"):
        assert stat.S_IMODE(os.stat(folder).st_mode) == 0o700
    assert [p.name for p in path.parent.iterdir()] == ["file.txt"]  # no temporary file left
    assert read_private(path, root) == b"two"
    assert read_private(root / "missing.txt", root) is None


def test_an_existing_folder_is_left_as_it_is(tmp_path):
    os.chmod(tmp_path, 0o755)
    private_dir(tmp_path / "new", tmp_path)
    assert stat.S_IMODE(os.stat(tmp_path).st_mode) == 0o755
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


@pytest.mark.parametrize("write", [write_private, append_line], ids=["write_private", "append_line"])
def test_a_path_outside_the_root_is_refused(tmp_path, write):
    root = tmp_path / "root"
    data = b"x" if write is write_private else "x"
    for path in (tmp_path / "outside.txt", root / ".." / "outside.txt"):
        with pytest.raises(StorageError, match="refusing"):
            write(path, data, root)
    assert not (tmp_path / "outside.txt").exists()


@pytest.mark.parametrize("write", [write_private, append_line], ids=["write_private", "append_line"])
def test_a_link_under_the_root_is_never_followed(tmp_path, write):
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "s").symlink_to(outside)
    data = b"x" if write is write_private else "x"
    with pytest.raises(StorageError, match="symbolic link"):
        write(root / "s" / "f.txt", data, root)
    assert list(outside.iterdir()) == []


def test_a_link_at_the_file_itself_is_never_followed(tmp_path):
    root, target = tmp_path / "root", tmp_path / "target.txt"
    root.mkdir()
    target.write_text("untouched")
    (root / "records.jsonl").symlink_to(target)
    with pytest.raises(StorageError, match="symbolic link"):
        append_line(root / "records.jsonl", "x", root)
    with pytest.raises(StorageError, match="symbolic link"):
        read_private(root / "records.jsonl", root)
    (root / "result.txt").symlink_to(target)
    assert create_private(root / "result.txt", b"x", root) is False  # taken: the link stays a link
    assert target.read_text() == "untouched" and (root / "result.txt").is_symlink()
    assert [p.name for p in root.iterdir() if p.name.startswith(".tmp-")] == []


def test_keep_private_writes_a_missing_file_only(tmp_path, monkeypatch):
    root = tmp_path / "root"
    path = root / "s" / "f.txt"
    assert keep_private(path, b"text", root) is True
    assert path.read_bytes() == b"text" and stat.S_IMODE(path.stat().st_mode) == 0o600
    written = path.stat().st_ino, path.stat().st_mtime_ns
    monkeypatch.setattr(storage, "_temp_holding", lambda *a: pytest.fail("wrote a file it found"))
    assert keep_private(path, b"text", root) is False  # holds it already: nothing written
    assert keep_private(path, b"other", root) is None  # holds another text, left as it is
    assert path.read_bytes() == b"text" and (path.stat().st_ino, path.stat().st_mtime_ns) == written
    (root / "s" / "link.txt").symlink_to(path)
    with pytest.raises(StorageError, match="symbolic link"):
        keep_private(root / "s" / "link.txt", b"text", root)
    assert sorted(p.name for p in (root / "s").iterdir()) == ["f.txt", "link.txt"]


def test_keep_private_looks_again_when_another_process_made_the_file_meanwhile(tmp_path, monkeypatch):
    root = tmp_path / "root"
    path = root / "f.txt"
    private_dir(root, root)
    real = storage._temp_holding

    def racing(folder, data):  # the other process links its file between the look and the link
        path.write_bytes(b"theirs")
        return real(folder, data)

    monkeypatch.setattr(storage, "_temp_holding", racing)
    assert keep_private(path, b"mine", root) is None
    assert path.read_bytes() == b"theirs" and [p.name for p in root.iterdir()] == ["f.txt"]


def test_reading_through_a_link_is_refused(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    secret = tmp_path / "secret.txt"
    secret.write_text("do not read")
    (root / "f.txt").symlink_to(secret)
    with pytest.raises(StorageError, match="symbolic link"):
        read_private(root / "f.txt", root)


def test_remove_deletes_a_link_not_what_it_points_to(tmp_path):
    root = tmp_path / "root"
    root.mkdir()
    target = tmp_path / "keep"
    target.mkdir()
    (target / "file").write_text("kept")
    (root / "folder").mkdir()
    (root / "folder" / "f").write_text("x")
    assert remove(root / "folder", root) is True and not (root / "folder").exists()
    assert remove(root / "folder", root) is False
    (root / "link").symlink_to(target)
    with pytest.raises(StorageError):
        remove(root / "link" / "file", root)
    assert (target / "file").read_text() == "kept"
    with pytest.raises(StorageError, match="not under"):
        remove(target, root)


# --- a folder swapped for a link, a named pipe planted ----------------------------------------


def swap_before_open(monkeypatch, root: Path, outside: Path, names: tuple[str, ...]) -> list[str]:
    """Make the first ``os.open`` of a file called one of ``names`` (a ``.tmp-`` file too) swap
    the folder ``root/s`` for a link to ``outside`` just before it opens: the moment between the
    check of the folders and the open. The real folder moves to ``root/moved``."""
    real_open, swapped = os.open, []

    def swapping_open(path, flags, *args, **kwargs):
        name = os.path.basename(os.fspath(path))
        if not swapped and (name in names or name.startswith(".tmp-")):
            os.rename(root / "s", root / "moved")
            os.symlink(outside, root / "s")
            swapped.append(name)
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", swapping_open)
    return swapped


@pytest.mark.parametrize(
    "write",
    [
        lambda path, root: write_private(path, b"inside", root),
        lambda path, root: create_private(path, b"inside", root),
        lambda path, root: append_line(path, "inside", root),
        lambda path, root: keep_private(path, b"inside", root),
    ],
    ids=["write_private", "create_private", "append_line", "keep_private"],
)
def test_a_folder_swapped_for_a_link_after_the_check_gets_no_write(tmp_path, monkeypatch, write):
    root, outside = tmp_path / "root", tmp_path / "outside"
    private_dir(root / "s", root)
    outside.mkdir()
    swapped = swap_before_open(monkeypatch, root, outside, ("f.txt",))
    write(root / "s" / "f.txt", root)
    assert swapped and list(outside.iterdir()) == []
    assert (root / "moved" / "f.txt").read_text().strip() == "inside"  # the folder that was checked


def test_a_folder_swapped_for_a_link_after_the_check_is_not_read_through(tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    write_private(root / "s" / "f.txt", b"inside", root)
    outside.mkdir()
    (outside / "f.txt").write_text("outside secret")
    swapped = swap_before_open(monkeypatch, root, outside, ("f.txt",))
    assert read_private(root / "s" / "f.txt", root) == b"inside"
    assert swapped


def test_remove_never_deletes_through_a_folder_swapped_for_a_link(tmp_path, monkeypatch):
    root, outside = tmp_path / "root", tmp_path / "outside"
    write_private(root / "s" / "old" / "f.txt", b"x", root)
    outside.mkdir()
    (outside / "old").mkdir()
    (outside / "old" / "precious.txt").write_text("kept")
    swapped: list = []

    def swapping(real, at):
        """``real``, which swaps the session folder for a link once it has looked at the path ``at`` takes."""

        def look(path, *args, **kwargs):
            result = real(path, *args, **kwargs)
            if not swapped and at(path, kwargs):
                os.rename(root / "s", root / "moved")
                os.symlink(outside, root / "s")
                swapped.append(path)
            return result

        return look

    # the check of the path just before the delete, by path or relative to the folder's descriptor
    monkeypatch.setattr(
        os, "lstat", swapping(os.lstat, lambda path, kw: os.fspath(path) == os.fspath(root / "s" / "old"))
    )
    at_old = lambda path, kw: os.path.basename(os.fspath(path)) == "old" and kw.get("dir_fd") is not None  # noqa: E731
    monkeypatch.setattr(os, "stat", swapping(os.stat, at_old))
    assert remove(root / "s" / "old", root) is True
    monkeypatch.undo()
    assert swapped
    assert (outside / "old" / "precious.txt").read_text() == "kept"
    assert not (root / "moved" / "old").exists()  # what was checked is what went


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_a_named_pipe_is_refused_never_waited_on(tmp_path):
    root = tmp_path / "root"
    private_dir(root, root)
    os.mkfifo(root / "f.txt", 0o600)
    with no_hang():
        with pytest.raises(StorageError, match="f.txt: a named pipe, not a regular file"):
            read_private(root / "f.txt", root)
        with pytest.raises(StorageError, match="a named pipe"):
            append_line(root / "f.txt", "x", root)
        with pytest.raises(StorageError, match="a named pipe"):
            list(read_records_file(root / "f.txt"))
        assert create_private(root / "f.txt", b"x", root) is False  # taken, and left as it is
    assert stat.S_ISFIFO(os.lstat(root / "f.txt").st_mode)
    with pytest.raises(StorageError, match="a folder, not a regular file"):
        read_private(root, tmp_path)


# --- a user's output file -------------------------------------------------------------------------


def test_an_output_file_is_replaced_whole_and_private(tmp_path):
    out = tmp_path / "view.jsonl"
    out.write_bytes(b"old and longer")
    os.chmod(out, 0o644)
    write_file(out, b"new")
    assert out.read_bytes() == b"new" and stat.S_IMODE(os.stat(out).st_mode) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["view.jsonl"]  # no temporary file left


def test_an_output_path_that_is_a_link_writes_to_its_target_and_stays_a_link(tmp_path):
    target = tmp_path / "real.jsonl"
    target.write_bytes(b"old")
    link = tmp_path / "link.jsonl"
    link.symlink_to("real.jsonl")
    write_file(link, b"new")
    assert link.is_symlink() and target.read_bytes() == b"new"
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to("made.jsonl")
    write_file(dangling, b"made")
    assert dangling.is_symlink() and (tmp_path / "made.jsonl").read_bytes() == b"made"


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_an_output_path_that_is_a_named_pipe_or_a_device_is_written_to_not_replaced(tmp_path):
    import threading

    pipe = tmp_path / "view.pipe"
    os.mkfifo(pipe, 0o600)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_bytes()), daemon=True)
    reader.start()
    with no_hang(5):
        write_file(pipe, b"through the pipe")
        reader.join()
    assert got == [b"through the pipe"] and stat.S_ISFIFO(os.lstat(pipe).st_mode)
    link = tmp_path / "null"
    link.symlink_to(os.devnull)
    write_file(link, b"x")
    assert link.is_symlink() and stat.S_ISCHR(os.stat(os.devnull).st_mode)


# --- secrets --------------------------------------------------------------------------------------

KEY = "sk-live-0123456789abcdefXYZ"


LIBPQ_PASSWORDS = [
    (r"host=db password=Sup3r\ S3cret dbname=x", "Sup3r S3cret"),
    (r"host=db password=a\b\'c\\d dbname=x", "ab'c\\d"),
    (r"host=db password='it\'s a \\ \secret' dbname=x", "it's a \\ secret"),
]
"""Keyword connection strings whose password holds a backslash escape, and the password libpq
reads in each."""


@pytest.mark.parametrize("libpq", [True, False], ids=["psycopg", "without-psycopg"])
@pytest.mark.parametrize(("dsn", "password"), LIBPQ_PASSWORDS)
def test_a_keyword_password_is_read_and_masked_as_libpq_reads_it(dsn, password, libpq, monkeypatch):
    from psycopg.conninfo import conninfo_to_dict

    assert conninfo_to_dict(dsn)["password"] == password  # what libpq reads, indeed
    if not libpq:
        monkeypatch.setitem(sys.modules, "psycopg.conninfo", None)  # as if psycopg were not installed
    assert connection_passwords(dsn) == [password]
    assert mask_passwords(dsn) == "host=db password=*** dbname=x"


def test_a_secret_is_masked_in_any_letter_case():
    secrets = SecretRegistry([KEY])
    assert secrets.redact(f"Authorization: Bearer {KEY}") == f"Authorization: Bearer {MASK}"
    assert secrets.redact(KEY.upper()) == MASK
    assert secrets.redact("nothing to hide") == "nothing to hide"


@pytest.mark.parametrize("secret", ['p@ss/w0rd!"x', "sh\\rt+pw=12", "clé-secrète/42"])
def test_a_secret_is_masked_json_escaped_and_url_encoded(secret, make_compactor):
    """A password with a quote, a backslash or a symbol in a tool result that is JSON (``docker
    inspect``, a config file) or a URL (a query string) is written escaped or percent-encoded:
    masked in every such form, and never written so to an offloaded file."""
    from urllib.parse import quote, quote_plus

    forms = {json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], quote(secret, safe="")}
    forms |= {quote_plus(secret), quote(secret, safe="").lower()}
    secrets = SecretRegistry([secret], patterns=False)
    for form in forms:
        assert secrets.redact(f"x {form} y") == f"x {MASK} y", form
    compactor = make_compactor(tool_result_threshold=100)
    compactor.secrets.add(secret)
    text = json.dumps({"Env": [f"DB_PASSWORD={secret}"], "url": f"https://db/?pw={quote(secret)}"}) + "\n" * 200
    placeholder = compactor.offload_tool_result({"role": "tool", "tool_call_id": "c1", "content": text})
    kept = compactor.read_tool_result("test-session/c1")
    assert PLACEHOLDER_PREFIX in placeholder["content"] and kept.count(MASK) == 2
    assert not [form for form in forms if form.lower() in kept.lower()]


def test_a_start_or_an_end_of_a_secret_cut_by_truncation_is_masked():
    secrets = SecretRegistry([KEY])
    assert secrets.redact(f"key={KEY[:14]}[... cut ...]") == f"key={MASK}[... cut ...]"
    assert secrets.redact(f"...{KEY[-12:]} end") == f"...{MASK} end"
    assert KEY[:9] in secrets.redact(f"x {KEY[:9]} y")  # shorter than a piece: ordinary text


def test_text_made_of_masked_parts_is_masked_again_for_registered_secrets_alone():
    """A record, a state or the compaction message is made of texts masked as they came in: only
    a secret registered since may be new in it, and formats are not searched again."""
    secrets = SecretRegistry([KEY])
    aws = "AKIAIOSFODNN7EXAMPLE"
    assert secrets.redact(f"{KEY} {aws}") == f"{MASK} {MASK}"
    assert secrets.redact_registered(f"{KEY} {aws}") == f"{MASK} {aws}"
    assert SecretRegistry().redact_registered(f"{KEY}") == KEY


def test_data_is_masked_string_by_string_and_comes_back_as_it_is_when_nothing_is_masked():
    secrets = SecretRegistry([KEY])
    clean = {"a": ["x", ("y", 1)], "b": Anchor(AnchorType.NEXT_STEP, "run the tests")}
    assert redact_data(clean, secrets.redact) is clean
    dirty = {"a": ["x", (f"key {KEY}", 1)], "b": Anchor(AnchorType.NEXT_STEP, f"use {KEY}")}
    assert redact_data(dirty, secrets.redact) == {
        "a": ["x", (f"key {MASK}", 1)],
        "b": Anchor(AnchorType.NEXT_STEP, f"use {MASK}"),
    }


def test_short_values_are_not_registered():
    secrets = SecretRegistry(["abc", "", None])
    assert not secrets
    assert secrets.redact("abc") == "abc"


def test_secret_settings_and_secret_looking_extra_headers_are_registered(monkeypatch):
    from types import SimpleNamespace

    from progressive_compactor.redaction import config_secrets

    monkeypatch.setenv("SOME_KEY_VARIABLE", "value-of-the-env-key")
    config = SimpleNamespace(
        config={
            "summarize-openai": {
                "api_key_env": "SOME_KEY_VARIABLE",
                "max_tokens_field": "max_tokens",
                "extra_headers": {
                    "api-key": "azure-key-0123456789",
                    "Helicone-Auth": "Bearer helicone-key-0123456789",
                    "Proxy-Authorization": "Basic dXNlcjpwcm94eS1wYXNz",
                    "anthropic-beta": "prompt-caching-2024-07-31",  # not a secret: masking its
                    "Content-Type": "application/json",  # ends would mangle ordinary text
                },
            },
            "my-plugin": {"client_secret": "client-secret-value", "password": "plain-password", "model": "gpt-x"},
        }
    )
    found = config_secrets(config)
    assert set(found) == {
        "value-of-the-env-key",
        "azure-key-0123456789",
        "helicone-key-0123456789",
        "dXNlcjpwcm94eS1wYXNz",
        "client-secret-value",
        "plain-password",
    }


# --- credentials nobody registered --------------------------------------------------------------

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"
FOUND = [
    # (text, the credential in it)
    ("OPENAI_API_KEY=sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789", "sk-proj-AbCdEfGhIjKlMnOpQrStUvWxYz0123456789"),
    (
        "key: sk-ant-api03-Xy9aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789.",
        "sk-ant-api03-Xy9aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789",
    ),
    (
        "remote: https://x-access:ghp_16C7e42F292c6912E7710c838347Ae178B4a@github.com",
        "ghp_16C7e42F292c6912E7710c838347",
    ),
    ("Authorization: token github_pat_11ABCDEFG0123456789_abcdefghijklmnop", "github_pat_11ABCDEFG0123456789"),
    ("aws_access_key_id = AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7EXAMPLE"),
    ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("SLACK_BOT_TOKEN=xoxb-123456789012-abcdefABCDEF", "xoxb-123456789012-abcdefABCDEF"),
    ("maps?key=AIzaSyA1234567890abcdefghijklmnopqrstuv", "AIzaSyA1234567890abcdefghijklmnopqrstuv"),
    ("stripe.api_key = 'sk_live_51H8abcdefghijklmnopqrstuv'", "sk_live_51H8abcdefghijklmnopqrstuv"),
    (f"Cookie: session={JWT}", JWT),
    ("curl -H 'Authorization: Bearer eAbCdEf0123456789GhIjKlMn' https://api", "eAbCdEf0123456789GhIjKlMn"),
    ("DATABASE_URL=postgresql://app:hunter2-prod-pw@db.internal:5432/prod", "hunter2-prod-pw"),
    ("redis://:S3cr3t!pass@cache:6379/0", "S3cr3t!pass"),
    ("postgresql://app:p@ssw0rd-prod@db:5432/x", "ssw0rd-prod"),  # a URL parser splits at the last "@"
    ("host=db user=app password=Tr0ub4dor!3x dbname=prod", "Tr0ub4dor!3x"),
    ('{"username": "app", "password": "Tr0ub4dor!3x"}', "Tr0ub4dor!3x"),
    ("  client_secret: 8f3c2a91-77d4-4c1e-9b2a-0d6e5f4c3b2a", "8f3c2a91-77d4-4c1e-9b2a-0d6e5f4c3b2a"),
    ('SECRET_KEY = "django-insecure-9x#k2m@p4q"', "django-insecure-9x#k2m@p4q"),
    (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nBG5vbmUAAAAEbm9uZQ==\n-----END OPENSSH PRIVATE KEY-----",
        "b3BlbnNzaC1rZXktdjEAAAAA",
    ),
    (  # a key block cut before its END line (head -3, a tool's output limit): masked to the cut
        "$ head -3 ~/.ssh/id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n"
        "MIIEpAIBAAKCAQEAu1SU1LfVLPHCozMxH2Mo4lgOEePzNm0tRgeLezV6ffAt0gun\nVTLw7onLRnrq0/IzW7yWR7QkrmBL7jTK",
        "VTLw7onLRnrq0/IzW7yWR7QkrmBL7jTK",
    ),
]
ORDINARY = [
    "commit 3f786850e387550fdab836ed7e6dc881de23001b\nAuthor: Dev <dev@example.com>\nMerge: 1a2b3c4 5d6e7f8",
    "session 123e4567-e89b-12d3-a456-426614174000 started; request_id=9b2a0d6e-5f4c-3b2a-8f3c-2a9177d44c1e",
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855  README.md",
    '"integrity": "sha512-Dj5FEdMx/1cnR6uUWMvYHuwRk0DX1PFy8YkyxwbaNLRGAvPtTzQWjH1lzS1uxozuKJTFTvr6mhQwUKOfB0ytGw=="',
    "image: python@sha256:4f53cda18c2baa0c0354bb5f9a3ecbe5ed12ab4d8e11ba873c2f11161202b945",
    "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==",
    "SGVsbG8sIHdvcmxkISBUaGlzIGlzIGp1c3QgYSBtZXNzYWdlIGluIGJhc2U2NC4=",
    'password = request.POST["password"]\nif not check_password(password, user.password_hash):\n    raise AuthError',
    "def login(user: str, password: str, token: Optional[str] = None) -> Token:\n    self.password = password",
    'client = OpenAI(api_key=os.environ["OPENAI_API_KEY"])\ntoken = tokens[0]\nsecret = get_secret()',
    "response = client.chat(max_tokens=4096, temperature=0.2)  # token: 5 per word",
    "tests/test_auth.py::test_token_expiry PASSED\nE   AssertionError: invalid token: expected 3 parts",
    "scikit-learn==1.4.0\nsk-learn is not a package\ntask-runner-abcdefghijklmnop",
    "git@github.com:org/repo.git\nhttps://registry.npmjs.org:443/@types/node\nhttps://example.com/a?b=c",
    "-rw-r--r--  1 dev staff  4096 Jan  2 10:11 .env.example\ndrwx------  5 dev staff   160 token_cache",
    "styles = {Token: '#cccccc', Comment: '#75715e'}\nAPI_KEY=your_api_key_here\nPASSWORD=changeme",
    "postgresql://app:***@db:5432/agents password=*** [REDACTED]",
    "PEM = \"-----BEGIN RSA PRIVATE KEY-----\\n\"\nif line.startswith('-----BEGIN PRIVATE KEY-----'):\n    key = []",
]


@pytest.mark.parametrize("text, credential", FOUND, ids=[t.split("=")[0].split(":")[0][:24] for t, _ in FOUND])
def test_credentials_of_well_known_formats_are_masked_though_nobody_registered_them(text, credential):
    masked = SecretRegistry().redact(text)
    assert credential not in masked and MASK in masked
    assert SecretRegistry(patterns=False).redact(text) == text  # mask_credentials: false
    assert mask_credentials(masked) == masked  # masking again changes nothing


@pytest.mark.parametrize("text", ORDINARY, ids=range(len(ORDINARY)))
def test_ordinary_text_code_hashes_and_ids_are_not_masked(text):
    assert SecretRegistry().redact(text) == text


def test_masking_json_text_leaves_valid_json():
    # the writers mask records and state after serialising them too: quotes and escapes stay whole
    data = {f"k{i}": text for i, (text, _) in enumerate(FOUND)} | {"q": 'password="Tr0ub4dor!3x\\"', "n": "a\\"}
    masked = mask_credentials(json.dumps(data))
    assert all(credential not in masked for _, credential in FOUND)
    assert set(json.loads(masked)) == set(data)


@pytest.mark.parametrize(
    "text",
    [
        "password=" * 100_000 + "(",
        "-----BEGIN PRIVATE KEY-----\n" * 30_000,
        "://x:" * 200_000,
        "token " * 200_000,
        " sk-" + "a" * 1_000_000,
        "password=" + "a." * 500_000,
    ],
    ids=["settings", "key blocks", "urls", "schemes", "prefix", "dotted"],
)
def test_masking_takes_linear_time_whatever_the_text(text):
    started = time.perf_counter()
    mask_credentials(text)
    assert time.perf_counter() - started < 2.0  # about 20 ms a megabyte; quadratic would take minutes


def test_the_registry_is_part_of_the_plugin_api_and_of_the_testing_helpers():
    from progressive_compactor import plugin, testing

    assert plugin.SecretRegistry is SecretRegistry is testing.SecretRegistry
