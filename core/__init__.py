"""progressive-compactor: tiered, progressive context compaction for long-running LLM agents.

```python
from progressive_compactor import ProgressiveCompactor
compactor = ProgressiveCompactor("default", context_window=32_000)
view, record = compactor.compact_with_record(history, session_id="s1")
```

Plugin authors import from :mod:`progressive_compactor.plugin`.
"""

from .compactor import EMERGENCY_ERROR, ProgressiveCompactor
from .config import CompactorConfig, PluginSelection
from .errors import (
    CompactorError,
    ConfigError,
    FallbackError,
    InvalidMessagesError,
    OffloadError,
    PluginError,
    StateConflictError,
    StorageError,
    SummarizerError,
)
from .hookspecs import hookimpl
from .models import (
    Anchor,
    AnchorType,
    CompactionRecord,
    CompactionTier,
    Facts,
    Message,
    OffloadEntry,
    ParsedSummary,
    SessionInfo,
    SessionState,
    SummaryRequest,
    SummaryResult,
    TierInput,
    TierPlan,
    ToolCall,
    TurnContext,
)
from .notice import notice
from .session import AsyncSession, Session
from .tools import READ_TOOL_RESULT_TOOL, handle_read_tool_call
from .validation import load_config

__version__ = "0.2.0"

__all__ = [
    "EMERGENCY_ERROR",
    "READ_TOOL_RESULT_TOOL",
    "Anchor",
    "AnchorType",
    "AsyncSession",
    "CompactionRecord",
    "CompactionTier",
    "CompactorConfig",
    "CompactorError",
    "ConfigError",
    "Facts",
    "FallbackError",
    "InvalidMessagesError",
    "Message",
    "OffloadEntry",
    "OffloadError",
    "ParsedSummary",
    "PluginError",
    "PluginSelection",
    "ProgressiveCompactor",
    "Session",
    "SessionInfo",
    "SessionState",
    "StateConflictError",
    "StorageError",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    "TierInput",
    "TierPlan",
    "ToolCall",
    "TurnContext",
    "__version__",
    "handle_read_tool_call",
    "hookimpl",
    "load_config",
    "notice",
]
