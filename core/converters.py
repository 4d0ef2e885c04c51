"""The cattrs converters: one strict converter for config, one for records and state.

Models carry no (de)serialization code; this module is the only place that knows how they look on
disk. The config converter is strict: it rejects unknown keys and does not turn ``"10"`` into
``10`` or a list into a string, and every problem is reported with its path.
"""

from __future__ import annotations

import collections.abc
import json
import typing
from typing import Any, TypeVar

import cattrs
from cattrs.v import transform_error

from .errors import ConfigError
from .models import AnchorType, CompactionRecord, CompactionTier, SessionState

T = TypeVar("T")


def _strict(kind: type, accept: tuple[type, ...], reject: tuple[type, ...] = ()):
    def structure(value: Any, _: type) -> Any:
        if isinstance(value, reject) or not isinstance(value, accept):
            raise TypeError(f"expected {kind.__name__}, got {type(value).__name__} {value!r}")
        return kind(value)

    return structure


def make_config_converter() -> cattrs.Converter:
    converter = cattrs.Converter(forbid_extra_keys=True)
    converter.register_structure_hook(int, _strict(int, (int,), (bool,)))
    converter.register_structure_hook(float, _strict(float, (int, float), (bool,)))
    converter.register_structure_hook(str, _strict(str, (str,)))
    converter.register_structure_hook(bool, _strict(bool, (bool,)))
    _reject_text_for_sequences(converter)
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
                raise TypeError(f"expected a list, got {type(value).__name__} {value!r}")
            return hook(value, target)

        return structure

    converter.register_structure_hook_factory(is_sequence, factory)


config_converter = make_config_converter()


def structure_config(data: Any, cls: type[T], path: str = "$") -> T:
    """Structure ``data`` into ``cls``; raise :class:`ConfigError` with one line per problem."""
    if data is None:
        data = {}
    try:
        return config_converter.structure(data, cls)
    except Exception as exc:  # cattrs raises ClassValidationError / plain errors
        if isinstance(exc, (cattrs.BaseValidationError,)):
            problems = transform_error(exc, path=path)
        else:
            problems = [f"{exc} @ {path}"]
        raise ConfigError(problems) from exc


def make_record_converter() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_unstructure_hook(CompactionTier, lambda tier: tier.name.lower())
    converter.register_structure_hook(
        CompactionTier,
        lambda value, _: CompactionTier[value.upper()] if isinstance(value, str) else CompactionTier(value),
    )
    converter.register_unstructure_hook(AnchorType, lambda t: t.value)
    return converter


record_converter = make_record_converter()


def record_to_dict(record: CompactionRecord) -> dict[str, Any]:
    return record_converter.unstructure(record)


def record_from_dict(data: dict[str, Any]) -> CompactionRecord:
    return record_converter.structure(data, CompactionRecord)


def record_to_json(record: CompactionRecord) -> str:
    return json.dumps(record_to_dict(record), ensure_ascii=False, separators=(",", ":"))


def state_to_json(state: SessionState) -> str:
    return json.dumps(record_converter.unstructure(state), ensure_ascii=False)


def state_from_json(text: str) -> SessionState:
    return record_converter.structure(json.loads(text), SessionState)
