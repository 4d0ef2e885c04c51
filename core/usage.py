"""Provider usage anchoring: the provider's own count of a request corrects the session's estimate.

A token estimator is an estimate: characters ÷ 4 is off by ±30 % on code, JSON or non-English
text, and even an exact tokenizer does not see what the provider adds (tool definitions, the
chat format of another model family). The provider reports the real count of every request
(``prompt_tokens``, ``input_tokens``). After a model call the caller (or an integration, from
the framework's usage reporting) hands that count to
:meth:`ProgressiveCompactor.observe_usage <progressive_compactor.ProgressiveCompactor.observe_usage>`
for the view the compactor last returned for the session (or the view of the record it names:
the integrations name it); from then on the session's counts are corrected.

The provider's count of a view is modelled as ``offset + scale × estimate``: the *scale* is the
estimator's error, proportional to the text; the *offset* is what the provider counts besides
the messages (tool definitions, a framework's instructions), the same for every request, however
small a compaction makes the view. A :class:`Correction` is the two of them:

- from two reports whose views differ enough in size (the latest, and the one farthest from it
  in size among the latest few, else the smallest view reported on: usually the first turn's),
  ``scale`` is the slope between them and ``offset`` what is left: both exact when the provider
  counts that way;
- from one report (or views of about the same size), the excess of the count over the estimate
  is the offset up to :data:`MAX_OFFSET_SHARE` of the window, the rest a scale up to
  :data:`ONE_REPORT_SCALE` and what is left beyond it the offset again, when that offset is
  under half the window (:data:`ONE_REPORT_OFFSET_SHARE`; else the rest is all scale): a small
  first view (the system message and the request) with thousands of tokens of tool definitions,
  even more than a tenth of the window, is not taken for text that counts four times its
  estimate, and a large view's excess for an offset that a compacted view would keep;
- ``scale`` is kept between 0.25 and 4 and ``offset`` between 0 and the reported count, so that
  a count reported for the wrong view cannot make a session compact on every turn or never; a
  count below a quarter of the view's estimate is ignored: it counts part of the view only;
- every count the turn decides on is corrected: the tier the policy picks, the loop guard's
  check after a summary and the truncation budget (messages count ``scale ×`` their estimate;
  the offset is counted once per view, like the system message, and comes off the budget);
- the correction stays until the next report; a session with no report has none.

The anchors live in the compactor's process (like the per-session cache); a worker that has not
seen a report for a session uses no correction until it gets one.
"""

from __future__ import annotations

import logging
import math
import threading
from collections.abc import Callable, Sequence

import attrs

from .forks import renew_lock_after_fork
from .models import Message
from .plugin_manager import Hooks

log = logging.getLogger("progressive_compactor")
MIN_RATIO = 0.25
MAX_RATIO = 4.0
MAX_OFFSET_SHARE = 0.1
"""From one report, at most this share of the window is taken for the provider's offset."""
ONE_REPORT_SCALE = 1.5
"""From one report, the text counts at most this many times its estimate (estimators are off by
±30 %; counting more is the safe side); more of an excess is the provider's offset, up to
:data:`ONE_REPORT_OFFSET_SHARE` of the window."""
ONE_REPORT_OFFSET_SHARE = 0.5
"""A count that an offset of this share of the window and :data:`ONE_REPORT_SCALE` do not explain
(the usage of several requests summed, another session's) is no count of the view's text and
tool definitions: it is taken as one report was before, the scale clamped at 4, so that the offset
of every view after it does not truncate them all."""
SPREAD = 0.25
"""Two reports give a slope when the smaller view is at most ``1 - SPREAD`` of the larger (and
:data:`MIN_SPREAD` tokens apart): closer, the rounding and the text's mix decide the slope."""
MIN_SPREAD = 500
KEPT_REPORTS = 8
"""A session's latest reports kept to learn from (with the one of its smallest view)."""


@attrs.frozen
class Correction:
    """The provider's count of a view: ``offset + scale × estimate`` (none: scale 1, offset 0)."""

    scale: float = 1.0
    offset: int = 0

    @property
    def none(self) -> bool:
        return self.scale == 1.0 and self.offset == 0

    def total(self, tokens: int) -> int:
        """The corrected count of a whole view of ``tokens`` estimated tokens."""
        return tokens if self.none else self.offset + corrected(tokens, self.scale)


NO_CORRECTION = Correction()


def fitted(reports: Sequence[tuple[int, int]], window: int, low: tuple[int, int] | None = None) -> Correction:
    """The correction that reports ``(estimated, reported)`` give, the latest last: the slope
    between the latest and the report whose view differs most from it in size, when they are
    far enough apart, looked for among ``reports`` first (the freshest: tool definitions may
    change), then with ``low`` (the smallest view reported on); else one report's worth."""
    found = _slope(reports) or (_slope([low, *reports]) if low is not None else None)
    if found is not None:
        return found
    # one report's worth: the excess is the offset up to its share of the window, the rest scale
    # up to a plausible estimator's error, and the offset again beyond it (up to half the window)
    e1, r1 = reports[-1]
    offset = min(max(r1 - e1, 0), int(MAX_OFFSET_SHARE * window))
    beyond = r1 - int(ONE_REPORT_SCALE * e1)
    if offset < beyond <= ONE_REPORT_OFFSET_SHARE * window:
        offset = beyond
    return Correction(_clamped((r1 - offset) / e1), offset)


def _slope(reports: Sequence[tuple[int, int]]) -> Correction | None:
    e1, r1 = reports[-1]
    e0, r0 = max(reports, key=lambda report: abs(report[0] - e1))
    if abs(e1 - e0) < max(MIN_SPREAD, SPREAD * max(e0, e1)):
        return None
    scale = (r1 - r0) / (e1 - e0)
    offset = r0 - scale * e0
    if offset < 0:  # a count proportional to the text (rounded), or a text that varies
        big, counted = max((e0, r0), (e1, r1))
        return Correction(_clamped(counted / big), 0)
    return Correction(scale, min(round(offset), r1)) if MIN_RATIO <= scale <= MAX_RATIO else None


def _clamped(ratio: float) -> float:
    return min(max(ratio, MIN_RATIO), MAX_RATIO)


@attrs.define
class UsageAnchor:
    """What the compactor knows of one session's real token counts."""

    views: dict[str, int] = attrs.Factory(dict)
    """Estimated tokens of the latest views returned (at most :data:`KEPT_REPORTS`, the last one
    last), by the id of their records: a report that names its view is paired with it, one that
    names none with the last view."""
    low: tuple[int, int] | None = None
    """``(estimated, reported)`` of the smallest view reported on (the newest of the smallest)."""
    recent: list[tuple[int, int]] = attrs.Factory(list)
    """The latest reports, oldest first (at most :data:`KEPT_REPORTS`)."""
    correction: Correction = NO_CORRECTION


class UsageAnchors:
    """The anchors of every session of one compactor (thread-safe)."""

    def __init__(self, context_window: int, redact: Callable[[str], str] = str) -> None:
        self._sessions: dict[str, UsageAnchor] = {}
        self._lock = threading.Lock()
        renew_lock_after_fork(self)
        self.context_window = context_window
        self.redact = redact
        """Masks what a warning quotes from outside (a session id), as the records are masked."""

    def correction(self, session_id: str) -> Correction:
        anchor = self._sessions.get(session_id)
        return anchor.correction if anchor is not None else NO_CORRECTION

    def open(self, session_id: str) -> None:
        """Keep an anchor for the session (its cache is about to be kept: the two go together)."""
        with self._lock:
            self._sessions.setdefault(session_id, UsageAnchor())

    def returned(self, session_id: str, estimated: int, view_id: str) -> None:
        """A view estimated at ``estimated`` tokens was returned for the session (with the record
        ``view_id``); nothing when the session's anchor was dropped with its cache meanwhile (its
        next turn starts anew)."""
        with self._lock:
            anchor = self._sessions.get(session_id)
            if anchor is not None:
                anchor.views[view_id] = estimated
                if len(anchor.views) > KEPT_REPORTS:
                    del anchor.views[next(iter(anchor.views))]

    def observe(self, session_id: str, input_tokens: int, view_id: str | None = None) -> float | None:
        """The provider counted ``input_tokens`` for the last view returned (or the view of the
        record ``view_id``, one of the latest few); the ratio of the count to that view's estimate
        (kept between 0.25 and 4), or None when no view was returned for the session yet, or that
        view is not one of the latest (nothing to anchor), or the count is below a quarter of the
        estimate: no tokenizer counts a whole view so short (it is the count of part of it, say
        Anthropic's ``input_tokens`` without the cached tokens), and taken for the view's count
        it would let the view grow past the window before any tier fires."""
        if isinstance(input_tokens, bool) or not isinstance(input_tokens, int) or input_tokens < 0:
            raise ValueError(f"input_tokens must be a whole number of tokens, 0 or more, got {input_tokens!r}")
        with self._lock:
            anchor = self._sessions.get(session_id)
            if anchor is None or input_tokens == 0:
                return None
            views = anchor.views
            estimated = views.get(view_id, 0) if view_id is not None else next(reversed(views.values()), 0)
            if estimated <= 0:
                return None
            if input_tokens < MIN_RATIO * estimated:
                log.warning(
                    "session %s: the provider's count of %d input tokens is below a quarter of the view's "
                    "estimate (%d), so it is not a count of the whole view; ignored (report the whole prompt: "
                    "with Anthropic, input_tokens + cache_creation_input_tokens + cache_read_input_tokens)",
                    self.redact(session_id),
                    input_tokens,
                    estimated,
                )
                return None
            latest = (estimated, input_tokens)
            if anchor.low is None or latest[0] <= anchor.low[0]:
                anchor.low = latest
            anchor.recent = [*anchor.recent[1 - KEPT_REPORTS :], latest]
            anchor.correction = fitted(anchor.recent, self.context_window, anchor.low)
            return _clamped(input_tokens / estimated)

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


def corrected(tokens: int, ratio: float) -> int:
    return tokens if ratio == 1.0 else round(tokens * ratio)


class CorrectedHooks(Hooks):
    """The compactor's hooks with every token count multiplied by a session's scale, for the
    tier logic of one turn (the per-session cache keeps the estimator's own counts)."""

    def __init__(self, hooks: Hooks, ratio: float):  # a view of ``hooks``: the same plugins
        self.__dict__.update(vars(hooks))
        self.ratio = ratio

    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        # Rounded up: the counts of a view's messages then never sum to less than its corrected
        # total (:func:`corrected`), so a view fitted message by message fits by the total too.
        return [math.ceil(n * self.ratio) for n in super().estimate_tokens(messages)]


__all__ = [
    "MAX_RATIO",
    "MIN_RATIO",
    "NO_CORRECTION",
    "CorrectedHooks",
    "Correction",
    "UsageAnchor",
    "UsageAnchors",
    "corrected",
    "fitted",
]
