"""The API for plugin authors: everything a plugin imports, in one module.

```python
from progressive_compactor.plugin import hookimpl, TierPlan, CompactionTier

class SummarizeAtSoft:
    @hookimpl
    def apply_tier(self, tier_input, turn):
        return TierPlan(offload=True, summarize=len(tier_input.head))
```

The built-in plugins import from here and nowhere else (HTTP summarizers also from
:mod:`progressive_compactor.http`, the declared API for summarizers that call a provider); what
is not exported here may move between releases. The database backends of the ``*-sqlite``,
``*-postgres`` and ``*-redis`` plugins (:mod:`progressive_compactor.stores`) are exported here
too; importing them imports no driver. See ``CONTRIBUTING.md`` for a guide with an
example of every hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .anchors import empty_anchors, facts_as_anchors, format_summary, merge_anchors, parse_markdown
from .converters import (
    parse_records,
    read_records_file,
    record_from_dict,
    record_to_dict,
    record_to_json,
    setting_check,
    state_from_json,
    state_to_json,
)
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
from .facts import bound_text, extract_facts, first_user_request, one_line
from .forks import renew_lock_after_fork
from .hookspecs import hookimpl
from .messages import (
    ANTHROPIC_KEY,
    DOCUMENT_TYPES,
    IMAGE_TYPES,
    carried_result,
    char_count,
    from_anthropic,
    group_start,
    is_split_point,
    message_from_dict,
    message_to_dict,
    part_sizes,
    replace_content,
    sent_extras,
    split_text,
    text_of,
    to_anthropic,
    with_text,
)
from .models import (
    NOT_AVAILABLE,
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
from .notice import changed_view
from .plugin_manager import PluginContext
from .pricing import PriceTable
from .redaction import SecretRegistry, connection_passwords, mask_passwords
from .session_memory import RecentlyUsed
from .storage import (
    append_line,
    create_private,
    expand_path,
    keep_private,
    list_folder,
    listed_id,
    lost_its_id,
    made_by_safe_name,
    newest_mtime,
    open_private,
    private_dir,
    read_private,
    remove,
    remove_leftovers,
    rename,
    root_for,
    safe_name,
    session_name,
    write_private,
)
from .thresholds import THRESHOLD_NAMES, Thresholds, check_thresholds, thresholds_of, tier_for_share
from .tools import PLACEHOLDER_PREFIX, OffloadText, head_lines, offload_handles, offload_text, placeholder

if TYPE_CHECKING:
    from .stores import (
        DatabaseOffloader,
        DatabaseRecords,
        DatabaseState,
        PostgresDatabase,
        PostgresSettings,
        RedisDatabase,
        RedisSettings,
        SqliteDatabase,
        SqliteSettings,
    )

_STORES = (
    "DatabaseOffloader",
    "DatabaseRecords",
    "DatabaseState",
    "PostgresDatabase",
    "PostgresSettings",
    "RedisDatabase",
    "RedisSettings",
    "SqliteDatabase",
    "SqliteSettings",
)
"""The database backends (:mod:`progressive_compactor.stores`), imported when first asked for:
building a compactor that uses none of them does not pay for them."""


def __getattr__(name: str) -> Any:
    if name in _STORES:
        from . import stores

        return getattr(stores, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ANTHROPIC_KEY",
    "DOCUMENT_TYPES",
    "IMAGE_TYPES",
    "NOT_AVAILABLE",
    "PLACEHOLDER_PREFIX",
    "THRESHOLD_NAMES",
    "Anchor",
    "AnchorType",
    "CompactionRecord",
    "CompactionTier",
    "CompactorError",
    "ConfigError",
    "DatabaseOffloader",
    "DatabaseRecords",
    "DatabaseState",
    "Facts",
    "FallbackError",
    "InvalidMessagesError",
    "Message",
    "OffloadEntry",
    "OffloadError",
    "OffloadText",
    "ParsedSummary",
    "PluginContext",
    "PluginError",
    "PostgresDatabase",
    "PostgresSettings",
    "PriceTable",
    "RecentlyUsed",
    "RedisDatabase",
    "RedisSettings",
    "SecretRegistry",
    "SessionInfo",
    "SessionState",
    "SqliteDatabase",
    "SqliteSettings",
    "StateConflictError",
    "StorageError",
    "SummarizerError",
    "SummaryRequest",
    "SummaryResult",
    "Thresholds",
    "TierInput",
    "TierPlan",
    "ToolCall",
    "TurnContext",
    "append_line",
    "bound_text",
    "carried_result",
    "changed_view",
    "char_count",
    "check_thresholds",
    "connection_passwords",
    "create_private",
    "empty_anchors",
    "expand_path",
    "extract_facts",
    "facts_as_anchors",
    "first_user_request",
    "format_summary",
    "from_anthropic",
    "group_start",
    "head_lines",
    "hookimpl",
    "is_split_point",
    "keep_private",
    "list_folder",
    "listed_id",
    "lost_its_id",
    "made_by_safe_name",
    "mask_passwords",
    "merge_anchors",
    "message_from_dict",
    "message_to_dict",
    "newest_mtime",
    "offload_handles",
    "offload_text",
    "one_line",
    "open_private",
    "parse_markdown",
    "parse_records",
    "part_sizes",
    "placeholder",
    "private_dir",
    "read_private",
    "read_records_file",
    "record_from_dict",
    "record_to_dict",
    "record_to_json",
    "remove",
    "remove_leftovers",
    "rename",
    "renew_lock_after_fork",
    "replace_content",
    "root_for",
    "safe_name",
    "sent_extras",
    "session_name",
    "setting_check",
    "split_text",
    "state_from_json",
    "state_to_json",
    "text_of",
    "thresholds_of",
    "tier_for_share",
    "to_anthropic",
    "with_text",
    "write_private",
]
