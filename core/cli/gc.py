"""``compactor gc``: delete a session everywhere, or every session older than an age."""

from __future__ import annotations

import re
import stat
import time
from pathlib import Path
from typing import Any

import click

from ..errors import StorageError
from ..models import SessionInfo
from ..storage import LEFTOVER_AGE, made_by_safe_name, remove, remove_leftovers, resolve_data_dir, session_name
from .app import config_option, data_dir_option, echo_json, json_option, load_cli_config, storage_compactor
from .records import FACTS_FOLDER, facts_path

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w``, ``1d12h`` -> seconds. ``M`` is refused: a month to
    many (systemd, ISO 8601), it would delete what is a minute old if read as ``m``."""
    if "M" in value:
        raise click.BadParameter(
            f"{value!r} is ambiguous: M is a month to some and a minute to others; "
            "write 30m for minutes, or days (30d) for a month",
            param_hint="--older-than",
        )
    text = value.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise click.BadParameter(
            f"expected a duration such as 7d, 12h, 30m or 2w, got {value!r}", param_hint="--older-than"
        )
    return sum(float(n) * _SECONDS[unit] for n, unit in parts)


FACTS = "replay --keep"
"""Who wrote a session's lost facts (``replay/{session}.facts.jsonl`` of the data folder): no plugin."""


def _facts(data_dir: Path, session_id: str) -> SessionInfo | None:
    """The facts file ``replay --keep`` wrote for the session in the data folder, if there is one
    (a regular file: a link there is never followed)."""
    path = facts_path(data_dir, session_id)
    try:
        st = path.lstat()
    except OSError:
        return None
    return SessionInfo(session_id, st.st_mtime, FACTS, str(path)) if stat.S_ISREG(st.st_mode) else None


def _name(session_id: str) -> str:
    """The file name a session is kept under: a hashed name that a plugin listed as the session
    (its id was lost) is its own."""
    hashed = session_id.startswith("_") and made_by_safe_name(session_id)
    return session_id if hashed else session_name(session_id)


def printable(session_id: str) -> str:
    """A session id as it can be printed on one line (quoted when it holds control characters)."""
    return (
        session_id if session_id.isprintable() and session_id.strip() == session_id and session_id else repr(session_id)
    )


@click.command(short_help="Delete a session's files and records, or every old session.")
@click.argument("session", required=False)
@click.option("--older-than", metavar="AGE", help="Remove every session not written to for AGE (7d, 12h, 2w).")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@config_option
@data_dir_option
@json_option
def gc(
    session: str | None, older_than: str | None, dry_run: bool, config: str, data_dir: str | None, as_json: bool
) -> None:
    """Delete a SESSION's offloaded results, records and state (and the facts replay --keep wrote),
    or every session older than AGE.

    What is stored is found through the plugins of the config (files, databases alike): each
    reports the sessions it keeps and when it last wrote for them, and each deletes its own.
    Temporary files that writers killed mid-write left are deleted too, once nothing has written
    to them for an hour (or for AGE, when that is less).

    \b
    Example: compactor gc --older-than 7d --dry-run
    """
    if (session is None) == (older_than is None):
        raise click.UsageError("give either SESSION or --older-than AGE")
    cfg = load_cli_config(config, data_dir=data_dir)
    with storage_compactor(cfg) as compactor:
        stored: dict[str, list[Any]] = {}
        listed, errors = compactor.hooks.list_sessions()  # a plugin that cannot list is an error
        for info in listed:
            stored.setdefault(info.session_id, []).append(info)
        data = resolve_data_dir(cfg.data_dir)
        for sid in [*stored, *([session] if session is not None and session not in stored else [])]:
            facts = _facts(data, sid)  # what replay --keep left beside the records: the session's too
            if facts is not None:
                stored.setdefault(sid, []).append(facts)
        if session is not None:
            targets = [session]
            leftover_age = LEFTOVER_AGE
        else:
            age = parse_duration(older_than or "")
            cutoff = time.time() - age
            leftover_age = min(age, LEFTOVER_AGE)  # AGE asks for everything not written since: leftovers too
            # a session is as new as anything kept under its file name, also where that is listed
            # under the hashed name (a results folder whose id file is missing)
            newest: dict[str, float] = {}
            for sid, infos in stored.items():
                name = _name(sid)
                newest[name] = max(newest.get(name, 0.0), *(i.updated for i in infos))
            targets = [sid for sid in sorted(stored) if newest[_name(sid)] < cutoff]
        kept: dict[str, list[Any]] = {}
        if not dry_run:
            for sid in targets:
                if sid in stored:
                    errors += compactor.delete_session(sid)
                    try:
                        remove(facts_path(data, sid), data)
                    except (OSError, StorageError) as exc:
                        errors.append(f"session {printable(sid)}: {exc}")
            left = [*compactor.sessions(), *filter(None, (_facts(data, sid) for sid in targets))]
            for info in left:  # what a plugin reported but did not delete
                if info.session_id in stored and info.session_id in targets:
                    kept.setdefault(info.session_id, []).append(info)
        for sid, infos in sorted(kept.items()):
            for info in infos:
                errors.append(
                    f"session {printable(sid)}: still stored after removal: {info.plugin}: {info.where} "
                    "(remove it by hand)"
                )
        leftovers, failed = compactor.hooks.remove_leftovers(leftover_age, dry_run)
        errors += failed
        try:  # replay --keep writes its facts files through a temporary file too
            before = time.time() - leftover_age
            leftovers += map(str, remove_leftovers(data / FACTS_FOLDER, data, before, dry_run=dry_run))
        except (OSError, StorageError) as exc:
            errors.append(f"{data / FACTS_FOLDER}: {exc}")
    removed: list[dict[str, Any]] = [
        {"session": sid, "where": [{"plugin": i.plugin, "where": i.where} for i in stored[sid]]}
        for sid in targets
        if sid in stored and sid not in kept
    ]
    missing = [sid for sid in targets if sid not in stored]
    if as_json:
        echo_json(
            {"dry_run": dry_run, "removed": removed, "leftovers": leftovers, "not_found": missing, "errors": errors}
        )
    else:
        verb = "would remove" if dry_run else "removed"
        for item in removed:
            click.echo(f"{verb} session {printable(item['session'])}")
            for place in item["where"]:
                click.echo(f"  {place['plugin']}: {place['where']}")
        for where in leftovers:
            click.echo(f"{verb} leftover of an interrupted write or a deleted session: {where}")
        for sid in missing:
            click.echo(f"session {printable(sid)}: nothing stored (no plugin of config {config!r} keeps it)", err=True)
        if not targets and not leftovers:
            click.echo("nothing to remove", err=True)
        for error in errors:
            click.echo(f"warning: {error}", err=True)
    if errors:
        raise click.exceptions.Exit(1)


COMMANDS = [gc]
