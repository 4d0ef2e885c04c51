"""The ``compactor`` group and what every command shares.

Conventions, the same on every command: ``--json`` prints machine-readable output instead of
tables; an error is one line on stderr (``error: ...``) and a non-zero exit status (1, or 2 for a
usage mistake), with the traceback only under ``--debug``; output whose reader is gone
(``compactor ... | head -1``) ends the command silently, exit status 0; no colour when ``NO_COLOR`` is set or
output is not a terminal; every ``--help`` ends with an example.

Commands are thin: each calls the library's own API (``ProgressiveCompactor``, the config loader,
the replay engine), and reads what plugins keep through hooks (``read_records``,
``list_sessions``, ``read_offloaded``, ``tier_thresholds``), so every command works with any
store, state or policy plugin, built-in or third-party. Each command lives in its own module of
this package; packages add commands through the ``register_commands`` hook.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import traceback
from importlib import metadata
from typing import Any, Callable, Sequence

import click

from ..errors import CompactorError

log = logging.getLogger("progressive_compactor")
CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class _StderrHandler(logging.Handler):
    """Library warnings as ``warning: ...`` lines on the stderr of the moment (the test runner swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(f"{record.levelname.lower()}: {record.getMessage()}\n")
        except Exception:  # noqa: BLE001 - logging must never break the command
            self.handleError(record)


_log_handler = _StderrHandler()


def _setup_logging(debug: bool) -> None:
    if _log_handler not in log.handlers:
        log.addHandler(_log_handler)
    log.setLevel(logging.DEBUG if debug else logging.WARNING)


def one_line(text: str) -> str:
    return " ".join(str(text).split())


GLOBAL_FLAGS = ("--debug",)
"""Options of the root group that may also be written after the command (``compactor replay
FILE --debug``); they take no value, so moving them to the front changes nothing else."""


def global_options_first(args: list[str]) -> list[str]:
    """``args`` with the global flags moved before the command (up to a ``--`` that ends options)."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    if not flags:
        return args
    return [*flags, *(a for a in args[:end] if a not in GLOBAL_FLAGS), *args[end:]]


class _OutputClosed(Exception):
    """A command's output pipe was closed by its reader."""


class CompactorGroup(click.Group):
    """The root group: one-line errors, ``--debug`` tracebacks."""

    debug = False

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, *a: Any, **kw: Any) -> Any:
        standalone = kw.pop("standalone_mode", True)
        type(self).debug = bool(os.environ.get("COMPACTOR_DEBUG"))
        args = global_options_first(sys.argv[1:] if args is None else list(args))
        try:
            result = super().main(args, prog_name or "compactor", *a, standalone_mode=False, **kw)  # type: ignore[call-overload]
            code = result if isinstance(result, int) else 0
            sys.stdout.flush()  # what is still buffered: a closed pipe shows here, if not before
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
        except (_OutputClosed, BrokenPipeError):  # the reader of the output is gone (| head): done
            _discard_stdout()
            code = 0
        except CompactorError as exc:
            self._fail(str(exc), exc)
            code = 1
        except Exception as exc:  # noqa: BLE001 - one line, never a traceback unless asked
            hint = "" if self.debug else " (run 'compactor --debug ...' for the traceback)"
            self._fail(f"{type(exc).__name__}: {exc}{hint}", exc)
            code = 1
        finally:
            log.removeHandler(_log_handler)
            log.setLevel(logging.NOTSET)
        if not standalone:
            return code
        sys.exit(code)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:  # raised past click, which would exit 1 without a word
            raise _OutputClosed from None

    def _fail(self, message: str, exc: BaseException | None = None) -> None:
        if self.debug and exc is not None:
            traceback.print_exception(type(exc), exc, exc.__traceback__, file=sys.stderr)
        sys.stderr.write(f"error: {one_line(message)}\n")


def _discard_stdout() -> None:
    """Point stdout at the null device, so that what is still buffered for a closed pipe does not
    fail again when Python flushes it at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):  # no file descriptor behind stdout (a test runner's): nothing to flush
        pass


@click.group(cls=CompactorGroup, context_settings=CONTEXT)
@click.version_option(package_name="progressive-compactor", prog_name="compactor")
@click.option(
    "--debug", is_flag=True, help="Show tracebacks on errors and the library's debug log (also after the command)."
)
def cli(debug: bool) -> None:
    """Tiered context compaction for LLM agents: compact, replay, inspect, report, clean up.

    \b
    Example: compactor replay session.jsonl -w 16000
    """
    CompactorGroup.debug = CompactorGroup.debug or debug
    _setup_logging(CompactorGroup.debug)


# --- options and helpers every command uses ---------------------------------------------------


def config_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--config", "-c", default="default", show_default=True, help="Bundled config name or YAML path."
    )(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Machine-readable JSON output.")(f)


def data_dir_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--data-dir",
        type=click.Path(file_okay=False),
        help="Folder the plugins keep files in (overrides the config and COMPACTOR_DATA_DIR).",
    )(f)


def window_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--context-window", "-w", type=click.IntRange(min=1), help="Context window in tokens (overrides the config)."
    )(f)


def load_cli_config(config: str, *, context_window: int | None = None, data_dir: str | None = None) -> Any:
    """The config a command runs with: the file or bundled name, with the command's overrides."""
    from ..validation import load_config

    overrides: dict[str, Any] = {}
    if context_window:
        overrides["context_window"] = context_window
    if data_dir:
        overrides["data_dir"] = os.path.abspath(os.path.expanduser(data_dir))
    return load_config(config, **overrides)


def storage_compactor(cfg: Any) -> Any:
    """A compactor of ``cfg`` for reading what its plugins keep (records, offloads, sessions).

    The summarizer is not needed to read anything, so the offline one stands in for it: reading
    records must not need a provider's API key.
    """
    import attrs

    from ..compactor import ProgressiveCompactor

    plugins = attrs.evolve(cfg.plugins, summarizer="summarize-extractive")
    return ProgressiveCompactor(attrs.evolve(cfg, plugins=plugins))


def json_text(data: Any) -> str:
    """JSON of ``data`` as readable text; escaped where it holds lone surrogates (valid JSON that
    no UTF-8 stream can carry as they are); a number that is not finite (NaN, infinity: no JSON
    number) is null."""
    try:
        text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    except ValueError:
        data = _finite(data)
        text = json.dumps(data, ensure_ascii=False, default=str, allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(data, ensure_ascii=True, default=str, allow_nan=False)
    return text


def _finite(data: Any) -> Any:
    """``data`` with every float that is not finite replaced by None."""
    if isinstance(data, float):
        return data if math.isfinite(data) else None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_finite(v) for v in data]
    return data


def echo_json(data: Any) -> None:
    click.echo(json_text(data))


def console(stderr: bool = False) -> Any:
    from .render import make_console

    return make_console(stderr=stderr)


def write_output(path: str, text: str) -> None:
    """Write a command's output file (:func:`~progressive_compactor.storage.write_file`: atomically
    and owner-only for a regular file, through for a link, a pipe or a device), or stdout for
    ``-``; errors as one readable line."""
    from ..storage import write_file

    if path == "-":
        click.echo(text, nl=False)
        return
    try:
        write_file(path, text.encode("utf-8", "surrogatepass"))
    except OSError as exc:
        raise click.ClickException(f"{path}: cannot write: {exc.strerror or exc}") from None


def check_output(path: str | None, inputs: Sequence[str]) -> None:
    """Refuse an output file that is one of the command's input files (also by another name),
    before any work: writing it would replace the input."""
    if not path or path == "-":
        return
    for source in inputs:
        try:
            same = source != "-" and os.path.samefile(path, source)
        except OSError:  # one of them does not exist (yet)
            continue
        if same:
            raise click.UsageError(f"--output {path} is the input file {source}; write to another file")


# --- the commands -----------------------------------------------------------------------------


def _add_builtin_commands() -> None:
    from . import compact, config, gc, plugins, records, replay, report

    for module in (compact, replay, records, plugins, config, gc, report):
        for command in module.COMMANDS:
            cli.add_command(command)


def _add_plugin_commands() -> None:
    """Commands of every package declared under the ``progressive_compactor_cli`` group."""
    import pluggy

    from ..hookspecs import PROJECT
    from . import hookspecs

    pm = pluggy.PluginManager(PROJECT)
    pm.add_hookspecs(hookspecs)
    for ep in metadata.entry_points(group=hookspecs.GROUP):
        try:
            pm.register(ep.load(), name=ep.name)
        except (Exception, SystemExit) as exc:  # noqa: BLE001 - a broken package must not take the CLI down
            cli.add_command(_broken_command(ep.name, exc))
    for impl in pm.hook.register_commands.get_hookimpls():
        try:
            impl.function(cli)
        except Exception as exc:  # noqa: BLE001
            cli.add_command(_broken_command(impl.plugin_name, exc))


def _broken_command(name: str, exc: BaseException) -> click.Command:
    def fail() -> None:
        raise click.ClickException(f"the '{name}' command failed to load: {type(exc).__name__}: {exc}")

    return click.Command(name, callback=fail, help=f"(unavailable: {type(exc).__name__})")


_add_builtin_commands()
_add_plugin_commands()
