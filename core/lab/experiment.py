"""A/B experiments: named variants of a config, sticky assignment for life, and comparisons.

An experiment is the ``experiment`` section of a YAML config; the rest of the file is the *base*::

    context_window: 32000
    pricing: {input: 3.0, cached_input: 0.3, output: 15.0}
    plugins: {state: state-files}       # shared by every worker: the variant lives in the state
    experiment:
      name: progressive-vs-one-threshold
      control: one-threshold            # differences are reported against it (default: first)
      salt: "2025-06"                   # optional (default: the name); hashed with new sessions' ids
      variants:
        one-threshold: {weight: 0.5, config: baseline-one-threshold}
        progressive:   {weight: 0.5, overrides: {min_tail_messages: 8}}

Each variant is the base with ``overrides`` laid over it, or, with ``config``, another config file
(a bundled name, or a path relative to the experiment file) with ``overrides`` laid over that.
``context_window`` and ``pricing`` are measurement settings, shared by every variant (a variant
may not override them); the data folder, the record stores and the state store (with their
blocks) come from the base even for a variant read from another file, and a variant may not
override them, so every record lands where the base says and every worker finds a session's
variant. Every variant's config has ``variant`` set to its name, so every record says which
variant wrote it.

Sticky for life: a session's variant is decided once, at its first turn, and stored with the
session's state (``SessionState.variant``); every later turn, in any process, reads it from there.
Only a new session is placed by hashing ``salt`` and its id (SHA-256, the first 8 bytes as a number
in [0, 1), laid against the cumulative normalised weights). Changing the weights, the salt or the
experiment's name therefore changes where *new* sessions go and never moves a running one. A
weight of 0 keeps a variant out of new live sessions but not out of replays. A session whose stored
variant is no longer in the experiment is served by the control; its records then name two
variants, and comparisons leave it out and count it.

Cost. Both comparisons (``compactor ab replay`` on recorded sessions, ``compactor ab report`` on the
records live traffic wrote) compute a session's cost the same way, from the same record fields, with
the experiment's price table (:func:`record_cost`): for every LLM call, the uncached part of the
view at the input price, the cached prefix at the cached-input price, and the summarizer's tokens
in and out at the summarizer's prices (the part of a cache-friendly summary request's input that the
provider cached at the summarizer's cached-input price). The agent's own answer is left out: it is unknown live, and
on a replayed transcript it is the same under every variant. In a replay, a summarizer that reports
no tokens (the offline one) has them estimated and written into the record
(:class:`~progressive_compactor.lab.replay.SummarizerMeter`), and so does
:class:`ExperimentCompactor` live: records price every summary alike, and the records of a replay
price exactly as the replay does.

Statistics (:func:`compare`). Per variant: the mean per session with a Student-t confidence
interval, and the total over sessions. Per variant against the control: the difference of means
with its confidence interval, the difference relative to the control's mean, a two-sided test at
the chosen level (``alpha``) and its verdict. When the two variants share at least two sessions (a
replay runs every session under every variant) the test is a paired t-test on the per-session
differences, over the shared sessions; otherwise (live traffic: each session under one variant)
Welch's t-test on two independent samples. The confidence interval comes from the same t
distribution, so it excludes 0 exactly when the test is significant. Shares (cached share,
retention, sessions with an overflow) differ in percentage points. A retention category that is
100 % for every session under every variant is *saturated*: it cannot tell the variants apart,
and is reported as such rather than as a tie or a win. For cost, :class:`SampleSize` says how many
sessions per variant a live experiment (each session on one variant) needs to detect the observed
difference, and the smallest difference worth detecting (``effect``, 10 % of the control's mean
unless told), with 80 % power; an unpaired comparison without that power for the latter is
underpowered. The tests are in :mod:`progressive_compactor.lab.stats`.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import attrs

from ..compactor import SAVE_ATTEMPTS, History, ProgressiveCompactor, TurnResult
from ..config import CompactorConfig, config_to_dict, deep_merge, read_config_data
from ..errors import CompactorError, ConfigError, StateConflictError
from ..forks import renew_lock_after_fork
from ..models import CompactionRecord, CompactionTier, SessionState
from ..options import keyword_plugins
from ..pricing import DEFAULT_PRICES, Cost, PriceTable, call_cost
from ..session_memory import RecentlyUsed
from ..validation import check_config_data, config_from_dict, variant_data
from .probes import CATEGORIES
from .replay import METER_NAME, SummarizerMeter
from .stats import (
    Difference,
    Estimate,
    SampleSize,
    Summary,
    bootstrap_ci,
    paired_difference,
    paired_t,
    sample_size,
    summarize,
    t_quantile,
    t_two_sided_p,
    unpaired_difference,
    welch_t,
)

log = logging.getLogger("progressive_compactor")


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

    @property
    def prices(self) -> PriceTable:
        """The price table every variant is compared with (the base's ``pricing``)."""
        return self.base.pricing

    def variant(self, name: str) -> Variant:
        for v in self.variants:
            if v.name == name:
                return v
        raise ConfigError([f"no variant named {name!r}; variants: {', '.join(self.names)} @ $.experiment.variants"])

    def assign(self, session_id: str) -> str:
        """The variant a *new* session goes to (the hash of salt and id, by weight). A session
        that has started keeps the variant stored with its state: see :class:`ExperimentCompactor`."""
        return assign_variant(session_id, [(v.name, v.weight) for v in self.variants], self.salt)

    def config_for(self, session_id: str) -> CompactorConfig:
        return self.variant(self.assign(session_id)).config

    def with_control(self, name: str) -> Experiment:
        """The same experiment compared against another variant."""
        self.variant(name)
        return attrs.evolve(self, control=name)

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
    """The variant a new session ``session_id`` goes to, given ``(name, weight)`` pairs."""
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


# --- live traffic -----------------------------------------------------------------------------


class ExperimentCompactor(ProgressiveCompactor):
    """Live traffic under an experiment: each session is compacted by its variant, for life.

    A drop-in for :class:`~progressive_compactor.ProgressiveCompactor` (``Session`` and
    ``AsyncSession`` included): it *is* one, built from the experiment's base config, and serves
    what does not depend on the variant itself (``state``, ``records``, ``sessions``, reading
    offloaded results); each turn and each offloaded tool result goes to the compactor of the
    session's variant, built on first use. Every variant's compactor shares this compactor's
    state store, so the variant stored with a session's state is seen by all of them.

    Records are the ones a ``ProgressiveCompactor`` writes, with one addition: a summarizer that
    reports no token counts (the offline one) has them estimated, as a replay does, so that the
    records of live traffic price the summarizer as ``compactor ab replay`` does.

    A session's variant is decided at its first turn: the variant stored in its state if there is
    one, else the hash of the experiment's salt and the session id, which is then saved into the
    state (compare-and-set, so two workers starting the same session agree). ``experiment`` is an
    :class:`Experiment`, a bundled config name or a YAML path; keyword arguments are those of
    ``ProgressiveCompactor`` (config overrides apply to every variant; plugin objects are shared).
    """

    def __init__(
        self,
        experiment: Experiment | str | Path,
        /,
        *,
        session_id: str = "default",
        todo_injector: Callable[[], str | None] | None = None,
        memory_extractor: Callable[..., Any] | None = None,
        record_store: Any = None,
        offloader: Any = None,
        extra_plugins: Iterable[tuple[str, Any]] = (),
        **overrides: Any,
    ):
        exp = experiment if isinstance(experiment, Experiment) else load_experiment(experiment)
        if overrides:
            exp = exp.with_overrides(**overrides)
        extra = [*keyword_plugins(todo_injector, memory_extractor, record_store, offloader), *extra_plugins]
        super().__init__(exp.base, session_id=session_id, extra_plugins=extra)
        self.experiment = exp
        state_name = self.config.plugins.state
        # The variants use this compactor's state store itself: one place for every session's variant.
        store = self.pm.get_plugin(state_name)
        self._shared: list[tuple[str, Any]] = [*([(state_name, store)] if store is not None else []), *extra]
        self._variants: dict[str, ProgressiveCompactor] = {}
        self._assigned: RecentlyUsed[str] = RecentlyUsed(self.config.cached_sessions)
        """A memo of the variants stored with the sessions' states."""
        self._lock = threading.Lock()
        renew_lock_after_fork(self)
        self._warned: set[str] = set()

    # --- the session's variant ----------------------------------------------------------------

    def variant_of(self, session_id: str | None = None) -> str:
        """The session's variant: the one stored with its state, or, for a new session, the one
        its id hashes to, stored now. Never changes afterwards."""
        sid = self._session_id(session_id)
        name = self._assigned.get(sid)
        if name is not None:
            return name
        with self._lock:
            name = self._assigned.get(sid)
            if name is None:
                name, stored = self._decide(sid)
                if stored:
                    self._assigned.put(sid, name)
        return name

    def _decide(self, sid: str) -> tuple[str, bool]:
        """``(variant, whether it is stored)``; fail-open: a state store that fails gives the
        hashed variant for this turn, and the next turn tries again."""
        for _ in range(SAVE_ATTEMPTS):
            try:
                state = self.hooks.load_state(sid)
            except Exception as exc:  # noqa: BLE001 - fail-open
                log.warning("experiment: loading the state of %s failed (%s); variant by hash", *self._masked(sid, exc))
                return self.experiment.assign(sid), False
            if state is not None and state.variant is not None:
                return state.variant, True
            name = self.experiment.assign(sid)
            new = (
                SessionState(variant=name, version=1)
                if state is None
                else attrs.evolve(state, variant=name, version=state.version + 1)
            )
            try:
                saved = self.hooks.save_state(sid, new)
            except Exception as exc:  # noqa: BLE001 - fail-open
                log.warning(
                    "experiment: saving the variant of %s failed (%s); variant by hash", *self._masked(sid, exc)
                )
                return name, False
            if saved is not False:
                return name, True
        raise StateConflictError(f"the variant of session {sid!r} could not be saved: its state kept changing", sid)

    def _masked(self, sid: str, exc: Exception) -> tuple[str, str]:
        """The session id and a store's error as a warning may name them: secrets masked."""
        return self.secrets.redact(sid), self.secrets.redact(str(exc))

    def compactor_for(self, session_id: str | None = None) -> ProgressiveCompactor:
        """The compactor of the session's variant (a stored variant the experiment no longer has
        is served by the control, with a warning)."""
        name = self.variant_of(session_id)
        if name not in self.experiment.names:
            if name not in self._warned:
                self._warned.add(name)
                log.warning(
                    "experiment %s has no variant %r any more; its sessions are served by the control %r "
                    "and left out of comparisons",
                    self.experiment.name,
                    name,
                    self.experiment.control,
                )
            name = self.experiment.control
        return self._variant_compactor(name)

    def _variant_compactor(self, name: str) -> ProgressiveCompactor:
        compactor = self._variants.get(name)
        if compactor is None:
            with self._lock:
                compactor = self._variants.get(name)
                if compactor is None:
                    config = self.experiment.variant(name).config
                    compactor = ProgressiveCompactor(config, session_id=self.session_id, extra_plugins=self._shared)
                    # A summarizer that reports no tokens has them estimated into the record, as
                    # in a replay: live records and replays price the summarizer alike.
                    compactor.pm.register(SummarizerMeter(compactor), name=METER_NAME)
                    self._variants[name] = compactor
        return compactor

    # --- compacting: the session's variant ----------------------------------------------------

    def compact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        sid = self._session_id(session_id)
        return self.compactor_for(sid).compact(history, sid)

    def compact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        sid = self._session_id(session_id)
        return self.compactor_for(sid).compact_force(history, sid)

    def compact_with_record(self, history: History, session_id: str | None = None) -> TurnResult:
        sid = self._session_id(session_id)
        return self.compactor_for(sid).compact_with_record(history, sid)

    async def acompact(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        sid = self._session_id(session_id)
        return await self.compactor_for(sid).acompact(history, sid)

    async def acompact_force(self, history: History, session_id: str | None = None) -> list[dict[str, Any]]:
        sid = self._session_id(session_id)
        return await self.compactor_for(sid).acompact_force(history, sid)

    async def acompact_with_record(self, history: History, session_id: str | None = None) -> TurnResult:
        sid = self._session_id(session_id)
        return await self.compactor_for(sid).acompact_with_record(history, sid)

    def _run_sync(self, history: History, session_id: str | None, force: bool = False) -> TurnResult:
        sid = self._session_id(session_id)  # ``Session.compact_now`` too: the variant's, never the base's
        return self.compactor_for(sid)._run_sync(history, sid, force)

    async def _run_async(self, history: History, session_id: str | None, force: bool = False) -> TurnResult:
        sid = self._session_id(session_id)
        return await self.compactor_for(sid)._run_async(history, sid, force)

    # --- other services -----------------------------------------------------------------------

    def observe_usage(
        self, session_id: str | None, input_tokens: int, record: CompactionRecord | None = None
    ) -> float | None:
        """Anchors the token counts of the variant that returned the session's last view (or
        ``record``'s: the compactor that counts its views); None when none did, and no variant is
        decided for it."""
        sid = self._session_id(session_id)
        for compactor in list(self._variants.values()):
            ratio = compactor.observe_usage(sid, input_tokens, record)
            if ratio is not None:
                return ratio
        return None

    def offload_tool_result(self, message: Mapping[str, Any], session_id: str | None = None) -> dict[str, Any]:
        """Offloaded by the session's variant (its ``tool_result_threshold`` and offloader)."""
        sid = self._session_id(session_id)
        return self.compactor_for(sid).offload_tool_result(message, sid)

    def read_tool_result(
        self, handle: str, lines: tuple[int, int] | None = None, *, session_id: str | None = None
    ) -> str:
        """Read by the base's offloader, else by each variant's (a variant may keep its own)."""
        try:
            return super().read_tool_result(handle, lines, session_id=session_id)
        except CompactorError as first:
            for name in self.experiment.names:
                try:
                    return self._variant_compactor(name).read_tool_result(handle, lines, session_id=session_id)
                except CompactorError:
                    continue
            raise first

    def delete_session(self, session_id: str | None = None) -> list[str]:
        """Delete the session everywhere: its variant's files, records and state, and the base's."""
        sid = self._session_id(session_id)
        errors: list[str] = []
        try:
            state = self.hooks.load_state(sid)
        except Exception:  # noqa: BLE001 - delete what can be deleted
            state = None
        if state is not None and state.variant in self.experiment.names:
            errors += self._variant_compactor(state.variant).delete_session(sid)
        for compactor in list(self._variants.values()):
            compactor._memory.forget(sid)
        errors += [e for e in super().delete_session(sid) if e not in errors]
        self._assigned.pop(sid)
        return errors

    def _release(self, compactor: ProgressiveCompactor) -> None:
        """Unregister the shared plugins from a variant's compactor, so that closing it leaves
        them to this compactor, which closes them once."""
        for name, _ in self._shared:
            if compactor.pm.get_plugin(name) is not None:
                compactor.pm.unregister(name=name)

    def close(self) -> None:
        for compactor in self._variants.values():
            self._release(compactor)
            compactor.close()
        self._variants.clear()
        super().close()

    async def aclose(self) -> None:
        for compactor in list(self._variants.values()):
            self._release(compactor)
            await compactor.aclose()
        self._variants.clear()
        await super().aclose()

    def __enter__(self) -> ExperimentCompactor:
        return self

    async def __aenter__(self) -> ExperimentCompactor:
        return self


# --- per-session metrics: one definition for replays and records ------------------------------

DEFAULT_EFFECT = 0.10
"""The smallest difference in cost worth detecting (a share of the control's mean), unless told."""
COST_DEFINITION = (
    "per LLM call: uncached view tokens × input + cached prefix × cached input + uncached summarizer "
    "tokens in × summarizer input + cached summarizer tokens in × summarizer cached input + summarizer "
    "tokens out × summarizer output; the agent's own answer is left out (unknown live, the same for "
    "every variant in a replay)"
)


@attrs.frozen
class Metric:
    key: str
    label: str
    kind: str
    """``money`` (USD), ``count`` (summed over sessions), ``share`` (0 to 1, differences in
    percentage points) or ``retention`` (a share that can saturate)."""


METRIC_LIST: tuple[Metric, ...] = (
    Metric("cost", "cost (USD)", "money"),
    Metric("peak_tokens", "peak view tokens", "count"),
    Metric("overflow_turns", "overflows: turns", "count"),
    Metric("overflow_sessions", "overflows: sessions", "share"),
    Metric("invalid_views", "invalid views", "count"),
    Metric("cached_share", "cached share", "share"),
    Metric("summarizer_calls", "summarizer calls", "count"),
    Metric("summarizer_tokens", "summarizer tokens", "count"),
    Metric("compactions", "compactions", "count"),
    *(Metric(f"retention_{c}", f"retention: {c.replace('_', ' ')}", "retention") for c in CATEGORIES),
)
METRICS: tuple[tuple[str, str], ...] = tuple((m.key, m.label) for m in METRIC_LIST)
Metrics = dict[str, float | None]


def record_cost(record: CompactionRecord, prices: PriceTable = DEFAULT_PRICES) -> Cost:
    """The cost of the LLM call a record's view was sent in, as the module docstring defines it."""
    view = record.tokens_after
    return call_cost(
        prices,
        view_tokens=view,
        cached_tokens=min(record.cache_stable_prefix_tokens, view),
        summarizer_tokens_in=record.summarizer_tokens_in,
        summarizer_tokens_out=record.summarizer_tokens_out,
        summarizer_tokens_in_cached=record.summarizer_tokens_in_cached,
    )


def session_metrics(
    records: Sequence[CompactionRecord],
    prices: PriceTable = DEFAULT_PRICES,
    *,
    invalid_views: int | None = None,
    retention: Mapping[str, float | None] | None = None,
) -> Metrics:
    """A session's comparison metrics from its records, oldest first (one per LLM call).

    ``invalid_views`` and ``retention`` need the views and the transcript: a replay gives them,
    records alone cannot (None).
    """
    from .report import changed_view

    cost = Cost()
    for r in records:
        cost = cost + record_cost(r, prices)
    sent = sum(r.tokens_after for r in records)
    overflows = sum(1 for r in records if r.context_window and r.tokens_after > r.context_window)
    retention = retention or {}
    return {
        "cost": cost.total,
        "peak_tokens": float(max((r.tokens_after for r in records), default=0)),
        "overflow_turns": float(overflows),
        "overflow_sessions": 1.0 if overflows else 0.0,
        "invalid_views": None if invalid_views is None else float(invalid_views),
        "cached_share": sum(min(r.cache_stable_prefix_tokens, r.tokens_after) for r in records) / sent
        if sent
        else None,
        "summarizer_calls": float(sum(r.summarizer_calls for r in records)),
        "summarizer_tokens": float(sum(r.summarizer_tokens_in + r.summarizer_tokens_out for r in records)),
        "compactions": float(sum(1 for r in records if r.tier is not CompactionTier.NONE and changed_view(r))),
        **{f"retention_{c}": retention.get(c) for c in CATEGORIES},
    }


def metrics_from_replay(result: Any, prices: PriceTable = DEFAULT_PRICES) -> Metrics:
    """The comparison metrics of one :class:`~progressive_compactor.lab.replay.ReplayResult`,
    from the records of its calls (what its records file holds) plus what only a replay knows."""
    return session_metrics(
        [t.record for t in result.turns],
        prices,
        invalid_views=result.invalid_views,
        retention=result.retention.ratios() if result.retention is not None else None,
    )


@attrs.frozen
class RecordSet:
    """Records read for a comparison, grouped by variant and session."""

    sessions: Mapping[str, Mapping[str, tuple[CompactionRecord, ...]]]
    """``{variant: {session: records}}`` of the sessions that can be compared."""
    records: int
    """Records read (duplicates included)."""
    duplicates: int
    """Records whose id was seen before, ignored (a file read twice, a rerun, a retried write)."""
    mixed: tuple[str, ...] = ()
    """Sessions whose records in one folder name more than one variant: left out."""
    conflicting: tuple[str, ...] = ()
    """Sessions with records of one variant in several folders (two runs): left out."""
    every_turn: Mapping[str, bool] = attrs.field(factory=dict)
    """Per variant: whether tier-None turns were recorded (else cost counts compaction turns only)."""


def group_records(sources: Iterable[tuple[str, Iterable[CompactionRecord]]]) -> RecordSet:
    """Group records by variant and session, as a comparison needs them.

    ``sources`` are ``(folder, records)`` pairs: one folder is one store (a live deployment, or
    one variant of a replay). A record whose id was already seen is ignored. A session whose
    records in one folder name two variants (a variant that changed mid-session) and a session
    found under the same variant in two folders (two runs) are left out and named.
    """
    seen: set[str] = set()
    total = duplicates = 0
    units: dict[tuple[str, str], dict[str, list[CompactionRecord]]] = {}
    for folder, records in sources:
        for r in records:
            total += 1
            if r.id in seen:
                duplicates += 1
                continue
            seen.add(r.id)
            units.setdefault((folder, r.session_id), {}).setdefault(r.variant or "(none)", []).append(r)
    mixed = sorted({sid for (_, sid), by_variant in units.items() if len(by_variant) > 1})
    places: dict[tuple[str, str], list[str]] = {}
    for (folder, sid), by_variant in units.items():
        if len(by_variant) == 1:
            places.setdefault((next(iter(by_variant)), sid), []).append(folder)
    conflicting = sorted({sid for (_, sid), folders in places.items() if len(folders) > 1})
    grouped: dict[str, dict[str, tuple[CompactionRecord, ...]]] = {}
    every_turn: dict[str, bool] = {}
    for (_, sid), by_variant in sorted(units.items()):
        if sid in mixed or sid in conflicting:
            continue
        ((variant, recs),) = by_variant.items()
        grouped.setdefault(variant, {})[sid] = tuple(recs)
        every_turn[variant] = every_turn.get(variant, False) or any(r.tier is CompactionTier.NONE for r in recs)
    return RecordSet(grouped, total, duplicates, tuple(mixed), tuple(conflicting), every_turn)


def metrics_from_records(
    records: Iterable[CompactionRecord] | RecordSet, prices: PriceTable | None = None
) -> dict[tuple[str, str], Metrics]:
    """Per ``(variant, session)`` metrics from records written by live traffic (or a replay).

    Records are de-duplicated by id; a session whose records name two variants is left out (see
    :func:`group_records`). Cost covers every turn only when tier-None records were stored
    (``store-jsonl: {record_none: true}``). Retention and invalid views need the transcript: None.
    """
    grouped = records if isinstance(records, RecordSet) else group_records([("", records)])
    prices = prices or DEFAULT_PRICES
    return {
        (variant, sid): session_metrics(recs, prices)
        for variant, sessions in grouped.sessions.items()
        for sid, recs in sessions.items()
    }


# --- the comparison ---------------------------------------------------------------------------


@attrs.frozen
class Row:
    metric: str
    label: str
    kind: str
    summaries: Mapping[str, Summary]
    """Per variant: its sessions' values of this metric."""
    differences: Mapping[str, Difference | None]
    """Per variant but the control: its difference from the control."""
    saturated: bool = False
    """A retention category at 100 % for every session under every variant."""

    @property
    def means(self) -> dict[str, float | None]:
        return {v: s.mean for v, s in self.summaries.items()}


@attrs.frozen
class Comparison:
    control: str
    variants: tuple[str, ...]
    sessions: Mapping[str, int]
    rows: tuple[Row, ...]
    alpha: float = 0.05
    sample_sizes: Mapping[str, SampleSize | None] = attrs.field(factory=dict)
    """Per variant but the control: sessions needed to detect the observed difference in cost."""
    effect: float = 0.10
    """The smallest difference in cost worth detecting, as a share of the control's mean."""
    target_sample_sizes: Mapping[str, SampleSize | None] = attrs.field(factory=dict)
    """Per variant but the control: sessions needed to detect ``effect``, and the power this
    comparison had to detect it (an unpaired comparison below 80 % is underpowered)."""

    def row(self, metric: str) -> Row:
        return next(r for r in self.rows if r.metric == metric)

    @property
    def paired(self) -> bool:
        """Whether every comparison of cost was paired."""
        return all(d is None or d.paired for d in self.row("cost").differences.values())


def compare(
    per_variant: Mapping[str, Mapping[str, Metrics]],
    control: str | None = None,
    *,
    alpha: float = 0.05,
    effect: float | None = None,
) -> Comparison:
    """The comparison from ``{variant: {session: metrics}}`` against ``control`` (default: the
    first variant), as the module docstring describes. Sample sizes are given for the observed
    difference in cost and for ``effect`` (a share of the control's mean cost, default
    :data:`DEFAULT_EFFECT`), the smallest difference worth detecting: an unpaired comparison is
    underpowered when it had less than 80 % power to detect that. A value that is not finite (NaN,
    infinity: no mean, no test) is refused with a :class:`ValueError` that says where it is."""
    effect = DEFAULT_EFFECT if effect is None else effect
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha}")
    variants = list(per_variant)
    if not variants:
        raise ValueError("nothing to compare: no variant has any session")
    if control is not None and control not in per_variant:
        raise ValueError(f"no sessions of the control {control!r}; variants: {', '.join(variants)}")
    for v, sessions in per_variant.items():
        for s, m in sessions.items():
            for key, value in m.items():
                if value is not None and not math.isfinite(value):
                    raise ValueError(f"the {key} of session {s!r} under {v!r} is not a finite number: {value}")
    chosen: str = control if control is not None else variants[0]
    ordered = [chosen] + [v for v in variants if v != chosen]
    rows = []
    sizes: dict[str, SampleSize | None] = {}
    targets: dict[str, SampleSize | None] = {}
    for metric in METRIC_LIST:
        values = {v: _values(per_variant[v], metric.key) for v in ordered}
        summaries = {
            v: summarize(list(values[v].values()), alpha, summable=metric.kind in ("money", "count")) for v in ordered
        }
        if metric.key == "overflow_sessions":  # its total is the number of sessions that overflowed
            summaries = {v: attrs.evolve(s, total=math.fsum(values[v].values())) for v, s in summaries.items()}
        saturated = (
            metric.kind == "retention"
            and any(values[v] for v in ordered)
            and all(x == 1.0 for v in ordered for x in values[v].values())
        )
        diffs: dict[str, Difference | None] = {}
        base = values[chosen]
        for v in ordered[1:]:
            other = values[v]
            common = [s for s in other if s in base]
            if len(common) >= 2:
                t, c = [other[s] for s in common], [base[s] for s in common]
                diffs[v] = paired_t(t, c, alpha)
            else:
                t, c = list(other.values()), list(base.values())
                diffs[v] = welch_t(t, c, alpha) if t and c else None
            d = diffs[v]
            if metric.key == "cost" and d is not None:
                t, c = list(other.values()), list(base.values())
                sizes[v] = sample_size(t, c, d)
                targets[v] = sample_size(t, c, d, relative_effect=effect)
            elif metric.key == "cost":
                sizes[v] = targets[v] = None
        rows.append(Row(metric.key, metric.label, metric.kind, summaries, diffs, saturated))
    return Comparison(
        chosen,
        tuple(ordered),
        {v: len(per_variant[v]) for v in ordered},
        tuple(rows),
        alpha,
        sizes,
        effect,
        targets,
    )


def _values(sessions: Mapping[str, Metrics], metric: str) -> dict[str, float]:
    """``session -> value`` of one metric, for the sessions that have it."""
    return {s: value for s, m in sessions.items() if (value := m.get(metric)) is not None}


def comparison_to_dict(comparison: Comparison) -> dict[str, Any]:
    """The comparison as plain data (for ``--json``)."""

    def difference(d: Difference | None, row: Row) -> dict[str, Any] | None:
        if d is None:
            return None
        data = attrs.asdict(d)
        data.update(
            relative=d.relative,
            relative_low=d.relative_low,
            relative_high=d.relative_high,
            significant=d.significant,
            verdict="saturated" if row.saturated else d.verdict,
        )
        return data

    def size(s: SampleSize | None) -> dict[str, Any] | None:
        return None if s is None else {**attrs.asdict(s), "underpowered": s.underpowered}

    return {
        "control": comparison.control,
        "variants": list(comparison.variants),
        "sessions": dict(comparison.sessions),
        "alpha": comparison.alpha,
        "confidence": 1 - comparison.alpha,
        "metrics": {
            row.metric: {
                "label": row.label,
                "kind": row.kind,
                "saturated": row.saturated,
                "means": row.means,
                "summaries": {v: attrs.asdict(s) for v, s in row.summaries.items()},
                "differences": {v: difference(d, row) for v, d in row.differences.items()},
            }
            for row in comparison.rows
        },
        "sample_sizes": {v: size(s) for v, s in comparison.sample_sizes.items()},
        "effect": comparison.effect,
        "target_sample_sizes": {v: size(s) for v, s in comparison.target_sample_sizes.items()},
    }


__all__ = [
    "COST_DEFINITION",
    "DEFAULT_EFFECT",
    "METRICS",
    "METRIC_LIST",
    "Comparison",
    "Difference",
    "Estimate",
    "Experiment",
    "ExperimentCompactor",
    "RecordSet",
    "Row",
    "SampleSize",
    "Summary",
    "Variant",
    "assign_variant",
    "bootstrap_ci",
    "compare",
    "comparison_to_dict",
    "experiment_from_config",
    "experiment_from_dict",
    "group_records",
    "hash_unit",
    "load_experiment",
    "metrics_from_records",
    "metrics_from_replay",
    "paired_difference",
    "paired_t",
    "record_cost",
    "sample_size",
    "session_metrics",
    "summarize",
    "t_quantile",
    "t_two_sided_p",
    "unpaired_difference",
    "welch_t",
]
