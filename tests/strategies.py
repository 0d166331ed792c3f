"""Hypothesis strategies: conversations with tool loops, parallel calls, thinking and pending calls."""

from __future__ import annotations

from hypothesis import strategies as st

from dp_compact.sessions.model import Message, Session, ToolCall, ToolResult


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 6, anthropic_shape: bool | None = None) -> list[Message]:
    """A well-formed conversation: user turns, each followed by rounds of (parallel) tool calls.

    Anthropic shape puts all results of one assistant message into one tool message; OpenAI
    shape gives each result its own message. The last round may leave its calls pending.
    """
    shape = draw(st.booleans()) if anthropic_shape is None else anthropic_shape
    messages: list[Message] = []
    ids = iter(range(10**6))
    for _ in range(draw(st.integers(1, max_turns))):
        plain = draw(st.booleans())
        messages.append(Message("user", "do " * draw(st.integers(1, 30)), raw={"role": "user", "content": "x" if plain else []}))
        for _ in range(draw(st.integers(0, 4))):
            calls = tuple(ToolCall(f"call_{next(ids)}", "bash", "{}") for _ in range(draw(st.integers(1, 3))))
            signed = draw(st.booleans())
            messages.append(Message("assistant", "ok", tool_calls=calls, thinking="hmm" if signed else "", signed_thinking=signed))
            results = [ToolResult(c.id, "out " * draw(st.integers(0, 50))) for c in calls]
            if shape:
                messages.append(Message("tool", tool_results=tuple(results)))
            else:
                messages.extend(Message("tool", tool_results=(r,)) for r in results)
        if draw(st.booleans()):
            messages.append(Message("assistant", "done " * draw(st.integers(1, 20))))
    if draw(st.booleans()):  # a pending tool call at the end
        messages.append(Message("assistant", "", tool_calls=(ToolCall(f"call_{next(ids)}", "bash", "{}"),)))
    return messages


def session_of(messages: list[Message]) -> Session:
    """A Session around ``messages`` (no usage records)."""
    return Session(
        path="<memory>", format="anthropic", messages=tuple(messages),
        user_turns=sum(m.role == "user" for m in messages), llm_calls=sum(m.role == "assistant" for m in messages),
    )
