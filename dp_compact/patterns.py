"""The item-extraction patterns: what in a message's text or a tool call names a file, an
identifier, an error or a command, and which tools read, edit or run them.

One home for the regular expressions and name lists that the summary's anchors and sections
(:mod:`dp_compact.pipeline.extract`, :mod:`dp_compact.pipeline.summarize`), what a tool call
does to files (:mod:`dp_compact.file_operations`, the judge's rule (b) of DESIGN §6 "Lost
information", :mod:`dp_compact.reuse`) and through them the recall curve of the calibration
(:mod:`dp_compact.calibration.recall`) look for. Two readings of a tool call live here side by
side: the judge's exact rules (a tool named ``Read`` reads its ``file_path``; a shell command's
``cat`` reads its operands) and the summary's wider net (any argument whose name mentions a path,
any tool whose name mentions an edit). Constants only: no IO, no state.
"""

from __future__ import annotations

import re

__all__ = [
    "EDITOR_TOOLS",
    "EDITOR_WRITES",
    "EDIT_TOOL_NAME",
    "ERROR",
    "EXTENSIONS",
    "HAS_EXTENSION",
    "IDENTIFIER",
    "INJECTED_BLOCK",
    "PATCH_PATH",
    "PATH",
    "PATH_ARGUMENT_KEYS",
    "PATH_ARGUMENT_NAME",
    "READ_TOOLS",
    "SHELLS",
    "SHELL_ARGUMENT_KEYS",
    "SHELL_COMMAND_KEYS",
    "SHELL_HINT",
    "SHELL_READERS",
    "SHELL_TOOL_NAME",
    "WINDOWS_PATH",
    "WORKDIR_KEYS",
    "WRITE_TOOLS",
]

# --- In text ---------------------------------------------------------------------------------

#: File extensions a bare file name must end with to count as a path (alternation, no groups).
EXTENSIONS = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|md|mdx|rst|txt|csv|tsv|sql|go|rs|java|kt|kts|c|h|cc|cpp|hpp|"
    "cs|rb|php|swift|sh|bash|zsh|ps1|css|scss|html|htm|vue|svelte|ini|cfg|conf|env|lock|xml|gradle|tf|proto|dart|lua|r|scala|"
    "ex|exs|erl|hs|ml|pl|log|pdf|png|jpg|svg|dockerfile|mk|cmake"
)
#: A path candidate in running text (group 1): slashed segments, or a bare name with a known
#: extension; never inside a URL or an e-mail address.
PATH = re.compile(
    r"(?<![\w@:/.\-])"
    r"((?:~|\.{1,2})?/?(?:[\w.\-]+/)+[\w.\-]+|[\w\-]+(?:\.[\w\-]+)*\.(?:" + EXTENSIONS + r"))"
    r"(?![\w/])",
    re.I,
)
#: Ends with a known file extension.
HAS_EXTENSION = re.compile(r"\.(?:" + EXTENSIONS + r")$", re.I)
#: A Windows path: a drive letter or a UNC prefix.
WINDOWS_PATH = re.compile(r"^(?:[A-Za-z]:[\\/]|\\\\)")
#: A file an ``apply_patch`` body touches (group 1), one per header line.
PATCH_PATH = re.compile(r"^\*\*\* (?:Update File|Add File|Delete File|Move to): (.+?)\s*$", re.MULTILINE)
#: Code identifiers: dotted names, snake_case, CamelCase.
IDENTIFIER = re.compile(r"\b(?:[A-Za-z_]\w*\.[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*|[a-z]+_\w+|[A-Z][a-z0-9]+[A-Z]\w*)\b")
#: A line that mentions an error or a failure.
ERROR = re.compile(
    r"\b(errors?|exceptions?|traceback|fail(?:ed|s|ure|ing)?|fatal|panic|denied|not found|cannot|can't|unable|invalid|"
    r"refused|timed? ?out|crash(?:ed)?|broken|missing|undefined|segfault|abort(?:ed)?)\b",
    re.I,
)
#: Blocks a client injects into a user message (``<system-reminder>…</system-reminder>`` and the like).
INJECTED_BLOCK = re.compile(
    r"<(system-reminder|environment_context|user_instructions|local-command-\w+|command-\w+|ide_\w+)>.*?</\1>", re.S
)

# --- Tool-call arguments ---------------------------------------------------------------------

#: Arguments that name the one file a read, edit or write tool works on, first present wins.
PATH_ARGUMENT_KEYS = ("file_path", "path", "absolute_path", "absolutePath", "notebook_path", "target_file", "filename")
#: Argument names whose values may name files (the summary's wider net over any tool).
PATH_ARGUMENT_NAME = re.compile(r"path|file|dir|cwd|workdir|target|source|dest|pattern|glob", re.I)
#: Arguments naming the directory relative paths are joined to.
WORKDIR_KEYS = ("workdir", "cwd")
#: Arguments holding the shell command whose file reads and writes the judge follows.
SHELL_COMMAND_KEYS = ("command", "cmd")
#: Arguments holding a command line the summary lists under "Commands run".
SHELL_ARGUMENT_KEYS = (*SHELL_COMMAND_KEYS, "script", "commands")

# --- Tool names (compared lower-cased, or searched case-insensitively) -----------------------

#: Tools that read the file of their path argument.
READ_TOOLS = frozenset({"read", "read_file", "view", "open"})
#: Editors whose ``command`` argument says whether they read (``view``) or write.
EDITOR_TOOLS = frozenset({"str_replace_editor", "str_replace_based_edit_tool"})
#: The editor commands that write.
EDITOR_WRITES = frozenset({"create", "str_replace", "insert"})
#: Tools that edit or write the file of their path argument.
WRITE_TOOLS = frozenset(
    {"edit", "multiedit", "write", "notebookedit", "write_to_file", "replace_in_file", "write_file", "replace", "edit_file"}
)
#: A tool name that suggests it changes files (the summary's wider net).
EDIT_TOOL_NAME = re.compile(r"edit|write|create|patch|replace|insert|update|delete|move|rename", re.I)
#: A tool name that suggests its free-text arguments are a shell command.
SHELL_TOOL_NAME = re.compile(r"bash|shell|exec|terminal|run_command|command|powershell", re.I)

# --- Shell programs --------------------------------------------------------------------------

#: Shells whose ``-c``/``-lc``/``-Command``/``/c`` argument is the script (argv-style commands).
SHELLS = frozenset({"bash", "sh", "zsh", "dash", "powershell", "pwsh", "powershell.exe", "pwsh.exe", "cmd", "cmd.exe"})
#: Programs that print a file whole or in part (their operands are reads).
SHELL_READERS = frozenset({"cat", "head", "tail", "nl", "get-content", "gc"})
#: A script line worth tokenizing: a redirection, a reader, or ``sed``.
SHELL_HINT = re.compile(r">|\b(?:" + "|".join(sorted(SHELL_READERS | {"sed"})) + r")\b", re.IGNORECASE)
