"""Files that plugins write: where they go, and writing them safely.

Every built-in plugin that keeps files (offloaded tool results, JSONL records, session state)
writes under one data folder, by default a per-user folder (see :func:`default_data_dir`),
overridable by ``data_dir`` in the config or the ``COMPACTOR_DATA_DIR`` environment variable. A
plugin's folder setting may start with ``{data_dir}``.

Ids that name files come from outside (session ids, tool-call ids), and the folders may sit where
an agent with a shell can plant symbolic links, named pipes, or swap a folder for a link at any
moment. So: a name is never a path (:func:`safe_name`); nothing under a plugin's root is followed
if it is a link, and a plugin's root is the data folder when its folder is in it
(:func:`root_for`), so its own folder is never followed either. The folders are opened one at a
time from the root (``O_DIRECTORY | O_NOFOLLOW``) and each file is made, opened, linked, renamed
or deleted relative to its folder's descriptor, so a folder swapped for a link after the walk
changes nothing. A file is opened with ``O_NOFOLLOW | O_NONBLOCK`` and anything but a regular file
(a named pipe, a device) is refused rather than waited on. Everything is created owner-only
(folders 0700, files 0600). Whole files are replaced atomically (a temporary file, then a rename),
so a crashed process leaves the old content or the new, never a torn file. (They are not synced
to disk: what a compactor keeps can be rebuilt from the history, and a sync per offload would
cost more than the turn.)
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import secrets
import stat
import sys
import tempfile
from pathlib import Path
from typing import Callable, Iterator

from .errors import StorageError

DATA_DIR_ENV = "COMPACTOR_DATA_DIR"
APP_NAME = "progressive-compactor"
_SAFE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,127}")
_DEVICE = re.compile(r"(?i)(?:con|prn|aux|nul|com[0-9]|lpt[0-9])(?:\..*)?")
"""Names Windows keeps for its devices in every folder, with any extension (``nul.txt``)."""
_HASHED = re.compile(r"_[0-9a-f]{40}")
_LEFTOVER = re.compile(r"\.tmp-[0-9a-f]{16}|\..+\.tmp-[a-z0-9_]{8}")
"""The temporary files of :func:`write_private` and :func:`create_private` (``.tmp-`` and 16 hex
digits) and of :func:`write_file` (``.NAME.tmp-`` and 8 of ``tempfile``'s letters)."""
LEFTOVER_AGE = 3600.0
"""Seconds after its last write that a temporary file is a leftover of a crashed writer: a writer
renames (or links) its file right after writing it, with no sync in between, so an hour is a
stalled or killed process, never a live write."""
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_FOLDER = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | _CLOEXEC
_NEW_FILE = os.O_RDWR | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC
_FD_WALK = bool(_NOFOLLOW and getattr(os, "O_DIRECTORY", 0)) and (
    {os.open, os.mkdir, os.stat, os.link, os.rename, os.unlink, os.rmdir} <= os.supports_dir_fd
    and os.scandir in os.supports_fd
)
"""Whether folders are walked by descriptor (every POSIX system): elsewhere (Windows) each folder
is checked with ``lstat`` before it is used, which a process swapping folders at that very moment
can get past."""


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
    or a digit, holds no ``..``, does not end with ``.`` and is not a name Windows keeps for a
    device (``nul``, ``con.txt``): there, ``abc.`` is ``abc`` and ``nul.txt`` the null device.
    """
    if _SAFE.fullmatch(value) and ".." not in value and not value.endswith(".") and not _DEVICE.fullmatch(value):
        return value
    return _hashed(value)


def session_name(session_id: str) -> str:
    """The name a session's files, folders and handles are kept under: :func:`safe_name`'s, and
    hashed too when it has an upper-case letter. On a case-insensitive file system (macOS's and
    Windows' defaults) ``Alice`` and ``alice`` would name one file, and each session would read
    the other's results, records and state."""
    name = safe_name(session_id)
    return _hashed(session_id) if name != name.lower() else name


def _hashed(value: str) -> str:
    return "_" + hashlib.sha256(value.encode("utf-8", "surrogatepass")).hexdigest()[:40]


def made_by_safe_name(name: str) -> bool:
    """Whether :func:`safe_name`, of this version or an earlier one, could have made ``name``: a
    plain name, or ``_`` and 40 hex digits. A plugin lists and deletes only such files and
    folders: anything else in its folder was put there by someone else."""
    plain = _SAFE.fullmatch(name) is not None and ".." not in name
    return plain or _HASHED.fullmatch(name) is not None


def listed_id(name: str, stored: object) -> str:
    """The session a plugin lists for its file or folder ``name``: the id stored with it when
    :func:`safe_name` makes ``name`` of it, else ``name`` itself (the id was lost, or names
    another file), under which it is listed and deleted."""
    return stored if isinstance(stored, str) and session_name(stored) == name else name


def lost_its_id(session_id: str, session_of: Callable[[str], str]) -> bool:
    """Whether ``session_id`` is the name of a hashed file or folder whose id is lost (listed under
    its own name by ``session_of``, a plugin's :func:`listed_id` of a name): what deleting that
    session must remove besides ``session_name(session_id)``."""
    return (
        session_id != session_name(session_id)
        and made_by_safe_name(session_id)
        and session_of(session_id) == session_id
    )


def root_for(folder: str | os.PathLike[str], data_dir: str | os.PathLike[str]) -> Path:
    """The ``root`` to pass to the helpers of this module for a plugin's ``folder``: the data
    folder when ``folder`` is in it, else the folder above ``folder``. So neither the plugin's
    folder nor any folder between it and the data folder is followed if it is a symbolic link
    (the data folder itself may be one: the user chose it)."""
    top, folder = Path(data_dir), Path(folder)
    if folder == top or top in folder.parents:
        return top
    return folder.parent


class _Folder:
    """A folder opened on the way down from a root: its descriptor, which later calls use with
    ``dir_fd`` so that a folder swapped for a link meanwhile changes nothing, or, where there are
    no such calls (``fd`` None), its path, checked with ``lstat``. Pass ``at(name)`` with
    ``dir_fd=fd``."""

    __slots__ = ("fd", "path")

    def __init__(self, fd: int | None, path: str) -> None:
        self.fd = fd
        self.path = path

    def at(self, name: str) -> str:
        return name if self.fd is not None else os.path.join(self.path, name)

    def scan(self) -> list[os.DirEntry[str]]:
        with os.scandir(self.fd if self.fd is not None else self.path) as entries:
            return sorted(entries, key=lambda entry: entry.name)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)


def _parts(root: Path, path: Path) -> list[str]:
    """The names from ``root`` down to ``path`` (none for ``root`` itself); a path that is not
    under ``root``, or holds ``..`` on the way, is refused."""
    top, target = os.fspath(root), os.fspath(path)  # both normalised by Path: no "." or "//"
    if target == top:
        return []
    prefix = top if top.endswith(os.sep) else top + os.sep
    if not target.startswith(prefix):
        raise StorageError(f"refusing {path}: it is not under {root}", path=str(path))
    parts = target[len(prefix) :].split(os.sep)
    for part in parts:
        if part in ("", ".", ".."):
            raise StorageError(f"refusing {path}: '{part}' in the path", path=str(path))
    return parts


def _link_refused(path: str, root: Path) -> StorageError:
    return StorageError(
        f"refusing {path}: a symbolic link under {root}, where links are never followed "
        "(remove the link; to keep the files elsewhere, name that folder in the config)",
        path=path,
    )


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _make_missing(folder: Path) -> None:
    """Create ``folder`` and its missing parents, each owner-only (0700)."""
    missing = []
    for each in [folder, *folder.parents]:
        if os.path.lexists(each):
            break
        missing.append(each)
    for each in reversed(missing):
        try:
            each.mkdir(mode=0o700)
        except FileExistsError:
            pass


def _open_root(root: Path, create: bool) -> _Folder:
    """``root`` opened (it and the folders above it may be links: they are the user's choice),
    made first with its missing parents if ``create``."""
    if not _FD_WALK:
        if create and not os.path.isdir(root):
            _make_missing(root)
        if not os.path.isdir(root):
            raise FileNotFoundError(errno.ENOENT, "no such folder", str(root))
        return _Folder(None, os.fspath(root))
    try:
        return _Folder(os.open(root, _FOLDER), os.fspath(root))
    except FileNotFoundError:
        if not create:
            raise
    _make_missing(root)
    return _Folder(os.open(root, _FOLDER), os.fspath(root))


def _open_below(parent: _Folder, name: str, create: bool, root: Path) -> _Folder:
    """The folder ``name`` of ``parent`` opened, never through a link (refused), made owner-only
    first if it is missing and ``create``."""
    path = os.path.join(parent.path, name)
    for attempt in (1, 2):
        try:
            if parent.fd is None:
                mode = os.lstat(path).st_mode
                if not stat.S_ISDIR(mode):
                    raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR), path)
                return _Folder(None, path)
            return _Folder(os.open(name, _FOLDER | _NOFOLLOW, dir_fd=parent.fd), path)
        except FileNotFoundError:
            if not create or attempt == 2:
                raise
            try:
                os.mkdir(parent.at(name), 0o700, dir_fd=parent.fd)
            except FileExistsError:
                pass
        except OSError as exc:  # ENOTDIR for a link with O_DIRECTORY, ELOOP or EMLINK without
            if exc.errno not in (errno.ENOTDIR, errno.ELOOP, errno.EMLINK):
                raise
            if stat.S_ISLNK(os.stat(parent.at(name), dir_fd=parent.fd, follow_symlinks=False).st_mode):
                raise _link_refused(path, root) from None
            raise
    raise AssertionError("unreachable")  # pragma: no cover


@contextlib.contextmanager
def _opened(root: Path, parts: list[str], create: bool) -> Iterator[_Folder]:
    """The folder ``root/parts...``, opened one folder at a time from ``root``: no link below
    ``root`` is followed, and the folder handed out is the one checked, whatever is renamed
    meanwhile. Missing folders are made owner-only if ``create``, else FileNotFoundError."""
    current = _open_root(root, create)
    try:
        for name in parts:
            below = _open_below(current, name, create, root)
            current.close()
            current = below
        yield current
    finally:
        current.close()


def _folder_of(path: Path, root: Path, create: bool) -> contextlib.AbstractContextManager[_Folder]:
    """The folder holding the file ``path`` (under ``root``), opened as :func:`_opened` does."""
    parts = _parts(root, path)
    if not parts:
        raise StorageError(f"refusing {path}: it is the folder {root} itself, not a file in it", path=str(path))
    return _opened(root, parts[:-1], create)


def _parent_of(path: Path, root: Path) -> contextlib.AbstractContextManager[_Folder]:
    """The folder holding ``path`` (a file or a folder under ``root``, or ``root`` itself, whose
    own parent is then opened as the user's), opened as :func:`_opened` does, never made."""
    parts = _parts(root, path)
    return _opened(root, parts[:-1], False) if parts else _opened(path.parent, [], False)


def _open_file(folder: _Folder, path: Path, flags: int, root: Path) -> int:
    """A descriptor of the regular file ``path`` in ``folder``. A link is refused (as one on the
    way is), and so is anything but a regular file: it is opened without blocking, so a named
    pipe cannot hang the caller, and refused after a look at what it is."""
    if folder.fd is None and os.path.islink(path):
        raise _link_refused(str(path), root)
    try:
        fd = os.open(folder.at(path.name), flags | _NOFOLLOW | _NONBLOCK | _CLOEXEC, 0o600, dir_fd=folder.fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EMLINK):  # EMLINK: FreeBSD's answer to O_NOFOLLOW
            raise _link_refused(str(path), root) from None
        raise
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise StorageError(f"refusing {path}: {_kind(mode)}, not a regular file (remove it)", path=str(path))
    return fd


def private_dir(path: Path, root: Path) -> None:
    """Create ``path`` (``root`` or a folder under it) and whatever of it is missing, each
    folder created owner-only (0700). Folders that exist already are left as they are."""
    with _opened(root, _parts(root, path), create=True):
        pass


def write_private(path: Path, data: bytes, root: Path) -> None:
    """Replace ``path`` (under ``root``) by ``data`` atomically, readable by the owner only."""
    with _folder_of(path, root, create=True) as folder:
        tmp = _temp_holding(folder, data)
        try:  # a link at ``path`` is replaced, never followed
            os.replace(folder.at(tmp), folder.at(path.name), src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
        except BaseException:
            _remove_quietly(folder, tmp)
            raise


def create_private(path: Path, data: bytes, root: Path) -> bool:
    """Create ``path`` (under ``root``) holding ``data``, owner-only, only if nothing is there:
    True if this call created it, False if it existed. Whole or absent, never partial: the data
    is written to a temporary file first and linked into place."""
    with _folder_of(path, root, create=True) as folder:
        tmp = _temp_holding(folder, data)
        try:  # fails if anything, a link included, is already at ``path``
            os.link(folder.at(tmp), folder.at(path.name), src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
            return True
        except FileExistsError:
            return False
        finally:
            _remove_quietly(folder, tmp)


def keep_private(path: Path, data: bytes, root: Path) -> bool | None:
    """Make ``path`` (under ``root``) hold ``data``, owner-only, unless something is there:
    True if this call created it, False if it held ``data`` already, None if it holds other
    bytes (left as they are). Looked for first, so data kept already is never written again;
    created as :func:`create_private` does, whole or absent; one walk from ``root`` for both."""
    with _folder_of(path, root, create=True) as folder:
        for _ in range(2):  # missing when looked for, then made by another process: look again
            try:
                fd = _open_file(folder, path, os.O_RDONLY, root)
            except FileNotFoundError:
                pass
            else:
                with os.fdopen(fd, "rb") as f:
                    return False if f.read() == data else None
            tmp = _temp_holding(folder, data)
            try:  # fails if anything, a link included, is already at ``path``
                os.link(folder.at(tmp), folder.at(path.name), src_dir_fd=folder.fd, dst_dir_fd=folder.fd)
                return True
            except FileExistsError:
                continue
            finally:
                _remove_quietly(folder, tmp)
    return None


def _temp_holding(folder: _Folder, data: bytes) -> str:
    """A new owner-only file with a random name in ``folder``, holding ``data`` whole (written
    with ``os.write``: a file object per write cost a tenth of an offload), and its name; none at
    all if writing failed."""
    while True:
        name = f".tmp-{secrets.token_hex(8)}"
        try:
            fd = os.open(folder.at(name), _NEW_FILE, 0o600, dir_fd=folder.fd)
            break
        except FileExistsError:  # pragma: no cover - 64 random bits
            continue
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
    except BaseException:
        _remove_quietly(folder, name)
        raise
    return name


def _remove_quietly(folder: _Folder, name: str) -> None:
    try:
        os.unlink(folder.at(name), dir_fd=folder.fd)
    except OSError:
        pass


def write_file(path: str | os.PathLike[str], data: bytes) -> None:
    """Write ``data`` to ``path``, a user's output file.

    A regular file (or a missing one) is replaced atomically, owner-only (0600): an interrupted
    write leaves the old file whole, never an empty or partial one. A symbolic link stays a link:
    the file it points to is replaced. Anything else (a named pipe, a device such as
    ``/dev/stdout``) is opened and written to, as a shell's ``>`` would, never replaced.
    """
    target = Path(path).absolute()
    try:
        mode: int | None = os.stat(target).st_mode
    except FileNotFoundError:
        mode = None  # missing, or a link to a missing file: made where the link points
    if mode is not None and not stat.S_ISREG(mode):
        with open(target, "wb") as f:
            f.write(data)
        return
    if target.is_symlink():
        target = Path(os.path.realpath(target))
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.tmp-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def append_line(path: Path, line: str, root: Path) -> None:
    """Append one line to ``path`` (under ``root``), owner-only; a torn last line (a crash
    mid-write) is closed first, so the new line starts on a line of its own."""
    with _folder_of(path, root, create=True) as folder:
        fd = _open_file(folder, path, os.O_RDWR | os.O_APPEND | os.O_CREAT, root)
    try:
        size = os.fstat(fd).st_size
        prefix = b""
        if size and os.pread(fd, 1, size - 1) != b"\n":
            prefix = b"\n"
        os.write(fd, prefix + line.encode("utf-8", "surrogatepass") + b"\n")
    finally:
        os.close(fd)


def open_private(path: Path, root: Path) -> int:
    """A read-write descriptor of the regular file ``path`` (under ``root``), created empty and
    owner-only if missing: a lock file. The caller closes it."""
    with _folder_of(path, root, create=True) as folder:
        return _open_file(folder, path, os.O_RDWR | os.O_CREAT, root)


def read_private(path: Path, root: Path, *, limit: int | None = None) -> bytes | None:
    """The bytes of ``path`` (under ``root``), or None when it does not exist; only the first
    ``limit`` bytes when given. A symbolic link anywhere under ``root``, or anything but a
    regular file at ``path``, is refused."""
    try:
        with _folder_of(path, root, create=False) as folder:
            try:
                fd = _open_file(folder, path, os.O_RDONLY, root)
            except FileNotFoundError:
                raise
            except OSError as exc:
                raise StorageError(f"cannot read {path}: {exc.strerror or exc}", path=str(path)) from exc
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        return f.read(-1 if limit is None else limit)


def read_file(path: str | os.PathLike[str]) -> bytes:
    """The bytes of a file a user names (links are followed: the user chose the path). Anything
    but a regular file is refused, opened without blocking, so a named pipe cannot hang the
    caller."""
    fd = os.open(path, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), os.fspath(path))
        raise StorageError(f"refusing {path}: {_kind(mode)}, not a regular file", path=os.fspath(path))
    with os.fdopen(fd, "rb") as f:
        return f.read()


def rename(path: Path, name: str, root: Path) -> None:
    """Rename the file ``path`` (under ``root``) to ``name`` in the same folder, replacing what
    is there; links are renamed, never followed."""
    if name in ("", ".", "..") or "/" in name or os.sep in name:
        raise StorageError(f"refusing to rename {path} to {name!r}: not a file name", path=str(path))
    with _folder_of(path, root, create=False) as folder:
        os.replace(folder.at(path.name), folder.at(name), src_dir_fd=folder.fd, dst_dir_fd=folder.fd)


def remove(path: Path, root: Path) -> bool:
    """Delete ``path`` (a file, or a folder and what it holds) under ``root``; links are removed,
    never followed. Returns whether something was there."""
    try:
        with _parent_of(path, root) as folder:
            mode = os.stat(folder.at(path.name), dir_fd=folder.fd, follow_symlinks=False).st_mode
            if stat.S_ISDIR(mode):
                _remove_tree(folder, path.name, root)
            else:
                os.unlink(folder.at(path.name), dir_fd=folder.fd)
    except FileNotFoundError:
        return False
    return True


def _remove_tree(parent: _Folder, name: str, root: Path) -> None:
    """Delete the folder ``name`` of ``parent`` and everything in it, one descriptor at a time:
    a link in it is deleted, never followed. What vanishes meanwhile is not missed."""
    folder = _open_below(parent, name, False, root)
    try:
        for entry in folder.scan():
            if entry.is_dir(follow_symlinks=False):
                _remove_tree(folder, entry.name, root)
            else:
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(folder.at(entry.name), dir_fd=folder.fd)
    finally:
        folder.close()
    with contextlib.suppress(FileNotFoundError):
        os.rmdir(parent.at(name), dir_fd=parent.fd)


def list_folder(folder: Path, root: Path) -> dict[str, os.stat_result]:
    """What ``folder`` (``root`` or a folder under it) holds, by name, each with its ``lstat``
    (links are reported as links, never followed); empty when ``folder`` does not exist."""
    try:
        with _opened(root, _parts(root, folder), False) as opened:
            found = {}
            for entry in opened.scan():
                with contextlib.suppress(FileNotFoundError):
                    found[entry.name] = entry.stat(follow_symlinks=False)
            return found
    except FileNotFoundError:
        return {}


def remove_leftovers(folder: Path, root: Path, before: float, *, dry_run: bool = False) -> list[Path]:
    """Delete the temporary files that writers killed before their rename left in ``folder``
    (``root`` or a folder under it): regular files named as this module names them, last written
    before ``before`` (seconds since the epoch); links, folders and every other name are left
    alone, and no link is followed on the way from ``root``. Returns what was (with ``dry_run``:
    what would be) deleted; nothing when ``folder`` does not exist."""
    try:
        with _opened(root, _parts(root, folder), False) as opened:
            found = []
            for entry in opened.scan():
                if not _LEFTOVER.fullmatch(entry.name):
                    continue
                try:
                    st = entry.stat(follow_symlinks=False)
                    if not stat.S_ISREG(st.st_mode) or st.st_mtime >= before:
                        continue
                    if not dry_run:
                        os.unlink(opened.at(entry.name), dir_fd=opened.fd)
                except FileNotFoundError:
                    continue
                found.append(folder / entry.name)
            return found
    except FileNotFoundError:
        return []


def newest_mtime(path: Path, root: Path | None = None) -> float:
    """The newest modification time of a file, or of a folder and everything in it; links are
    not followed, neither in the folder nor on the way from ``root`` (by default the folder
    holding ``path``)."""
    top = path.parent if root is None else root
    with _parent_of(path, top) as folder:
        st = os.stat(folder.at(path.name), dir_fd=folder.fd, follow_symlinks=False)
        newest = st.st_mtime
        if stat.S_ISDIR(st.st_mode):
            newest = max(newest, _newest_in(folder, path.name, top))
    return newest


def _newest_in(parent: _Folder, name: str, root: Path) -> float:
    newest = 0.0
    try:
        folder = _open_below(parent, name, False, root)
    except (OSError, StorageError):  # gone, or swapped for a link meanwhile
        return newest
    try:
        for entry in folder.scan():
            try:
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
                if entry.is_dir(follow_symlinks=False):
                    newest = max(newest, _newest_in(folder, entry.name, root))
            except OSError:
                continue
    finally:
        folder.close()
    return newest


__all__ = [
    "DATA_DIR_ENV",
    "LEFTOVER_AGE",
    "append_line",
    "create_private",
    "default_data_dir",
    "expand_path",
    "keep_private",
    "list_folder",
    "listed_id",
    "lost_its_id",
    "made_by_safe_name",
    "newest_mtime",
    "open_private",
    "private_dir",
    "read_file",
    "read_private",
    "remove",
    "remove_leftovers",
    "rename",
    "resolve_data_dir",
    "root_for",
    "safe_name",
    "session_name",
    "write_file",
    "write_private",
]
