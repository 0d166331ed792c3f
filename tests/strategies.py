"""Hypothesis strategies: conversations with tool loops, parallel calls, thinking and pending calls."""

from __future__ import annotations

from hypothesis import strategies as st

from dp_compact.conversation import Message, Session, ToolCall, ToolResult


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


@st.composite
def api_conversations(draw: st.DrawFn, api: str, max_turns: int = 5) -> list[dict]:
    """A valid request body in ``api``'s shape ("anthropic" or "openai"), as raw dicts.

    User turns (plain string or text blocks), tool loops with parallel calls, signed thinking
    blocks (Anthropic), long tool results (some over the 800-character shrink threshold), a
    final assistant answer per turn, optionally a pending call instead of the last answer, and
    (OpenAI) an optional system message first.
    """
    ids = iter(range(10**6))
    messages: list[dict] = []
    if api == "openai" and draw(st.booleans()):
        messages.append({"role": "system", "content": "You are a careful coding agent."})
    n_turns = draw(st.integers(1, max_turns))
    pending = draw(st.booleans())
    for turn in range(n_turns):
        text = f"turn {turn}: fix src/mod_{turn}.py " + "please " * draw(st.integers(0, 20))
        if draw(st.booleans()):
            text += " Never touch the production database."
        plain = api == "openai" or draw(st.booleans())
        messages.append({"role": "user", "content": text if plain else [{"type": "text", "text": text}]})
        for _ in range(draw(st.integers(0, 3))):
            calls = [f"call_{next(ids)}" for _ in range(draw(st.integers(1, 3)))]
            outputs = ["out " * draw(st.integers(0, 300)) + ("ERROR: failed" if draw(st.booleans()) else "") for _ in calls]
            messages += _round(api, calls, outputs, thinking=draw(st.booleans()), tag=next(ids))
        last = turn == n_turns - 1
        if last and pending:
            messages += _round(api, [f"call_{next(ids)}"], None, thinking=draw(st.booleans()), tag=next(ids))
        else:
            messages.append(_assistant(api, "done " * draw(st.integers(1, 20)), [], thinking=draw(st.booleans()), tag=next(ids)))
    return messages


def _assistant(api: str, text: str, calls: list[str], *, thinking: bool, tag: int) -> dict:
    """An assistant message with ``text`` and tool calls ``calls`` (signed thinking first if asked)."""
    if api == "openai":
        wire = [{"id": c, "type": "function", "function": {"name": "bash", "arguments": f'{{"command": "cat f{c}.txt"}}'}} for c in calls]
        return {"role": "assistant", "content": text or None, **({"tool_calls": wire} if wire else {})}
    blocks: list[dict] = [{"type": "thinking", "thinking": f"plan {tag}", "signature": f"sig-{tag}"}] if thinking else []
    blocks += [{"type": "text", "text": text}] if text.strip() else []
    blocks += [{"type": "tool_use", "id": c, "name": "bash", "input": {"command": f"cat f{c}.txt"}} for c in calls]
    return {"role": "assistant", "content": blocks}


def _round(api: str, calls: list[str], outputs: list[str] | None, *, thinking: bool, tag: int) -> list[dict]:
    """One API round: the assistant message with ``calls`` and their results (none when pending)."""
    messages = [_assistant(api, "running tools" if tag % 2 else "", calls, thinking=thinking, tag=tag)]
    if outputs is None:
        return messages
    if api == "openai":
        return messages + [{"role": "tool", "tool_call_id": c, "content": o} for c, o in zip(calls, outputs, strict=True)]
    results = [{"type": "tool_result", "tool_use_id": c, "content": o} for c, o in zip(calls, outputs, strict=True)]
    return messages + [{"role": "user", "content": results}]
