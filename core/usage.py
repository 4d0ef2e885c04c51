"""Provider usage anchoring: the provider's own count of a request corrects the session's estimate.

A token estimator is an estimate: characters ÷ 4 is off by ±30 % on code, JSON or non-English
text, and even an exact tokenizer does not see what the provider adds (tool definitions, the
chat format of another model family). The provider reports the real count of every request
(``prompt_tokens``, ``input_tokens``). After a model call the caller (or an integration, from
the framework's usage reporting) hands that count to
:meth:`ProgressiveCompactor.observe_usage <progressive_compactor.ProgressiveCompactor.observe_usage>`
for the view the compactor last returned for the session; from then on the session's counts are
corrected:

- the *ratio* of a session is ``reported ÷ estimated`` for the last view reported on (kept
  between 0.25 and 4, so that a count reported for the wrong view cannot make a session
  compact on every turn or never);
- the corrected count of a view is ``ratio × its estimate``. When the view extends the one
  reported on (nothing was compacted since), this is exactly the reported count plus
  ``ratio ×`` the estimate of what was added since; after a compaction changed the view, the
  same ratio is applied to the whole new view (an offset would not shrink with the view);
- every count the turn decides on is corrected: the tier the policy picks, the loop guard's
  check after a summary and the truncation budget all see ``ratio ×`` the estimator's counts,
  so the tiers fire at the real share of the window with any tokenizer;
- the ratio stays until the next report; a session with no report has ratio 1.

The anchors live in the compactor's process (like the per-session cache); a worker that has not
seen a report for a session uses ratio 1 until it gets one.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence

import attrs

from .models import Message
from .plugin_manager import Hooks

MIN_RATIO = 0.25
MAX_RATIO = 4.0


@attrs.define
class UsageAnchor:
    """What the compactor knows of one session's real token counts."""

    estimated: int = 0
    """Estimated tokens of the last view returned for the session (0: none returned yet)."""
    ratio: float = 1.0


class UsageAnchors:
    """The anchors of every session of one compactor (thread-safe)."""

    def __init__(self) -> None:
        self._sessions: dict[str, UsageAnchor] = {}
        self._lock = threading.Lock()

    def ratio(self, session_id: str) -> float:
        anchor = self._sessions.get(session_id)
        return anchor.ratio if anchor is not None else 1.0

    def returned(self, session_id: str, estimated: int) -> None:
        """A view estimated at ``estimated`` tokens was returned for the session."""
        with self._lock:
            anchor = self._sessions.get(session_id)
            if anchor is None:
                anchor = self._sessions[session_id] = UsageAnchor()
            anchor.estimated = estimated

    def observe(self, session_id: str, input_tokens: int) -> float | None:
        """The provider counted ``input_tokens`` for the last view returned; the new ratio, or
        None when no view was returned for the session yet (nothing to anchor)."""
        if isinstance(input_tokens, bool) or not isinstance(input_tokens, int) or input_tokens < 0:
            raise ValueError(f"input_tokens must be a whole number of tokens, 0 or more, got {input_tokens!r}")
        with self._lock:
            anchor = self._sessions.get(session_id)
            if anchor is None or anchor.estimated <= 0 or input_tokens == 0:
                return None
            anchor.ratio = min(max(input_tokens / anchor.estimated, MIN_RATIO), MAX_RATIO)
            return anchor.ratio

    def forget(self, session_id: str) -> None:
        with self._lock:
            self._sessions.pop(session_id, None)


def corrected(tokens: int, ratio: float) -> int:
    return tokens if ratio == 1.0 else round(tokens * ratio)


class CorrectedHooks(Hooks):
    """The compactor's hooks with every token count multiplied by a session's ratio, for the
    tier logic of one turn (the per-session cache keeps the estimator's own counts)."""

    def __init__(self, hooks: Hooks, ratio: float):  # a view of ``hooks``: the same plugins
        self.__dict__.update(vars(hooks))
        self.ratio = ratio

    def estimate_tokens(self, messages: Sequence[Message]) -> list[int]:
        # Rounded up: the counts of a view's messages then never sum to less than its corrected
        # total (:func:`corrected`), so a view fitted message by message fits by the total too.
        return [math.ceil(n * self.ratio) for n in super().estimate_tokens(messages)]


__all__ = ["MAX_RATIO", "MIN_RATIO", "CorrectedHooks", "UsageAnchor", "UsageAnchors", "corrected"]
