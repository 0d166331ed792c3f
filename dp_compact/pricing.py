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
only when a name is not built-in, so importing this module stays cheap. Its answers are kept for
the process (:func:`price_lookups`); a process may start from answers an earlier one kept
(:func:`seed_price_lookups`: the hot path's kept state, :mod:`dp_compact.hot.state`), which then
imports no price data.
"""

from __future__ import annotations

import bisect
import difflib
import re
import math
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from functools import cache
from operator import attrgetter
from typing import TYPE_CHECKING

from dp_compact.errors import UnknownProfileError
from dp_compact._fast import keep_newest

if TYPE_CHECKING:
    from datetime import date
    from decimal import Decimal

    from genai_prices.data_snapshot import DataSnapshot
    from genai_prices.types import ModelInfo, ModelPrice, TieredPrices

__all__ = ["CACHE_TTL_1H_S", "CACHE_TTL_5M_S", "OPENAI_WRITE_TTL_S", "PROFILES", "PriceTier", "Prices", "base_model_name", "get_prices", "list_profiles",
           "price_lookups", "seed_price_lookups"]

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


#: Lifetimes of a cache entry after its last use, seconds (DESIGN §8): 5 minutes (Anthropic's
#: default, OpenAI's in-memory retention at least) and 1 hour (Anthropic's ``ttl: "1h"`` writes).
CACHE_TTL_5M_S = 300.0
CACHE_TTL_1H_S = 3600.0
#: OpenAI's priced cache writes (GPT-5.6 and later) live at least 30 minutes (DESIGN §8). Their
#: 12-hour writes (GPT-6.1, 2.5 × input) are not in genai-prices' data, so no profile carries them.
OPENAI_WRITE_TTL_S = 1800.0
#: The prices of a tier made lately (:meth:`Prices.at`), by the id of the prices they were made from and the
#: tier's index: ``(prices, tier prices)`` (the prices held, so that an id names one object). Prices are
#: frozen, so the tier prices are those made again; a plan asks for each tier many times.
_TIER_PRICES: dict[tuple[int, int], tuple[Prices, Prices]] = {}
#: Entries of :data:`_TIER_PRICES` kept (the tiers of the few prices planned with lately).
TIER_PRICES_KEPT = 32
#: A tier's threshold (:attr:`Prices.tier_starts`).
_START_TOKENS = attrgetter("start_tokens")


@dataclass(frozen=True, slots=True)
class PriceTier:
    """Prices of every token of a request whose prompt exceeds ``start_tokens`` (a whole-request
    tier, DESIGN §8; from genai-prices ``TieredPrices``), $/MTok; ``None`` write prices as in
    :class:`Prices`."""

    start_tokens: int
    p_input: float
    p_cache: float
    p_out: float
    p_cache_write: float | None = None
    p_cache_write_1h: float | None = None


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
        Where the numbers come from: ``"written by hand from <pricing-page URL>"`` for a built-in
        profile, or ``"genai-prices <version>"`` followed by ``"; "``-separated notes on any
        assumption made.
    window_source : str
        Where ``max_context_tokens`` comes from for a session (:func:`dp_compact.prepare.choose_prices`,
        :func:`dp_compact.measure.windows.context_window`); for a price-database model whose window is not
        listed, that it is assumed; else "" for a bare profile. Ignored by equality.
    p_cache_write_1h : float or None
        Writing 1-hour cache entries, $/MTok (Anthropic: 2 × input; DESIGN §8); ``None`` when the
        provider sells none.
    write_1h_share : float
        Share of the cache writes made as 1-hour entries, in [0, 1]: the session's recorded mix
        (:func:`dp_compact.prepare.choose_prices`), 0 (the provider's 5-minute default) without
        evidence. Sets :attr:`p_write` and :attr:`cache_ttl_s`.
    tiers : tuple of PriceTier
        Whole-request price tiers, ascending thresholds (DESIGN §8); :meth:`at` applies them.
    price_date : str
        ISO date (UTC) on which these prices are in force (genai-prices' dated prices); ``""`` for a
        built-in profile.
    later : tuple of (str, Prices)
        Prices that take over from a later ISO date (:meth:`on`); ignored by equality.
    write_ttl_s : float
        Life of an entry written at ``p_cache_write``, seconds after its last use: 300
        (:data:`CACHE_TTL_5M_S`: Anthropic's 5-minute entries, OpenAI's in-memory cache) or 1,800
        for an OpenAI model that prices writes (GPT-5.6 and later: a 30-minute minimum life,
        :data:`OPENAI_WRITE_TTL_S`; DESIGN §8).

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
    p_cache_write_1h: float | None = None
    write_1h_share: float = 0.0
    tiers: tuple[PriceTier, ...] = ()
    price_date: str = ""
    later: tuple[tuple[str, Prices], ...] = field(default=(), compare=False, repr=False)
    write_ttl_s: float = 300.0

    def __post_init__(self) -> None:
        for field_name, value in (("p_input", self.p_input), ("p_cache", self.p_cache), ("p_out", self.p_out),
                                  ("p_cache_write", self.p_cache_write), ("p_cache_write_1h", self.p_cache_write_1h)):
            if value is not None and not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{self.name}: {field_name}={value!r} must be a finite price >= 0 $/MTok")
        if self.max_context_tokens <= 0:
            raise ValueError(f"{self.name}: max_context_tokens={self.max_context_tokens!r} must be > 0")
        if not 0.0 <= self.write_1h_share <= 1.0:
            raise ValueError(f"{self.name}: write_1h_share={self.write_1h_share!r} must lie in [0, 1]")

    @property
    def p_write_5m(self) -> float:
        """$/MTok of a 5-minute cache write: ``p_cache_write`` where priced, else ``p_input``
        (DESIGN §2 "Cache writes": no write premium)."""
        return self.p_cache_write if self.p_cache_write is not None else self.p_input

    @property
    def p_write_1h(self) -> float:
        """$/MTok of a 1-hour cache write (Anthropic: 2 × input, DESIGN §8): ``p_cache_write_1h``
        where priced, else the 5-minute price (a provider without 1-hour entries)."""
        return self.p_cache_write_1h if self.p_cache_write_1h is not None else self.p_write_5m

    @property
    def p_write(self) -> float:
        """$/MTok of prompt tokens written to the cache, at this session's mix of write lifetimes:
        ``(1 − s) · p_write_5m + s · p_write_1h`` with ``s = write_1h_share`` (DESIGN §8).

        The one home of this price (DESIGN §2 "Cache writes"), shared by the planner's ② and
        the replay's cache meter (DESIGN §6).
        """
        if self.write_1h_share == 0.0:
            return self.p_write_5m
        return (1.0 - self.write_1h_share) * self.p_write_5m + self.write_1h_share * self.p_write_1h

    @property
    def cache_ttl_s(self) -> float:
        """Seconds a cache entry lives after its last use at this write mix (DESIGN §8): 1 hour
        when most writes are 1-hour entries, else 5 minutes (Anthropic's default lifetime; OpenAI's
        in-memory prompt cache also keeps a prefix at least 5 minutes after its last use)."""
        return self._ttl_at(self.write_1h_share)

    def _ttl_at(self, share: float) -> float:
        """:attr:`cache_ttl_s` at the write mix ``share`` (share of 1-hour writes), seconds."""
        return CACHE_TTL_1H_S if share >= 0.5 else self.write_ttl_s

    @property
    def write_lifetime(self) -> str:
        """``"1h"``, ``"30m"`` or ``"5m"``: the lifetime of :attr:`cache_ttl_s`."""
        return self.write_lifetime_at(self.write_1h_share)

    def write_lifetime_at(self, share: float) -> str:
        """:attr:`write_lifetime` at the write mix ``share`` (share of 1-hour writes, in [0, 1]): that of
        ``with_write_share(share)``, without making those prices."""
        return {CACHE_TTL_1H_S: "1h", OPENAI_WRITE_TTL_S: "30m"}.get(self._ttl_at(share), "5m")

    def with_write_share(self, share: float) -> Prices:
        """The same prices with ``write_1h_share = share`` (also in the prices that take over later);
        these prices themselves when that changes nothing (the same float, sign included, and none later)."""
        current = self.write_1h_share
        if not self.later and type(share) is type(current) is float and share == current \
                and math.copysign(1.0, share) == math.copysign(1.0, current):
            return self
        later = tuple((day, replace(p, write_1h_share=share)) for day, p in self.later)
        return replace(self, write_1h_share=share, later=later)

    def at(self, prompt_tokens: float) -> Prices:
        """Prices of a request whose prompt is ``prompt_tokens`` tokens: the highest tier whose
        threshold it passes (whole-request tiers: every token of the request at that tier's rate,
        genai-prices' cliff rule ``prompt > start``; DESIGN §8), else these. Window, sources and
        write mix are kept."""
        if not self.tiers or prompt_tokens <= self.tiers[0].start_tokens:
            return self
        return self._tier_prices(bisect.bisect_left(self.tier_starts, prompt_tokens) - 1)

    @property
    def tier_starts(self) -> tuple[int, ...]:
        """Thresholds of the tiers, tokens, ascending: a prompt above ``tier_starts[i]`` pays tier i."""
        return tuple(map(_START_TOKENS, self.tiers))

    def _tier_prices(self, index: int) -> Prices:
        """The prices of tier ``index`` (:meth:`at`), made once per prices and tier (:data:`_TIER_PRICES`)."""
        kept = _TIER_PRICES.get((id(self), index))
        if kept is not None and kept[0] is self:
            return kept[1]
        tier = self.tiers[index]
        made = replace(self, p_input=tier.p_input, p_cache=tier.p_cache, p_out=tier.p_out, p_cache_write=tier.p_cache_write,
                       p_cache_write_1h=tier.p_cache_write_1h, tiers=(), later=())
        _TIER_PRICES[(id(self), index)] = (self, made)
        keep_newest(_TIER_PRICES, TIER_PRICES_KEPT)
        return made

    def to_dict(self) -> dict[str, object]:
        """JSON-ready fields: the prices ($/MTok), window (tokens) and sources, the tiers, the prices
        taking over later (``{"from": ISO date, ...}``), and the derived ``p_write`` (at the write
        mix), ``write_lifetime`` and ``cache_ttl_s`` (seconds)."""
        names = ("name", "p_input", "p_cache", "p_out", "p_cache_write", "p_cache_write_1h", "write_1h_share", "max_context_tokens",
                 "source", "window_source", "price_date")
        out: dict[str, object] = {name: getattr(self, name) for name in names}
        out["tiers"] = [{"above_tokens": t.start_tokens, "p_input": t.p_input, "p_cache": t.p_cache, "p_out": t.p_out,
                         "p_cache_write": t.p_cache_write, "p_cache_write_1h": t.p_cache_write_1h} for t in self.tiers]
        out["later"] = [{"from": day, "p_input": p.p_input, "p_cache": p.p_cache, "p_out": p.p_out, "p_write": p.p_write}
                        for day, p in self.later]
        out.update(p_write=self.p_write, write_lifetime=self.write_lifetime, cache_ttl_s=self.cache_ttl_s, write_ttl_s=self.write_ttl_s)
        return out

    def on(self, day: str) -> Prices:
        """The prices in force on ``day`` (ISO date, UTC): the last of :attr:`later` that started on
        or before it, else these (DESIGN §8: each call at the price of its own date)."""
        chosen = self
        for start, prices in self.later:
            if start <= day:
                chosen = prices
        return chosen


def _by_hand(name: str, p_input: float, p_cache: float, p_out: float, p_write: float | None, window: int, url: str,
             *, one_hour: bool = False, tiers: tuple[PriceTier, ...] = ()) -> Prices:
    """A built-in profile, written by hand from ``url`` (its ``source`` says so); ``one_hour``:
    the provider sells 1-hour cache writes at 2 × input (Anthropic, DESIGN §8)."""
    return Prices(name, p_input, p_cache, p_out, p_write, window, f"written by hand from {url}",
                  p_cache_write_1h=2.0 * p_input if one_hour else None, tiers=tiers)


PROFILES: dict[str, Prices] = {
    p.name: p
    for p in (
        # DESIGN §3 (genai-prices agrees); writes: Anthropic, 1.25 x input (5 minutes), 2 x (1 hour).
        _by_hand("claude-sonnet-4", 3.00, 0.30, 15.00, 3.75, 200_000, _ANTHROPIC_URL, one_hour=True),
        # genai-prices bundled data, model claude-opus-4-5.
        _by_hand("claude-opus-4.5", 5.00, 0.50, 25.00, 6.25, 200_000, _ANTHROPIC_URL, one_hour=True),
        # genai-prices bundled data, model claude-haiku-4-5.
        _by_hand("claude-haiku-4.5", 1.00, 0.10, 5.00, 1.25, 200_000, _ANTHROPIC_URL, one_hour=True),
        # DESIGN §3 (genai-prices agrees); OpenAI charges no cache-write premium.
        _by_hand("gpt-4o", 2.50, 1.25, 10.00, None, 128_000, _OPENAI_URL),
        # genai-prices bundled data (OpenAI's model page says 1,047,576 tokens).
        _by_hand("gpt-4.1", 2.00, 0.50, 8.00, None, 1_000_000, _OPENAI_URL),
        # genai-prices bundled data.
        _by_hand("gpt-5", 1.25, 0.125, 10.00, None, 400_000, _OPENAI_URL),
        # genai-prices bundled data: prompts above 200K tokens pay 2.50 / 0.25 / 15.00 for the whole request.
        _by_hand("gemini-2.5-pro", 1.25, 0.125, 10.00, None, 1_048_576, _GOOGLE_URL,
                 tiers=(PriceTier(200_000, 2.50, 0.25, 15.00),)),
        # genai-prices bundled data (text input price; audio input costs more).
        _by_hand("gemini-2.5-flash", 0.30, 0.03, 2.50, None, 1_048_576, _GOOGLE_URL),
        # DESIGN §3; genai-prices differs (see the module docstring). No write premium.
        _by_hand("deepseek-v4-flash", 1.00, 0.02, 3.00, None, 64_000, _DEEPSEEK_URL),
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


def get_prices(name: str, on: date | None = None) -> Prices:
    """Resolve a profile or model name to its prices and context window.

    Built-in profiles come first: the name is matched case-insensitively and with '.' and '-'
    interchangeable (``claude-opus-4-5`` finds ``claude-opus-4.5``). Any other name is looked up,
    offline, in the snapshot bundled with genai-prices (no auto-update, no network), which is
    imported only then. A ``provider/model`` name (``openai/gpt-4o-mini``) selects the provider.

    Parameters
    ----------
    name : str
        Profile or model name, for example ``claude-sonnet-4`` or ``gpt-4o-mini``.
    on : date, optional
        The day whose prices apply (a session's first call); today (UTC) when None. Built-in
        profiles have one price.

    Returns
    -------
    Prices
        Prices in $/MTok and the context window in tokens. From genai-prices: ``name`` is the
        model id found and ``source`` is ``"genai-prices <version>"``; where the data leave a gap,
        a note is appended to ``source``:

        - tiered prices: the base tier in the prices, every threshold in ``tiers`` (:meth:`Prices.at`);
        - prices that change by date: the one in force on ``on`` (UTC; today when None), the
          later ones in ``later`` (:meth:`Prices.on`); daily peak-hour rates (DeepSeek) are
          ignored, so the off-peak rate is used;
        - no cache-read price: ``p_cache = p_input`` (no discount);
        - no context window: 128,000 tokens assumed (:data:`ASSUMED_CONTEXT_TOKENS`), 1,048,576
          for a Gemini model (:data:`ASSUMED_GEMINI_CONTEXT_TOKENS`).

        ``p_cache_write`` is genai-prices' (5-minute) cache-write price and ``p_cache_write_1h``
        its 1-hour one, ``None`` when it lists none.

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
    key = _lookup_key(name, on)
    answer = _LOOKUPS.get(key)
    if answer is None:
        snapshot = _bundled_snapshot()
        model = _find_model(snapshot, name.strip())
        if model is None:
            answer = (UNKNOWN, tuple(_close_matches(snapshot, name)))
        else:
            answer = _prices_from_model(name, model, snapshot, on)
        _LOOKUPS[key] = answer
    if isinstance(answer, tuple):
        raise UnknownProfileError(name, list(answer[1]))
    return answer


#: The first item of a kept lookup of a name genai-prices does not know (:data:`_LOOKUPS`).
UNKNOWN = "unknown"
#: The genai-prices answers of :func:`get_prices` in this process: ``(name, day) -> Prices`` or
#: ``("unknown", close matches)``; ``day`` is the ISO date asked for, or ``"today YYYY-MM-DD"``
#: (UTC) when none was (today's prices, kept for that day only).
_LOOKUPS: dict[tuple[str, str], Prices | tuple[str, tuple[str, ...]]] = {}


def _lookup_key(name: str, on: date | None) -> tuple[str, str]:
    """The key of :data:`_LOOKUPS` for ``get_prices(name, on)``."""
    return (name, on.isoformat() if on is not None else "today " + datetime.now(UTC).date().isoformat())


def price_lookups() -> dict[tuple[str, str], Prices | tuple[str, tuple[str, ...]]]:
    """A copy of the genai-prices answers :func:`get_prices` gave or was seeded with in this
    process, today's only among those asked without a day (the layout of :data:`_LOOKUPS`)."""
    today = _lookup_key("", None)[1]
    return {key: answer for key, answer in _LOOKUPS.items() if not key[1].startswith("today ") or key[1] == today}


def seed_price_lookups(lookups: dict[tuple[str, str], object]) -> None:
    """Add ``lookups`` (:func:`price_lookups` of a process running the same genai-prices data) to
    this process's answers; an entry of another layout is left out."""
    for key, answer in lookups.items():
        if (isinstance(key, tuple) and len(key) == 2 and all(isinstance(k, str) for k in key)
                and (isinstance(answer, Prices) or (isinstance(answer, tuple) and len(answer) == 2 and answer[0] == UNKNOWN))):
            _LOOKUPS[key] = answer if isinstance(answer, Prices) else (UNKNOWN, tuple(answer[1]))


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


def _prices_from_model(name: str, model: ModelInfo, snapshot: DataSnapshot, on: date | None = None) -> Prices:
    """Prices of a genai-prices model in force on ``on`` (UTC; None: today), with the prices that
    take over after it in ``later``, and a note in ``source`` for every gap filled."""
    day = on or datetime.now(UTC).date()
    notes: list[str] = []
    variants = _dated_variants(model, day, notes)
    first = _prices_of(name, model, snapshot, variants[0][1], notes, day)
    later = tuple((start.isoformat(), replace(_prices_of(name, model, snapshot, price, [], start), source=first.source))
                  for start, price in variants[1:])
    return replace(first, later=later)


def _prices_of(name: str, model: ModelInfo, snapshot: DataSnapshot, price: ModelPrice, notes: list[str], day: date) -> Prices:
    """One :class:`Prices` from one genai-prices price set (tiers kept as :class:`PriceTier`)."""
    from genai_prices import __version__

    p_input, p_out = _base(price.input_mtok), _base(price.output_mtok)
    if p_input is None or p_out is None:
        raise UnknownProfileError(name, _close_matches(snapshot, name))
    p_cache = _base(price.cache_read_mtok)
    if p_cache is None:
        p_cache = p_input
        notes.append("no cache-read price, p_cache = p_input")
    window, window_source = model.context_window, ""
    if window is None:
        window = ASSUMED_GEMINI_CONTEXT_TOKENS if model.id.startswith("gemini") else ASSUMED_CONTEXT_TOKENS
        notes.append(f"context window not listed, {window:,} tokens assumed")
        window_source = f"assumed for {model.id}, whose window the price database does not list (give yours with --max-context-tokens)"
    tiers = _tiers(price)
    write_ttl = CACHE_TTL_5M_S
    if _base(price.cache_write_mtok) is not None and model.id.lower().startswith(("gpt-", "o1", "o3", "o4")):
        write_ttl = OPENAI_WRITE_TTL_S
        notes.append("OpenAI cache writes live 30 minutes")
    if tiers:
        notes.append("whole-request tiers above " + ", ".join(f"{t.start_tokens:,}" for t in tiers) + " prompt tokens")
    return Prices(
        name=model.id,
        p_input=p_input,
        p_cache=p_cache,
        p_out=p_out,
        p_cache_write=_base(price.cache_write_mtok),
        max_context_tokens=window,
        source="; ".join([f"genai-prices {__version__}", *dict.fromkeys(notes)]),
        window_source=window_source,
        p_cache_write_1h=_base(getattr(price, "cache_write_1h_mtok", None)),
        tiers=tiers,
        price_date=day.isoformat(),
        write_ttl_s=write_ttl,
    )


def _dated_variants(model: ModelInfo, day: date, notes: list[str]) -> list[tuple[date, ModelPrice]]:
    """The price set in force on ``day`` (the last unconditional or already-started one), then
    those starting after it, in order; daily peak-hour windows are skipped (off-peak used)."""
    from genai_prices.types import StartDateConstraint, TimeOfDateConstraint

    if not isinstance(model.prices, list):
        return [(day, model.prices)]
    chosen = model.prices[0].prices
    later: list[tuple[date, ModelPrice]] = []
    for conditional in model.prices:
        constraint = conditional.constraint
        if constraint is None or (isinstance(constraint, StartDateConstraint) and constraint.start_date <= day):
            chosen = conditional.prices
        elif isinstance(constraint, StartDateConstraint):
            later.append((constraint.start_date, conditional.prices))
    notes.append(f"price in force on {day.isoformat()} (UTC)")
    if any(isinstance(c.constraint, TimeOfDateConstraint) for c in model.prices):
        notes.append("peak-hour rates ignored")
    return [(day, chosen), *sorted(later, key=lambda pair: pair[0])]


def _base(value: Decimal | TieredPrices | None) -> float | None:
    """A price in $/MTok as float (the base tier of tiered prices: the tiers are :func:`_tiers`), None when absent."""
    from genai_prices.types import TieredPrices

    if value is None:
        return None
    if isinstance(value, TieredPrices):
        return float(value.base)
    return float(value)


def _tiers(price: ModelPrice) -> tuple[PriceTier, ...]:
    """Whole-request tiers of a genai-prices price set: one :class:`PriceTier` per threshold any
    token class has (a class without a tier there keeps its base price)."""
    from genai_prices.types import TieredPrices

    names = ("input_mtok", "cache_read_mtok", "output_mtok", "cache_write_mtok", "cache_write_1h_mtok")
    values = {n: getattr(price, n, None) for n in names}
    starts = sorted({t.start for v in values.values() if isinstance(v, TieredPrices) for t in v.tiers})

    def at(name: str, start: int) -> float | None:
        value = values[name]
        if not isinstance(value, TieredPrices):
            return None if value is None else float(value)
        applicable = value.base
        for tier in value.tiers:
            if start >= tier.start:
                applicable = tier.price
        return float(applicable)

    tiers = []
    for start in starts:
        p_input, p_cache, p_out = at("input_mtok", start), at("cache_read_mtok", start), at("output_mtok", start)
        assert p_input is not None and p_out is not None  # _prices_of checked the base prices
        tiers.append(PriceTier(int(start), p_input, p_cache if p_cache is not None else p_input, p_out,
                               at("cache_write_mtok", start), at("cache_write_1h_mtok", start)))
    return tuple(tiers)
