"""A summary carries the whole past forward (DESIGN §9 "Retention"): after five compactions of a
real transcript, every request the person typed and every file the agent changed is still in
the context, and the summary stays within its size bound."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from dp_compact.conversation import Message, ToolCall
from dp_compact.errors import DpCompactError
from dp_compact.measure.tokens import count_text_tokens
from dp_compact.pipeline.compact import compact_file
from dp_compact.pipeline.shrink import shrink_messages
from dp_compact.pipeline.summarize import ExtractiveSummarizer, SummaryRequest, carried_forward, condensed, with_instructions
from dp_compact.pipeline.texts import parse_sections
from dp_compact.settings import load_settings
from tests.conftest import SESSIONS, need

EDIT_TOOLS = ("Edit", "Write", "MultiEdit", "NotebookEdit")


def _flat(text: str) -> str:
    return " ".join(text.split())


def _typed_requests_and_changed_files(path: Path) -> tuple[list[str], set[str]]:
    """From the source records themselves (not through dp_compact's readers): the first 40 characters
    of each typed request, and each file an edit tool or a patch changed."""
    requests: list[str] = []
    files: set[str] = set()
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if not isinstance(record, dict):
            continue
        message = record.get("message") if isinstance(record.get("message"), dict) else {}
        if record.get("type") == "user" and not record.get("isSidechain") and not record.get("isMeta"):
            content = message.get("content")
            texts = [content] if isinstance(content, str) else [b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text"]
            for text in texts:
                text = _flat(text)
                if len(text) >= 15 and not text.startswith(("<", "[Request interrupted", "Caveat:", "This session is being continued")):
                    requests.append(text[:40])
        if record.get("type") == "assistant":
            for block in message.get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_use" and block.get("name") in EDIT_TOOLS:
                    arguments = block.get("input") or {}
                    if path_ := arguments.get("file_path") or arguments.get("notebook_path"):
                        files.add(path_)
        payload = record.get("payload") if record.get("type") in ("response_item", "event_msg") else None
        if isinstance(payload, dict):
            if payload.get("type") == "user_message" and isinstance(payload.get("message"), str):
                text = _flat(payload["message"])
                if len(text) >= 15 and not text.startswith("<"):
                    requests.append(text[:40])
            for found in re.finditer(r"\*\*\* (?:Update|Add) File: ([^\\\n\"]+)", json.dumps(payload)):
                files.add(found.group(1).strip())
    return list(dict.fromkeys(requests)), files


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for v in value.values() for s in _strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in _strings(v)]
    return []


def _retained(text: str, path: str) -> bool:
    parts = [p for p in re.split(r"[\\/]+", path) if p]
    return path in text or "/".join(parts[-2:]) in text.replace("\\", "/")


RETENTION_FILES = [f"claude_code/{n}" for n in ("cc_fundwise.jsonl", "cc_posthog_dashboard_compact.jsonl", "cc_privacy_x402.jsonl",
                                                 "cc_task43_develop.jsonl")] + [
    f"codex/{n}" for n in ("codex_meridianops_windows.jsonl", "codex_pharma_2compactions.jsonl", "codex_raze.jsonl")]


@pytest.mark.slow
@pytest.mark.parametrize("name", RETENTION_FILES)
def test_five_compactions_keep_every_request_and_changed_file(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = need(SESSIONS / name)
    monkeypatch.setenv("DP_ARCHIVE_DIR", str(tmp_path / "archive"))
    requests, files = _typed_requests_and_changed_files(source)
    settings = load_settings()
    current = source
    for round_ in range(5):
        output = tmp_path / f"out{round_}.jsonl"
        try:
            compact_file(current, settings, output=output, keep=4)
        except DpCompactError as exc:
            if round_ and "no feasible cut" in str(exc):
                break  # nothing left to drop
            raise
        current = output
    text = _flat(" ".join(_strings([json.loads(line) for line in current.read_text().splitlines() if line.strip()])))
    assert [r for r in requests if _flat(r) not in text] == []
    assert sorted(p for p in files if not _retained(text, p)) == []


def _request(head: list[Message], previous: str | None = None, limit: int = 1000) -> SummaryRequest:
    return SummaryRequest(head=tuple(head), shrunk_head=shrink_messages(head), previous_summary=previous,
                          target_tokens=limit // 2, max_tokens=limit)


def _edit(i: int) -> Message:
    return Message("assistant", tool_calls=(ToolCall(f"c{i}", "Edit", json.dumps({"file_path": f"/repo/pkg_{i}/module_{i}.py"})),))


def test_older_summaries_are_condensed_into_the_new_one_never_dropped() -> None:
    first = [Message("user", "First request: build the parser for the config files"), _edit(1)]
    summary = ExtractiveSummarizer()(_request(first))
    second = [Message("user", "[summary]\n" + summary), Message("user", "Second request: add tests for the parser"), _edit(2)]
    carried = carried_forward(_request(second, previous=summary))
    assert [r[:14] for r in carried["requests"]] == ["First request:", "Second request"]
    assert carried["changed"] == ["/repo/pkg_1/module_1.py", "/repo/pkg_2/module_2.py"]
    again = ExtractiveSummarizer()(_request(second, previous=summary))
    assert "First request: build the parser" in again and "module_1.py" in again


@pytest.mark.parametrize("limit", [120, 300, 2000])
def test_the_carried_sections_fit_their_budget_keeping_the_first_request(limit: int) -> None:
    carried = {"requests": [f"Request number {i}: please refactor the module called component_{i} now" for i in range(60)],
               "changed": [f"/home/user/project/src/pkg_{i}/file_{i}.py" for i in range(120)]}
    form = condensed(carried, limit)
    body = "\n".join(f"- {x}" for key in ("requests", "changed") for x in form[key])
    assert int(count_text_tokens([body])[0]) <= limit + 40  # headings apart
    assert form["requests"][0].startswith("Request number 0:")
    if limit >= 2000:  # room for every item in a shorter form
        assert len([r for r in form["requests"] if r.startswith("Request")]) == 60


def test_an_llm_summary_lacking_requests_gets_them_appended_within_the_bound() -> None:
    head = [Message("user", "Please migrate the billing service to the new queue"), _edit(7)]
    request = _request(head, limit=400)
    out = with_instructions("Goal: migration. Done so far: nothing.", (), request)
    sections = parse_sections(out)
    assert sections["requests"][0].startswith("Please migrate the billing")
    assert any("module_7.py" in item for item in sections["changed"])
    assert int(count_text_tokens([out])[0]) <= 400
