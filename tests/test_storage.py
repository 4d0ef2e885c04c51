"""Writing files safely (progressive_compactor.storage) and keeping secrets out of them
(progressive_compactor.redaction): what every file-keeping plugin relies on."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from progressive_compactor.converters import read_records_file
from progressive_compactor.errors import StorageError
from progressive_compactor.redaction import MASK, SecretRegistry
from progressive_compactor.storage import (
    append_line,
    create_private,
    expand_path,
    private_dir,
    read_private,
    remove,
    safe_name,
    write_private,
)
from timeouts import no_hang

# --- names ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["s1", "ticket-42", "call_0", "a.b-c_d", "x" * 128])
def test_a_plain_name_is_kept(value):
    assert safe_name(value) == value


@pytest.mark.parametrize(
    "value", ["", ".", "..", "a/b", "../../etc", "/abs", "x\x00y", "-rf", "a..b", "x" * 129, "C:\\evil"]
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

    from progressive_compactor import storage

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
    ],
    ids=["write_private", "create_private", "append_line"],
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
    real_lstat, swapped = os.lstat, []

    def swapping_lstat(path, *args, **kwargs):  # the check of the path, just before the delete
        if not swapped and os.fspath(path) == os.fspath(root / "s" / "old"):
            result = real_lstat(path, *args, **kwargs)
            os.rename(root / "s", root / "moved")
            os.symlink(outside, root / "s")
            swapped.append(path)
            return result
        return real_lstat(path, *args, **kwargs)

    real_stat = os.stat

    def swapping_stat(path, *args, **kwargs):
        if not swapped and os.path.basename(os.fspath(path)) == "old" and kwargs.get("dir_fd") is not None:
            result = real_stat(path, *args, **kwargs)
            os.rename(root / "s", root / "moved")
            os.symlink(outside, root / "s")
            swapped.append(path)
            return result
        return real_stat(path, *args, **kwargs)

    monkeypatch.setattr(os, "lstat", swapping_lstat)
    monkeypatch.setattr(os, "stat", swapping_stat)
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


# --- secrets --------------------------------------------------------------------------------------

KEY = "sk-live-0123456789abcdefXYZ"


def test_a_secret_is_masked_in_any_letter_case():
    secrets = SecretRegistry([KEY])
    assert secrets.redact(f"Authorization: Bearer {KEY}") == f"Authorization: Bearer {MASK}"
    assert secrets.redact(KEY.upper()) == MASK
    assert secrets.redact("nothing to hide") == "nothing to hide"


def test_a_start_or_an_end_of_a_secret_cut_by_truncation_is_masked():
    secrets = SecretRegistry([KEY])
    assert secrets.redact(f"key={KEY[:14]}[... cut ...]") == f"key={MASK}[... cut ...]"
    assert secrets.redact(f"...{KEY[-12:]} end") == f"...{MASK} end"
    assert KEY[:9] in secrets.redact(f"x {KEY[:9]} y")  # shorter than a piece: ordinary text


def test_short_values_are_not_registered():
    secrets = SecretRegistry(["abc", "", None])
    assert not secrets
    assert secrets.redact("abc") == "abc"


def test_secret_settings_and_every_extra_header_are_registered(monkeypatch):
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


def test_the_registry_is_part_of_the_plugin_api_and_of_the_testing_helpers():
    from progressive_compactor import plugin, testing

    assert plugin.SecretRegistry is SecretRegistry is testing.SecretRegistry
