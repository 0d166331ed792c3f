"""Terms ①–⑤ of DESIGN §2: golden values and agreement with the per-cut reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dp_compact.core import _reference
from dp_compact.core.benefit import BenefitInputs, net_benefit, recall_costs
from dp_compact.pricing import Prices

SEED_PRICES = Prices("seed", 3.0, 0.30, 15.0, None, 200_000, "DESIGN §2")
# DESIGN §2 / seed 004 worked example: t = 8, K = 25k, H = 65k, E = 4, L = 3, c = 1.
GOLDEN = BenefitInputs(
    v_tokens=5000, s_tokens=500, m_tokens=200_000, total_tokens=90_000, remaining_calls=12, avg_tokens=4000,
    compactions=1, beta=0.03, retention=0.8, quality_penalty=0.2,
)


def test_net_benefit_matches_design_golden_value_term_by_term():
    terms = net_benefit(np.array([3]), np.array([25_000]), prices=SEED_PRICES, inputs=GOLDEN)
    assert terms.savings[0] == pytest.approx(0.2145, abs=1e-9)
    assert terms.cache_miss[0] == pytest.approx(0.06885, abs=1e-9)
    assert terms.compact_cost[0] == pytest.approx(0.02871, abs=1e-9)
    assert terms.info_loss[0] == pytest.approx(0.0015552, abs=1e-9)
    assert terms.quality[0] == pytest.approx(0.024375, abs=1e-9)
    assert terms.net[0] == pytest.approx(0.1397598, abs=1e-9)


def test_net_benefit_cache_write_price_replaces_input_in_cache_miss():
    with_write = Prices("w", 3.0, 0.30, 15.0, 3.75, 200_000, "test")
    terms = net_benefit(np.array([3]), np.array([25_000]), prices=with_write, inputs=GOLDEN)
    assert terms.cache_miss[0] == pytest.approx((500 + 25_000) * (3.75 - 0.30) / 1e6, abs=1e-12)
    assert terms.savings[0] == pytest.approx(0.2145, abs=1e-9)


def test_net_benefit_retention_floor_applies_after_many_compactions():
    many = BenefitInputs(**{**{f: getattr(GOLDEN, f) for f in GOLDEN.__dataclass_fields__}, "compactions": 9})
    terms = net_benefit(np.array([1]), np.array([25_000]), prices=SEED_PRICES, inputs=many)
    assert terms.info_loss[0] == pytest.approx(0.03 * (1 - 0.37) * 12 * 4000 * 3.0 / 1e6, abs=1e-12)


def test_net_benefit_rejects_tail_larger_than_total():
    with pytest.raises(ValueError, match="tail tokens"):
        net_benefit(np.array([1]), np.array([90_001]), prices=SEED_PRICES, inputs=GOLDEN)


def test_net_benefit_arrays_are_read_only():
    terms = net_benefit(np.array([1, 2]), np.array([10, 5]), prices=SEED_PRICES, inputs=GOLDEN)
    with pytest.raises(ValueError):
        terms.net[0] = 1.0


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 20_000), min_size=2, max_size=60),
    remaining=st.floats(1, 80),
    c=st.integers(0, 6),
    with_write=st.booleans(),
    recall=st.booleans(),
    q0=st.floats(0, 1),
    tau=st.floats(0.1, 50),
)
def test_net_benefit_equals_per_cut_reference(tokens, remaining, c, with_write, recall, q0, tau):
    prices = Prices("p", 2.5, 0.25, 10.0, 3.1 if with_write else None, 128_000, "test")
    array = np.array(tokens, dtype=np.int64)
    total = int(array.sum())
    inputs = BenefitInputs(5000, 500, 128_000, total, remaining, 3000.0, c, 0.03, 0.8, 0.2)
    cuts = np.arange(1, len(tokens), dtype=np.int64)
    tails = total - np.cumsum(array)[cuts - 1]
    ages = np.arange(len(tokens))[::-1].astype(np.float64) / 3.0
    head_recall = None
    if recall:
        per = recall_costs(array, ages, prices=prices, inputs=inputs, q0=q0, tau=tau)
        head_recall = np.concatenate(([0.0], np.cumsum(per)))[cuts]
    terms = net_benefit(cuts, tails, prices=prices, inputs=inputs, head_recall_cost=head_recall)
    for position, cut in enumerate(cuts):
        expected = _reference.net_benefit_at(
            tokens, int(cut), prices=prices, v=5000, s=500, m=128_000, remaining_calls=remaining, avg=3000.0,
            c=c, beta=0.03, r=0.8, qp=0.2, recall=(list(ages), q0, tau) if recall else None,
        )
        got = terms.at(position)
        for name, value in expected.items():
            assert got[name] == pytest.approx(value, rel=1e-9, abs=1e-12), name
