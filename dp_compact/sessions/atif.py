"""Harbor ATIF trajectories (Agent Trajectory Interchange Format, DESIGN §4, FORMATS.md (e)).

One document ``{schema_version: "ATIF-v1.x", session_id, agent, steps: [...]}``. A step's
``source`` is ``system`` (the prefix, ``system_text``), ``user`` or ``agent``.

- Structured variant: an agent step with ``tool_calls`` and an ``observation`` becomes an
  assistant message with those calls followed by ONE tool message holding the step's
  observation results (linked by ``source_call_id``; a result without one answers a synthetic
  call ``obs-<step>-<n>`` added to the step). ``metrics.prompt_tokens`` (cached included) is
  the call's prompt: one usage record per agent step that has it.
- Text-action variant (no ``tool_calls``/``observation`` anywhere, e.g. Terminus): commands are
  JSON inside the agent text and terminal output comes back as the next user step. Every user
  step after the first that follows an agent step is that step's observation: a tool message
  answering a synthetic call ``obs-<step>`` of the agent message, so long runs are cuttable
  between rounds.

``raw`` is an Anthropic-shaped message (synthetic calls never appear in it).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from dp_compact.sessions.common import build_session, dumps, is_summary_text, relink, text_and_images
from dp_compact.conversation import Message, Session, ToolCall, ToolResult, Usage, new_message
from dp_compact.sessions.source import Source, each_record
from dp_compact.sessions.usage import token_count

__all__ = ["DESCRIPTION", "FORMAT", "read", "sniff"]

FORMAT = "atif"
DESCRIPTION = "Harbor ATIF trajectory {schema_version: ATIF-v1.x, steps[source user|agent|system]}"


def sniff(source: Source) -> bool:
    """True for a document with an ``ATIF-...`` schema version and a ``steps`` list."""
    document = source.document
    return (
        isinstance(document, dict)
        and isinstance(document.get("schema_version"), str)
        and document["schema_version"].upper().startswith("ATIF")
        and isinstance(document.get("steps"), list)
    )


def _usage(metrics: Any) -> list[Usage]:
    """One usage record from a step's ``metrics`` (prompt includes cached tokens).

    Raises ValueError for a count that is not a non-negative whole number.
    """
    if not isinstance(metrics, dict) or not token_count(metrics.get("prompt_tokens"), "prompt_tokens"):
        return []
    extra = metrics.get("extra") if isinstance(metrics.get("extra"), dict) else {}
    return [
        Usage(
            token_count(metrics["prompt_tokens"], "prompt_tokens"),
            cache_read_tokens=token_count(metrics.get("cached_tokens"), "cached_tokens"),
            cache_write_tokens=token_count(extra.get("cache_creation_input_tokens"), "extra.cache_creation_input_tokens"),
            output_tokens=token_count(metrics.get("completion_tokens"), "completion_tokens"),
            convention="openai",
        )
    ]


def _calls(step: dict[str, Any]) -> list[ToolCall]:
    """The structured tool calls of an agent step."""
    specs = step.get("tool_calls") or []
    if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
        raise ValueError("tool_calls must be a list of objects")
    return [ToolCall(str(s.get("tool_call_id", "")), str(s.get("function_name", "")), dumps(s.get("arguments", {}))) for s in specs]


def _observation(step: dict[str, Any], calls: list[ToolCall], step_id: str) -> tuple[list[ToolCall], list[ToolResult], int]:
    """Synthetic calls for unlinked results, the results, and their image count."""
    observation = step.get("observation")
    results_spec = observation.get("results") if isinstance(observation, dict) else None
    if not isinstance(results_spec, list):
        return [], [], 0
    known = {c.id for c in calls}
    extra_calls: list[ToolCall] = []
    results: list[ToolResult] = []
    images = 0
    for n, spec in enumerate(r for r in results_spec if isinstance(r, dict)):
        content = spec.get("content")
        if content is None and spec.get("subagent_trajectory_ref") is not None:
            content = dumps(spec["subagent_trajectory_ref"])
        text, count = text_and_images(content)
        images += count
        call_id = spec.get("source_call_id")
        if not isinstance(call_id, str) or call_id not in known:
            call_id = f"obs-{step_id}-{n}"
            extra_calls.append(ToolCall(call_id, "action"))
        results.append(ToolResult(call_id, text))
    return extra_calls, results, images


def _anthropic_assistant(text: str, step: dict[str, Any]) -> dict[str, Any]:
    """Anthropic-shaped raw assistant message (the step's real calls only)."""
    specs = step.get("tool_calls") or []
    if not specs:
        return {"role": "assistant", "content": text}
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
    blocks += [
        {"type": "tool_use", "id": str(s.get("tool_call_id", "")), "name": str(s.get("function_name", "")), "input": s.get("arguments", {})}
        for s in specs
    ]
    return {"role": "assistant", "content": blocks}


def _anthropic_results(results: list[ToolResult]) -> dict[str, Any]:
    """Anthropic-shaped raw tool-result message."""
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": r.call_id, "content": r.text} for r in results]}


class _Reader:
    """State of one pass over the steps."""

    def __init__(self, structured: bool) -> None:
        self.structured = structured
        self.messages: list[Message] = []
        self.usage: list[Usage] = []
        self.system: list[str] = []
        self.live_start = 0
        self.compactions = 0
        self.model: str | None = None

    def step(self, step: Any, index: int) -> None:
        """Handle one step (raises ValueError when it breaks the schema)."""
        if not isinstance(step, dict):
            raise ValueError("a step must be an object")
        source, step_id = step.get("source"), str(step.get("step_id", index + 1))
        text, images = text_and_images(step.get("message"))
        nbytes = len(dumps(step).encode())
        if source == "system":
            if text:
                self.system.append(text)
        elif source == "user":
            self.user(text, images, nbytes, step_id)
        elif source == "agent":
            self.agent(step, text, images, nbytes, step_id)

    def user(self, text: str, images: int, nbytes: int, step_id: str) -> None:
        """A user step: a user turn, or (text-action variant) the previous step's observation."""
        previous = self.messages[-1] if self.messages else None
        seen_user = any(m.role in ("user", "tool") for m in self.messages)
        if not self.structured and seen_user and previous is not None and previous.role == "assistant":
            call = ToolCall(f"obs-{step_id}", "action")
            self.messages[-1] = replace(previous, tool_calls=previous.tool_calls + (call,))
            result = ToolResult(call.id, text)
            self.messages.append(new_message(role="tool", tool_results=(result,), images=images, source_bytes=nbytes, raw={"role": "user", "content": text}))
            return
        if is_summary_text(text):
            self.compactions, self.live_start = self.compactions + 1, len(self.messages)
        self.messages.append(new_message(role="user", text=text, images=images, source_bytes=nbytes, raw={"role": "user", "content": text}))

    def agent(self, step: dict[str, Any], text: str, images: int, nbytes: int, step_id: str) -> None:
        """An agent step: assistant message, then its observation results."""
        calls = _calls(step)
        extra_calls, results, result_images = _observation(step, calls, step_id)
        thinking = step.get("reasoning_content") if isinstance(step.get("reasoning_content"), str) else ""
        self.messages.append(
            new_message(
                role="assistant", text=text, tool_calls=tuple(calls + extra_calls), thinking=thinking, images=images,
                source_bytes=nbytes, raw=_anthropic_assistant(text, step),
            )
        )
        if results:
            self.messages.append(new_message(role="tool", tool_results=tuple(results), images=result_images, raw=_anthropic_results(results)))
        self.usage += _usage(step.get("metrics"))
        if isinstance(step.get("model_name"), str):
            self.model = step["model_name"]


def _agent_model(agent: Any) -> str | None:
    """``agent.model_name`` or ``agent.model.name``."""
    if not isinstance(agent, dict):
        return None
    if isinstance(agent.get("model_name"), str):
        return agent["model_name"]
    model = agent.get("model")
    return model.get("name") if isinstance(model, dict) and isinstance(model.get("name"), str) else None


def read(source: Source) -> Session:
    """Read an ATIF trajectory into a :class:`Session`.

    Parameters
    ----------
    source : Source
        The ATIF document.

    Returns
    -------
    Session
        Messages in step order; one usage record per agent step with ``metrics.prompt_tokens``
        (tokens); ``system_text`` from system steps.

    Raises
    ------
    MalformedLineError
        A step that is not an object or has ``tool_calls`` that are not a list of objects
        (named by its index); skipped when the source is lenient.
    """
    steps = source.document["steps"]
    structured = any(isinstance(s, dict) and (s.get("tool_calls") or s.get("observation")) for s in steps)
    reader = _Reader(structured)
    numbered = list(enumerate(steps))
    skipped = each_record(source, numbered, lambda item: reader.step(item[1], item[0]), label="step", first=1)
    return build_session(
        path=source.path, format=FORMAT, messages=relink(reader.messages, reader.live_start), usage=reader.usage,
        live_start=reader.live_start, compactions=reader.compactions,
        system_text="\n\n".join(reader.system), model=reader.model or _agent_model(source.document.get("agent")),
        skipped_lines=source.skipped + skipped,
    )
