"""Files that plugins write: where they go, and writing them safely.

Every built-in plugin that keeps files (offloaded tool results, JSONL records, session state)
writes under one data folder, by default a per-user folder (see :func:`default_data_dir`),
overridable by ``data_dir`` in the config or the ``COMPACTOR_DATA_DIR`` environment variable. A
plugin's folder setting may start with ``{data_dir}``.

Ids that name files come from outside (session ids, tool-call ids), and the folders may sit where
an agent with a shell can plant symbolic links. So: a name is never a path (:func:`safe_name`),
nothing under a plugin's root is followed if it is a link (each folder on the way is checked with
``lstat``; a file is opened with ``O_NOFOLLOW``, or linked into place, which never follows a link
either), and everything is created owner-only
(folders 0700, files 0600). Whole files are replaced atomically (a temporary file, then a rename),
so a crashed process leaves the old content or the new, never a torn file. (They are not synced
to disk: what a compactor keeps can be rebuilt from the history, and a sync per offload would
cost more than the turn.)
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import stat
import sys
import tempfile
from pathlib import Path

from .errors import StorageError

DATA_DIR_ENV = "COMPACTOR_DATA_DIR"
APP_NAME = "progressive-compactor"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def default_data_dir() -> Path:
    """``$COMPACTOR_DATA_DIR``, else the platform's per-user data folder for this library.

    Linux and other Unix: ``$XDG_DATA_HOME/progressive-compactor`` (``~/.local/share/...``);
    macOS: ``~/Library/Application Support/progressive-compactor``; Windows:
    ``%LOCALAPPDATA%\\progressive-compactor``.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env).expanduser().absolute()
    if sys.platform == "win32":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    elif sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    else:
        base = Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share")
    return (base / APP_NAME).absolute()


def resolve_data_dir(configured: str | None) -> Path:
    """The data folder a config names (``~`` expanded), or :func:`default_data_dir`."""
    if configured:
        return Path(configured).expanduser().absolute()
    return default_data_dir()


def expand_path(template: str, data_dir: str | os.PathLike[str]) -> Path:
    """A plugin's folder setting as an absolute path: ``{data_dir}`` and ``~`` expanded."""
    return Path(template.replace("{data_dir}", str(data_dir))).expanduser().absolute()


def safe_name(value: str) -> str:
    """``value`` if it is a plain file name, else ``_`` and a hash of it: never a path.

    A plain name has letters, digits and ``_ . -``, at most 128 characters, starts with a letter
    or a digit and holds no ``..``.
    """
    if _SAFE.fullmatch(value) and ".." not in value:
        return value
    return "_" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def _check_under(root: Path, path: Path) -> None:
    """Refuse ``path`` unless it lies under ``root`` with no symbolic link on the way."""
    top, target = os.fspath(root), os.fspath(path)  # both normalised by Path: no "." or "//"
    if target == top:
        return
    prefix = top if top.endswith(os.sep) else top + os.sep
    if not target.startswith(prefix):
        raise StorageError(f"refusing {path}: it is not under {root}", path=str(path))
    current = top
    for part in target[len(prefix) :].split(os.sep):
        if part in ("", ".", ".."):
            raise StorageError(f"refusing {path}: '{part}' in the path", path=str(path))
        current = os.path.join(current, part)
        try:
            mode = os.lstat(current).st_mode
        except FileNotFoundError:
            return
        if stat.S_ISLNK(mode):
            raise StorageError(f"refusing {current}: a symbolic link under {root}", path=current)


def private_dir(path: Path, root: Path) -> None:
    """Create ``path`` (``root`` or a folder under it) and whatever of it is missing, each
    folder created owner-only (0700). Folders that exist already are left as they are."""
    _check_under(root, path)
    missing = []
    for folder in [path, *path.parents]:
        if os.path.lexists(folder):
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
    if missing:
        _check_under(root, path)  # a link planted while the folders were made


def write_private(path: Path, data: bytes, root: Path) -> None:
    """Replace ``path`` (under ``root``) by ``data`` atomically, readable by the owner only."""
    tmp = _temp_holding(path, data, root)
    try:
        os.replace(tmp, path)  # a link at ``path`` is replaced, never followed
    except BaseException:
        _remove_quietly(tmp)
        raise


def create_private(path: Path, data: bytes, root: Path) -> bool:
    """Create ``path`` (under ``root``) holding ``data``, owner-only, only if nothing is there:
    True if this call created it, False if it existed. Whole or absent, never partial: the data
    is written to a temporary file first and linked into place."""
    tmp = _temp_holding(path, data, root)
    try:
        os.link(tmp, path)  # fails if anything, a link included, is already at ``path``
        return True
    except FileExistsError:
        return False
    finally:
        _remove_quietly(tmp)


def _temp_holding(path: Path, data: bytes, root: Path) -> str:
    """A temporary file beside ``path`` holding ``data`` whole (written with ``os.write``: a file
    object per write cost a tenth of an offload), or none at all if writing failed."""
    fd, tmp = _temp_beside(path, root)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except BaseException:
        _remove_quietly(tmp)
        raise
    return tmp


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _temp_beside(path: Path, root: Path) -> tuple[int, str]:
    """A new, empty, owner-only file with a random name in ``path``'s folder (made if missing),
    and its path. The folders on the way are checked for links; ``path`` itself needs no check:
    the file is renamed or linked there, which never follows a link."""
    _check_under(root, path.parent)
    try:
        return _temp_file(path.parent)
    except FileNotFoundError:  # the first file of its folder
        private_dir(path.parent, root)
        return _temp_file(path.parent)


def _temp_file(folder: Path) -> tuple[int, str]:
    while True:
        name = os.path.join(folder, f".tmp-{secrets.token_hex(8)}")
        try:
            return os.open(name, os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600), name
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Replace the file at ``path`` (a user's output file) by ``data`` atomically, owner-only
    (0600): an interrupted write leaves the old file whole, never an empty or partial one."""
    target = Path(path).absolute()
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise


def append_line(path: Path, line: str, root: Path) -> None:
    """Append one line to ``path`` (under ``root``), owner-only; a torn last line (a crash
    mid-write) is closed first, so the new line starts on a line of its own."""
    _check_folders(root, path)
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW
    try:
        fd = _open(path, flags, root)
    except FileNotFoundError:  # the first line of the folder
        private_dir(path.parent, root)
        fd = _open(path, flags, root)
    try:
        size = os.fstat(fd).st_size
        prefix = b""
        if size and os.pread(fd, 1, size - 1) != b"\n":
            prefix = b"\n"
        os.write(fd, prefix + line.encode("utf-8", "surrogatepass") + b"\n")
    finally:
        os.close(fd)


def _check_folders(root: Path, path: Path) -> None:
    """:func:`_check_under` for a file opened with ``O_NOFOLLOW``, which refuses a link at
    ``path`` itself: only the folders above it need a look (``path`` too where the flag does not
    exist)."""
    _check_under(root, path.parent if _NOFOLLOW else path)


def _open(path: Path, flags: int, root: Path) -> int:
    """``os.open`` of a file whose folders were checked; a link at ``path`` itself is refused
    with the same error as one on the way."""
    try:
        return os.open(path, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: FreeBSD's answer to O_NOFOLLOW
            raise StorageError(f"refusing {path}: a symbolic link under {root}", path=str(path)) from None
        raise


def read_private(path: Path, root: Path) -> bytes | None:
    """The bytes of ``path`` (under ``root``), or None when it does not exist. A symbolic link
    anywhere under ``root`` is refused, never followed."""
    _check_folders(root, path)
    try:
        fd = _open(path, os.O_RDONLY | _NOFOLLOW, root)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from exc
    with os.fdopen(fd, "rb") as f:
        return f.read()


def remove(path: Path, root: Path) -> bool:
    """Delete ``path`` (a file, or a folder and what it holds) under ``root``; links are removed,
    never followed. Returns whether something was there."""
    _check_under(root, path)
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return False
    if stat.S_ISDIR(mode):
        import shutil

        shutil.rmtree(path)
    else:
        path.unlink()
    return True


def newest_mtime(path: Path) -> float:
    """The newest modification time of a file, or of a folder and everything in it (links
    are not followed)."""
    newest = os.lstat(path).st_mtime
    if os.path.isdir(path) and not os.path.islink(path):
        for folder, dirs, files in os.walk(path):
            for name in dirs + files:
                try:
                    newest = max(newest, os.lstat(os.path.join(folder, name)).st_mtime)
                except OSError:
                    continue
    return newest


__all__ = [
    "DATA_DIR_ENV",
    "append_line",
    "create_private",
    "default_data_dir",
    "expand_path",
    "newest_mtime",
    "private_dir",
    "read_private",
    "remove",
    "resolve_data_dir",
    "safe_name",
    "write_file",
    "write_private",
]
