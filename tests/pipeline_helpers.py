"""Helpers for the pipeline tests: an in-memory archive, JSONL files, the SDKs' request types."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest


class FakeArchiver:
    """In-memory :class:`~dp_compact.pipeline.types.Archiver`: keeps every head it is given."""

    def __init__(self) -> None:
        self.heads: dict[str, list[dict[str, Any]]] = {}
        self.metadata: dict[str, dict[str, Any]] = {}

    def write(self, session_id: str, head_raw: list[dict[str, Any]], metadata: dict[str, Any]) -> str:
        ref = f"archive://{session_id}/{len(self.heads):04d}"
        self.heads[ref] = json.loads(json.dumps(head_raw))
        self.metadata[ref] = json.loads(json.dumps(metadata))
        return ref

    def restore(self, ref: str) -> list[dict[str, Any]]:
        return self.heads[ref]


def write_jsonl(path: Path, messages: list[Any]) -> Path:
    """``messages`` as one JSON object per line."""
    path.write_text("".join(json.dumps(m, ensure_ascii=False) + "\n" for m in messages), "utf-8")
    return path


def read_jsonl(path: Path) -> list[Any]:
    """Every non-blank line of ``path`` parsed."""
    return [json.loads(line) for line in path.read_text("utf-8").splitlines() if line.strip()]


def conversation(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Messages other than system/developer ones."""
    return [m for m in messages if m.get("role") not in ("system", "developer")]


def sdk_errors(messages: list[dict[str, Any]], api: str) -> list[str]:
    """Messages the official SDK's request type rejects (``anthropic.types.MessageParam`` or
    ``openai.types.chat.ChatCompletionMessageParam``, validated with pydantic, lazy parts consumed)."""
    from pydantic import TypeAdapter, ValidationError

    if api == "anthropic":
        types = pytest.importorskip("anthropic.types")
        adapter = TypeAdapter(types.MessageParam)
    else:
        chat = pytest.importorskip("openai.types.chat")
        adapter = TypeAdapter(chat.ChatCompletionMessageParam)
    errors = []
    for index, message in enumerate(messages):
        try:
            value = adapter.validate_python(message)
            for key in ("content", "tool_calls"):  # iterables are validated lazily
                part = value.get(key)
                if part is not None and not isinstance(part, str):
                    list(part)
        except ValidationError as exc:
            errors.append(f"message {index}: {str(exc)[:300]}")
    return errors
