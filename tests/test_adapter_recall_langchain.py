"""The recall tools of DpCompactMiddleware, end to end in a LangChain agent, and the full history it keeps.

A ``GenericFakeChatModel`` reads twelve files (each ~4k tokens) in a 32k window, so the middleware
compacts; then it calls ``dp_recall`` for the first file, ``dp_restore`` with the key the search
returned, and answers. The restored text is the first file's content, which the compaction had
removed from the agent's messages.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("langchain.agents", reason="the langchain extra is not installed")

from langchain.agents import create_agent  # noqa: E402
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import tool  # noqa: E402

from dp_compact.adapters.langchain import METADATA_KEY, DpCompactMiddleware  # noqa: E402
from dp_compact.adapters.recall import Recall  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402

FILES = 12
WINDOW = 32_000
#: A thread id with dots (a model name in it): its archives are filed under the whole id.
THREAD = "recall-gemini-2.5-pro"


def file_text(path: str) -> str:
    """~16k characters whose first line names a marker only this file holds."""
    marker = path.replace("/", "_").replace(".", "_").upper()
    return f"MARKER {marker}\n" + "\n".join(f"{path}:{i}: def f_{i}(x): return x + {i}  # body line of the module" for i in range(200))


class ScriptedFake(GenericFakeChatModel):
    """``GenericFakeChatModel`` whose script may hold callables of the prompt (to answer with what a tool returned)."""

    model_name: str = "claude-sonnet-4"
    prompts: list[list[BaseMessage]] = []

    def bind_tools(self, tools: Any, **kwargs: Any) -> ScriptedFake:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.prompts.append(list(messages))
        step = next(self.messages)
        message = step(messages) if callable(step) else step
        return ChatResult(generations=[ChatGeneration(message=message)])


def call(name: str, args: dict[str, Any], n: int) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{n}"}])


def restore_from_search(messages: list[BaseMessage]) -> AIMessage:
    """Call dp_restore with the first archive key of the last dp_recall result."""
    found = [m for m in messages if isinstance(m, ToolMessage) and m.name == "dp_recall"][-1]
    ref = re.search(r"archive://\S+", str(found.content))
    assert ref, found.content
    return call("dp_restore", {"ref": ref.group(0)}, 101)


def script() -> Iterator[AIMessage | Callable[[list[BaseMessage]], AIMessage]]:
    for n in range(FILES):
        yield call("read_file", {"path": f"src/mod_{n}.py"}, n)
    yield call("dp_recall", {"query": "src/mod_0.py"}, 100)
    yield restore_from_search
    yield AIMessage("Done: mod_0 defines f_0 .. f_199.")


@tool
def read_file(path: str) -> str:
    """Read a source file."""
    return file_text(path)


@pytest.fixture(scope="module")
def agent_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[DpCompactMiddleware, ScriptedFake, dict[str, Any], ArchiveStore]:
    store = ArchiveStore(tmp_path_factory.mktemp("archive"))
    model = ScriptedFake(messages=script(), profile={"max_input_tokens": WINDOW}, prompts=[])
    middleware = DpCompactMiddleware(model, archive=store)
    agent = create_agent(model, tools=[read_file], middleware=[middleware])
    state = agent.invoke({"messages": [HumanMessage("Read the modules under src/ and explain mod_0.")]},
                         {"recursion_limit": 100, "configurable": {"thread_id": THREAD}})
    return middleware, model, state, store


def test_recall_tools_are_registered_with_the_agent(agent_run):
    middleware, _, _, _ = agent_run
    assert [t.name for t in middleware.tools] == ["dp_recall", "dp_restore"]
    assert DpCompactMiddleware("claude-sonnet-4", archive=None).tools == []
    assert DpCompactMiddleware("claude-sonnet-4", archive=agent_run[3], recall=None).tools == []


def test_recall_agent_compacts_then_restores_the_dropped_file(agent_run):
    middleware, model, state, _ = agent_run
    assert middleware.compactions, "the 32k window must force a compaction"
    first = middleware.compactions[0]
    marker = "MARKER SRC_MOD_0_PY"
    recall_prompt = model.prompts[FILES]  # the request that asked for dp_recall's result
    assert not any(marker in str(m.content) for m in recall_prompt if isinstance(m, ToolMessage))  # dropped from context
    history = middleware.history(THREAD)  # the state may have compacted the tool results away again
    recalled = [m for m in history if isinstance(m, ToolMessage) and m.name == "dp_recall"][-1]
    assert first.archive_ref in str(recalled.content)
    assert first.archive_ref.startswith(f"archive://{THREAD}/")  # the whole thread id, not cut at its last dot
    restored = [m for m in history if isinstance(m, ToolMessage) and m.name == "dp_restore"][-1]
    assert marker in str(restored.content) and "error" not in str(restored.content).split("\n", 1)[0]
    assert state["messages"][-1].content.startswith("Done")


def test_recall_history_keeps_every_original_message_in_order(agent_run):
    middleware, _, state, _ = agent_run
    history = middleware.history(THREAD)
    assert isinstance(history[0], HumanMessage) and history[0].content.startswith("Read the modules")
    reads = [m for m in history if isinstance(m, ToolMessage) and m.name == "read_file"]
    assert [m.tool_call_id for m in reads] == [f"call_{n}" for n in range(FILES)]
    assert all(METADATA_KEY not in m.additional_kwargs for m in history)  # no summary, no acknowledgement
    assert history[-1] is state["messages"][-1]  # the final answer, recorded after the run
    assert len(history) == 1 + 2 * (FILES + 2) + 1
    assert len(state["messages"]) < len(history)  # the state lost the head; the history did not
    assert middleware.history("another-thread") == []


def test_recall_scope_session_refuses_another_sessions_key(tmp_path):
    store = ArchiveStore(tmp_path)
    mine = store.write("mine", [{"role": "user", "content": "alpha src/a.py"}], {"summary": "a"})
    theirs = store.write("theirs", [{"role": "user", "content": "alpha src/b.py"}], {"summary": "b"})
    recall = Recall(store, lambda: "mine")
    assert mine in recall.search("alpha") and theirs not in recall.search("alpha")
    assert recall.restore(theirs).startswith("error:")
    assert "src/a.py" in recall.restore(mine)
    everything = Recall(store, lambda: "mine", scope="all")
    assert theirs in everything.search("alpha") and "src/b.py" in everything.restore(theirs)
    assert recall.restore("archive://mine/nope").startswith("error:")
    assert recall.search("zzzz") == "no archived messages match 'zzzz'"


def test_recall_restore_pages_large_heads(tmp_path):
    store = ArchiveStore(tmp_path)
    ref = store.write("s", [{"role": "tool", "tool_call_id": f"c{i}", "content": "x" * 3_000} for i in range(10)], {"summary": "s"})
    recall = Recall(store, lambda: "s")
    page = recall.restore(ref, max_chars=7_000)
    assert page.splitlines()[0] == f"{ref}: messages 0..1 of 10; next_offset=2"
    last = recall.restore(ref, offset=8, max_chars=7_000)
    assert last.splitlines()[0].endswith("no more messages") and len(last.splitlines()) == 3
    huge = store.write("s", [{"role": "tool", "tool_call_id": "c", "content": "y" * 500_000}], {"summary": "s"})
    assert len(recall.restore(huge)) < 5_000  # one message larger than a page comes back shortened
