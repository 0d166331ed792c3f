"""Claude Code attachments: context the CLI injects into the next request (DESIGN §4).

An ``attachment`` record (``{"type": "attachment", "attachment": {"type": ..., ...}}``,
``sessions/FORMATS.md`` (a)) is not a message of the transcript, but Claude Code sends it to the
model: it renders each attachment as text wrapped in ``<system-reminder>`` tags and puts it in
the user message of the next request (after the tool results of the last call). The provider
counts those tokens, so the reader turns each attachment into an ``injected`` user message
holding that text (:func:`attachment_message`).

The text is what Claude Code roughly presents for each type, not its exact wording: the
listing for ``skill_listing``, the tool names for ``deferred_tools_delta``, the server
instructions for ``mcp_instructions_delta``, the file's lines as a ``Read`` result for
``file``, the queued prompt for ``queued_command`` (a task notification), the open task list
for ``todo_reminder`` / ``task_reminder``, and so on. A type not listed here is counted by its
JSON text, never refused. Types Claude Code does not send (``_UNSENT``) give no message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dp_compact.conversation import Message, new_message
from dp_compact.sessions.common import dumps, text_and_images

__all__ = ["attachment_message", "attachment_text"]

_REMINDER = "<system-reminder>\n{}\n</system-reminder>"
#: Attachment types Claude Code keeps for its own display and does not send to the model.
_UNSENT = frozenset({"already_read_file", "command_permissions", "hook_cancelled", "hook_permission_decision"})

_TODO_REMINDER = (
    "The TodoWrite tool hasn't been used recently. If you're working on tasks that would benefit from tracking"
    " progress, consider using the TodoWrite tool to track progress. Also consider cleaning up the todo list if it"
    " has become stale and no longer matches what you are working on. Only use it if it's relevant to the current"
    " work. This is just a gentle reminder - ignore if not applicable."
)
_TASK_REMINDER = _TODO_REMINDER.replace("The TodoWrite tool hasn't", "The task tools haven't").replace(
    "the TodoWrite tool", "the task tools"
)


def _text(value: Any) -> str:
    """A string as it is, anything else as compact JSON (``""`` for None)."""
    return "" if value is None else value if isinstance(value, str) else dumps(value)


def _names(value: Any) -> str:
    """One name per line of a list of names."""
    return "\n".join(_text(v) for v in value) if isinstance(value, list) else _text(value)


def _reminder(lead: str, attachment: dict[str, Any]) -> str:
    items = attachment.get("content")
    return lead + (f"\n\nHere are the existing contents of your list:\n\n{dumps(items)}" if items else "")


def _numbered(content: str, start: Any) -> str:
    """``content`` as Claude Code's ``Read`` tool shows it: ``<line number>\\t<line>``."""
    first = start if isinstance(start, int) and not isinstance(start, bool) and start > 0 else 1
    return "\n".join(f"{n}\t{line}" for n, line in enumerate(content.split("\n"), first))


def _file(attachment: dict[str, Any]) -> str:
    content = attachment.get("content")
    file = content.get("file") if isinstance(content, dict) else None
    if not (isinstance(file, dict) and isinstance(file.get("content"), str)):
        return _text(content)
    path = file.get("filePath") or attachment.get("filename") or ""
    return (f"Called the Read tool with the following input: {dumps({'file_path': path})}\n\n"
            f"Result of calling the Read tool:\n{_numbered(file['content'], file.get('startLine'))}")


def _deltas(lead: str, gone: str, added: Any, removed: Any) -> str:
    parts = [f"{lead}\n{added}"] if added else []
    if removed:
        parts.append(f"{gone}\n{_names(removed)}")
    return "\n\n".join(parts)


_RENDER: dict[str, Callable[[dict[str, Any]], str]] = {
    "queued_command": lambda a: _text(a.get("prompt")),
    "todo_reminder": lambda a: _reminder(_TODO_REMINDER, a),
    "task_reminder": lambda a: _reminder(_TASK_REMINDER, a),
    "file": _file,
    "compact_file_reference": lambda a: (
        f"Note: {a.get('filename', '')} was read before the last conversation was summarized, but the contents are"
        " too large to include. Use the Read tool if you need to access it."
    ),
    "skill_listing": lambda a: f"The following skills are available for use with the Skill tool:\n\n{_text(a.get('content'))}",
    "deferred_tools_delta": lambda a: _deltas(
        "The following deferred tools are now available via ToolSearch:", "The following deferred tools are no longer available:",
        _names(a.get("addedNames")), a.get("removedNames"),
    ),
    "mcp_instructions_delta": lambda a: _deltas(
        "# MCP Server Instructions\n\nThe following MCP servers have provided instructions for how to use their tools"
        " and resources:\n", "These MCP servers have disconnected and their instructions no longer apply:",
        "\n\n".join(_text(b) for b in a.get("addedBlocks") or ()), a.get("removedNames"),
    ),
    "selected_lines_in_ide": lambda a: (
        f"The user selected the lines {a.get('lineStart')} to {a.get('lineEnd')} from {a.get('filename', '')}:\n"
        f"{_text(a.get('content'))}\n\nThis may or may not be related to the current task."
    ),
    "opened_file_in_ide": lambda a: (
        f"The user opened the file {a.get('filename', '')} in the IDE. This may or may not be related to the current task."
    ),
    "edited_text_file": lambda a: (
        f"Note: {a.get('filename', '')} was modified, either by the user or by a linter. Here are the relevant changes"
        f" (shown with line numbers):\n{_text(a.get('snippet'))}"
    ),
    "nested_memory": lambda a: f"Contents of {a.get('path', '')}:\n\n{_text(a.get('content'))}",
    "critical_system_reminder": lambda a: _text(a.get("content")),
}


def attachment_text(attachment: Any) -> tuple[str, int]:
    """The text Claude Code sends for one attachment, and its image count.

    Parameters
    ----------
    attachment : Any
        The record's ``attachment`` value.

    Returns
    -------
    tuple[str, int]
        The rendered text wrapped in ``<system-reminder>`` tags (``""`` for a type that is not
        sent, or an attachment with nothing to render) and the images it carries (a queued
        prompt with image blocks, an image ``file``, which is then named in the text), which are
        counted, never put into text.
        An unknown type is its JSON text.

    >>> attachment_text({"type": "deferred_tools_delta", "addedNames": ["WebFetch", "WebSearch"]})[0].splitlines()[1:4]
    ['The following deferred tools are now available via ToolSearch:', 'WebFetch', 'WebSearch']
    >>> attachment_text({"type": "brand_new", "x": 1})
    ('<system-reminder>\\n{"type":"brand_new","x":1}\\n</system-reminder>', 0)
    """
    if not isinstance(attachment, dict):
        return _REMINDER.format(_text(attachment)), 0
    kind = attachment.get("type")
    if type(kind) is not str:  # names no attachment kind: written as it is
        kind = ""
    if kind in _UNSENT:
        return "", 0
    images = 0
    if kind == "queued_command" and isinstance(attachment.get("prompt"), list):
        text, images = text_and_images(attachment["prompt"])
    elif kind == "file" and isinstance(attachment.get("content"), dict) and attachment["content"].get("type") == "image":
        text, images = f"Image file {attachment.get('filename', '')} (attached below)", 1
    else:
        render = _RENDER.get(kind) if isinstance(kind, str) else None
        text = render(attachment) if render is not None else dumps(attachment)
    if images and not text.strip():
        text = "Image (attached below)"
    return (_REMINDER.format(text) if text.strip() else ""), images


def attachment_message(attachment: Any, *, line: int = 0, nbytes: int = 0) -> Message | None:
    """An ``injected`` user message holding what Claude Code sends for ``attachment`` (None when nothing).

    Its ``raw`` is an Anthropic user message with one ``text`` block (and no image bytes), which
    the pipeline can write back out; ``line`` and ``nbytes`` locate the attachment record.
    """
    text, images = attachment_text(attachment)
    if not text:
        return None
    raw = {"role": "user", "content": [{"type": "text", "text": text}]}
    return new_message("user", text, images=images, line=line, source_bytes=nbytes, raw=raw, kind="injected")
