"""Prompt-caching prices and context windows per model (DESIGN §2, §3).

A :class:`Prices` holds what the cost model needs: ``P_input``, ``P_cache``, ``P_out`` and the
optional cache-write price ``P_write`` in $ per million tokens ($/MTok), and the context window
``M`` in tokens. :func:`get_prices` resolves a name to one, first among the built-in
:data:`PROFILES`, then in the price database bundled with ``genai-prices``.

Built-in profiles (prices in $/MTok, window in tokens)::

    name               input  cache   out    write  window     pricing page (``source``)
    claude-haiku-4.5   1.00   0.10    5.00   1.25   200,000    anthropic.com/pricing
    claude-opus-4.5    5.00   0.50    25.00  6.25   200,000    anthropic.com/pricing
    claude-sonnet-4    3.00   0.30    15.00  3.75   200,000    anthropic.com/pricing
    deepseek-v4-flash  1.00   0.02    3.00   -      64,000     api-docs.deepseek.com
    gemini-2.5-flash   0.30   0.03    2.50   -      1,048,576  ai.google.dev/gemini-api
    gemini-2.5-pro     1.25   0.125   10.00  -      1,048,576  ai.google.dev/gemini-api
    gpt-4.1            2.00   0.50    8.00   -      1,000,000  developers.openai.com
    gpt-4o             2.50   1.25    10.00  -      128,000    developers.openai.com
    gpt-5              1.25   0.125   10.00  -      400,000    developers.openai.com

Where the numbers come from:

- claude-sonnet-4, gpt-4o and deepseek-v4-flash: DESIGN §3, which wins where other data differ.
  The bundled genai-prices 0.2.3 data agree for the first two; for deepseek-v4-flash they list
  0.14 / 0.0028 / 0.28 with a 1,000,000-token window and date/peak-hour conditional rates.
  The claude-sonnet-4 write price (1.25 × input, 5-minute entries) is Anthropic's.
- The others: the genai-prices 0.2.3 bundled snapshot, which cites the provider pages given as
  ``source``. gemini-2.5-pro prices are tiered there; the profile takes the base tier (prompts up
  to 200,000 tokens; above that Google charges 2.50 / 0.25 / 15.00). genai-prices lists no window
  for gemini-2.5-pro; its 1,048,576-token input limit is Google's model page
  (https://ai.google.dev/gemini-api/docs/models).
- ``p_cache_write`` is the 5-minute cache-write price where the provider charges a premium to
  write the cache (Anthropic: 1.25 × input). OpenAI, Google and DeepSeek charge none (Google's
  explicit caching bills storage per hour instead, which the cost model does not include), so
  theirs is ``None`` and DESIGN §2 ② falls back to ``P_input``.

genai-prices is used offline only: its bundled snapshot, never its auto-update, and it is imported
only when a name is not built-in, so importing this module stays cheap.
"""

from __future__ import annotations

import difflib
import re
import math
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import TYPE_CHECKING

from dp_compact.errors import UnknownProfileError

if TYPE_CHECKING:
    from datetime import date
    from decimal import Decimal

    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, ModelPrice, TieredPrices

__all__ = ["PROFILES", "Prices", "base_model_name", "get_prices", "list_profiles"]

#: Window assumed, in tokens, for a genai-prices model listed without ``context_window``
#: (the gpt-4o window of DESIGN §3; a guess, recorded in the ``source`` of such prices).
ASSUMED_CONTEXT_TOKENS = 128_000
#: Window assumed for a Gemini model listed without one: 1,048,576 input tokens, the limit
#: Google's model pages give for the Gemini 1.5, 2.x and 3 models.
ASSUMED_GEMINI_CONTEXT_TOKENS = 1_048_576

#: At most this many close matches are suggested for an unknown name.
MAX_CLOSE_MATCHES = 5

_ANTHROPIC_URL = "https://www.anthropic.com/pricing#api"
_OPENAI_URL = "https://developers.openai.com/api/docs/pricing"
_GOOGLE_URL = "https://ai.google.dev/gemini-api/docs/pricing"
_DEEPSEEK_URL = "https://api-docs.deepseek.com/quick_start/pricing"


@dataclass(frozen=True, slots=True)
class Prices:
    """Prices and context window of one model, as the cost model of DESIGN §2 uses them.

    Parameters
    ----------
    name : str
        Profile or model name as resolved (a built-in name, or the genai-prices model id).
    p_input : float
        P_input: uncached input, in $/MTok.
    p_cache : float
        P_cache: cache read, in $/MTok.
    p_out : float
        P_out: output, in $/MTok.
    p_cache_write : float or None
        P_write: writing the prompt cache (5-minute entries), in $/MTok; ``None`` when the
        provider charges no write premium (DESIGN §2 ② then uses ``p_input``).
    max_context_tokens : int
        M: the context window, in tokens.
    source : str
        Where the numbers come from: a provider's pricing-page URL, or ``"genai-prices <version>"``
        followed by ``"; "``-separated notes on any assumption made.
    window_source : str
        Where ``max_context_tokens`` comes from for a session (:func:`dp_compact.prepare.choose_prices`,
        :func:`dp_compact.measure.windows.context_window`); for a price-database model whose window is not
        listed, that it is assumed; else "" for a bare profile. Ignored by equality.

    Raises
    ------
    ValueError
        If a price is negative or not finite, or the window is not a positive number of tokens.
    """

    name: str
    p_input: float
    p_cache: float
    p_out: float
    p_cache_write: float | None
    max_context_tokens: int
    source: str
    window_source: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        for field_name in ("p_input", "p_cache", "p_out", "p_cache_write"):
            value = getattr(self, field_name)
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{self.name}: {field_name}={value!r} must be a finite price >= 0 $/MTok")
        if self.max_context_tokens <= 0:
            raise ValueError(f"{self.name}: max_context_tokens={self.max_context_tokens!r} must be > 0")

    @property
    def p_write(self) -> float:
        """$/MTok of prompt tokens written to the cache: ``p_cache_write`` where priced, else ``p_input``.

        The one home of this fallback (DESIGN §2 "Cache writes"), shared by the planner's ② and
        the replay's cache meter (DESIGN §6).
        """
        return self.p_cache_write if self.p_cache_write is not None else self.p_input


PROFILES: dict[str, Prices] = {
    p.name: p
    for p in (
        # DESIGN §3 (genai-prices 0.2.3 agrees); write 1.25 x input: Anthropic, 5-minute entries.
        Prices("claude-sonnet-4", 3.00, 0.30, 15.00, 3.75, 200_000, _ANTHROPIC_URL),
        # genai-prices 0.2.3 bundled data, model claude-opus-4-5.
        Prices("claude-opus-4.5", 5.00, 0.50, 25.00, 6.25, 200_000, _ANTHROPIC_URL),
        # genai-prices 0.2.3 bundled data, model claude-haiku-4-5.
        Prices("claude-haiku-4.5", 1.00, 0.10, 5.00, 1.25, 200_000, _ANTHROPIC_URL),
        # DESIGN §3 (genai-prices 0.2.3 agrees); OpenAI charges no cache-write premium.
        Prices("gpt-4o", 2.50, 1.25, 10.00, None, 128_000, _OPENAI_URL),
        # genai-prices 0.2.3 bundled data (OpenAI's model page says 1,047,576 tokens).
        Prices("gpt-4.1", 2.00, 0.50, 8.00, None, 1_000_000, _OPENAI_URL),
        # genai-prices 0.2.3 bundled data.
        Prices("gpt-5", 1.25, 0.125, 10.00, None, 400_000, _OPENAI_URL),
        # genai-prices 0.2.3 base tier (prompts <= 200K tokens); window: Google's model page.
        Prices("gemini-2.5-pro", 1.25, 0.125, 10.00, None, 1_048_576, _GOOGLE_URL),
        # genai-prices 0.2.3 bundled data (text input price; audio input costs more).
        Prices("gemini-2.5-flash", 0.30, 0.03, 2.50, None, 1_048_576, _GOOGLE_URL),
        # DESIGN §3; genai-prices 0.2.3 differs (see the module docstring). No write premium.
        Prices("deepseek-v4-flash", 1.00, 0.02, 3.00, None, 64_000, _DEEPSEEK_URL),
    )
}


def _normalized(name: str) -> str:
    """Lookup key of a name: trimmed, lower case, '.' read as '-'."""
    return name.strip().lower().replace(".", "-")


_PROFILE_KEYS: dict[str, Prices] = {_normalized(name): prices for name, prices in PROFILES.items()}


#: Suffixes that rename a copy of a model rather than name another one: a backup or local copy
#: (``gpt-5.3-codex-bak``), or a snapshot date (``claude-sonnet-4-20250514``, ``...@2025-05-14``).
_COPY_SUFFIX = re.compile(r"(?:[-_.@](?:bak|backup|old|orig|copy|tmp|local)|[-@]\d{4}-?\d{2}-?\d{2})$", re.IGNORECASE)


def base_model_name(name: str) -> str | None:
    """``name`` without a suffix that marks a copy or a dated snapshot of a model, or None when it has none.

    >>> base_model_name("gpt-5.3-codex-bak"), base_model_name("claude-opus-4-6@2026-01-01"), base_model_name("gpt-4o")
    ('gpt-5.3-codex', 'claude-opus-4-6', None)
    """
    stripped = _COPY_SUFFIX.sub("", name.strip())
    return stripped if stripped and stripped != name.strip() else None


def list_profiles() -> list[Prices]:
    """Return the built-in pricing profiles, sorted by name.

    Returns
    -------
    list of Prices
        Every entry of :data:`PROFILES` (prices in $/MTok, windows in tokens), sorted by ``name``.
    """
    return sorted(PROFILES.values(), key=lambda prices: prices.name)


def get_prices(name: str) -> Prices:
    """Resolve a profile or model name to its prices and context window.

    Built-in profiles come first: the name is matched case-insensitively and with '.' and '-'
    interchangeable (``claude-opus-4-5`` finds ``claude-opus-4.5``). Any other name is looked up,
    offline, in the snapshot bundled with genai-prices (no auto-update, no network), which is
    imported only then. A ``provider/model`` name (``openai/gpt-4o-mini``) selects the provider.

    Parameters
    ----------
    name : str
        Profile or model name, for example ``claude-sonnet-4`` or ``gpt-4o-mini``.

    Returns
    -------
    Prices
        Prices in $/MTok and the context window in tokens. From genai-prices: ``name`` is the
        model id found and ``source`` is ``"genai-prices <version>"``; where the data leave a gap,
        a note is appended to ``source``:

        - tiered prices: the base tier (the price below the first token threshold);
        - prices that change by date: the one in force today (UTC); daily peak-hour rates
          (DeepSeek) are ignored, so the off-peak rate is used;
        - no cache-read price: ``p_cache = p_input`` (no discount);
        - no context window: 128,000 tokens assumed (:data:`ASSUMED_CONTEXT_TOKENS`), 1,048,576
          for a Gemini model (:data:`ASSUMED_GEMINI_CONTEXT_TOKENS`).

        ``p_cache_write`` is genai-prices' (5-minute) cache-write price, ``None`` when it lists none.

    Raises
    ------
    UnknownProfileError
        If neither the built-in profiles nor genai-prices know the name, or genai-prices lists the
        model without a per-token input or output price. ``close_matches`` holds up to 5 similar
        names among the built-in profiles and the genai-prices model ids (lower case).

    Examples
    --------
    >>> get_prices("Claude-Opus-4-5").p_input
    5.0
    >>> get_prices("claude-sonnet-4").max_context_tokens
    200000
    """
    profile = _PROFILE_KEYS.get(_normalized(name))
    if profile is not None:
        return profile
    snapshot = _bundled_snapshot()
    model = _find_model(snapshot, name.strip())
    if model is None:
        raise UnknownProfileError(name, _close_matches(snapshot, name))
    return _prices_from_model(name, model, snapshot)


@cache
def _bundled_snapshot() -> DataSnapshot:
    """The price data shipped inside genai-prices (never a downloaded update)."""
    from genai_prices.data import providers
    from genai_prices.data_snapshot import DataSnapshot

    return DataSnapshot(providers=providers, from_auto_update=False)


def _find_model(snapshot: DataSnapshot, name: str) -> ModelInfo | None:
    """The genai-prices model for a name, a provider/name, or the name with '.' read as '-'.

    genai-prices' own provider guess comes first; failing that, every provider in snapshot order.
    """
    attempts: list[tuple[str, str | None]] = [(name, None)]
    provider_id, slash, model_ref = name.partition("/")
    if slash and provider_id and model_ref:
        attempts.append((model_ref, provider_id))
    attempts += [(ref.replace(".", "-"), pid) for ref, pid in attempts if "." in ref]
    for model_ref, provider in attempts:
        try:
            return snapshot.find_provider_model(model_ref, None, provider, None)[1]
        except LookupError:
            continue
    for model_ref, _ in attempts:
        for provider in snapshot.providers:
            if (model := provider.find_model(model_ref)) is not None:
                return model
    return None


def _close_matches(snapshot: DataSnapshot, name: str) -> list[str]:
    """Up to MAX_CLOSE_MATCHES built-in names and genai-prices model ids like ``name``."""
    known = dict.fromkeys([*sorted(PROFILES), *(m.id.lower() for p in snapshot.providers for m in p.models)])
    return difflib.get_close_matches(name.strip().lower(), list(known), n=MAX_CLOSE_MATCHES)


def _prices_from_model(name: str, model: ModelInfo, snapshot: DataSnapshot) -> Prices:
    """Prices of a genai-prices model, with a note in ``source`` for every gap filled."""
    from genai_prices import __version__

    notes: list[str] = []
    price = _price_in_force(model, datetime.now(UTC).date(), notes)
    p_input, p_out = _base(price.input_mtok, notes), _base(price.output_mtok, notes)
    if p_input is None or p_out is None:
        raise UnknownProfileError(name, _close_matches(snapshot, name))
    p_cache = _base(price.cache_read_mtok, notes)
    if p_cache is None:
        p_cache = p_input
        notes.append("no cache-read price, p_cache = p_input")
    window, window_source = model.context_window, ""
    if window is None:
        window = ASSUMED_GEMINI_CONTEXT_TOKENS if model.id.startswith("gemini") else ASSUMED_CONTEXT_TOKENS
        notes.append(f"context window not listed, {window:,} tokens assumed")
        window_source = f"assumed for {model.id}, whose window the price database does not list (give yours with --max-context-tokens)"
    return Prices(
        name=model.id,
        p_input=p_input,
        p_cache=p_cache,
        p_out=p_out,
        p_cache_write=_base(price.cache_write_mtok, notes),
        max_context_tokens=window,
        source="; ".join([f"genai-prices {__version__}", *dict.fromkeys(notes)]),
        window_source=window_source,
    )


def _price_in_force(model: ModelInfo, today: date, notes: list[str]) -> ModelPrice:
    """The last unconditional or already-started conditional price; daily windows are skipped."""
    from genai_prices.types import StartDateConstraint, TimeOfDateConstraint

    if not isinstance(model.prices, list):
        return model.prices
    chosen = model.prices[0].prices
    for conditional in model.prices:
        constraint = conditional.constraint
        if constraint is None or (isinstance(constraint, StartDateConstraint) and constraint.start_date <= today):
            chosen = conditional.prices
    notes.append(f"price in force on {today.isoformat()} (UTC)")
    if any(isinstance(c.constraint, TimeOfDateConstraint) for c in model.prices):
        notes.append("peak-hour rates ignored")
    return chosen


def _base(value: Decimal | TieredPrices | None, notes: list[str]) -> float | None:
    """A price in $/MTok as float, the base tier of tiered prices, None when absent."""
    from genai_prices.types import TieredPrices

    if value is None:
        return None
    if isinstance(value, TieredPrices):
        notes.append("tiered prices, base tier used")
        return float(value.base)
    return float(value)
