"""``dp-compact mcp`` started as a subprocess, driven by the MCP SDK's own stdio client."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import pytest

pytest.importorskip("mcp", reason="the mcp extra is not installed")

from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from dp_compact.api import plan_file  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.settings import load_settings  # noqa: E402
from tests.conftest import SESSIONS, need  # noqa: E402

HEAD = [{"role": "user", "content": "fix the crash in src/app.py parse_config"}, {"role": "assistant", "content": "Fixed parse_config."}]


def _structured(result):
    return getattr(result, "structured_content", None) or getattr(result, "structuredContent", None)


def _is_error(result):
    return getattr(result, "is_error", None) or getattr(result, "isError", False)


async def _session_calls(archive: Path, calls: list[tuple[str, dict]]) -> tuple[list[str], list]:
    env = {**os.environ, "DP_ARCHIVE_DIR": str(archive), "DP_MCP_ROOTS": os.pathsep.join([str(SESSIONS), str(archive)])}
    params = StdioServerParameters(command=sys.executable, args=["-m", "dp_compact.cli", "mcp"], env=env)
    async with stdio_client(params) as streams, ClientSession(streams[0], streams[1]) as session:
        await session.initialize()
        tools = sorted(t.name for t in (await session.list_tools()).tools)
        results = [await session.call_tool(name, arguments) for name, arguments in calls]
    return tools, results


def test_mcp_server_plans_recalls_and_restores(tmp_path):
    transcript = need(SESSIONS / "claude_code" / "cc_raze_hooks.jsonl")
    ref = ArchiveStore(tmp_path).write("run-7", HEAD, {"summary": "fixing parse_config", "file_paths": ["src/app.py"]})
    tools, (plan, recall, restore, bad) = asyncio.run(_session_calls(tmp_path, [
        ("plan", {"session_path": str(transcript)}),
        ("recall", {"query": "src/app.py"}),
        ("restore", {"ref": ref}),
        ("restore", {"ref": "archive://run-7/nope"}),
    ]))
    assert tools == ["plan", "recall", "restore"]
    planned = _structured(plan)
    expected = plan_file(transcript, load_settings(), lenient=True).to_dict()
    assert not _is_error(plan) and (planned["decision"], planned["k"], planned["N"]) == (expected["decision"], expected["k"], expected["N"])
    hits = _structured(recall)["result"]
    assert [h["ref"] for h in hits] == [ref] and hits[0]["session"] == "run-7"
    page = _structured(restore)
    assert page["messages"] == HEAD and page["next_offset"] is None and page["total"] == len(HEAD)
    assert _is_error(bad) and "no archive under archive://run-7/nope" in bad.content[0].text
