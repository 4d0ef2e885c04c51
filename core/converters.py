"""The cattrs converters: one strict converter for config, one for records and state.

Models carry no (de)serialization code; this module is the only place that knows how they look
as data. The config converter is strict: it rejects unknown keys (with a "did you mean"), does not
turn ``"10"`` into ``10`` or a string into a list of letters, and reports every problem with its
path and, from a validator, its own message.
"""

from __future__ import annotations

import collections.abc
import difflib
import json
import logging
import os
import re
import typing
from typing import Any, Callable, Iterator, TypeVar

import attrs
import cattrs
import orjson
from cattrs.errors import ForbiddenExtraKeysError
from cattrs.gen import make_dict_structure_fn
from cattrs.v import format_exception, transform_error

from .errors import ConfigError
from .models import AnchorType, CompactionRecord, CompactionTier, SessionState
from .redaction import secret_setting

T = TypeVar("T")
log = logging.getLogger("progressive_compactor")


class SettingError(ValueError):
    """Raised by config validators and strict hooks: its message is shown as it is."""

    def __init__(self, message: str, field: str | None = None):
        self.field = field
        super().__init__(message)


def setting_check(check: Callable[[Any], bool], message: str) -> Callable[[Any, Any, Any], None]:
    """An attrs validator: ``message`` (with ``{value}``) when ``check(value)`` is false."""

    def validate(instance: Any, attribute: Any, value: Any) -> None:
        if not check(value):
            raise SettingError(message.format(value=value), attribute.name)

    return validate


def did_you_mean(word: str, choices: typing.Iterable[str]) -> str:
    """``; did you mean 'x'?`` for the closest choice, or nothing."""
    close = difflib.get_close_matches(word, list(choices), n=1, cutoff=0.6)
    return f"; did you mean {close[0]!r}?" if close else ""


def _strict(kind: type, accept: tuple[type, ...], reject: tuple[type, ...] = ()) -> Callable[[Any, Any], Any]:
    def structure(value: Any, _: Any) -> Any:
        if isinstance(value, reject) or not isinstance(value, accept):
            raise SettingError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return kind(value)

    return structure


def make_config_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict(int, (int,), (bool,)))
    converter.register_structure_hook(float, _strict(float, (int, float), (bool,)))
    converter.register_structure_hook(str, _strict(str, (str,)))
    converter.register_structure_hook(bool, _strict(bool, (bool,)))
    _reject_text_for_sequences(converter)
    _reject_non_mappings(converter)
    return converter


def _reject_text_for_sequences(converter: cattrs.Converter) -> None:
    """cattrs makes ``"store-jsonl"`` into a tuple of letters and a mapping into its keys; a
    config list must be a list."""
    inner = converter.copy()

    def is_sequence(cls: Any) -> bool:
        return typing.get_origin(cls) in (tuple, list, set, frozenset, collections.abc.Sequence)

    def factory(cls: Any) -> Any:
        hook = inner.get_structure_hook(cls)

        def structure(value: Any, target: Any) -> Any:
            if not isinstance(value, (list, tuple)):
                raise SettingError(f"expected a list, got {type(value).__name__} {value!r}")
            return hook(value, target)

        return structure

    converter.register_structure_hook_factory(is_sequence, factory)


def _reject_non_mappings(converter: cattrs.Converter) -> None:
    """A block that should be a mapping but is a string or a list says so plainly."""
    inner = converter.copy()

    def is_mapping(cls: Any) -> bool:
        return attrs.has(cls) or typing.get_origin(cls) in (dict, collections.abc.Mapping)

    def factory(cls: Any) -> Any:
        # an attrs class's fields are structured by ``converter`` itself, so that a block nested in
        # a block (``timeout: {connect, read}``) is checked too
        hook = make_dict_structure_fn(cls, converter) if attrs.has(cls) else inner.get_structure_hook(cls)

        def structure(value: Any, target: Any) -> Any:
            if not isinstance(value, collections.abc.Mapping):
                raise SettingError(f"expected a mapping, got {type(value).__name__} {value!r}")
            return hook(value, target)

        return structure

    converter.register_structure_hook_factory(is_mapping, factory)


config_converter = make_config_converter()
_FIELD_MARK = "\x00field:"


_PROBLEMS_MARK = "\x00problems:"


def _format(exc: BaseException, kind: Any) -> str:
    if isinstance(exc, ConfigError):  # a Config class's own check of several settings at once
        return _PROBLEMS_MARK + "\x00".join(exc.problems)
    if isinstance(exc, SettingError):
        return f"{exc}{_FIELD_MARK}{exc.field}" if exc.field else str(exc)
    if isinstance(exc, ForbiddenExtraKeysError):
        kind = kind if attrs.has(kind) else getattr(exc, "cl", None)  # cattrs passes None for it
        names = [f.name for f in attrs.fields(kind)] if attrs.has(kind) else []
        return "; ".join(
            f"unknown setting {key!r}{did_you_mean(key, names)}" + (f" (settings: {', '.join(names)})" if names else "")
            for key in sorted(exc.extra_fields)
        )
    return format_exception(exc, kind)


def _lines(line: str) -> list[str]:
    """The problems of one line of ``transform_error``: a ConfigError raised by a Config class
    gives each of its problems, with the block's path where it names none."""
    if not line.startswith(_PROBLEMS_MARK):
        return [_with_field(line)]
    body, _, path = line[len(_PROBLEMS_MARK) :].rpartition(" @ ")
    return [p if " @ $" in p else f"{p} @ {path}" for p in body.split("\x00")]


def _with_field(line: str) -> str:
    """``message\\0field:name @ $.path`` -> ``message @ $.path.name``."""
    if _FIELD_MARK not in line:
        return line
    message, rest = line.split(_FIELD_MARK, 1)
    field, _, path = rest.partition(" @ ")
    return f"{message} @ {path}.{field}"


_PATH_KEY = re.compile(r"""\.([^.\[\]]+)|\[('(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[0-9]+)\]""")
"""A key of a path ``transform_error`` writes: ``.name``, ``['name']`` or ``[0]``."""


def _no_secret(problem: str) -> str:
    """``problem`` without the value it quotes when its path names a secret setting
    (:func:`~progressive_compactor.redaction.secret_setting`: an ``extra_headers`` entry, an
    ``api_key``): ``expected str, got int 8723... @ $...`` says ``got int`` alone."""
    message, at, path = problem.rpartition(" @ ")
    keys = [name or quoted[1:-1] for name, quoted in _PATH_KEY.findall(path)]
    if at and keys and secret_setting(keys[-1], keys[-2] if len(keys) > 1 else ""):
        message = re.sub(r"(, got [\w.]+) .*", r"\1", message, flags=re.DOTALL)
    return f"{message}{at}{path}"


def structure_config(data: Any, cls: type[T], path: str = "$") -> T:
    """Structure ``data`` into ``cls``; raise :class:`ConfigError` with one line per problem."""
    if data is None and attrs.has(cls):  # an empty block in YAML is null
        data = {}
    try:
        return config_converter.structure(data, cls)
    except cattrs.BaseValidationError as exc:
        lines = transform_error(exc, path=path, format_exception=_format)
        raise ConfigError([_no_secret(p) for line in lines for p in _lines(line)]) from exc
    except ConfigError:
        raise
    except SettingError as exc:
        where = f"{path}.{exc.field}" if exc.field else path
        raise ConfigError([f"{exc} @ {where}"]) from exc
    except Exception as exc:  # a validator that raised something else
        raise ConfigError([f"{type(exc).__name__}: {exc} @ {path}"]) from exc


# --- records and state ------------------------------------------------------------------------


def _text(value: Any, _: Any) -> str:
    """A text field of a record or a state: ``null`` is no text (a hand-edited file), refused as a
    missing field is, never read as the text ``None``."""
    if value is None:
        raise SettingError("null where text belongs")
    return str(value)


def make_record_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_structure_hook(str, _text)
    converter.register_structure_hook(AnchorType, lambda value, _: AnchorType(value))  # a str, but an enum
    converter.register_unstructure_hook(CompactionTier, lambda tier: tier.name.lower())
    converter.register_structure_hook(
        CompactionTier,
        lambda value, _: CompactionTier[value.upper()] if isinstance(value, str) else CompactionTier(value),
    )
    converter.register_unstructure_hook(AnchorType, lambda t: t.value)
    return converter


record_converter = make_record_converter()
EMERGENCY_CAUSE = "emergency fallback: forced truncation"
"""The cause the record gives when the truncation fallback made the view."""


def record_to_dict(record: CompactionRecord) -> dict[str, Any]:
    data: dict[str, Any] = record_converter.unstructure(record)
    return data


def upgrade_record_data(data: dict[str, Any]) -> dict[str, Any]:
    """A record dict of an older schema version in today's layout.

    Version 1 had one ``error`` string joining every cause with ``"; "``: it is split into
    ``errors``, loop-guard notes move to ``escalations``, and ``fallback`` is set when the
    truncation fallback's cause is among them.
    """
    if data.get("schema_version", 1) >= 2 or "error" not in data:
        return data
    data = dict(data)
    causes: list[str] = []
    for piece in str(data.pop("error") or "").split("; "):
        if piece == "escalating" and causes and causes[-1].startswith("loop guard:"):
            causes[-1] += "; escalating"  # "loop guard: Soft left the view at N% of the window; escalating"
        elif piece:
            causes.append(piece)
    data["escalations"] = [c for c in causes if c.startswith("loop guard:")]
    data["errors"] = [c for c in causes if c not in data["escalations"]]
    data["fallback"] = EMERGENCY_CAUSE in causes
    return data


def record_from_dict(data: dict[str, Any]) -> CompactionRecord:
    """A record from its dict, any schema version (older ones are upgraded)."""
    return record_converter.structure(upgrade_record_data(data), CompactionRecord)


def compact_json(data: Any) -> str:
    """``data`` as JSON with no spaces and characters as they are, by orjson (sixteen times
    faster than the standard library: a record is written at every compaction); text with a
    lone surrogate, which orjson refuses, by the standard library."""
    try:
        return orjson.dumps(data).decode("utf-8")
    except orjson.JSONEncodeError:
        return json.dumps(data, ensure_ascii=False, separators=(",", ":"))


def record_to_json(record: CompactionRecord) -> str:
    return compact_json(record_to_dict(record))


def read_records_file(path: str | os.PathLike[str]) -> Iterator[CompactionRecord]:
    """Every record in a JSONL file; a line that does not parse is skipped with a warning naming
    the file and the line (a torn last line is what a crash mid-write leaves). A named pipe or
    anything else that is not a regular file is refused (:class:`StorageError`), never waited on."""
    from .storage import read_file

    yield from parse_records(read_file(path), path)


def unreadable(exc: Exception) -> str:
    """Why a record could not be read, for a warning: each field's problem (``timestamp: required
    field missing``), else the error's type (never a value: it may hold a secret)."""
    if not isinstance(exc, cattrs.BaseValidationError):
        return type(exc).__name__
    lines = transform_error(
        exc, format_exception=lambda e, kind: str(e) if isinstance(e, SettingError) else format_exception(e, kind)
    )
    problems = (line.rpartition(" @ ") for line in lines)
    return "; ".join(f"{where.removeprefix('$').removeprefix('.') or 'record'}: {what}" for what, _, where in problems)


def parse_records(data: bytes, path: str | os.PathLike[str]) -> Iterator[CompactionRecord]:
    """Every record in the bytes of a JSONL file, as :func:`read_records_file` reads them;
    ``path`` names the file in the warnings."""
    lines = data.split(b"\n")
    last = len(lines) - 1
    for number, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        try:
            yield record_from_dict(json.loads(raw.decode("utf-8", "surrogatepass")))
        except Exception as exc:  # noqa: BLE001 - JSON, UTF-8 and cattrs errors all mean "unreadable"
            what = "torn last line (interrupted write)" if number - 1 == last else "unreadable line"
            log.warning("%s:%d: skipped %s: %s", path, number, what, unreadable(exc))


def state_to_json(state: SessionState) -> str:
    return compact_json(record_converter.unstructure(state))


def state_from_json(text: str) -> SessionState:
    return record_converter.structure(json.loads(text), SessionState)
