"""A plain per-cut reference of DESIGN §1–§2, for tests and the benchmark only.

Every quantity is recomputed from scratch for one cut with Python loops and floats, the way
the seed's original planner does; the vectorized :mod:`dp_compact.core.benefit` must agree with it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dp_compact.core.benefit import L_INSTR_TOKENS, RETENTION_FLOOR
from dp_compact.pricing import CACHE_TTL_1H_S, CACHE_TTL_5M_S, Prices
from dp_compact.conversation import Message

__all__ = ["is_feasible_cut", "lifetime_costs_reference", "net_benefit_at", "rates_reference"]


def is_feasible_cut(messages: Sequence[Message], cut: int, *, user_turns_only: bool = False) -> bool:
    """DESIGN §1 for one cut, checked directly on the messages (O(N))."""
    n = len(messages)
    if not 0 < cut < n:
        return False
    first = messages[cut]
    if user_turns_only:
        raw = first.raw
        if not first.is_user_turn or (isinstance(raw, dict) and isinstance(raw.get("content"), list)):
            return False
    elif first.role == "tool":
        return False
    called_in_tail = {c.id for m in messages[cut:] for c in m.tool_calls}
    called_anywhere = {c.id for m in messages for c in m.tool_calls}
    for message in messages[cut:]:
        for result in message.tool_results:
            if result.call_id in called_anywhere and result.call_id not in called_in_tail:
                return False
    return True


def net_benefit_at(
    tokens: Sequence[int],
    cut: int,
    *,
    prices: Prices,
    v: int,
    s: int,
    m: int,
    remaining_calls: float,
    avg: float,
    c: int,
    beta: float,
    r: float,
    qp: float,
    recall: tuple[Sequence[float], float, float] | None = None,
) -> dict[str, float]:
    """The five terms and net of DESIGN §2 at one cut, in $.

    ``recall`` is ``(ages, q0, tau)`` for the recall model (ages in user turns), None for the seed's.
    """
    total = sum(int(t) for t in tokens)
    kept = sum(int(t) for t in tokens[cut:])
    head = total - kept
    p_write = prices.p_cache_write if prices.p_cache_write is not None else prices.p_input
    savings = (remaining_calls - 1) * prices.p_cache * head / 1e6
    cache_miss = (s + kept) * (p_write - prices.p_cache) / 1e6
    compact_cost = (prices.p_cache * (v + head) + prices.p_input * L_INSTR_TOKENS + prices.p_out * s) / 1e6
    retained = max(r ** (c + 1), RETENTION_FLOOR)
    info_loss = beta * (1 - retained) * remaining_calls * avg * prices.p_input / 1e6
    if recall is not None:
        ages, q0, tau = recall
        for j in range(cut):
            q = q0 * math.exp(-ages[j] / tau)
            refetch = int(tokens[j]) * (prices.p_input + (remaining_calls - 1) * prices.p_cache)
            refetch += avg * prices.p_cache + s * prices.p_out
            info_loss += q * refetch / 1e6
    quality = qp * prices.p_input * ((v + total) ** 2 - (v + kept) ** 2) / (m * 1e6)
    net = savings - cache_miss - compact_cost - info_loss + quality
    return {
        "savings": savings, "cache_miss": cache_miss, "compact_cost": compact_cost,
        "info_loss": info_loss, "quality": quality, "net": net,
    }


def rates_reference(prices: Prices, prompts: Sequence[float]) -> list[tuple[float, float, float, float]]:
    """``(p_input, p_cache, p_write, p_out)`` of each prompt by :meth:`Prices.at`, one call at a time
    (the per-call form of :func:`dp_compact.core.tiers.rates_at`)."""
    return [(p.p_input, p.p_cache, p.p_write, p.p_out) for p in (prices.at(float(prompt)) for prompt in prompts)]


def lifetime_costs_reference(gaps: Sequence[float], prompts: Sequence[float], prices: Prices) -> dict[str, float]:
    """:func:`dp_compact.core.timing.lifetime_costs`' two sums, call by call with floats: ``usd_5m``, ``usd_1h``."""
    out = {}
    for name, ttl in (("5m", CACHE_TTL_5M_S), ("1h", CACHE_TTL_1H_S)):
        total = 0.0
        for j in range(1, len(prompts)):
            at = prices.at(float(prompts[j]))
            write = at.p_write_5m if name == "5m" else at.p_write_1h
            read = 0.0 if gaps[j - 1] > ttl else min(float(prompts[j - 1]), float(prompts[j]))
            total += read * at.p_cache + (float(prompts[j]) - read) * write
        out[f"usd_{name}"] = total / 1e6
    return out
