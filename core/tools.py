"""A ready-made tool for the agent's own tool list: read an offloaded tool result back.

```python
tools = [*my_tools, READ_TOOL_RESULT_TOOL]
...
if call["function"]["name"] == "read_tool_result":
    content = handle_read_tool_call(compactor, call["function"]["arguments"])
```
"""

from __future__ import annotations

import json
from typing import Any

from .errors import CompactorError

READ_TOOL_RESULT_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read_tool_result",
        "description": (
            "Read the full text of an earlier tool result that was moved out of the context to save "
            "space. Its placeholder names the handle. Give start_line and end_line (1-based, "
            "inclusive) to read part of a long result."
        ),
        "parameters": {
            "type": "object",
            "properties": {
                "handle": {"type": "string", "description": "The handle named in the placeholder."},
                "start_line": {"type": "integer", "minimum": 1},
                "end_line": {"type": "integer", "minimum": 1},
            },
            "required": ["handle"],
            "additionalProperties": False,
        },
    },
}


def handle_read_tool_call(compactor: Any, arguments: str | dict[str, Any]) -> str:
    """Answer a ``read_tool_result`` call; errors come back as text the model can read."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
        handle = args["handle"]
        start, end = args.get("start_line"), args.get("end_line")
        lines = (int(start or 1), int(end or 10**9)) if start or end else None
        return compactor.read_tool_result(str(handle), lines)
    except (ValueError, KeyError, TypeError) as exc:
        return f"error: invalid arguments for read_tool_result: {exc}"
    except CompactorError as exc:
        return f"error: {exc}"
