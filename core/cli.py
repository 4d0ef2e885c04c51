"""The ``compactor`` command line.

Conventions, the same on every command: ``--json`` prints machine-readable output instead of
tables; an error is one line on stderr (``error: ...``) and a non-zero exit status (1, or 2 for a
usage mistake), with the traceback only under ``compactor --debug``; no colour when ``NO_COLOR``
is set or output is not a terminal; every ``--help`` ends with an example.

Commands are thin: each one calls the library's own API (ProgressiveCompactor, the plugin
manager, the config loader, the replay engine), so that what the CLI shows is what a program
using the library gets. Heavy modules (the replay engine, plotly) are imported inside commands,
so ``compactor --help`` stays fast.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

import click

from .errors import CompactorError, ConfigError, InvalidMessagesError, PluginError

log = logging.getLogger("progressive_compactor")

LAZY_COMMANDS = {"ab": ("progressive_compactor.cli_ab", "ab")}
"""Commands that live in optional modules: listed only when the module exists, imported on use."""


# --- reading input ----------------------------------------------------------------------------


def _read_text(source: str, what: str = "file") -> str:
    """Text of ``source`` (``-`` is stdin); every way of failing becomes one readable line."""
    if source == "-":
        return sys.stdin.read()
    path = Path(source)
    try:
        return path.read_text("utf-8")
    except FileNotFoundError:
        raise click.ClickException(f"{source}: no such {what}") from None
    except IsADirectoryError:
        raise click.ClickException(f"{source}: is a directory, expected a {what}") from None
    except PermissionError:
        raise click.ClickException(f"{source}: permission denied") from None
    except UnicodeDecodeError as exc:
        raise click.ClickException(f"{source}: not UTF-8 text (byte {exc.start})") from None
    except OSError as exc:
        raise click.ClickException(f"{source}: cannot read: {exc.strerror or exc}") from None


def _parse_messages(source: str, text: str) -> tuple[list[Any], list[int] | None]:
    """Messages and, for JSONL, the line each one came from (to name it in errors)."""
    stripped = text.lstrip()
    if stripped.startswith("["):
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise click.ClickException(
                f"{source}: invalid JSON on line {exc.lineno}, column {exc.colno}: {exc.msg}"
            ) from exc
        if not isinstance(data, list):
            raise click.ClickException(f"{source}: expected a JSON array of messages")
        return data, None
    messages: list[Any] = []
    lines: list[int] = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError as exc:
            whole = _whole_document(text) if not messages else None
            if whole is not None:
                return whole, None
            raise click.ClickException(
                f"{source}: invalid JSON on line {number}, column {exc.colno}: {exc.msg}"
            ) from exc
        lines.append(number)
    return messages, lines


def _whole_document(text: str) -> list[Any] | None:
    """A pretty-printed ``{"messages": [...]}`` document, accepted as a convenience."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    if isinstance(data, dict) and isinstance(data.get("messages"), list):
        return data["messages"]
    return None


def read_messages(source: str) -> list[dict[str, Any]]:
    """Messages from a JSONL file, a JSON array file, or ``-`` for stdin; errors name the line."""
    return _parse_messages(source, _read_text(source))[0]


def load_history(source: str) -> list[dict[str, Any]]:
    """:func:`read_messages`, then every message checked, a bad one named by its line."""
    from .messages import message_from_dict

    messages, lines = _parse_messages(source, _read_text(source))
    if not messages:
        raise click.ClickException(f"{source}: no messages")
    for index, data in enumerate(messages):
        try:
            message_from_dict(data, index)
        except InvalidMessagesError as exc:
            reason = re.sub(r"^message \d+: ", "", str(exc))
            where = f"line {lines[index]} (message {index})" if lines else f"message {index}"
            raise click.ClickException(f"{source}: {where}: {reason}") from exc
    return messages


# --- the group, its error handling and logging -------------------------------------------------


class _StderrHandler(logging.Handler):
    """Library warnings as ``warning: ...`` lines on the stderr of the moment (the test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"{record.levelname.lower()}: {record.getMessage()}\n")
        except Exception:  # logging must never break the command
            self.handleError(record)


_log_handler = _StderrHandler()


def _setup_logging(debug: bool) -> None:
    if _log_handler not in log.handlers:
        log.addHandler(_log_handler)
    log.setLevel(logging.DEBUG if debug else logging.WARNING)


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


class CompactorGroup(click.Group):
    """The root group: one-line errors, ``--debug`` tracebacks, lazily imported sub-groups."""

    debug = False

    def list_commands(self, ctx: click.Context) -> list[str]:
        names = list(super().list_commands(ctx))
        for name, (module, _) in LAZY_COMMANDS.items():
            try:
                found = importlib.util.find_spec(module) is not None
            except (ImportError, ValueError):
                found = False
            if found:
                names.append(name)
        return sorted(names)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is not None or name not in LAZY_COMMANDS:
            return command
        module, attr = LAZY_COMMANDS[name]
        try:
            return getattr(importlib.import_module(module), attr)
        except ImportError as exc:
            if exc.name == module:  # the optional module is not there: no such command
                return None
            return _broken_command(name, exc)
        except Exception as exc:  # a broken optional module must not take the whole CLI down
            return _broken_command(name, exc)

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, *a: Any, **kw: Any) -> Any:
        standalone = kw.pop("standalone_mode", True)
        type(self).debug = bool(os.environ.get("COMPACTOR_DEBUG"))
        try:
            result = super().main(args, prog_name or "compactor", *a, standalone_mode=False, **kw)
            code = result if isinstance(result, int) else 0
        except click.UsageError as exc:
            where = exc.ctx.command_path if exc.ctx is not None else "compactor"
            self._fail(f"{exc.format_message()} (see '{where} --help')")
            code = 2
        except click.ClickException as exc:
            self._fail(exc.format_message(), exc)
            code = exc.exit_code
        except click.Abort:
            self._fail("interrupted")
            code = 130
        except CompactorError as exc:
            self._fail(str(exc), exc)
            code = 1
        except Exception as exc:
            hint = "" if self.debug else " (run 'compactor --debug ...' for the traceback)"
            self._fail(f"{type(exc).__name__}: {exc}{hint}", exc)
            code = 1
        finally:
            log.removeHandler(_log_handler)
            log.setLevel(logging.NOTSET)
        if not standalone:
            return code
        sys.exit(code)

    def _fail(self, message: str, exc: BaseException | None = None) -> None:
        if self.debug and exc is not None:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        sys.stderr.write(f"error: {_one_line(message)}\n")


def _broken_command(name: str, exc: BaseException) -> click.Command:
    def fail() -> None:
        raise click.ClickException(f"the '{name}' command failed to load: {type(exc).__name__}: {exc}")

    return click.Command(name, callback=fail, help=f"(unavailable: {type(exc).__name__})")


CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


@click.group(cls=CompactorGroup, context_settings=CONTEXT)
@click.version_option(package_name="progressive-compactor", prog_name="compactor")
@click.option("--debug", is_flag=True, help="Show tracebacks on errors and the library's debug log.")
def main(debug: bool) -> None:
    """Tiered context compaction for LLM agents: compact, replay, inspect, report, clean up.

    \b
    Example: compactor replay session.jsonl -w 16000
    """
    CompactorGroup.debug = CompactorGroup.debug or debug
    _setup_logging(CompactorGroup.debug)


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config", "-c", default="default", show_default=True, help="Bundled config name or YAML path."
    )(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(f)


def _echo_json(data: Any) -> None:
    click.echo(json.dumps(data, ensure_ascii=False, default=str))


def _console(stderr: bool = False) -> Any:
    from .cli_render import make_console

    return make_console(stderr=stderr)


# --- compact ----------------------------------------------------------------------------------


@main.command(short_help="Compact one history and write the view.")
@click.argument("session_file")
@config_option
@click.option("--context-window", "-w", type=click.IntRange(min=1), help="Context window in tokens (overrides the config).")
@click.option("--session-id", "-s", help="Session id (default: the file name).")
@click.option("--output", "-o", type=click.Path(dir_okay=False), help="Write the view here (default: stdout).")
@json_option
def compact(
    session_file: str,
    config: str,
    context_window: int | None,
    session_id: str | None,
    output: str | None,
    as_json: bool,
) -> None:
    """Compact SESSION_FILE (JSONL, a JSON array of chat messages, or - for stdin) and write the view.

    The view is written as JSONL, one message per line, and seed 5.4's notice goes to stderr
    (to stdout with -o). With --json, one object {"view": [...], "record": {...}} instead.

    \b
    Example: compactor compact session.jsonl -w 32000 -o view.jsonl
    """
    from .compactor import ProgressiveCompactor
    from .converters import record_to_dict
    from .notification import notification

    overrides = {"context_window": context_window} if context_window else {}
    messages = load_history(session_file)
    sid = session_id or (Path(session_file).stem if session_file != "-" else "stdin")
    with ProgressiveCompactor(config, **overrides) as compactor:
        view, record = compactor.compact_with_record(messages, sid)
    if as_json:
        text = json.dumps({"view": view, "record": record_to_dict(record)}, ensure_ascii=False) + "\n"
    else:
        text = "".join(json.dumps(m, ensure_ascii=False) + "\n" for m in view)
    if output:
        _write_file(output, text)
    else:
        click.echo(text, nl=False)
    if not as_json:
        notice = notification(record) or f"No compaction needed: {record.tokens_before} tokens"
        click.echo(notice, err=bool(not output))


def _write_file(path: str, text: str) -> None:
    try:
        Path(path).write_text(text, "utf-8")
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write: {exc.strerror or exc}") from None


# --- replay -----------------------------------------------------------------------------------

_FILE_PLUGIN_ROOTS = (
    ("offload-files", "root", "tool_results"),
    ("store-jsonl", "directory", "records"),
    ("state-files", "directory", "state"),
)


def _load_config(config: str, context_window: int | None = None) -> Any:
    from .config import load_config

    return load_config(config, **({"context_window": context_window} if context_window else {}))


def _rooted(cfg: Any, directory: Path) -> Any:
    """``cfg`` with the built-in file plugins (offloads, records, state) writing under ``directory``."""
    import attrs

    blocks = dict(cfg.config)
    selected = set(cfg.plugins.names())
    for name, key, sub in _FILE_PLUGIN_ROOTS:
        if name in selected:
            blocks[name] = {**cfg.plugin_block(name), key: str(directory / sub)}
    return attrs.evolve(cfg, config=blocks, work_dir=str(directory))


def _turn_count(messages: Sequence[Mapping[str, Any]]) -> int:
    """Simulated LLM calls of a replay: one per assistant message after the first message."""
    return sum(1 for i, m in enumerate(messages) if i and m.get("role") == "assistant")


def replay_summary(session: str, source: str, result: Any) -> dict[str, Any]:
    """What ``compactor replay`` reports for one session: the table's rows, and the --json object."""
    from .models import CompactionTier
    from .report import changed_view

    compactions = [
        {
            "turn": t.index,
            "tier": t.tier.name.lower(),
            "tokens_before": t.record.tokens_before,
            "tokens_after": t.record.tokens_after,
            "summarized": t.record.summarized,
            "offloads": len(t.record.offloaded),
            "offloaded_bytes": sum(e.chars for e in t.record.offloaded),
            "error": t.record.error,
            "changed_view": changed_view(t.record),
        }
        for t in result.turns
        if t.tier is not CompactionTier.NONE
    ]
    cost = result.cost
    return {
        "session": session,
        "file": source,
        "messages": result.messages,
        "context_window": result.context_window,
        "variant": result.variant,
        "turns": len(result.turns),
        "tiers": {t.name.lower(): result.tier_counts.get(t.label, 0) for t in CompactionTier},
        "compactions": result.compactions,
        "view_changing_compactions": sum(1 for c in compactions if c["changed_view"]),
        "peak_view_tokens": result.peak_view_tokens,
        "total_input_tokens": result.total_input_tokens,
        "cache_stable_tokens": result.cached_input_tokens,
        "overflows": result.overflows,
        "offloads": result.offloads,
        "offloaded_bytes": result.offloaded_bytes,
        "summarizer_calls": result.summarizer_calls,
        "summarizer_tokens_in": result.summarizer_tokens_in,
        "summarizer_tokens_out": result.summarizer_tokens_out,
        "compactor_seconds": round(result.compactor_seconds, 4),
        "invalid_views": result.invalid_views,
        "invalid_view_problems": list(result.invalid_view_problems),
        "cost_usd": None
        if cost is None
        else {
            "input": round(cost.input, 6),
            "cached_input": round(cost.cached_input, 6),
            "output": round(cost.output, 6),
            "summarizer": round(cost.summarizer, 6),
            "total": round(cost.total, 6),
        },
        "retention": None if result.retention is None else result.retention.ratios(),
        "compaction_log": compactions,
    }


def _session_ids(files: Sequence[str]) -> list[str]:
    """File stems as session ids, made unique when two files share a name."""
    seen: dict[str, int] = {}
    out = []
    for f in files:
        stem = Path(f).stem if f != "-" else "stdin"
        seen[stem] = seen.get(stem, 0) + 1
        out.append(stem if seen[stem] == 1 else f"{stem}-{seen[stem]}")
    return out


def run_replays(
    files: Sequence[str],
    cfg: Any,
    directory: Path,
    on_start: Callable[[str, int], None] | None = None,
    on_turn: Callable[[Any], None] | None = None,
) -> Iterator[tuple[str, str, Any]]:
    """Replay each file with a fresh compactor whose files live under ``directory``.

    Yields ``(session_id, file, ReplayResult)``. Every file is read and checked before the first
    replay starts, so a bad file fails fast instead of after minutes of work.
    """
    from .compactor import ProgressiveCompactor
    from .replay import replay_session

    from .plugins.offload_files import safe_name

    histories = [load_history(f) for f in files]
    rooted = _rooted(cfg, directory)
    for sid, source, messages in zip(_session_ids(files), files, histories):
        name = safe_name(sid)
        for old in (directory / "tool_results" / name, directory / "records" / f"{name}.jsonl", directory / "state" / f"{name}.json"):
            if old.exists():  # an earlier replay kept here: start afresh, not on top of its state
                _remove(old)
        if on_start is not None:
            on_start(sid, _turn_count(messages))
        with ProgressiveCompactor(rooted) as compactor:
            result = replay_session(messages, compactor, sid, on_turn)
        yield sid, source, result


@main.command(short_help="Replay sessions turn by turn; notices and a summary table.")
@click.argument("files", nargs=-1, required=True)
@config_option
@click.option("--context-window", "-w", type=click.IntRange(min=1), help="Context window in tokens (overrides the config).")
@click.option(
    "--keep",
    type=click.Path(file_okay=False),
    help="Keep offloaded results, records and state under this folder (default: a temporary folder, removed).",
)
@click.option("--verbose", "-v", is_flag=True, help="Also print turns whose tier changed nothing (a Warn with nothing to offload).")
@json_option
def replay(
    files: tuple[str, ...], config: str, context_window: int | None, keep: str | None, verbose: bool, as_json: bool
) -> None:
    """Play recorded sessions turn by turn, as an agent loop would, and report every compaction.

    Before each assistant message of FILE, the view is computed from the history so far; each
    compaction that changed the view prints seed 5.4's two-line notice, and a summary table
    closes the run. With --json, one JSON object per session (one per line) instead.
    Offloaded results, records and state go to a temporary folder unless --keep names one
    (a session replayed again there starts afresh).

    \b
    Example: compactor replay session.jsonl other.jsonl -w 16000
    """
    from .cli_render import is_tty, notice_text, replay_progress, summary_table
    from .report import changed_view

    cfg = _load_config(config, context_window)
    out = _console()
    err = _console(stderr=True)
    show_bar = not as_json and is_tty(sys.stderr)
    summaries = []
    with _work_folder(keep) as directory, replay_progress(err, disable=not show_bar) as progress:
        task = None
        # With a bar on a terminal, notices are printed above it (same terminal); otherwise to stdout.
        notices = progress.console if show_bar and is_tty(sys.stdout) else out

        def on_start(sid: str, turns: int) -> None:
            nonlocal task
            if task is not None:
                progress.remove_task(task)
            task = progress.add_task(sid, total=turns)
            if not as_json and len(files) > 1:
                notices.print(f"── {sid}", style="bold", markup=False, soft_wrap=True)

        def on_turn(turn: Any) -> None:
            progress.advance(task)
            if not as_json and turn.tier and (verbose or changed_view(turn.record)):
                notices.print(notice_text(turn.record), soft_wrap=True)

        for sid, source, result in run_replays(files, cfg, directory, on_start, on_turn):
            summary = replay_summary(sid, source, result)
            summaries.append(summary)
            if as_json:
                _echo_json(summary)
    if not as_json:
        out.print(summary_table(summaries))
        if keep:
            first = Path(keep) / "records" / f"{summaries[0]['session']}.jsonl"
            out.print(f"kept in {keep}: tool_results/, records/, state/", markup=False, soft_wrap=True)
            out.print(f"read the records with: compactor records {first}", markup=False, soft_wrap=True)


@contextlib.contextmanager
def _work_folder(keep: str | None) -> Iterator[Path]:
    """The given folder (created), or a temporary one removed afterwards."""
    if keep:
        path = Path(keep).expanduser().absolute()
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="compactor-") as tmp:
        yield Path(tmp)


# --- records ----------------------------------------------------------------------------------


def _plugin_instance(cfg: Any, name: str) -> Any | None:
    """The configured instance of one selected plugin, built alone (no summarizer, no API key)."""
    from .plugin_manager import PluginContext, installed_plugins, instantiate, load_plugin_object

    if name not in cfg.plugins.names():
        return None
    info = installed_plugins().get(name)
    if info is None:
        raise PluginError(f"plugin {name!r} is selected but not installed", name)
    return instantiate(name, load_plugin_object(info), cfg.plugin_block(name), PluginContext(cfg.work_dir))


def _records_path(session_or_file: str, config: str) -> Path:
    path = Path(session_or_file).expanduser()
    if path.is_file() or session_or_file.endswith(".jsonl") or os.sep in session_or_file:
        if not path.exists():
            raise click.ClickException(f"{session_or_file}: no such file")
        if path.is_dir():
            raise click.ClickException(f"{session_or_file}: is a directory, expected a records JSONL file")
        return path
    cfg = _load_config(config)
    store = _plugin_instance(cfg, "store-jsonl")
    if store is None:
        raise click.ClickException(
            f"looking up a session id needs the store-jsonl plugin, which config {config!r} does not "
            f"select (stores: {', '.join(cfg.plugins.stores) or 'none'}); pass a records JSONL path instead"
        )
    found = store.path_for(session_or_file)
    if not found.exists():
        raise click.ClickException(f"no records for session {session_or_file!r} (looked for {found})")
    return found


@main.command(short_help="Show the compaction records of a session or records file.")
@click.argument("session_or_file")
@config_option
@json_option
def records(session_or_file: str, config: str, as_json: bool) -> None:
    """Show the compaction records of a session id (via the configured store) or a records JSONL file.

    A torn last line (a crash mid-write) is skipped with a warning. With --json, the records as
    JSON lines, one per record.

    \b
    Example: compactor records my-session --config team.yaml
    """
    from .cli_render import records_table
    from .converters import record_to_json
    from .plugins.store_jsonl import read_records

    path = _records_path(session_or_file, config)
    try:
        found = list(read_records(path))
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot read: {exc.strerror or exc}") from None
    if as_json:
        for record in found:
            click.echo(record_to_json(record))
        return
    if not found:
        click.echo(f"no records in {path}", err=True)
        return
    _console().print(records_table(found, title=f"{len(found)} records in {path}"))


# --- show -------------------------------------------------------------------------------------


def parse_line_range(value: str | None) -> tuple[int, int] | None:
    """``A:B``, ``A:``, ``:B`` or ``A`` -> 1-based inclusive ``(start, end)``."""
    if value is None:
        return None
    match = re.fullmatch(r"\s*(\d*)\s*(?::\s*(\d*)\s*)?", value)
    if match is None or not (match.group(1) or match.group(2)):
        raise click.BadParameter(f"expected A:B, A: or :B (1-based line numbers), got {value!r}", param_hint="--lines")
    start = int(match.group(1)) if match.group(1) else 1
    if match.group(2) is None and ":" not in value:
        end = start
    else:
        end = int(match.group(2)) if match.group(2) else sys.maxsize
    if start < 1 or end < start:
        raise click.BadParameter(f"line range {value!r} is empty (lines start at 1, A <= B)", param_hint="--lines")
    return start, end


@main.command(short_help="Print an offloaded tool result, whole or a line range.")
@click.argument("handle")
@click.option("--lines", "line_range", metavar="A:B", help="Only lines A to B (1-based, inclusive; A: or :B open).")
@config_option
@json_option
def show(handle: str, line_range: str | None, config: str, as_json: bool) -> None:
    """Print an offloaded tool result by its HANDLE (as named in the placeholder), whole or a line range.

    \b
    Example: compactor show my-session/call_42 --lines 120:180
    """
    from .compactor import ProgressiveCompactor

    lines = parse_line_range(line_range)
    with ProgressiveCompactor(config) as compactor:
        text = compactor.read_tool_result(handle, lines)
    if as_json:
        _echo_json({"handle": handle, "lines": None if lines is None else [lines[0], lines[1] if lines[1] < sys.maxsize else None], "text": text})
    else:
        click.echo(text)


# --- plugins ----------------------------------------------------------------------------------

IMPL_MARKER = "progressive_compactor_impl"


def hooks_of(target: Any) -> list[str]:
    """Hook names implemented by a plugin class, instance or module (read from pluggy's markers)."""
    names = set()
    for attr in dir(target):
        try:
            member = getattr(target, attr)
        except Exception:
            continue
        options = getattr(member, IMPL_MARKER, None)
        if isinstance(options, dict):
            names.add(options.get("specname") or attr)
    return sorted(names)


def _selection(cfg: Any) -> dict[str, list[str]]:
    """Plugin name -> the roles the config gives it (plus ``disabled`` and ``essential``)."""
    from .config import ESSENTIAL_PLUGINS

    roles: dict[str, list[str]] = {}
    for role, name in cfg.plugins.roles().items():
        if name != "none":
            roles.setdefault(name, []).append(role)
    for name in cfg.plugins.stores:
        roles.setdefault(name, []).append("store")
    for name in cfg.plugins.extra:
        roles.setdefault(name, []).append("extra")
    for name in cfg.plugins.disable:
        roles[name] = ["disabled"]
    for name in ESSENTIAL_PLUGINS:
        if "fallback" not in roles.get(name, []):
            roles.setdefault(name, []).append("essential")
    return roles


@main.command(short_help="List installed plugins and what the config selects.")
@config_option
@json_option
def plugins(config: str, as_json: bool) -> None:
    """List installed plugins: distribution, version, hooks implemented, and what CONFIG selects.

    A plugin that fails to import shows its error instead of its hooks.

    \b
    Example: compactor plugins --config team.yaml
    """
    from .cli_render import plugins_table
    from .plugin_manager import installed_plugins, load_plugin_object

    cfg = _load_config(config)
    selection = _selection(cfg)
    rows = []
    installed = installed_plugins()
    for name, info in sorted(installed.items()):
        try:
            hooks, error = hooks_of(load_plugin_object(info)), None
        except Exception as exc:
            cause = exc.__cause__ or exc
            hooks, error = [], f"failed to import: {type(cause).__name__}: {cause}"
        rows.append(
            {
                "name": name,
                "distribution": info.distribution,
                "version": info.version,
                "target": info.value,
                "hooks": hooks,
                "error": error,
                "selected": selection.get(name, []),
            }
        )
    for name in sorted(set(selection) - set(installed)):
        rows.append(
            {
                "name": name,
                "distribution": None,
                "version": None,
                "target": None,
                "hooks": [],
                "error": "not installed",
                "selected": selection[name],
            }
        )
    if as_json:
        _echo_json(rows)
    else:
        _console().print(plugins_table(rows, config))


# --- config -----------------------------------------------------------------------------------


@main.group(name="config", context_settings=CONTEXT, short_help="Check a config, or show the effective one.")
def config_group() -> None:
    """Check a config file, or show the effective config with every default filled in.

    \b
    Example: compactor config check team.yaml
    """


def config_problems(source: str) -> list[str]:
    """Every problem of a config: its YAML and core fields, then each selected plugin's block.

    Each selected plugin is loaded and built with its block on its own, so that one bad block
    does not hide the next; a clean config is finally built into a full plugin manager, which
    also checks hook names.
    """
    from .config import ESSENTIAL_PLUGINS, load_config
    from .plugin_manager import (
        PluginContext,
        get_plugin_manager,
        installed_plugins,
        instantiate,
        load_plugin_object,
    )

    try:
        cfg = load_config(source)
    except ConfigError as exc:
        return exc.problems
    problems: list[str] = []
    try:
        installed = installed_plugins()
    except PluginError as exc:
        return [str(exc)]
    wanted = cfg.plugins.names()
    roles = {name: role for role, name in cfg.plugins.roles().items()}
    for name in wanted:
        if name not in installed:
            path = f"$.plugins.{roles[name]}" if name in roles else "$.plugins"
            problems.append(f"unknown plugin {name!r} @ {path}; installed: {', '.join(sorted(installed))}")
    for name in sorted(set(cfg.config) - set(wanted) - set(ESSENTIAL_PLUGINS)):
        problems.append(f"settings for plugin {name!r}, which is not selected @ $.config.{name}")
    context = PluginContext(cfg.work_dir)
    for name in wanted:
        if name not in installed:
            continue
        try:
            instantiate(name, load_plugin_object(installed[name]), cfg.plugin_block(name), context)
        except ConfigError as exc:
            problems.extend(exc.problems)
        except PluginError as exc:
            problems.append(f"{exc} @ $.config.{name}")
    if cfg.pricing:
        from .pricing import prices_from_mapping

        try:
            prices_from_mapping(cfg.pricing)
        except ConfigError as exc:
            problems.extend(exc.problems)
    if not problems:
        try:
            pm = get_plugin_manager(cfg, context=context)
        except (ConfigError, PluginError) as exc:
            problems.extend(getattr(exc, "problems", None) or [str(exc)])
        else:
            for _, plugin in pm.list_name_plugin():
                closer = getattr(plugin, "close", None)
                if callable(closer):
                    closer()
    return problems


@config_group.command(name="check", short_help="Validate a config; every problem with its path.")
@click.argument("file")
@json_option
def config_check(file: str, as_json: bool) -> None:
    """Validate a config FILE (or bundled name): every problem on its own line with its path; exit 1 if any.

    \b
    Example: compactor config check team.yaml
    """
    problems = config_problems(file)
    if as_json:
        _echo_json({"file": file, "ok": not problems, "problems": problems})
    elif problems:
        for problem in problems:
            click.echo(f"{file}: {problem}")
        click.echo(f"error: {len(problems)} problem{'s' if len(problems) != 1 else ''} in {file}", err=True)
    else:
        click.echo(f"{file}: OK")
    if problems:
        raise click.exceptions.Exit(1)


SECRET_KEY = re.compile(
    r"(?i)^(?:.*[_-])?(?:api[_-]?key|key|secret|password|passwd|token|credentials?|authorization)$"
)
"""Setting names whose values ``config show`` masks. ``api_key_env`` is not one: such settings
hold the *name* of an environment variable, never its value."""


def _masked(data: Any, key: str = "") -> Any:
    if isinstance(data, Mapping):
        return {k: _masked(v, str(k)) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_masked(v, key) for v in data]
    if isinstance(data, str) and data and SECRET_KEY.match(key):
        return "***"
    return data


def effective_config(source: str) -> dict[str, Any]:
    """The config as the core sees it, with each selected plugin's block completed by its defaults."""
    import attrs

    from .config import config_to_dict, load_config
    from .converters import config_converter, structure_config
    from .plugin_manager import installed_plugins, load_plugin_object

    cfg = load_config(source)
    data = config_to_dict(cfg)
    installed = installed_plugins()
    blocks = dict(data.get("config") or {})
    for name in cfg.plugins.names():
        info = installed.get(name)
        if info is None:
            continue
        try:
            target = load_plugin_object(info)
        except PluginError as exc:
            log.warning("%s; its block is shown as written", exc)
            continue
        config_cls = getattr(target, "Config", None)
        if config_cls is None or not attrs.has(config_cls):
            continue
        block = structure_config(dict(cfg.plugin_block(name)), config_cls, path=f"$.config.{name}")
        blocks[name] = config_converter.unstructure(block)
    data["config"] = blocks
    from .pricing import prices_from_config

    data["pricing"] = config_converter.unstructure(prices_from_config(cfg))
    return _masked(data)


@config_group.command(name="show", short_help="Print the effective config, defaults filled in.")
@click.argument("file", required=False, default="default")
@json_option
def config_show(file: str, as_json: bool) -> None:
    """Print the effective config of FILE (default: the bundled 'default') with every default filled in.

    YAML by default. Values of secret-looking settings are masked; configs name environment
    variables (api_key_env), never keys.

    \b
    Example: compactor config show team.yaml --json
    """
    import yaml

    data = effective_config(file)
    if as_json:
        _echo_json(data)
    else:
        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


# --- gc ---------------------------------------------------------------------------------------

_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhdw])")
_SECONDS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_duration(value: str) -> float:
    """``7d``, ``12h``, ``30m``, ``2w``, ``1d12h`` -> seconds."""
    text = value.strip().lower()
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise click.BadParameter(
            f"expected a duration such as 7d, 12h, 30m or 2w, got {value!r}", param_hint="--older-than"
        )
    return sum(float(n) * _SECONDS[unit] for n, unit in parts)


def _newest_mtime(path: Path) -> float:
    """The newest modification time of a file, or of a folder and everything in it."""
    newest = path.stat().st_mtime
    if path.is_dir():
        for child in path.rglob("*"):
            try:
                newest = max(newest, child.stat().st_mtime)
            except OSError:
                continue
    return newest


def session_files(cfg: Any) -> dict[str, list[Path]]:
    """Session name on disk -> its files, from the selected built-in file plugins."""
    found: dict[str, list[Path]] = {}
    offloader = _plugin_instance(cfg, "offload-files")
    if offloader is not None and offloader.root.is_dir():
        for folder in offloader.root.iterdir():
            if folder.is_dir():
                found.setdefault(folder.name, []).append(folder)
    for name, suffix in (("store-jsonl", ".jsonl"), ("state-files", ".json")):
        plugin = _plugin_instance(cfg, name)
        directory = getattr(plugin, "directory", None)
        if directory is not None and directory.is_dir():
            for file in directory.glob(f"*{suffix}"):
                if file.is_file():
                    found.setdefault(file.name[: -len(suffix)], []).append(file)
    return found


def _real_session_id(name: str, paths: Sequence[Path]) -> str | None:
    """The session id behind a name on disk: the name itself, or (for a hashed name) the id its records carry."""
    from .plugins.offload_files import safe_name
    from .plugins.store_jsonl import read_records

    if safe_name(name) == name:
        return name
    for path in paths:
        if path.suffix == ".jsonl":
            for record in read_records(path):
                return record.session_id if safe_name(record.session_id) == name else None
    return None


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


@main.command(short_help="Delete a session's files and records, or every old session.")
@click.argument("session", required=False)
@click.option("--older-than", metavar="AGE", help="Remove every session whose files are all older than AGE (7d, 12h, 2w).")
@click.option("--dry-run", is_flag=True, help="Print what would be removed; remove nothing.")
@config_option
@json_option
def gc(session: str | None, older_than: str | None, dry_run: bool, config: str, as_json: bool) -> None:
    """Delete a SESSION's offloaded results, records and state (seed 5.5's cascade), or every old session.

    SESSION goes through every plugin's on_delete_session (file stores, databases alike).
    --older-than finds sessions in the built-in file plugins' folders (offload-files,
    store-jsonl, state-files) whose newest file is older than AGE.

    \b
    Example: compactor gc --older-than 7d --dry-run
    """
    from .compactor import ProgressiveCompactor

    if (session is None) == (older_than is None):
        raise click.UsageError("give either SESSION or --older-than AGE")
    cfg = _load_config(config)
    removed: list[dict[str, Any]] = []
    errors: list[str] = []
    if session is not None:
        paths = session_files(cfg)
        from .plugins.offload_files import safe_name

        targets = [(session, paths.get(safe_name(session), []))]
    else:
        age = parse_duration(older_than or "")
        cutoff = time.time() - age
        targets = []
        for name, paths in sorted(session_files(cfg).items()):
            if all(_newest_mtime(p) < cutoff for p in paths):
                targets.append((_real_session_id(name, paths) or name, paths))
    if not dry_run and targets:
        with ProgressiveCompactor(cfg) as compactor:
            for sid, paths in targets:
                errors += compactor.delete_session(sid)
                for path in paths:  # hashed names whose id is unknown: remove the files themselves
                    if path.exists():
                        _remove(path)
    for sid, paths in targets:
        removed.append({"session": sid, "paths": [str(p) for p in paths]})
    if as_json:
        _echo_json({"dry_run": dry_run, "removed": removed, "errors": errors})
    else:
        verb = "would remove" if dry_run else "removed"
        if not removed:
            click.echo("nothing to remove", err=True)
        for item in removed:
            click.echo(f"{verb} session {item['session']}")
            for p in item["paths"]:
                click.echo(f"  {p}")
            if not item["paths"] and session is not None:
                click.echo("  (no files in the file plugins' folders; other stores were asked to delete it)")
        for error in errors:
            click.echo(f"warning: {error}", err=True)
    if errors:
        raise click.exceptions.Exit(1)


# --- report -----------------------------------------------------------------------------------


def _sniff(source: str) -> str:
    """``messages`` or ``records``: what the first JSON object of a JSONL file looks like."""
    text = _read_text(source)
    for line in text.splitlines():
        if line.strip():
            break
    else:
        raise click.ClickException(f"{source}: empty file")
    if line.lstrip().startswith("["):
        return "messages"
    try:
        first = json.loads(line)
    except json.JSONDecodeError:
        return "messages"  # let the messages reader name the line
    if isinstance(first, dict) and "tokens_before" in first and "tier" in first:
        return "records"
    return "messages"


@main.command(short_help="Write a self-contained HTML report with charts.")
@click.argument("input_file", metavar="INPUT")
@click.option("--output", "-o", required=True, type=click.Path(dir_okay=False), help="HTML file to write.")
@config_option
@click.option("--context-window", "-w", type=click.IntRange(min=1), help="Context window in tokens (session input only).")
@json_option
def report(input_file: str, output: str, config: str, context_window: int | None, as_json: bool) -> None:
    """Write a self-contained HTML report (charts work offline) for a session file or a records JSONL.

    A session (chat messages) is replayed first; a records file is charted as it is. Charts:
    view tokens per turn with the four threshold bands and each compaction marked by tier,
    tokens before/after per compaction, offloaded size. Needs plotly:
    pip install progressive-compactor[report].

    \b
    Example: compactor report session.jsonl -w 16000 -o report.html
    """
    from . import report as report_mod

    if input_file == "-":
        raise click.UsageError("INPUT must be a file (a session or a records JSONL), not stdin")
    report_mod.require_plotly()
    cfg = _load_config(config, context_window)
    thresholds = report_mod.thresholds_of(cfg)
    if _sniff(input_file) == "records":
        from .plugins.store_jsonl import read_records

        found = list(read_records(input_file))
        if not found:
            raise click.ClickException(f"{input_file}: no readable records")
        data = report_mod.from_records(found, thresholds, title=Path(input_file).stem)
    else:
        with _work_folder(None) as directory:
            sid, source, result = next(run_replays([input_file], cfg, directory))
        data = report_mod.from_replay(result, thresholds, title=sid, summary=replay_summary(sid, source, result))
    page = report_mod.render_html(data)
    _write_file(output, page)
    if as_json:
        _echo_json({"output": output, "bytes": len(page.encode("utf-8")), "compactions": len(data.compactions)})
    else:
        click.echo(f"wrote {output} ({len(page.encode('utf-8')) // 1024} KB, {len(data.compactions)} compactions)")


if __name__ == "__main__":
    main()
