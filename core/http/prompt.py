"""The prompt that asks an LLM to fold new messages into the running summary.

The reply must carry the five anchors and the prose in the format
:func:`progressive_compactor.anchors.parse_markdown` reads (``## User Intent`` ... ``## Summary``).
The summary is incremental: the model gets the previous summary and anchors and only
the messages not yet covered, and answers with the whole updated summary.

A template is two ``string.Template`` texts, system and user, with ``$name`` placeholders (see
:data:`PLACEHOLDERS`). A custom template file (``prompt_template`` in a summarizer's config) holds
the system text; a line ``=== user ===`` may follow it with a user text as well, else the default
user text is used. ``$$`` is a literal dollar sign. A cache-friendly request
(:func:`build_instruction`) sends the system and the user text together as its closing message,
``$messages`` standing for a note that the messages are the oldest of the conversation above.
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Sequence

import attrs

from ..anchors import format_summary
from ..errors import ConfigError
from ..facts import bound_text
from ..messages import text_of
from ..models import Anchor, Facts, Message, SummaryRequest

USER_SEPARATOR = "=== user ==="
CHARS_PER_TOKEN = 4
"""The core's estimate (``tokens-chars``): also used for the size checks of a reply."""

PLACEHOLDERS = {
    "session_id": "the session id",
    "tier": "the compaction tier (Soft or Full)",
    "target_tokens": "how long the summary should be at most, in tokens",
    "target_words": "the same in words (about three quarters of the tokens)",
    "previous_summary": "the previous summary with its anchors, or a line saying there is none",
    "facts": "facts the core extracted mechanically (user's request and later instructions, files, failed commands; for a delta also the stated decisions and next step)",
    "user_request": "the user's original request, verbatim (or N/A)",
    "message_count": "how many new messages there are",
    "messages": "the new messages, one block each, each bounded in length",
}

DEFAULT_SYSTEM = """\
You keep the running summary of a long working session between a user and an AI agent that uses \
tools. Your summary replaces the messages it covers: the agent will continue the task from your \
summary alone, so whatever you leave out is lost for good.

Update the previous summary (if there is one) with the new messages, and reply with the whole \
updated summary in exactly this Markdown format, with these six headings in this order and \
nothing before or after them:

## User Intent
The user's original request, quoted verbatim (copy it exactly; do not paraphrase or shorten it), \
then every later instruction, constraint or change of mind, each on its own line.
## Execution Progress
What has been done and what state it left: every file created, edited or read (full paths), \
commands run and their outcome, the state of tests and builds.
## Key Decisions
Each decision taken and why.
## Tried Solutions
Each approach that failed or was abandoned, and why it failed (quote the error line), so that it \
is not tried again.
## Next Steps
The immediate next step, in one or two lines.
## Summary
A short paragraph or two of prose: the story so far, in the order things happened, the latest \
events in most detail (a program keeps only the newest part of a long story).

Rules:
- Keep everything from the previous summary that still matters; merge, do not restart.
- Under a heading with nothing to report, write N/A. Never drop a heading.
- Tool results shown as "[Tool result offloaded ...]" were moved to files: keep the handle of \
any result that still matters, so the agent can read it back.
- Be concrete: names, paths, numbers, error messages. No advice, no commentary.
- Stay under about $target_words words ($target_tokens tokens)."""

DEFAULT_USER = """\
Session $session_id, compaction tier $tier.

<previous_summary>
$previous_summary
</previous_summary>

<facts>
Facts extracted mechanically from the conversation; they are correct, keep every one of them.
$facts
</facts>

<new_messages count="$message_count">
$messages
</new_messages>

Write the whole updated summary now, in the format above."""


DELTA_SYSTEM = """\
You keep the running summary of a long working session between a user and an AI agent that uses \
tools. A program keeps the summary so far; write only what the new messages add to it, in exactly \
this Markdown format: these six headings, in this order, nothing before or after them.

## User Intent
New instructions, constraints or changes of mind from the user that the facts do not quote, one \
per line.
## Execution Progress
What the new messages did and the state they left: commands and their outcome, tests and builds.
## Key Decisions
Each decision taken, and why (or why for one the facts state).
## Tried Solutions
Each approach that failed or was abandoned, and why, beyond the failed commands the facts list.
## Next Steps
The immediate next step, in a line or two (N/A when it is the one the facts give).
## Summary
One short paragraph on what happened in the new messages.

Rules:
- Never copy the facts you are given: the program adds them to the summary itself. Under a \
heading with nothing new, write N/A; never drop a heading.
- Keep the handle of any offloaded tool result ("[Tool result offloaded ...]") that still matters.
- Be concrete: names, paths, numbers, error messages. No advice, no commentary.
- Stay under about $target_words words ($target_tokens tokens)."""

DELTA_USER = """\
Session $session_id, compaction tier $tier.

<user_request>
$user_request
</user_request>

<facts>
Extracted from the new messages by the program, which adds them to the summary: do not copy them.
$facts
</facts>

<new_messages count="$message_count">
$messages
</new_messages>

Write what the new messages add now, in the format above."""


@attrs.frozen
class PromptTemplate:
    system: str
    user: str
    source: str = "built-in"


@attrs.frozen
class Prompt:
    system: str
    user: str


DEFAULT_TEMPLATE = PromptTemplate(DEFAULT_SYSTEM, DEFAULT_USER)
DELTA_TEMPLATE = PromptTemplate(DELTA_SYSTEM, DELTA_USER, "built-in (delta)")
"""Asks for what the new messages add only; the summarizer marks its result ``delta``."""


def _identifiers(text: str) -> set[str]:
    names = set()
    for match in string.Template.pattern.finditer(text):
        name = match.group("named") or match.group("braced")
        if name:
            names.add(name)
        elif match.group("invalid") is not None:
            line = text[: match.start()].count("\n") + 1
            raise ValueError(f"a '$' on line {line} starts no placeholder (write $$ for a dollar sign)")
    return names


def check_template(template: PromptTemplate, where: str = "$.prompt_template") -> PromptTemplate:
    """Raise :class:`ConfigError` when a template names an unknown placeholder or lacks ``$messages``."""
    problems = []
    used: set[str] = set()
    for part in ("system", "user"):
        try:
            names = _identifiers(getattr(template, part))
        except ValueError as exc:
            problems.append(f"prompt template {template.source}, {part} part: {exc} @ {where}")
            continue
        used |= names
        unknown = sorted(names - PLACEHOLDERS.keys())
        if unknown:
            problems.append(
                f"prompt template {template.source}, {part} part: unknown placeholder(s) "
                f"{', '.join('$' + n for n in unknown)}; known: {', '.join('$' + n for n in PLACEHOLDERS)} @ {where}"
            )
    if "messages" not in used and not problems:
        problems.append(
            f"prompt template {template.source} never uses $messages, so the model would see no messages @ {where}"
        )
    if problems:
        raise ConfigError(problems)
    return template


def load_template(path: str | None, where: str = "$.prompt_template") -> PromptTemplate:
    """The template in the file at ``path`` (see the module docstring), or the default one."""
    if not path:
        return DEFAULT_TEMPLATE
    file = Path(path).expanduser()
    try:
        text = file.read_text("utf-8")
    except OSError as exc:
        raise ConfigError([f"cannot read prompt template {file}: {exc.strerror or exc} @ {where}"]) from exc
    parts = re.split(rf"^\s*{re.escape(USER_SEPARATOR)}\s*$", text, maxsplit=1, flags=re.M)
    system = parts[0].strip()
    user = parts[1].strip() if len(parts) == 2 else DEFAULT_USER
    if not system:
        raise ConfigError([f"prompt template {file} has an empty system part @ {where}"])
    return check_template(PromptTemplate(system, user, str(file)), where)


# --- rendering --------------------------------------------------------------------------------


def previous_size_tokens(request: SummaryRequest) -> int:
    """Estimated tokens of the previous summary and anchors, which the new summary replaces too."""
    if not request.previous_summary and not request.previous_anchors:
        return 0
    return len(format_summary(request.previous_anchors, request.previous_summary or "")) // CHARS_PER_TOKEN


def replaced_budget_tokens(request: SummaryRequest) -> int:
    """What the reply replaces: the new messages and the previous summary. A reply at least this
    large would grow the view instead of shrinking it."""
    return request.replaced_tokens + previous_size_tokens(request)


def target_tokens(request: SummaryRequest) -> int:
    """The length the prompt asks for: well under what is replaced, and under the core's limit."""
    return max(min(request.max_summary_tokens, replaced_budget_tokens(request) // 2), 150)


def render_previous(summary: str | None, anchors: Sequence[Anchor]) -> str:
    if not summary and not anchors:
        return "None: this is the first summary of the session."
    return format_summary(anchors, summary or "")


def render_facts(facts: Facts, quoted: bool = False, stated: bool = False) -> str:
    """The facts, once: the user's request only when the prompt does not show it already
    (``quoted``); with ``stated``, the decisions and the next step the agent stated too (a delta
    is asked not to copy what the core adds to the summary itself, so it must see all of it)."""
    request = facts.user_request or "N/A"
    if facts.user_request and quoted:
        request = "(quoted above; keep it verbatim)"
    # a delta shows the request above and the program keeps it: nothing to say of it here
    lines = [] if stated and quoted else [f"User's original request (verbatim):\n{request}"]
    listed: list[tuple[str, Sequence[str]]] = [
        ("Later instructions from the user", facts.instructions),
        ("Files created", facts.files_created),
        ("Files edited", facts.files_edited),
        ("Files read", facts.files_read),
        ("Failed commands (command -> error)", facts.failed_commands),
        ("Tools used", facts.tools_used),
    ]
    if stated:
        listed += [
            ("Decisions stated", facts.decisions),
            ("Next step stated", [facts.next_step] if facts.next_step else []),
        ]
    for label, items in listed:
        if items:
            lines.append(f"{label}: " + "; ".join(items))
    return "\n".join(lines)


def render_message(
    index: int,
    message: Message,
    max_chars: int,
    max_result_chars: int | None = None,
    labels: dict[str, str] | None = None,
) -> str:
    """One message as a compact block, at most about ``max_chars`` characters (a tool result
    at most ``max_result_chars``: its facts, files and error line reach the prompt anyway).

    ``labels`` names tool calls by short labels (``#1``, ``#2``...) instead of their ids: a
    provider's call id is some 30 random characters (a score of tokens) that tell the summarizer
    nothing but which result answers which call. A call without a label is shown by its id; an
    offloaded result's handle, in its text, keeps the id either way."""
    labels = {} if labels is None else labels
    if message.role == "tool" and max_result_chars is not None:
        max_chars = min(max_chars, max_result_chars)
    if message.role == "tool":
        call_id = message.tool_call_id or ""
        head = f"[{index}] tool result of {labels.get(call_id, call_id)}"
        head += f" ({message.name})" if message.name else ""
    else:
        head = f"[{index}] {message.role}"
    body = text_of(message).strip()
    calls = [
        f"-> tool call {labels.get(call.id, call.id)} {call.name}: "
        + bound_text(call.arguments.strip(), max(max_chars // 4, 200))
        for call in message.tool_calls
    ]
    text = "\n".join(part for part in [body, *calls] if part) or "(empty)"
    return f"{head}:\n{bound_text(text, max_chars)}"


def call_labels(messages: Sequence[Message]) -> dict[str, str]:
    """Short labels for the tool calls of ``messages`` (see :func:`render_message`)."""
    labels: dict[str, str] = {}
    for m in messages:
        for call in m.tool_calls:
            if call.id and call.id not in labels:
                labels[call.id] = f"#{len(labels) + 1}"
    return labels


def render_messages(
    messages: Sequence[Message], max_chars: int, max_result_chars: int | None = None, user_request: str | None = None
) -> str:
    """The messages, one block each; the user's request (shown apart) is not repeated."""
    labels = call_labels(messages)
    blocks = []
    for i, m in enumerate(messages, 1):
        if user_request and m.role == "user" and _is_request(text_of(m).strip(), user_request):
            blocks.append(f"[{i}] user:\n(the user's request, shown above)")
        else:
            blocks.append(render_message(i, m, max_chars, max_result_chars, labels))
    return "\n\n".join(blocks)


def _is_request(text: str, user_request: str) -> bool:
    return bool(text) and text[:500] == user_request[:500]


def _values(request: SummaryRequest, delta: bool, *, messages: str, request_chars: int) -> dict[str, str]:
    """What a template's placeholders stand for (see :data:`PLACEHOLDERS`). For a delta the
    user's request is cut to ``request_chars``: the core keeps it verbatim in the summary."""
    target = target_tokens(request)
    previous = render_previous(request.previous_summary, request.previous_anchors)
    full = request.facts.user_request
    # a delta needs the request as context only; a whole summary quotes it
    user_request = bound_text(full, request_chars) if full and delta else full
    quoted = delta or bool(full and full in previous)  # the delta template shows it; a summary quotes it
    facts = attrs.evolve(request.facts, user_request=user_request)
    return {
        "session_id": request.session_id,
        "tier": request.tier.label,
        "target_tokens": str(target),
        "target_words": str(target * 3 // 4),
        "previous_summary": previous,
        "facts": render_facts(facts, quoted, stated=delta),
        "user_request": user_request or "N/A",
        "message_count": str(len(request.messages)),
        "messages": messages,
    }


MAX_MESSAGE_CHARS = 800
MAX_RESULT_CHARS = 400
"""A summary request is lean: each message is cut to this many characters (head and tail kept),
a tool result shorter still, and (for a delta) the user's request to twice the message length. The core
extracts a result's facts (files, the error line) from its whole text and sends them apart, a
large result is already a placeholder with a handle, and the core keeps the user's request
verbatim in the summary itself."""


def build_prompt(
    request: SummaryRequest,
    template: PromptTemplate = DEFAULT_TEMPLATE,
    *,
    max_message_chars: int = MAX_MESSAGE_CHARS,
    max_result_chars: int = MAX_RESULT_CHARS,
    delta: bool = False,
) -> Prompt:
    """The system and user prompt for ``request``. Pure: same request, same prompt.

    ``delta`` asks for what the new messages add only (with the built-in template, the delta
    one): the previous summary is not sent, the user's request is, once."""
    if delta and template is DEFAULT_TEMPLATE:
        template = DELTA_TEMPLATE
    messages = render_messages(request.messages, max_message_chars, max_result_chars, request.facts.user_request)
    values = _values(request, delta, messages=messages, request_chars=2 * max_message_chars)
    return Prompt(
        system=string.Template(template.system).substitute(values),
        user=string.Template(template.user).substitute(values),
    )


def build_instruction(
    request: SummaryRequest,
    template: PromptTemplate = DEFAULT_TEMPLATE,
    *,
    max_message_chars: int = MAX_MESSAGE_CHARS,
    delta: bool = False,
) -> str:
    """The closing message of a cache-friendly request: the conversation (``request.view``) goes
    first, as the agent sent it, so the provider reads it from its prompt cache; this asks for
    the summary of its oldest uncovered messages, with the facts and the format. ``template``
    and ``delta`` as for :func:`build_prompt`; ``$messages`` says where the messages are."""
    if delta and template is DEFAULT_TEMPLATE:
        template = DELTA_TEMPLATE
    cached = CACHED_MESSAGES.format(count=len(request.messages))
    values = _values(request, delta, messages=cached, request_chars=2 * max_message_chars)
    system = string.Template(template.system).substitute(values)
    user = string.Template(template.user).substitute(values)
    return f"{system}\n\n{user}"


CACHED_MESSAGES = (
    "(not repeated here: they are the {count} oldest messages of the conversation above, after "
    "its system message and after the [Context Compaction] summary if it has one)"
)
