"""The recall toolset of DpCompactProcessor, end to end in a pydantic-ai Agent, and the full history it keeps.

A ``FunctionModel`` reads twelve files (each ~4k tokens) with a 32k window, so the processor
compacts; then it calls ``dp_recall`` for the first file, ``dp_restore`` with the key the search
returned, and answers with what it read.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest

pytest.importorskip("pydantic_ai", reason="the pydantic-ai extra is not installed")

from pydantic_ai import Agent  # noqa: E402
from pydantic_ai.messages import (  # noqa: E402
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel  # noqa: E402
from pydantic_ai.usage import UsageLimits  # noqa: E402

from dp_compact.adapters.pydantic_ai import METADATA_KEY, DpCompactProcessor  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402

FILES = 12
WINDOW = 32_000
MARKER = "MARKER SRC_MOD_0_PY"


def file_text(path: str) -> str:
    marker = path.replace("/", "_").replace(".", "_").upper()
    return f"MARKER {marker}\n" + "\n".join(f"{path}:{i}: def f_{i}(x): return x + {i}  # body line of the module" for i in range(200))


def _returns(messages: list[ModelMessage], tool: str) -> list[ToolReturnPart]:
    return [p for m in messages if isinstance(m, ModelRequest) for p in m.parts if isinstance(p, ToolReturnPart) and p.tool_name == tool]


def _agent(processor: DpCompactProcessor, seen: list[list[ModelMessage]], answers: list[str]) -> Agent:
    def respond(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append(list(messages))
        n = len(seen) - 1
        if n < FILES:
            return ModelResponse(parts=[ToolCallPart("read_file", {"path": f"src/mod_{n}.py"}, f"call_{n}")])
        if n == FILES:
            assert {"dp_recall", "dp_restore"} <= {t.name for t in info.function_tools}
            return ModelResponse(parts=[ToolCallPart("dp_recall", {"query": "src/mod_0.py"}, "call_recall")])
        if n == FILES + 1:
            ref = re.search(r"archive://\S+", str(_returns(messages, "dp_recall")[-1].content))
            return ModelResponse(parts=[ToolCallPart("dp_restore", {"ref": ref.group(0) if ref else "none"}, "call_restore")])
        answers.append(str(_returns(messages, "dp_restore")[-1].content))
        return ModelResponse(parts=[TextPart("Done.")])

    model = FunctionModel(respond, model_name="claude-sonnet-4")
    try:
        from pydantic_ai.capabilities import ProcessHistory, Toolset

        agent = Agent(model, system_prompt="You read code.", capabilities=[ProcessHistory(processor), Toolset(processor.recall_toolset())])
    except ImportError:  # pydantic-ai 1.x
        agent = Agent(model, system_prompt="You read code.", history_processors=[processor], toolsets=[processor.recall_toolset()])

    @agent.tool_plain
    def read_file(path: str) -> str:
        """Read a source file."""
        return file_text(path)

    return agent


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DpCompactProcessor, list[list[ModelMessage]], list[str], Any]:
    processor = DpCompactProcessor(session_id="pai-recall", archive=ArchiveStore(tmp_path_factory.mktemp("archive")),
                                   max_context_tokens=WINDOW, v=1_000)
    seen: list[list[ModelMessage]] = []
    answers: list[str] = []
    result = asyncio.run(_agent(processor, seen, answers).run("Read the modules under src/ and explain mod_0.",
                                                              usage_limits=UsageLimits(request_limit=None)))
    return processor, seen, answers, result


def test_pydantic_ai_recall_restores_what_compaction_dropped(run):
    processor, seen, answers, result = run
    assert processor.compactions and result.output == "Done."
    assert not any(MARKER in str(p.content) for p in _returns(seen[FILES], "read_file"))  # gone from the context
    recalled = str(_returns(processor.history(), "dp_recall")[-1].content)
    assert processor.compactions[0].archive_ref in recalled
    assert answers and MARKER in answers[0] and not answers[0].startswith("error")


def test_pydantic_ai_history_is_the_full_record(run):
    processor, _, _, result = run
    history = processor.history(result.all_messages())
    first = history[0]
    assert isinstance(first, ModelRequest) and any(isinstance(p, UserPromptPart) and p.content.startswith("Read the modules") for p in first.parts)
    assert [p.tool_call_id for p in _returns(history, "read_file")] == [f"call_{n}" for n in range(FILES)]
    assert not any((getattr(m, "metadata", None) or {}).get(METADATA_KEY) for m in history)  # no summary request
    assert history[-1] is result.all_messages()[-1] and isinstance(history[-1], ModelResponse)
    assert len(result.all_messages()) < len(history)  # all_messages() is the compacted history
    assert len(processor.history()) == len(history) - 1  # without latest: all but the final answer


def test_pydantic_ai_conversation_keeps_the_full_history_too(run):
    """pydantic-ai 2: ``result.conversation.messages`` holds what a history processor dropped (its documented contract)."""
    _, _, _, result = run
    conversation = getattr(result, "conversation", None)
    if conversation is None:
        pytest.skip("pydantic-ai 1.x has no AgentRunResult.conversation")
    reads = [p.tool_call_id for p in _returns(list(conversation.messages), "read_file")]
    assert reads == [f"call_{n}" for n in range(FILES)]


def test_pydantic_ai_recall_toolset_needs_an_archive():
    with pytest.raises(ValueError, match="no recall tools"):
        DpCompactProcessor(archive=None).recall_toolset()
