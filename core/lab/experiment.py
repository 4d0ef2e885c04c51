"""A/B experiments: named variants of a config, sticky assignment, and paired comparisons.

An experiment is the ``experiment`` section of a YAML config; the rest of the file is the *base*::

    context_window: 32000
    pricing: {input: 3.0, cached_input: 0.3, output: 15.0}
    experiment:
      name: progressive-vs-one-threshold
      control: one-threshold            # differences are reported against it (default: first)
      salt: "2025-06"                   # optional; changing it reshuffles assignment
      variants:
        one-threshold: {weight: 0.5, config: baseline-one-threshold}
        progressive:   {weight: 0.5, overrides: {min_tail_messages: 8}}

Each variant is the base with ``overrides`` laid over it, or, with ``config``, another config file
(a bundled name, or a path relative to the experiment file) with ``overrides`` laid over that.
``context_window`` and ``pricing`` are measurement settings, shared by every variant (a variant
may not override them); the data folder, the record stores and the state store come from the base
even for a variant read from another file, so every record lands where the base says. Every
variant's config has ``variant`` set to its name, so every record says which variant wrote it.

Sticky assignment: a session goes to the variant found by hashing ``salt`` and the session id
(SHA-256, the first 8 bytes as a number in [0, 1), laid against the cumulative normalised
weights). The same session id lands on the same variant on every turn, in every process and on
every host; a weight of 0 keeps a variant out of live traffic but not out of replays.

Comparisons: per-variant means, and the difference of each variant from the control with a
percentile bootstrap 95 % confidence interval. Replays (``compactor ab replay``) run every session
under every variant, so the difference is paired per session; live records (``compactor ab
report``) usually hold each session under one variant only, so the difference is between two
independent samples (paired when sessions were recorded under both).
"""

from __future__ import annotations

import hashlib
import math
import random
import statistics
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from ..config import CompactorConfig, config_to_dict, deep_merge, read_config_data
from ..errors import ConfigError
from ..validation import check_config_data, config_from_dict, variant_data


@attrs.frozen
class Variant:
    name: str
    weight: float
    config: CompactorConfig


@attrs.frozen
class Experiment:
    """A parsed experiment: its variants (configs resolved and checked) and how to assign them."""

    name: str
    variants: tuple[Variant, ...]
    control: str
    salt: str
    base: CompactorConfig

    @property
    def names(self) -> list[str]:
        return [v.name for v in self.variants]

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError([f"no variant named {name!r}; variants: {', '.join(self.names)} @ $.experiment.variants"])

    def assign(self, session_id: str) -> str:
        """The variant of ``session_id``: sticky, as the module docstring describes."""
        return assign_variant(session_id, [(v.name, v.weight) for v in self.variants], self.salt)

    def config_for(self, session_id: str) -> CompactorConfig:
        return self.variant(self.assign(session_id)).config

    def with_overrides(self, **overrides: Any) -> Experiment:
        """Every variant's config with ``overrides`` laid over it (a window, a work folder)."""
        variants = tuple(attrs.evolve(v, config=_override(v.config, overrides)) for v in self.variants)
        return attrs.evolve(self, variants=variants, base=_override(self.base, overrides))


def _override(config: CompactorConfig, overrides: Mapping[str, Any]) -> CompactorConfig:
    if not overrides:
        return config
    return config_from_dict(deep_merge(config_to_dict(config), overrides))


def hash_unit(session_id: str, salt: str = "") -> float:
    """A number in [0, 1) from ``salt`` and ``session_id``; the same in every process."""
    digest = hashlib.sha256(f"{salt}\0{session_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def assign_variant(session_id: str, weights: Sequence[tuple[str, float]], salt: str = "") -> str:
    """The variant ``session_id`` sticks to, given ``(name, weight)`` pairs."""
    total = sum(w for _, w in weights)
    if not weights or total <= 0:
        raise ConfigError(["at least one variant needs a positive weight @ $.experiment.variants"])
    u = hash_unit(session_id, salt) * total
    acc = 0.0
    for name, weight in weights:
        acc += weight
        if u < acc and weight > 0:
            return name
    return [name for name, w in weights if w > 0][-1]


def experiment_from_dict(
    data: Mapping[str, Any], source: str | None = None, directory: Path | None = None
) -> Experiment:
    """Parse a whole config mapping (base plus ``experiment`` section) into an Experiment.

    The whole file goes through the one validation every config goes through, variants
    included; :class:`ConfigError` lists every problem.
    """
    if not isinstance(data.get("experiment"), Mapping):
        raise ConfigError(["no experiment section; add one (see configs/ab-example.yaml) @ $.experiment"], source)
    base, problems = check_config_data(data, directory=directory)
    if problems:
        raise ConfigError(problems, source)
    spec = base.experiment
    assert spec is not None
    variants = []
    for name, v in spec.variants.items():
        vdata, where = variant_data(name, v, data, directory)
        variants.append(Variant(name, v.weight, config_from_dict(vdata, where, directory=directory)))
    return Experiment(
        name=spec.name,
        variants=tuple(variants),
        control=spec.control or variants[0].name,
        salt=spec.salt if spec.salt is not None else spec.name,
        base=attrs.evolve(base, experiment=None),
    )


def load_experiment(name_or_path: str | Path) -> Experiment:
    """Read an experiment from a bundled config name or a YAML file."""
    data, source, directory = read_config_data(name_or_path)
    return experiment_from_dict(data, source, directory)


def experiment_from_config(config: CompactorConfig, directory: Path | None = None) -> Experiment:
    """The experiment of an already loaded config (its ``experiment`` section); a variant's
    relative ``config`` path is resolved against ``directory`` (default: the working folder)."""
    return experiment_from_dict(config_to_dict(config), None, directory or Path.cwd())


class ExperimentCompactor:
    """Live traffic under an experiment: each session is compacted by its sticky variant.

    Has the compacting methods of :class:`~progressive_compactor.ProgressiveCompactor`; one
    compactor per variant is built on first use.
    """

    def __init__(self, experiment: Experiment | str | Path, **kwargs: Any):
        self.experiment = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
        self._kwargs = kwargs
        self._compactors: dict[str, Any] = {}

    def compactor_for(self, session_id: str) -> Any:
        from ..compactor import ProgressiveCompactor

        name = self.experiment.assign(session_id)
        if name not in self._compactors:
            self._compactors[name] = ProgressiveCompactor(self.experiment.variant(name).config, **self._kwargs)
        return self._compactors[name]

    def compact_with_record(self, history: Any, session_id: str) -> Any:
        return self.compactor_for(session_id).compact_with_record(history, session_id)

    def compact(self, history: Any, session_id: str) -> Any:
        return self.compactor_for(session_id).compact(history, session_id)

    async def acompact_with_record(self, history: Any, session_id: str) -> Any:
        return await self.compactor_for(session_id).acompact_with_record(history, session_id)

    async def acompact(self, history: Any, session_id: str) -> Any:
        return await self.compactor_for(session_id).acompact(history, session_id)

    def close(self) -> None:
        for compactor in self._compactors.values():
            compactor.close()


# --- statistics -------------------------------------------------------------------------------


@attrs.frozen
class Estimate:
    """A mean (or a difference of means) with its bootstrap confidence interval."""

    mean: float
    low: float
    high: float
    n: int
    paired: bool = True


def bootstrap_ci(
    values: Sequence[float],
    *,
    resamples: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    statistic: Callable[[Sequence[float]], float] = statistics.fmean,
) -> tuple[float, float]:
    """Percentile bootstrap interval of ``statistic`` over ``values``; seeded, so reproducible."""
    if not values:
        raise ValueError("bootstrap of no values")
    if len(values) == 1:
        return values[0], values[0]
    rng = random.Random(seed)
    n = len(values)
    stats = sorted(statistic([values[rng.randrange(n)] for _ in range(n)]) for _ in range(resamples))
    return _percentile(stats, (1 - confidence) / 2), _percentile(stats, 1 - (1 - confidence) / 2)


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default method)."""
    position = q * (len(sorted_values) - 1)
    lo = math.floor(position)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (position - lo)


def paired_difference(
    treatment: Sequence[float], control: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Mean of ``treatment[i] - control[i]`` with a bootstrap CI over the pairs."""
    if len(treatment) != len(control):
        raise ValueError("paired samples must have the same length")
    diffs = [t - c for t, c in zip(treatment, control, strict=False)]
    low, high = bootstrap_ci(diffs, resamples=resamples, seed=seed)
    return Estimate(statistics.fmean(diffs), low, high, len(diffs), True)


def unpaired_difference(
    treatment: Sequence[float], control: Sequence[float], *, resamples: int = 2000, seed: int = 0
) -> Estimate:
    """Difference of means of two independent samples, each resampled on its own."""
    if not treatment or not control:
        raise ValueError("bootstrap of an empty sample")
    rng = random.Random(seed)
    nt, nc = len(treatment), len(control)
    stats = sorted(
        statistics.fmean([treatment[rng.randrange(nt)] for _ in range(nt)])
        - statistics.fmean([control[rng.randrange(nc)] for _ in range(nc)])
        for _ in range(resamples)
    )
    return Estimate(
        statistics.fmean(treatment) - statistics.fmean(control),
        _percentile(stats, 0.025),
        _percentile(stats, 0.975),
        min(nt, nc),
        False,
    )


# --- per-session metrics and the comparison table ---------------------------------------------

METRICS: tuple[tuple[str, str], ...] = (
    ("cost", "billed cost (USD)"),
    ("peak_tokens", "peak view tokens"),
    ("overflows", "overflows"),
    ("invalid_views", "invalid views"),
    ("cached_share", "cached share of input"),
    ("summarizer_calls", "summarizer calls"),
    ("compactions", "compactions"),
    ("retention_request", "retention: request"),
    ("retention_artifacts", "retention: artifacts"),
    ("retention_errors", "retention: errors"),
    ("retention_next_step", "retention: next step"),
)
Metrics = dict[str, float | None]


def metrics_from_replay(result: Any) -> Metrics:
    """The comparison metrics of one :class:`~progressive_compactor.lab.replay.ReplayResult`."""
    retention = result.retention.ratios() if result.retention is not None else {}
    return {
        "cost": result.cost.total if result.cost is not None else None,
        "peak_tokens": float(result.peak_view_tokens),
        "overflows": float(result.overflows),
        "invalid_views": float(result.invalid_views),
        "cached_share": result.cached_input_tokens / result.total_input_tokens if result.total_input_tokens else None,
        "summarizer_calls": float(result.summarizer_calls),
        "compactions": float(result.compactions),
        **{f"retention_{c}": retention.get(c) for c in ("request", "artifacts", "errors", "next_step")},
    }


def metrics_from_records(records: Iterable[Any], prices: Any = None) -> dict[tuple[str, str], Metrics]:
    """Per ``(variant, session)`` metrics from CompactionRecords written by live traffic.

    Cost is the input side only (view, cached prefix, summarizer): records do not hold the
    model's answers. It covers every turn only when tier-None records were stored
    (``store-jsonl: {record_none: true}``). Retention needs the transcript: None here.
    """
    from ..models import CompactionTier
    from ..pricing import DEFAULT_PRICES, call_cost

    prices = prices or DEFAULT_PRICES
    grouped: dict[tuple[str, str], list[Any]] = {}
    for r in records:
        grouped.setdefault((r.variant or "(none)", r.session_id), []).append(r)
    out: dict[tuple[str, str], Metrics] = {}
    for key, recs in grouped.items():
        cost = 0.0
        for r in recs:
            cost += call_cost(
                prices,
                view_tokens=r.tokens_after,
                cached_tokens=min(r.cache_stable_prefix_tokens, r.tokens_after),
                summarizer_tokens_in=r.summarizer_tokens_in,
                summarizer_tokens_out=r.summarizer_tokens_out,
            ).total
        total_in = sum(r.tokens_after for r in recs)
        out[key] = {
            "cost": cost,
            "peak_tokens": float(max(r.tokens_after for r in recs)),
            "overflows": float(sum(1 for r in recs if r.context_window and r.tokens_after > r.context_window)),
            "invalid_views": None,
            "cached_share": sum(min(r.cache_stable_prefix_tokens, r.tokens_after) for r in recs) / total_in
            if total_in
            else None,
            "summarizer_calls": float(sum(r.summarizer_calls for r in recs)),
            "compactions": float(sum(1 for r in recs if r.tier is not CompactionTier.NONE)),
            **{f"retention_{c}": None for c in ("request", "artifacts", "errors", "next_step")},
        }
    return out


@attrs.frozen
class Row:
    metric: str
    label: str
    means: Mapping[str, float | None]
    """Per variant: the mean over its sessions that have this metric."""
    differences: Mapping[str, Estimate | None]
    """Per non-control variant: its difference from the control."""


@attrs.frozen
class Comparison:
    control: str
    variants: tuple[str, ...]
    sessions: Mapping[str, int]
    rows: tuple[Row, ...]


def compare(
    per_variant: Mapping[str, Mapping[str, Metrics]],
    control: str | None = None,
    *,
    resamples: int = 2000,
    seed: int = 0,
) -> Comparison:
    """The comparison table from ``{variant: {session: metrics}}``.

    For each metric and each variant but the control: paired by session when at least two
    sessions have the metric under both, else the difference of two independent samples.
    """
    variants = list(per_variant)
    if not variants:
        raise ValueError("nothing to compare: no variant has any session")
    chosen: str = control if control is not None and control in per_variant else variants[0]
    ordered = [chosen] + [v for v in variants if v != chosen]
    rows = []
    for metric, label in METRICS:
        means: dict[str, float | None] = {}
        for v in ordered:
            values = _values(per_variant[v], metric)
            means[v] = statistics.fmean(values.values()) if values else None
        diffs: dict[str, Estimate | None] = {}
        base = _values(per_variant[chosen], metric)
        for v in ordered[1:]:
            other = _values(per_variant[v], metric)
            common = [s for s in other if s in base]
            if len(common) >= 2:
                diffs[v] = paired_difference(
                    [other[s] for s in common], [base[s] for s in common], resamples=resamples, seed=seed
                )
            else:
                t, c = list(other.values()), list(base.values())
                diffs[v] = unpaired_difference(t, c, resamples=resamples, seed=seed) if t and c else None
        rows.append(Row(metric, label, means, diffs))
    return Comparison(chosen, tuple(ordered), {v: len(per_variant[v]) for v in ordered}, tuple(rows))


def _values(sessions: Mapping[str, Metrics], metric: str) -> dict[str, float]:
    """``session -> value`` of one metric, for the sessions that have it."""
    return {s: value for s, m in sessions.items() if (value := m.get(metric)) is not None}


def comparison_to_dict(comparison: Comparison) -> dict[str, Any]:
    """The comparison as plain data (for ``--json``)."""
    return {
        "control": comparison.control,
        "variants": list(comparison.variants),
        "sessions": dict(comparison.sessions),
        "metrics": {
            row.metric: {
                "label": row.label,
                "means": dict(row.means),
                "differences": {v: None if e is None else attrs.asdict(e) for v, e in row.differences.items()},
            }
            for row in comparison.rows
        },
    }


__all__ = [
    "METRICS",
    "Comparison",
    "Estimate",
    "Experiment",
    "ExperimentCompactor",
    "Variant",
    "assign_variant",
    "bootstrap_ci",
    "compare",
    "comparison_to_dict",
    "experiment_from_config",
    "experiment_from_dict",
    "hash_unit",
    "load_experiment",
    "metrics_from_records",
    "metrics_from_replay",
    "paired_difference",
    "unpaired_difference",
]
