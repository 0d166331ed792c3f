"""A/B: a recorded agent replayed through LangChain under dp-compact and under SummarizationMiddleware.

A scripted chat model replays the assistant messages of a recorded transcript (its text and tool
calls, in order) and a replay middleware answers each tool call with the recorded tool output, so
every policy does the same work; only what each request carries changes. Each user turn of the
transcript is one ``agent.invoke`` on the state the previous one left.

Policies: ``DpCompactMiddleware`` with its defaults (extractive summary, the planner decides);
``SummarizationMiddleware`` with its defaults (no trigger: it never summarizes) and with
``trigger=("fraction", 0.8)`` (its documented example; keep 20 messages, trim 4,000 tokens), its
summary written by a fake model answering ``--summary-tokens`` tokens. The model's window is
``--window`` tokens (its profile), small so that compaction happens.

Columns: model calls; compactions; summary model calls (SummarizationMiddleware skips the call and
writes "Previous conversation was too long to summarize" when its 4,000-token trim keeps nothing);
verbatim tokens kept per compaction (median) and the summary's tokens (median); the largest
request, tokens, and requests over the window; dollars of the agent's calls (dp_compact's prices of
``--model``; the longest message prefix a call shares with the previous one read from the cache,
the rest written, output at P_out: DESIGN §6 "Cache"), of the summary calls (prompt at P_input,
output at P_out; dp's extractive summary costs nothing), and total; later uses of dropped content:
pairs (earlier message m, later assistant message a) of the strict detector
(``find_uses(..., detector="strict")`` on the full replayed conversation) where m was not in the
request that produced a, and the number of distinct such m.

    python bench/bench_ab.py [--window 32000] [--model claude-sonnet-4] [SESSION ...]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from langchain.agents import create_agent  # noqa: E402
from langchain.agents.middleware import AgentMiddleware, SummarizationMiddleware  # noqa: E402
from langchain_core.language_models import BaseChatModel  # noqa: E402
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage  # noqa: E402
from langchain_core.outputs import ChatGeneration, ChatResult  # noqa: E402
from langchain_core.tools import StructuredTool  # noqa: E402
from timing import SHARED_SESSIONS, machine_line  # noqa: E402

from dp_compact.adapters.langchain import DpCompactMiddleware, to_openai  # noqa: E402
from dp_compact.adapters.live import live_session  # noqa: E402
from dp_compact.measure.reuse import find_uses  # noqa: E402
from dp_compact.measure.tokens import count_text_tokens  # noqa: E402
from dp_compact.pipeline.archive import ArchiveStore  # noqa: E402
from dp_compact.pricing import get_prices  # noqa: E402
from dp_compact.sessions import read_session  # noqa: E402

#: Transcripts with many tool calls (Claude Code: 83 calls; Codex: 126 calls over ~600k characters).
DEFAULT_SESSIONS = ("claude_code/cc_fundwise.jsonl", "codex/codex_meridianops_windows.jsonl")
#: Tokens the provider counts beside the messages (system prompt, tool schemas), the same for every policy.
PREFIX_TOKENS = 3_000
END_OF_TURN = "(end of turn)"


# --- the recorded agent ------------------------------------------------------------------------

def script_of(path: Path) -> list[tuple[str, list[AIMessage]]]:
    """The transcript as user turns: (user text, the assistant messages that answered it, in order).

    Consecutive assistant messages are merged into one (text joined, tool calls in order); a turn
    whose last message calls tools gets a closing message without calls, so the loop ends there.
    """
    session = read_session(path, lenient=True)
    turns: list[tuple[str, list[AIMessage]]] = []
    pending: dict[str, Any] | None = None
    for message in session.messages:
        if message.role == "user":
            if pending is not None:
                turns[-1][1].append(_ai(pending))
                pending = None
            if turns and not turns[-1][1]:  # two user messages in a row: one turn
                turns[-1] = (turns[-1][0] + "\n\n" + message.text, [])
            else:
                turns.append((message.text or "(empty)", []))
        elif message.role == "assistant" and turns:
            if pending is not None and pending["calls"]:
                turns[-1][1].append(_ai(pending))
                pending = None
            pending = pending or {"text": [], "calls": []}
            if message.text:
                pending["text"].append(message.text)
            pending["calls"].extend(message.tool_calls)
    if pending is not None:
        turns[-1][1].append(_ai(pending))
    for _, steps in turns:
        if not steps or steps[-1].tool_calls:
            steps.append(AIMessage(END_OF_TURN))
    return [t for t in turns if t[1]]


def _ai(pending: dict[str, Any]) -> AIMessage:
    calls = []
    for call in pending["calls"]:
        try:
            args = json.loads(call.arguments) if call.arguments else {}
        except ValueError:
            args = {"input": call.arguments}
        calls.append({"name": _tool_name(call.name), "args": args if isinstance(args, dict) else {"input": args}, "id": call.id})
    return AIMessage("\n".join(pending["text"]), tool_calls=calls)


def _tool_name(name: str) -> str:
    return "".join(c if c.isalnum() or c in "_-" else "_" for c in name)[:64] or "tool"


def recorded_outputs(path: Path) -> dict[str, str]:
    """Each tool call id's recorded output text."""
    return {r.call_id: r.text for m in read_session(path, lenient=True).messages for r in m.tool_results}


class Tokens:
    """cl100k_base tokens of a LangChain message (its chat-completions JSON), counted once per object."""

    def __init__(self) -> None:
        self._counts: dict[int, tuple[BaseMessage, int]] = {}

    def __call__(self, messages: list[BaseMessage]) -> int:
        missing = [m for m in messages if id(m) not in self._counts]
        if missing:
            texts = [json.dumps(to_openai(m), ensure_ascii=False) for m in missing]
            for message, count in zip(missing, count_text_tokens(texts), strict=True):
                self._counts[id(message)] = (message, int(count))
        return sum(self._counts[id(m)][1] for m in messages)


class ReplayModel(BaseChatModel):
    """Answers each call with the next recorded assistant message; reports usage as a provider would."""

    model_name: str = "claude-sonnet-4"
    steps: Any = None  # iterator of AIMessage
    prompts: list[list[BaseMessage]] = []
    tokens: Any = None

    @property
    def _llm_type(self) -> str:
        return "replay"

    def bind_tools(self, tools: Any, **kwargs: Any) -> ReplayModel:
        return self

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        step: AIMessage = next(self.steps)
        self.prompts.append(list(messages))
        prompt = PREFIX_TOKENS + self.tokens(messages)
        out = self.tokens([step])
        message = AIMessage(step.content, tool_calls=step.tool_calls, id=f"step-{len(self.prompts) - 1}",
                            usage_metadata={"input_tokens": prompt, "output_tokens": out, "total_tokens": prompt + out})
        return ChatResult(generations=[ChatGeneration(message=message)])


class FakeSummaryModel(BaseChatModel):
    """SummarizationMiddleware's summary model: records each prompt's tokens, answers ``size`` tokens."""

    size: int = 800
    prompts: list[int] = []
    tokens: Any = None

    @property
    def _llm_type(self) -> str:
        return "fake-summary"

    def _generate(self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any) -> ChatResult:
        self.prompts.append(self.tokens(messages))
        return ChatResult(generations=[ChatGeneration(message=AIMessage("summary " * self.size))])


class Replay(AgentMiddleware):
    """Answers every tool call with its recorded output (tools never run) and records every message."""

    def __init__(self, outputs: dict[str, str]) -> None:
        super().__init__()
        self.outputs = outputs
        self.history: list[BaseMessage] = []
        self._seen: set[str] = set()

    def record(self, messages: list[BaseMessage]) -> None:
        for message in messages:
            if message.id not in self._seen and not message.additional_kwargs.get("dp_compact") and message.id:
                if isinstance(message, HumanMessage) and message.additional_kwargs.get("lc_source") == "summarization":
                    continue
                self._seen.add(message.id)
                self.history.append(message)

    def before_model(self, state: Any, runtime: Any) -> None:
        self.record(state["messages"])

    def after_agent(self, state: Any, runtime: Any) -> None:
        self.record(state["messages"])

    def wrap_tool_call(self, request: Any, handler: Any) -> ToolMessage:
        call = request.tool_call
        return ToolMessage(self.outputs.get(call["id"], "(no recorded output)"), tool_call_id=call["id"], name=call["name"])


def run_policy(path: Path, policy: str, window: int, summary_tokens: int, model_name: str) -> dict[str, Any]:
    """Replay ``path`` under ``policy``; the model's prompts, the full history and the middleware."""
    turns = script_of(path)
    tokens = Tokens()
    steps: Iterator[AIMessage] = (step for _, answer in turns for step in answer)
    model = ReplayModel(model_name=model_name, steps=steps, prompts=[], tokens=tokens, profile={"max_input_tokens": window})
    replay = Replay(recorded_outputs(path))
    summarizer = FakeSummaryModel(size=summary_tokens, prompts=[], tokens=tokens)
    archive_root = tempfile.TemporaryDirectory(prefix="bench-ab-")  # removed when the run is measured
    if policy == "dp":
        compactor: Any = DpCompactMiddleware(model, archive=ArchiveStore(archive_root.name), recall=None, keep_history=False)
    elif policy == "sm-defaults":
        compactor = SummarizationMiddleware(model, summarizer=summarizer)
    else:
        compactor = SummarizationMiddleware(model, trigger=("fraction", 0.8), summarizer=summarizer)
    names = sorted({c["name"] for _, answer in turns for step in answer for c in step.tool_calls})
    tools = [StructuredTool.from_function(lambda **kw: "", name=n, description="recorded tool",
                                          args_schema={"type": "object", "properties": {}, "additionalProperties": True}) for n in names]
    agent = create_agent(model, tools=tools, middleware=[replay, compactor])
    messages: list[BaseMessage] = []
    for user, answer in turns:
        state = agent.invoke({"messages": [*messages, HumanMessage(user)]},
                             {"recursion_limit": 4 * len(answer) + 20, "configurable": {"thread_id": f"ab-{policy}"}})
        messages = state["messages"]
    archive_root.cleanup()
    return {"model": model, "replay": replay, "summarizer": summarizer, "compactor": compactor, "tokens": tokens}


# --- measures ----------------------------------------------------------------------------------

def measure(run: dict[str, Any], window: int, model_name: str) -> dict[str, Any]:
    """The table's columns for one replay."""
    prices = get_prices(model_name)
    model, history, tokens = run["model"], run["replay"].history, run["tokens"]
    index = {m.id: n for n, m in enumerate(history)}
    usd_calls, previous, compactions, kept, summaries, peak, over = 0.0, [], 0, [], [], 0, 0
    present: list[set[int]] = []
    for prompt in model.prompts:
        ids = {index[m.id] for m in prompt if m.id in index}
        if present and present[-1] - ids:
            compactions += 1
            kept.append(tokens([m for m in prompt if m.id in index]))
            summaries.append(tokens([m for m in prompt if m.id not in index]))
        present.append(ids)
        shared = 0
        while shared < min(len(prompt), len(previous)) and prompt[shared].id == previous[shared].id and prompt[shared].id:
            shared += 1
        total = PREFIX_TOKENS + tokens(prompt)
        cached = PREFIX_TOKENS + tokens(prompt[:shared]) if previous else 0
        usd_calls += (cached * prices.p_cache + (total - cached) * prices.p_write) / 1e6
        peak, over, previous = max(peak, total), over + (total > window), prompt
    usd_calls += sum(tokens([m]) for m in history if isinstance(m, AIMessage)) * prices.p_out / 1e6
    summarizer = run["summarizer"]
    usd_summary = sum(p * prices.p_input + summarizer.size * prices.p_out for p in summarizer.prompts) / 1e6
    # later uses of dropped content: strict detector on the full conversation as replayed
    raws = [to_openai(m) for m in history]
    session = live_session(raws, [None] * len(raws), session_id="ab")
    uses = find_uses(session.messages, detector="strict")
    position = {id(raw): n for n, raw in enumerate(raws)}
    to_history = [position.get(id(m.raw), -1) for m in session.messages]
    produced_by = {index[f"step-{j}"]: j for j in range(len(model.prompts)) if f"step-{j}" in index}
    lost_pairs, lost_messages = 0, set()
    for used, at in zip(uses.message.tolist(), uses.at.tolist(), strict=True):
        h_used, h_at = to_history[used], to_history[at]
        j = produced_by.get(h_at)
        if j is not None and h_used >= 0 and h_used not in present[j]:
            lost_pairs += 1
            lost_messages.add(h_used)
    return {
        "calls": len(model.prompts), "compactions": compactions, "kept": statistics.median(kept) if kept else 0,
        "summary": statistics.median(summaries) if summaries else 0, "peak": peak, "over": over,
        "usd_calls": usd_calls, "usd_summary": usd_summary, "summary_calls": len(summarizer.prompts), "uses": len(uses), "lost_pairs": lost_pairs, "lost_messages": len(lost_messages),
    }


POLICIES = (("dp", "dp-compact middleware"), ("sm-defaults", "Summarization defaults"), ("sm-0.8", "Summarization 0.8·window"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", nargs="*", type=Path)
    parser.add_argument("--window", type=int, default=32_000)
    parser.add_argument("--model", default="claude-sonnet-4")
    parser.add_argument("--summary-tokens", type=int, default=800)
    args = parser.parse_args()
    paths = args.sessions or [SHARED_SESSIONS / s for s in DEFAULT_SESSIONS]
    print(machine_line())
    print(f"# window {args.window:,} tokens · {args.model} prices · prefix {PREFIX_TOKENS:,} tokens · "
          f"fake summary {args.summary_tokens} tokens · strict detector")
    header = ("session", "policy", "calls", "compactions", "summary calls", "kept/compaction", "summary", "peak", "over window",
              "$ calls", "$ summaries", "$ total", "lost uses", "lost msgs")
    rows = []
    for path in paths:
        for policy, label in POLICIES:
            m = measure(run_policy(path, policy, args.window, args.summary_tokens, args.model), args.window, args.model)
            rows.append((path.stem, label, m["calls"], m["compactions"], m["summary_calls"], f"{m['kept']:,.0f}", f"{m['summary']:,.0f}", f"{m['peak']:,}",
                         m["over"], f"{m['usd_calls']:.4f}", f"{m['usd_summary']:.4f}", f"{m['usd_calls'] + m['usd_summary']:.4f}",
                         f"{m['lost_pairs']}/{m['uses']}", m["lost_messages"]))
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    for row in [header, *rows]:
        print("  ".join(str(v).ljust(w) if i < 2 else str(v).rjust(w) for i, (v, w) in enumerate(zip(row, widths, strict=True))))


if __name__ == "__main__":
    main()
