"""Provider-native context actions (DESIGN §9): what to send, and how each is billed.

Three actions a provider carries out itself, typed in the installed SDKs:

- Anthropic ``clear_tool_uses_20250919`` (beta ``context-management-2025-06-27``): a
  ``context_management`` edit of ``messages.create``. The client keeps sending the whole history;
  above the trigger, the server replaces the oldest tool results (and, with ``clear_tool_inputs``,
  the calls' inputs) by a placeholder before the model reads them, keeping the last ``keep`` tool
  uses. No extra request: the cleared tokens are not billed as input
  (``context_management.applied_edits[].cleared_input_tokens`` says how many), and the prompt is
  cached again from the first cleared result on (``clear_at_least`` exists so that a clearing
  is worth that rewrite).
- Anthropic ``compact_20260112`` (beta ``compact-2026-01-12``): a ``context_management`` edit; above
  its trigger (default 150,000 input tokens) the server summarizes the older context into a
  ``compaction`` block the client sends back first in later requests. It is a sampling of its
  own, billed as such: ``usage.iterations`` holds a ``compaction`` entry (input, cache read,
  cache write and output tokens), *not* included in the top-level ``usage``; the request after it
  starts from the block, so its cache is written from the start.
- OpenAI ``POST /responses/compact`` (``client.responses.compact``): a request of its own that
  returns the user messages and one encrypted ``compaction`` item to send instead of the history,
  billed by its ``usage`` (``input_tokens`` including ``input_tokens_details.cached_tokens`` read
  from the cache, ``output_tokens``); the next request's cache is written from the start.

:class:`NativeAction` describes one (the request parameters, the beta header, and the facts of its
billing the planner needs); :class:`NativeUsage` is what a response says it cost. The SDKs are
imported only inside functions: importing this module loads neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = [
    "ANTHROPIC_COMPACT_BETA", "ANTHROPIC_COMPACT_DEFAULT_TRIGGER_TOKENS", "ANTHROPIC_CONTEXT_MANAGEMENT_BETA", "NativeAction",
    "NativeUsage", "anthropic_clear_tool_uses", "anthropic_compact", "anthropic_usage", "openai_compact", "openai_compact_call",
]

#: Beta header of Anthropic's ``clear_tool_uses_20250919`` edit (``AnthropicBetaParam`` in the SDK).
ANTHROPIC_CONTEXT_MANAGEMENT_BETA = "context-management-2025-06-27"
#: Beta header of Anthropic's ``compact_20260112`` edit.
ANTHROPIC_COMPACT_BETA = "compact-2026-01-12"
#: ``compact_20260112``'s trigger when none is given, input tokens (``BetaCompact20260112EditParam.trigger``).
ANTHROPIC_COMPACT_DEFAULT_TRIGGER_TOKENS = 150_000

Provider = Literal["anthropic", "openai"]
Kind = Literal["clear_tool_uses", "compact"]


@dataclass(frozen=True, slots=True)
class NativeAction:
    """One provider-native context action: how to ask for it and how it is billed.

    Attributes
    ----------
    provider : {"anthropic", "openai"}
    kind : {"clear_tool_uses", "compact"}
        Clearing old tool results (the calls and all text stay) or summarizing the older context.
    edit : Mapping
        Anthropic: the ``context_management`` edit (validated against the SDK's TypedDict);
        OpenAI: extra parameters of ``responses.compact`` (usually empty).
    beta : str or None
        The ``anthropic-beta`` value the edit needs.
    trigger_tokens : int or None
        Input tokens above which the provider acts (None: OpenAI acts when called).
    keep_tool_uses : int or None
        ``clear_tool_uses``: the most recent tool uses kept whole.
    summary_request : bool
        True when the action is a model sampling billed of its own (compaction); False when it
        only removes input tokens (clearing).
    billed_in : str
        Where a response reports the action's tokens.
    cache_rewrite_from : {"first_cleared", "start"}
        From where the next request's prompt is written to the cache again.
    """

    provider: Provider
    kind: Kind
    edit: Mapping[str, Any] = field(default_factory=dict)
    beta: str | None = None
    trigger_tokens: int | None = None
    keep_tool_uses: int | None = None
    summary_request: bool = False
    billed_in: str = ""
    cache_rewrite_from: Literal["first_cleared", "start"] = "start"

    @property
    def setting(self) -> str:
        """The ``DP_NATIVE`` value that prices this action (:mod:`dp_compact.core.native_costs`):
        ``anthropic-clear``, ``anthropic-compact`` or ``openai-compact``."""
        return f"{self.provider}-{'clear' if self.kind == 'clear_tool_uses' else 'compact'}"

    def now(self) -> NativeAction:
        """This action asked to act on the request it is sent with: an Anthropic compaction whose
        trigger is the least the API takes (:data:`~dp_compact.core.native_costs.ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS`),
        so that it compacts any prompt the planner would compact (the planner never compacts below
        it); any other action as it is."""
        if self.provider != "anthropic" or self.kind != "compact":
            return self
        from dataclasses import replace

        from dp_compact.core.native_costs import ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS

        edit = {**self.edit, "trigger": {"type": "input_tokens", "value": ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS}}
        return replace(self, edit=edit, trigger_tokens=ANTHROPIC_COMPACT_MIN_TRIGGER_TOKENS)

    def keeping(self, tool_uses: int) -> NativeAction:
        """This ``clear_tool_uses`` action asked to clear every tool use but the last ``tool_uses``, on any
        request holding more (``keep`` that many, ``trigger`` at that many tool uses, no ``clear_at_least``:
        the planner decided the clearing pays). Other fields (``exclude_tools``, ``clear_tool_inputs``) stay.

        Raises
        ------
        ValueError
            If the action is not a clearing.
        """
        if self.kind != "clear_tool_uses":
            raise ValueError(f"{self.provider} {self.kind} is not a clearing")
        from dataclasses import replace

        edit = {k: v for k, v in self.edit.items() if k != "clear_at_least"}
        edit.update(keep={"type": "tool_uses", "value": tool_uses}, trigger={"type": "tool_uses", "value": max(tool_uses, 1)})
        return replace(self, edit=edit, keep_tool_uses=tool_uses, trigger_tokens=None)

    def anthropic_kwargs(self) -> dict[str, Any]:
        """Keyword arguments of ``client.beta.messages.create`` (or a LangChain ``ChatAnthropic`` call) asking for this edit.

        Raises
        ------
        ValueError
            If the action is not Anthropic's.
        """
        if self.provider != "anthropic":
            raise ValueError(f"{self.provider} {self.kind} is not a context_management edit")
        return {"context_management": {"edits": [dict(self.edit)]}, "betas": [self.beta]}


@dataclass(frozen=True, slots=True)
class NativeUsage:
    """What a response says a native action cost and removed, in tokens.

    ``input_tokens`` are billed at P_input, ``cache_read_tokens`` at P_cache, ``cache_write_tokens``
    at P_write and ``output_tokens`` at P_out (:meth:`cost_usd`); ``cleared_input_tokens`` and
    ``cleared_tool_uses`` are what a clearing removed from the prompt (not billed).
    """

    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cleared_input_tokens: int = 0
    cleared_tool_uses: int = 0

    def cost_usd(self, prices: Any) -> float:
        """The action's own cost, $, at ``prices`` (a :class:`~dp_compact.pricing.Prices`, $/MTok)."""
        return (self.input_tokens * prices.p_input + self.cache_read_tokens * prices.p_cache
                + self.cache_write_tokens * prices.p_write + self.output_tokens * prices.p_out) / 1e6


def _anthropic_type(name: str) -> Any:
    """The TypedDict ``name`` of ``anthropic.types.beta``.

    Raises
    ------
    MissingExtraError
        The ``anthropic`` SDK is not installed (the ``llm`` extra installs it).
    """
    from dp_compact.errors import MissingExtraError

    try:
        from anthropic.types import beta
    except ImportError as exc:
        raise MissingExtraError("native", "llm", exc.name) from None
    return getattr(beta, name)


def _checked(typed: Any, edit: dict[str, Any]) -> dict[str, Any]:
    """``edit`` validated against the SDK TypedDict ``typed`` (pydantic), returned as given."""
    from pydantic import TypeAdapter, ValidationError

    try:
        TypeAdapter(typed).validate_python(edit, strict=True)
    except ValidationError as exc:
        raise ValueError(f"not a valid {edit.get('type')} edit: {exc.errors()[0]['msg']} at {exc.errors()[0]['loc']}") from None
    return edit


def anthropic_clear_tool_uses(
    *, trigger_tokens: int | None = None, keep_tool_uses: int = 3, clear_at_least_tokens: int | None = None,
    exclude_tools: tuple[str, ...] = (), clear_tool_inputs: bool = False,
) -> NativeAction:
    """Anthropic's ``clear_tool_uses_20250919`` edit (SDK: ``BetaClearToolUses20250919EditParam``).

    Parameters
    ----------
    trigger_tokens : int, optional
        Clear once the prompt exceeds this many input tokens (None: the server's default).
    keep_tool_uses : int
        The most recent tool uses left whole.
    clear_at_least_tokens : int, optional
        Clear only when at least this many tokens go (so that the cache rewrite pays).
    exclude_tools : tuple of str
        Tools whose results are never cleared (``dp_recall``/``dp_restore`` belong here).
    clear_tool_inputs : bool
        Also clear the calls' inputs.
    """
    BetaClearToolUses20250919EditParam = _anthropic_type("BetaClearToolUses20250919EditParam")  # noqa: N806 - the SDK's name

    edit: dict[str, Any] = {"type": "clear_tool_uses_20250919", "keep": {"type": "tool_uses", "value": keep_tool_uses}}
    if trigger_tokens is not None:
        edit["trigger"] = {"type": "input_tokens", "value": trigger_tokens}
    if clear_at_least_tokens is not None:
        edit["clear_at_least"] = {"type": "input_tokens", "value": clear_at_least_tokens}
    if exclude_tools:
        edit["exclude_tools"] = list(exclude_tools)
    if clear_tool_inputs:
        edit["clear_tool_inputs"] = True
    return NativeAction(
        "anthropic", "clear_tool_uses", _checked(BetaClearToolUses20250919EditParam, edit), ANTHROPIC_CONTEXT_MANAGEMENT_BETA,
        trigger_tokens=trigger_tokens, keep_tool_uses=keep_tool_uses, summary_request=False,
        billed_in="usage.input_tokens counts the prompt after clearing; context_management.applied_edits[].cleared_input_tokens",
        cache_rewrite_from="first_cleared",
    )


def anthropic_compact(*, trigger_tokens: int | None = None, instructions: str | None = None, pause_after_compaction: bool = False) -> NativeAction:
    """Anthropic's ``compact_20260112`` edit (SDK: ``BetaCompact20260112EditParam``); trigger default 150,000 tokens."""
    BetaCompact20260112EditParam = _anthropic_type("BetaCompact20260112EditParam")  # noqa: N806 - the SDK's name

    edit: dict[str, Any] = {"type": "compact_20260112"}
    if trigger_tokens is not None:
        edit["trigger"] = {"type": "input_tokens", "value": trigger_tokens}
    if instructions:
        edit["instructions"] = instructions
    if pause_after_compaction:
        edit["pause_after_compaction"] = True
    return NativeAction(
        "anthropic", "compact", _checked(BetaCompact20260112EditParam, edit), ANTHROPIC_COMPACT_BETA,
        trigger_tokens=trigger_tokens or ANTHROPIC_COMPACT_DEFAULT_TRIGGER_TOKENS, summary_request=True,
        billed_in="usage.iterations[type=compaction] (not in the top-level usage)", cache_rewrite_from="start",
    )


def openai_compact(**params: Any) -> NativeAction:
    """OpenAI's ``POST /responses/compact`` (``client.responses.compact``); ``params`` are passed to the call."""
    return NativeAction("openai", "compact", dict(params), None, summary_request=True,
                        billed_in="CompactedResponse.usage (input_tokens include input_tokens_details.cached_tokens)")


def anthropic_usage(message: Any) -> NativeUsage:
    """What an Anthropic ``BetaMessage`` (or its dict) says its native actions cost and removed.

    Compaction: the ``usage.iterations`` entries of type ``compaction``; clearing: the
    ``context_management.applied_edits`` of type ``clear_tool_uses_20250919``.
    """
    data = message if isinstance(message, Mapping) else message.model_dump()
    iterations = ((data.get("usage") or {}).get("iterations")) or []
    compaction = [i for i in iterations if i.get("type") == "compaction"]
    edits = [e for e in ((data.get("context_management") or {}).get("applied_edits") or []) if e.get("type") == "clear_tool_uses_20250919"]
    return NativeUsage(
        input_tokens=sum(int(i.get("input_tokens") or 0) for i in compaction),
        cache_read_tokens=sum(int(i.get("cache_read_input_tokens") or 0) for i in compaction),
        cache_write_tokens=sum(int(i.get("cache_creation_input_tokens") or 0) for i in compaction),
        output_tokens=sum(int(i.get("output_tokens") or 0) for i in compaction),
        cleared_input_tokens=sum(int(e.get("cleared_input_tokens") or 0) for e in edits),
        cleared_tool_uses=sum(int(e.get("cleared_tool_uses") or 0) for e in edits),
    )


def openai_compact_call(client: Any, *, model: str, input: list[dict[str, Any]], action: NativeAction | None = None) -> tuple[list[dict[str, Any]], NativeUsage]:
    """Compact ``input`` (Responses API items) with ``client.responses.compact``.

    Returns
    -------
    (list of dict, NativeUsage)
        The items to send instead of ``input`` (the user messages and one ``compaction`` item,
        as JSON dicts) and the call's usage: uncached input at P_input, cached at P_cache, cache
        writes at P_write, output at P_out.
    """
    params = dict(action.edit) if action is not None else {}
    response = client.responses.compact(model=model, input=input, **params)
    usage = response.usage
    cached = int(usage.input_tokens_details.cached_tokens or 0)
    written = int(getattr(usage.input_tokens_details, "cache_write_tokens", 0) or 0)
    out = NativeUsage(input_tokens=usage.input_tokens - cached - written, cache_read_tokens=cached, cache_write_tokens=written,
                      output_tokens=usage.output_tokens)
    return [item.model_dump(exclude_none=True, warnings=False) for item in response.output], out  # user messages are typed as outputs
