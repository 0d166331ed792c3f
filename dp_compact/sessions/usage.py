"""Providers' usage objects as :class:`~dp_compact.conversation.Usage` records (DESIGN §4).

Two conventions exist for the prompt of a call, and a file may mix them (a proxy in front of
several providers, a converter): Anthropic's ``input_tokens`` excludes the cache reads and
writes, which are added; OpenAI's ``input_tokens`` / ``prompt_tokens`` (Chat Completions,
Responses, Codex ``token_count``) already include the cached part. :func:`usage_from_api` tells
them apart by their keys, record by record, and :func:`token_count` rejects a count that is not
a non-negative whole number with a ValueError, which the readers turn into a
:class:`~dp_compact.errors.MalformedLineError` naming ``file:line``, as it rejects a count above
:data:`MAX_TOKENS_PER_CALL`, which no provider accepts for one call.
"""

from __future__ import annotations

from typing import Any

from dp_compact.conversation import Usage

__all__ = ["MAX_TOKENS_PER_CALL", "token_count", "usage_from_api"]

#: The most tokens a count of one call may hold: 100 million, ten times the largest context window
#: a model is served with (Llama 4 Scout, 10M tokens, Meta's model card, April 2025; Gemini 1.5 Pro
#: and 2.5 Pro 2M, Anthropic 1M, OpenAI 1M) and the largest any model has been announced with
#: (Magic's LTM-2-mini, 100M, August 2024). A larger count is a corrupted record: believed, a cache
#: write of 2^62 made the window 4.6e18 tokens and forced a compaction of a 31-token conversation.
MAX_TOKENS_PER_CALL = 100_000_000

#: Keys that only an Anthropic-style usage object has: ``input_tokens`` then excludes them.
_ANTHROPIC_CACHE_KEYS = ("cache_read_input_tokens", "cache_creation_input_tokens")
#: Keys that only an OpenAI-style usage object has (Chat Completions, Responses, Codex
#: ``token_count``): ``input_tokens`` / ``prompt_tokens`` then already include the cached part.
_OPENAI_CACHE_KEYS = ("cached_input_tokens", "input_tokens_details", "prompt_tokens_details", "prompt_tokens")


def token_count(value: Any, name: str) -> int:
    """A token count of a usage object as an int; a missing or null value is 0.

    Accepts a non-negative int, a float with no fraction (``1200.0``) or a string of digits.

    Raises
    ------
    ValueError
        If ``value`` is anything else (negative, fractional, a bool, non-numeric text, an
        object); the message names the field ``name`` and the value. Readers turn it into a
        :class:`~dp_compact.errors.MalformedLineError` naming ``file:line``.

    >>> token_count("1200", "input_tokens"), token_count(None, "output_tokens")
    (1200, 0)
    """
    if value is None:
        return 0
    count: int | None = None
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        count = value
    elif isinstance(value, float) and value.is_integer() and value >= 0:
        count = int(value) if value <= MAX_TOKENS_PER_CALL else MAX_TOKENS_PER_CALL + 1
    elif isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        count = int(value) if len(value.strip()) <= 12 else MAX_TOKENS_PER_CALL + 1
    if count is not None and count <= MAX_TOKENS_PER_CALL:
        return count
    shown = _shown(value)
    if count is not None:
        raise ValueError(
            f"usage field {name!r} is {shown} tokens, above {MAX_TOKENS_PER_CALL:,}, more than any provider accepts"
            " for one call (a corrupted record)"
        )
    raise ValueError(f"usage field {name!r} must be a non-negative whole number of tokens, not {shown}")


def _shown(value: Any) -> str:
    """``value`` for a message, at most 60 characters (a huge int is not written out in full)."""
    if isinstance(value, int) and value.bit_length() > 64:
        return f"about 2^{value.bit_length() - 1}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _cached_openai(usage: dict[str, Any]) -> int:
    """The cached part of an OpenAI-style usage object (``cached_input_tokens`` or ``*_tokens_details.cached_tokens``)."""
    if "cached_input_tokens" in usage:
        return token_count(usage["cached_input_tokens"], "cached_input_tokens")
    for key in ("input_tokens_details", "prompt_tokens_details"):
        details = usage.get(key)
        if isinstance(details, dict):
            return token_count(details.get("cached_tokens"), f"{key}.cached_tokens")
    return 0


def usage_from_api(usage: dict[str, Any], line: int = 0) -> Usage | None:
    """One LLM call's :class:`Usage` from a provider's usage object, whichever convention it follows.

    Anthropic (``input_tokens`` + ``cache_read_input_tokens`` + ``cache_creation_input_tokens``,
    the input excluding both) and OpenAI (``input_tokens`` or ``prompt_tokens`` including the
    ``cached_input_tokens`` / ``*_tokens_details.cached_tokens``) objects are told apart by
    their keys, record by record, so that a file mixing both (a proxy in front of several
    providers) is neither halved nor double counted. Two contradictions are resolved and
    recorded in ``Usage.convention``:

    - an OpenAI-style cached count larger than the input it is said to be part of: the input
      cannot include it, so it is added (``"anthropic"``);
    - an object with both key families (a translation layer): when the two cached counts agree
      and the input is at least that large, the input is taken to include it (``"openai"``),
      else the Anthropic sum is used.

    Parameters
    ----------
    usage : dict
        The usage object as the source wrote it.
    line : int
        1-based source line of the record (0 when unknown).

    Returns
    -------
    Usage or None
        None when the prompt is 0 tokens (no call, or a placeholder).

    Raises
    ------
    ValueError
        If a count is not a non-negative whole number (:func:`token_count`).
    """
    output_key = "output_tokens" if "output_tokens" in usage else "completion_tokens"
    if usage.keys().isdisjoint(_OPENAI_CACHE_KEYS):  # the Anthropic sum; all four counts plain: one step
        given, output, read, write = (usage.get("input_tokens"), usage.get(output_key), usage.get("cache_read_input_tokens"),
                                      usage.get("cache_creation_input_tokens"))
        plain = type(given) is int and type(output) is int and type(read) is int and type(write) is int
        if plain and min(given, output, read, write) >= 0 and given + read + write + output <= MAX_TOKENS_PER_CALL:
            total = given + read + write  # both cache keys are there: the Anthropic convention
            return Usage(total, read, write, output, line, "anthropic", _one_hour(usage, write)) if total else None  # positional: a keyword costs a third more
    source_input = "input_tokens" if "input_tokens" in usage else "prompt_tokens"
    given = token_count(usage.get(source_input), source_input)
    output = token_count(usage.get(output_key), output_key)
    read = token_count(usage.get("cache_read_input_tokens"), "cache_read_input_tokens")
    write = token_count(usage.get("cache_creation_input_tokens"), "cache_creation_input_tokens")
    cached = _cached_openai(usage)
    if given + read + write + cached > MAX_TOKENS_PER_CALL:
        raise ValueError(
            f"a prompt of {given + read + write + cached:,} tokens (input and cache counts together) is above {MAX_TOKENS_PER_CALL:,},"
            " more than any provider accepts for one call (a corrupted record)"
        )
    anthropic = not usage.keys().isdisjoint(_ANTHROPIC_CACHE_KEYS)
    openai = not usage.keys().isdisjoint(_OPENAI_CACHE_KEYS)
    if openai and anthropic:
        openai = cached == read and given >= read
        anthropic = not openai
    if openai and cached > given:
        return Usage(given + cached, cached, 0, output, line=line, convention="anthropic")
    if openai:
        return Usage(given, cached, 0, output, line=line, convention="openai") if given else None
    total = given + read + write
    return (Usage(total, read, write, output, line=line, convention="anthropic" if anthropic else "",
                  cache_write_1h_tokens=_one_hour(usage, write)) if total else None)


def _one_hour(usage: dict[str, Any], write: int) -> int:
    """Tokens of ``write`` (the cache writes) written as 1-hour entries: Anthropic's
    ``cache_creation.ephemeral_1h_input_tokens`` (DESIGN §8), at most ``write``; 0 when absent."""
    split = usage.get("cache_creation")
    if type(split) is not dict or not split:
        return 0
    return min(token_count(split.get("ephemeral_1h_input_tokens"), "cache_creation.ephemeral_1h_input_tokens"), write)
