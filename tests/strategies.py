"""Hypothesis strategies: conversations with tool loops, parallel calls, thinking and pending calls."""

from __future__ import annotations

from hypothesis import strategies as st

from dp_compact.conversation import Message, Session, ToolCall, ToolResult

#: A person's message typed while a tool runs, or the marker a client writes when a call is interrupted.
_INTERJECTIONS = (
    ("prompt", "also check ci.yml"),
    ("injected", "[Request interrupted by user for tool use]"),
)


def _user(text: str, *, plain: bool, kind: str | None = None) -> Message:
    return Message("user", text, raw={"role": "user", "content": text if plain else [{"type": "text", "text": text}]}, kind=kind)


def _interjection(draw: st.DrawFn) -> Message:
    """A message that arrives while a call is open: assistant text, a user turn or an injected user message."""
    who = draw(st.sampled_from(["assistant", "prompt", "injected"]))
    if who == "assistant":
        return Message("assistant", "still running, one moment " * draw(st.integers(1, 5)))
    kind, text = _INTERJECTIONS[who == "injected"]
    return _user(text, plain=draw(st.booleans()), kind=kind)


@st.composite
def conversations(draw: st.DrawFn, max_turns: int = 6, anthropic_shape: bool | None = None) -> list[Message]:
    """A conversation: user turns, each followed by rounds of (parallel) tool calls.

    Anthropic shape puts all results of one assistant message into one tool message; OpenAI
    shape gives each result its own message. Besides the well-formed rounds, a round may be:

    - *interleaved*: a message (assistant text, a user turn or an injected user message) arrives
      between the calls and their results (OpenAI shape: anywhere before the last result);
    - *interrupted*: some or all of its calls are never answered and a user turn follows (the
      person stopped the tool), after which the turn goes on.

    The last round may leave its calls pending.
    """
    shape = draw(st.booleans()) if anthropic_shape is None else anthropic_shape
    messages: list[Message] = []
    ids = iter(range(10**6))
    for _ in range(draw(st.integers(1, max_turns))):
        messages.append(_user("do " * draw(st.integers(1, 30)), plain=draw(st.booleans())))
        for _ in range(draw(st.integers(0, 4))):
            calls = tuple(ToolCall(f"call_{next(ids)}", "bash", "{}") for _ in range(draw(st.integers(1, 3))))
            signed = draw(st.booleans())
            messages.append(Message("assistant", "ok", tool_calls=calls, thinking="hmm" if signed else "", signed_thinking=signed))
            fate = draw(st.sampled_from(["answered", "interleaved", "interrupted"]))
            answered = list(calls)
            if fate == "interrupted":  # the first calls are answered, the rest never are
                answered = answered[: draw(st.integers(0, len(calls) - 1))]
            results = [ToolResult(c.id, "out " * draw(st.integers(0, 50))) for c in answered]
            replies = ([Message("tool", tool_results=tuple(results))] if results else []) if shape else [
                Message("tool", tool_results=(r,)) for r in results]
            if fate == "interleaved":
                replies.insert(draw(st.integers(0, len(replies) - 1)), _interjection(draw))
            messages.extend(replies)
            if fate == "interrupted":  # the client's marker (sometimes), then the person's turn
                if draw(st.booleans()):
                    messages.append(_user(_INTERJECTIONS[1][1], plain=draw(st.booleans()), kind="injected"))
                messages.append(_user("stop, read ci.yml instead", plain=draw(st.booleans())))
        if draw(st.booleans()):
            messages.append(Message("assistant", "done " * draw(st.integers(1, 20))))
    if draw(st.booleans()):  # a pending tool call at the end
        messages.append(Message("assistant", "", tool_calls=(ToolCall(f"call_{next(ids)}", "bash", "{}"),)))
    return messages


def session_of(messages: list[Message]) -> Session:
    """A Session around ``messages`` (no usage records)."""
    return Session(
        path="<memory>", format="anthropic", messages=tuple(messages),
        user_turns=sum(m.is_user_turn for m in messages), llm_calls=sum(m.role == "assistant" for m in messages),
    )


@st.composite
def api_conversations(draw: st.DrawFn, api: str, max_turns: int = 5, irregular: bool = False) -> list[dict]:
    """A valid request body in ``api``'s shape ("anthropic" or "openai"), as raw dicts.

    User turns (plain string or text blocks), tool loops with parallel calls, signed thinking
    blocks (Anthropic), long tool results (some over the 800-character shrink threshold), a
    final assistant answer per turn, optionally a pending call instead of the last answer, and
    (OpenAI) an optional system message first.

    ``irregular``: also rounds that no API accepts as they are but transcripts hold (the
    pipeline must repair them): a message (assistant text or a user message) between the calls
    and their results, and calls never answered followed by a user message (the person stopped
    the tool), after which the turn goes on.
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
            fate = draw(st.sampled_from(["answered", "interleaved", "interrupted"])) if irregular else "answered"
            if fate == "interrupted":  # the first calls are answered, the rest never are
                outputs = outputs[: draw(st.integers(0, len(calls) - 1))]
            round_ = _round(api, calls, outputs, thinking=draw(st.booleans()), tag=next(ids))
            if fate == "interleaved":  # after the calls, before the last result
                between = ({"role": "user", "content": "also check ci.yml"} if draw(st.booleans())
                           else _assistant(api, "still running, one moment", [], thinking=False, tag=next(ids)))
                round_.insert(draw(st.integers(1, len(round_) - 1)), between)
            messages += round_
            if fate == "interrupted":
                messages.append({"role": "user", "content": "stop, read ci.yml instead"})
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
    """One API round: the assistant message with ``calls`` and the results ``outputs`` of its first calls
    (all of them in a well-formed round; none when pending)."""
    messages = [_assistant(api, "running tools" if tag % 2 else "", calls, thinking=thinking, tag=tag)]
    if outputs is None:
        return messages
    if api == "openai":
        return messages + [{"role": "tool", "tool_call_id": c, "content": o} for c, o in zip(calls, outputs, strict=False)]
    results = [{"type": "tool_result", "tool_use_id": c, "content": o} for c, o in zip(calls, outputs, strict=False)]
    return messages + ([{"role": "user", "content": results}] if results else [])
