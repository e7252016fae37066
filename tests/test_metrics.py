"""Metrics against brute-force enumeration and hand computation (issue 4, WIP)."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from prl_core.metrics import (
    average_at_k, bootstrap_ci, maj_at_k, majority_answer, mcnemar, micro_macro, paired_bootstrap_diff, pass_at_k,
)


@given(st.integers(1, 8).flatmap(lambda n: st.tuples(st.just(n), st.lists(st.booleans(), min_size=n, max_size=n))))
def test_pass_at_k_equals_enumerating_k_subsets(case):
    n, outcomes = case
    c = sum(outcomes)
    for k in range(1, n + 1):
        subsets = list(itertools.combinations(range(n), k))
        brute = sum(any(outcomes[i] for i in s) for s in subsets) / len(subsets)
        assert pass_at_k(torch.tensor([c]), n, k).item() == pytest.approx(brute, abs=1e-12)


def test_average_and_maj():
    correct = torch.tensor([[1, 0, 1, 1], [0, 0, 0, 0]], dtype=torch.bool)
    assert average_at_k(correct).tolist() == [0.75, 0.0]
    answers = [["5", "7", "5", "7"], ["3", "3", None, "4"]]
    ok = torch.tensor([[True, False, True, False], [False, False, False, True]])
    assert maj_at_k(answers, ok, 4).tolist() == [1.0, 0.0]  # tie 5 vs 7 goes to 5 (first)
    assert maj_at_k(answers, ok, 1).tolist() == [1.0, 0.0]
    with pytest.raises(ValueError, match="^k"):
        pass_at_k(torch.tensor([1]), 4, 5)


# ── maj@n: answers clustered by an equivalence (the verifier's, in prl) ─────────────────

HALF = {"1/2", "0.5", "\\frac{1}{2}"}


def half_equiv(a: str, b: str) -> bool:
    """Hand-written equivalence for the tests: 1/2 ≡ 0.5 ≡ \\frac{1}{2}; otherwise exact."""
    return a == b or (a in HALF and b in HALF)


def test_maj_groups_equivalent_answers_not_strings():
    answers = [["1/2", "0.5", "3", "3", "\\frac{1}{2}"]]
    ok = [[True, True, False, False, True]]
    # clusters {1/2, 0.5, \frac{1}{2}} (3) and {3, 3} (2): the 1/2 cluster wins, and it is correct
    assert majority_answer(answers[0], equivalent=half_equiv) == 0
    assert maj_at_k(answers, ok, 5, equivalent=half_equiv).tolist() == [1.0]
    # by string, "3" is the only answer seen twice: a wrong majority
    assert majority_answer(answers[0]) == 2
    assert maj_at_k(answers, ok, 5).tolist() == [0.0]


def test_maj_ties_go_to_the_cluster_whose_first_member_appears_first():
    ok = [[False, True, True, False]]
    # x (indices 0, 3) vs the 1/2 cluster (1, 2): 2 each, x opened first → x, wrong
    assert maj_at_k([["x", "0.5", "1/2", "x"]], ok, 4, equivalent=half_equiv).tolist() == [0.0]
    # the same counts with the 1/2 cluster opened first → 1/2, correct
    assert maj_at_k([["0.5", "x", "x", "1/2"]], [[True, False, False, True]], 4, equivalent=half_equiv).tolist() == [1.0]


def test_maj_uses_the_first_k_samples_and_ignores_missing_answers():
    answers = [["3", "1/2", "0.5", "\\frac{1}{2}"], [None, None, None, "7"], [None, None, None, None]]
    ok = torch.tensor([[False, True, True, True], [False, False, False, True], [False, False, False, False]])
    assert maj_at_k(answers, ok, 1, equivalent=half_equiv).tolist() == [0.0, 0.0, 0.0]  # "3"; no answer; none
    assert maj_at_k(answers, ok, 2, equivalent=half_equiv).tolist() == [0.0, 0.0, 0.0]  # tie 3 vs 1/2 → 3
    assert maj_at_k(answers, ok, 4, equivalent=half_equiv).tolist() == [1.0, 1.0, 0.0]  # 1/2 × 3; "7" alone
    assert majority_answer([None, None]) is None


def test_maj_joins_the_first_equivalent_cluster_and_scores_its_representative():
    calls = []

    def chain(a: str, b: str) -> bool:  # not transitive: a ≡ ab ≡ b, but a ≢ b
        calls.append((a, b))
        return {a, b} in ({"a", "ab"}, {"ab", "b"})

    # "b" opens its own cluster; "ab" joins the first cluster it matches ("a"), not "b"
    assert majority_answer(["a", "b", "ab"], equivalent=chain) == 0
    assert calls == [("b", "a"), ("ab", "a")]  # (new answer, representative); an exact repeat needs no call
    calls.clear()
    assert majority_answer(["a", "a"], equivalent=chain) == 0 and calls == []
    # the cluster's correctness is its representative's (first member's)
    assert maj_at_k([["0.5", "1/2", "1/2"]], [[False, True, True]], 3, equivalent=half_equiv).tolist() == [0.0]


def test_maj_rejects_bad_shapes_and_k():
    with pytest.raises(ValueError, match="^k"):
        maj_at_k([["1", "2"]], [[True, False]], 3)
    with pytest.raises(ValueError, match="^k"):
        maj_at_k([["1", "2"]], [[True, False]], 0)
    with pytest.raises(ValueError, match="^correct"):
        maj_at_k([["1", "2"]], [[True, False], [True, True]], 1)
    with pytest.raises(ValueError, match="^correct"):
        maj_at_k([["1", "2"]], [[True]], 1)


def test_micro_and_macro_by_hand():
    scores = {"a": torch.tensor([1.0, 0.0, 1.0, 1.0]), "b": torch.tensor([0.0, 1.0])}
    agg = micro_macro(scores)
    assert agg["micro"] == pytest.approx(4 / 6) and agg["macro"] == pytest.approx((0.75 + 0.5) / 2)


def test_paper_five_avg_is_micro_with_the_benchmark_sizes():
    # Table 1, Qwen2.5-Math-1.5B base, pass@8: per-dataset columns → reported 5 Avg 56.82
    cols = {"math500": (81.60, 500), "minerva_math": (35.66, 272), "olympiad_bench": (48.15, 675),
            "amc23": (65.00, 40), "aime24": (20.00, 30)}
    # per-problem scores whose data-set means are the columns, sized as the benchmarks
    scores = {d: torch.full((n,), v, dtype=torch.float64) for d, (v, n) in cols.items()}
    agg = micro_macro(scores)
    assert round(agg["micro"], 2) == 56.82
    assert agg["macro"] == pytest.approx(sum(v for v, _ in cols.values()) / 5)  # 50.08: not the paper's


def test_bootstrap_and_paired_tests():
    v = torch.tensor([1.0] * 50 + [0.0] * 50)
    lo, hi = bootstrap_ci(v, seed=1)
    assert lo < 0.5 < hi and hi - lo < 0.25
    a = torch.tensor([0.0] * 100)
    b = torch.tensor([1.0] * 30 + [0.0] * 70)
    d = paired_bootstrap_diff(a, b, seed=1)
    assert d["diff"] == pytest.approx(0.3) and d["lo"] > 0
    m = mcnemar(a.bool(), b.bool())
    assert (m["gained"], m["lost"]) == (30, 0) and m["p_value"] < 1e-8
    assert mcnemar(b.bool(), b.bool())["p_value"] == 1.0
    # exact two-sided p for 6 gained vs 2 lost: 2·P(X ≤ 2), X ~ Bin(8, 1/2)
    x = torch.tensor([True] * 2 + [False] * 6)
    y = torch.tensor([False] * 2 + [True] * 6)
    assert mcnemar(x, y)["p_value"] == pytest.approx(2 * sum(math.comb(8, i) for i in range(3)) / 256)


def test_paper_tables_reproduce_except_exactly_one_row():
    from prl.data.paper import load_paper_tables

    rows = load_paper_tables()
    assert len(rows) == 28
    bad = [r for r in rows if not r.matches]
    assert [(r.table, r.base_model, r.method) for r in bad] == [(1, "Qwen2.5-Math-1.5B", "RAFT")]
    assert bad[0].computed_5avg == pytest.approx(62.2945, abs=1e-4) and bad[0].reported_5avg == 62.23


def test_aggregate_bootstrap_keeps_strata_and_brackets_the_estimate():
    from prl_core.metrics import aggregate_bootstrap_ci

    scores = {"big": torch.tensor([1.0] * 90 + [0.0] * 10), "small": torch.tensor([0.0] * 9 + [1.0])}
    lo, hi = aggregate_bootstrap_ci(scores, how="micro", iters=500)
    assert lo <= micro_macro(scores)["micro"] <= hi
    lo_m, hi_m = aggregate_bootstrap_ci(scores, how="macro", iters=500)
    assert lo_m <= micro_macro(scores)["macro"] <= hi_m
    # constant data sets: stratified resampling cannot move either aggregate
    const = {"a": torch.ones(5), "b": torch.zeros(20)}
    assert aggregate_bootstrap_ci(const, how="micro") == pytest.approx((0.2, 0.2))
    assert aggregate_bootstrap_ci(const, how="macro") == pytest.approx((0.5, 0.5))
    with pytest.raises(ValueError, match="how"):
        aggregate_bootstrap_ci(const, how="median")


def test_t_quantiles_match_the_published_table():
    """Student t critical values (two-sided 95%) as printed in every statistics table."""
    from prl_core.metrics import t_quantile

    table = {1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 10: 2.2281, 20: 2.0860, 30: 2.0423, 120: 1.9799}
    for df, t in table.items():
        assert t_quantile(0.975, df) == pytest.approx(t, abs=5e-5), df
    assert t_quantile(0.025, 4) == pytest.approx(-2.7764, abs=5e-5)
    assert t_quantile(0.995, 2) == pytest.approx(9.9248, abs=5e-4)


def test_seed_ci_is_mean_plus_minus_t_times_the_standard_error():
    from prl_core.metrics import seed_ci

    r = seed_ci([0.50, 0.60, 0.70])
    assert r["mean"] == pytest.approx(0.6) and r["sd"] == pytest.approx(0.1)
    assert (r["lo"], r["hi"]) == pytest.approx((0.6 - 4.3027 * 0.1 / 3 ** 0.5, 0.6 + 4.3027 * 0.1 / 3 ** 0.5), abs=1e-5)
    one = seed_ci([0.4])
    assert one["mean"] == 0.4 and math.isnan(one["lo"]) and math.isnan(one["hi"])
