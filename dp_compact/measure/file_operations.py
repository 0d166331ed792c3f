"""What a tool call does to files: the paths it reads and the paths it edits or writes.

Recognised by tool name (case-insensitive) and arguments across formats: read tools
(``Read``, ``read_file``, ``view``), editors (``str_replace_editor`` commands), write tools,
Codex's ``apply_patch`` bodies and shell commands (``cat``/``head``/``sed -n``/``nl`` reads,
redirections and here-documents as writes), Windows paths included; the tool and program names
come from :mod:`dp_compact.text.patterns`. Used by the judge's rule (b) of DESIGN §6 "Lost information"
(:mod:`dp_compact.measure.reuse`) and the summary's changed files (:mod:`dp_compact.pipeline.summarize`).
Pure: no IO. The operations of the most recent shell scripts and tool calls are remembered
(:data:`MEMO_ENTRIES`; the shell parsing is most of the cost), so that a conversation's calls
looked at again, by a second summary pass or a later run of a long-lived process, are free.
"""

from __future__ import annotations

import json
import ntpath
import posixpath
import re
import shlex
from collections.abc import Iterator
from typing import Any

from dp_compact.conversation import ToolCall
from dp_compact._fast import keep_newest
from dp_compact.text.patterns import (
    EDITOR_TOOLS,
    EDITOR_WRITES,
    PATCH_PATH,
    PATH_ARGUMENT_KEYS,
    READ_TOOLS,
    SHELL_COMMAND_KEYS,
    SHELL_HINT,
    SHELL_READERS,
    SHELLS,
    WINDOWS_PATH,
    WORKDIR_KEYS,
    WRITE_TOOLS,
)

__all__ = ["MEMO_ENTRIES", "argument_text", "file_operations", "first_string", "operations", "parsed_arguments"]

#: Shell scripts and tool calls whose operations are remembered, each (the least recently used
#: forgotten first): a long session's calls, a few times over.
MEMO_ENTRIES = 8192


def _leaves(value: Any) -> Iterator[str]:
    """The string values of a parsed JSON value, depth first, in order."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for item in value.values():
            yield from _leaves(item)
    elif isinstance(value, list):
        for item in value:
            yield from _leaves(item)


def parsed_arguments(call: ToolCall) -> Any:
    """The tool call's arguments as parsed JSON, or None when they are not JSON."""
    try:
        return json.loads(call.arguments) if call.arguments else None
    except ValueError:
        return None


def argument_text(call: ToolCall, parsed: Any) -> str:
    """The argument text a model reproduced: JSON string values joined by newlines, else the raw text."""
    return call.arguments if parsed is None else "\n".join(_leaves(parsed))


_POWERSHELL_VALUES = {"-totalcount", "-head", "-tail", "-first", "-last", "-encoding", "-delimiter", "-readcount"}
_OPTIONS_WITH_VALUE = {
    "head": {"-n", "-c"}, "tail": {"-n", "-c"}, "nl": {"-b", "-w", "-s", "-v", "-i"},
    "get-content": _POWERSHELL_VALUES, "gc": _POWERSHELL_VALUES,
}
_CONTROL = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
_REDIRECT_WRITE = frozenset({">", ">>", ">|", "&>", "&>>", ">&"})
_REDIRECT_OTHER = frozenset({"<", "<<", "<<<", "<>", "<&"})
_HEREDOC = re.compile(r"(?<!<)<<(?!<)-?\s*(['\"]?)([A-Za-z_][\w.-]*)\1")


def _normalize(path: str, workdir: str | None) -> str | None:
    """``path`` stripped, joined to ``workdir`` when relative, and normalized; None when empty."""
    path = path.strip().strip("'\"")
    if not path or path in ("-", "/dev/null"):
        return None
    windows = bool(WINDOWS_PATH.match(path)) or (workdir is not None and bool(WINDOWS_PATH.match(workdir)))
    module = ntpath if windows else posixpath
    if workdir and not module.isabs(path) and not path.startswith("~"):
        path = module.join(workdir, path)
    return module.normpath(path)


def first_string(arguments: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of ``keys`` whose value is a non-empty string."""
    for key in keys:
        value = arguments.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _script(command: Any) -> str | None:
    """The shell script of a ``command``/``cmd`` argument: a string, or argv such as ["bash", "-lc", "cat x"]."""
    if isinstance(command, str):
        return command
    if not isinstance(command, list) or not command or not all(isinstance(c, str) for c in command):
        return None
    if len(command) >= 3 and posixpath.basename(command[0]).lower() in SHELLS and command[1].lower() in ("-c", "-lc", "-command", "/c"):
        return command[-1]
    return shlex.join(command)


#: A quoted string spanning more lines than this is not joined (its lines are read one by one).
_MAX_QUOTED_LINES = 200


def _script_lines(script: str) -> Iterator[str]:
    """The logical lines of ``script``: here-document bodies left out, and a quoted string that
    spans several lines (``node -e "...multi-line script..."``) kept in one line, so that its
    content is not read as shell (a ``=>`` in JavaScript is no redirection)."""
    lines = iter(script.splitlines())
    pending: list[str] = []
    for line in lines:
        pending.append(line)
        joined = "\n".join(pending)
        if len(pending) < _MAX_QUOTED_LINES and _open_quote(joined):
            continue
        pending = []
        yield joined
        for match in _HEREDOC.finditer(line):
            for body in lines:
                if body.strip() == match.group(2):
                    break
    if pending:
        yield from pending


def _open_quote(text: str) -> bool:
    """True when ``text`` ends inside a quoted string (shell quoting rules, backslashes kept)."""
    if "'" not in text and '"' not in text:  # no quote to open (and no escape character: nothing else fails)
        return False
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.escape = ""
    try:
        for _ in lexer:
            pass
    except ValueError:
        return True
    return False


def _tokens(line: str) -> list[str]:
    """Shell tokens of one line (control operators and redirections apart); [] when unparsable."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.escape = ""  # keep Windows backslashes
    try:
        return list(lexer)
    except ValueError:
        return []


def _simple_commands(tokens: list[str]) -> Iterator[tuple[list[str], list[str]]]:
    """Each simple command's words and its ``>``/``>>`` redirection targets."""
    words: list[str] = []
    targets: list[str] = []
    items = iter(tokens)
    for token in items:
        if token in _CONTROL:
            yield words, targets
            words, targets = [], []
        elif token in _REDIRECT_WRITE or token in _REDIRECT_OTHER:
            if words and words[-1].isdigit():  # the descriptor of ``2>``
                words.pop()
            target = next(items, "")
            if token in _REDIRECT_WRITE and not target.startswith("&") and not target.isdigit():
                targets.append(target)
        elif not (words == [] and re.match(r"^[A-Za-z_]\w*=", token)):
            words.append(token)
    yield words, targets


def _remembered(memo: dict[Any, Any], key: Any) -> Any:
    """The value ``memo`` keeps for ``key``, made the most recently used; None when it keeps none."""
    found = memo.pop(key, None)
    if found is not None:
        memo[key] = found
    return found


def _remember(memo: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep ``value`` for ``key`` in ``memo``, forgetting the least recently used past :data:`MEMO_ENTRIES`."""
    memo[key] = value
    keep_newest(memo, MEMO_ENTRIES)


#: Script -> (reads, writes) of :func:`_shell_operations`, as tuples.
_SHELL_MEMO: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
#: (tool name, arguments text, workdir) -> (reads, writes) of :func:`file_operations`, as tuples.
_CALL_MEMO: dict[tuple[str, str, str | None], tuple[tuple[str, ...], tuple[str, ...]]] = {}


def _shell_operations(script: str) -> tuple[list[str], list[str]]:
    """Files a shell script reads whole or in part (cat, head, tail, sed -n, nl, Get-Content) and writes (>, sed -i)."""
    found = _remembered(_SHELL_MEMO, script)
    if found is None:
        found = tuple(map(tuple, _parsed_shell_operations(script)))
        _remember(_SHELL_MEMO, script, found)
    return list(found[0]), list(found[1])


def _parsed_shell_operations(script: str) -> tuple[list[str], list[str]]:
    """:func:`_shell_operations`, parsed (no memo)."""
    reads: list[str] = []
    writes: list[str] = []
    for line in _script_lines(script):
        if not SHELL_HINT.search(line):
            continue
        for words, targets in _simple_commands(_tokens(line)):
            writes.extend(targets)
            if not words:
                continue
            program = ntpath.basename(words[0]).lower()
            if program in SHELL_READERS:
                reads.extend(_operands(words[1:], _OPTIONS_WITH_VALUE.get(program, set())))
            elif program == "sed":
                options = [w for w in words[1:] if w.startswith("-")]
                operands = _operands(words[1:], {"-e", "-f"})
                has_script = any(o in ("-e", "-f") or o.startswith("--expression") for o in options)
                files = operands if has_script else operands[1:]
                if any(o.startswith("-i") or o.startswith("--in-place") for o in options):
                    writes.extend(files)
                elif any(o in ("-n", "--quiet", "--silent") or (o[1:].isalpha() and "n" in o[1:]) for o in options):
                    reads.extend(files)
    return reads, writes


def _operands(words: list[str], options_with_value: set[str]) -> list[str]:
    """Words that are not options nor option values (PowerShell's ``-Path P`` gives P)."""
    operands: list[str] = []
    items = iter(words)
    for word in items:
        if word.lower() in options_with_value:
            next(items, None)
        elif not word.startswith("-") or word == "-":
            operands.append(word)
    return operands


def file_operations(call: ToolCall, workdir: str | None = None) -> tuple[list[str], list[str]]:
    """Paths a tool call reads and paths it edits or writes (rule b), normalized.

    Parameters
    ----------
    call : ToolCall
        Any format's tool call; recognised by name (case-insensitive) and arguments.
    workdir : str, optional
        Directory that relative paths are joined to when the call names none (``workdir``/``cwd``).

    Returns
    -------
    reads, writes : list of str
        Normalized paths (``os.path.normpath`` rules; Windows paths by ``ntpath``).

    Examples
    --------
    >>> file_operations(ToolCall("1", "Read", '{"file_path": "/src/a.py"}'))
    (['/src/a.py'], [])
    >>> file_operations(ToolCall("2", "apply_patch", "*** Begin Patch\\n*** Update File: src/b.py\\n@@\\n*** End Patch"), "/w")
    ([], ['/w/src/b.py'])
    >>> file_operations(ToolCall("3", "exec_command", '{"cmd": "sed -n \\'1,80p\\' c.go && nl -ba d.go | head", "workdir": "/r"}'))
    (['/r/c.go', '/r/d.go'], [])
    """
    key = (call.name, call.arguments, workdir)
    memo = type(call.name) is str and type(call.arguments) is str and (workdir is None or type(workdir) is str)
    found = _remembered(_CALL_MEMO, key) if memo else None
    if found is None:
        parsed = parsed_arguments(call)
        found = tuple(map(tuple, operations(call.name, parsed, argument_text(call, parsed), workdir)))
        if memo:
            _remember(_CALL_MEMO, key, found)
    return list(found[0]), list(found[1])


def operations(name: str, parsed: Any, text: str, workdir: str | None) -> tuple[list[str], list[str]]:
    """:func:`file_operations` on arguments already parsed (``text``: their string values)."""
    name = name.lower()
    arguments = parsed if isinstance(parsed, dict) else {}
    workdir = first_string(arguments, WORKDIR_KEYS) or workdir
    reads: list[str] = []
    writes: list[str] = [m.group(1) for m in PATCH_PATH.finditer(text)]
    path = first_string(arguments, PATH_ARGUMENT_KEYS)
    if name in EDITOR_TOOLS:
        command = str(arguments.get("command", "")).lower()
        if path and command == "view":
            reads.append(path)
        elif path and command in EDITOR_WRITES:
            writes.append(path)
    elif name in READ_TOOLS and path:
        reads.append(path)
    elif name in WRITE_TOOLS and path:
        writes.append(path)
    elif (script := _script(next((arguments[k] for k in SHELL_COMMAND_KEYS if k in arguments), None))) is not None:
        shell_reads, shell_writes = _shell_operations(script)
        reads.extend(shell_reads)
        writes.extend(shell_writes)
    read_paths = [p for p in (_normalize(r, workdir) for r in reads) if p]
    write_paths = [p for p in (_normalize(w, workdir) for w in writes) if p]
    return list(dict.fromkeys(read_paths)), list(dict.fromkeys(write_paths))
