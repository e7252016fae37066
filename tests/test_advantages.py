"""prl_core.advantages against the plain-Python loops of tests/loops.py, plus the invariants of
docs/architecture.md §Invariants the tests hold."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import loops
from prl_core import fill_segments, group_advantages, prl_advantages, step_boundaries, suffix_sums
from strategies import batches

TOL = dict(rtol=1e-9, atol=1e-9)


def assert_close_to(got: torch.Tensor, want, **tol):
    want = torch.tensor(want, dtype=torch.float64).reshape(got.shape)
    torch.testing.assert_close(got.double(), want, **(tol or TOL))


# ── group advantages ───────────────────────────────────────────────────────────────

@given(batches(), st.booleans())
def test_group_advantages_match_loop(batch, normalize_std):
    got = group_advantages(batch["rewards"], batch["groups"], normalize_std=normalize_std)
    assert_close_to(got, loops.group_adv(batch["rewards"].tolist(), batch["groups"].tolist(), normalize_std))


def test_group_of_one_gives_reward_and_equal_rewards_give_exact_zero():
    rewards = torch.tensor([0.7, 0.1, 0.1, 0.1, 1.0, 0.0])
    groups = torch.tensor([9, 4, 4, 4, 2, 2])
    adv = group_advantages(rewards, groups)
    assert adv[0] == pytest.approx(0.7)
    assert torch.equal(adv[1:4], torch.zeros(3))  # exact, although 0.1 is not representable
    # two-member group: unbiased std of {1, 0} is sqrt(0.5)
    assert adv[4].item() == pytest.approx(0.5 / (math.sqrt(0.5) + 1e-6), rel=1e-6)
    assert adv[5].item() == pytest.approx(-0.5 / (math.sqrt(0.5) + 1e-6), rel=1e-6)


def test_dr_grpo_does_not_divide_by_std():
    adv = group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0]), torch.zeros(4, dtype=torch.long), normalize_std=False)
    torch.testing.assert_close(adv, torch.tensor([0.75, -0.25, -0.25, -0.25]))


# ── suffix sums ───────────────────────────────────────────────────────────────────

@given(batches())
def test_suffix_sums_match_loop_over_every_t(batch):
    got = suffix_sums(batch["old"], batch["mask"])
    assert_close_to(got, loops.suffix(batch["old"].tolist(), batch["mask"].tolist()), rtol=1e-9, atol=1e-8)


def test_suffix_sums_ignore_nan_in_padding_and_last_token_is_exact():
    values = torch.tensor([[0.1, 0.2, 0.3, float("nan")]], dtype=torch.float32)
    mask = torch.tensor([[True, True, True, False]])
    s = suffix_sums(values, mask)
    assert s[0, 2].item() == values[0, 2].item()
    assert s[0, 3].item() == 0.0
    assert s[0, 0].item() == pytest.approx(0.6, abs=1e-6)


def test_suffix_sums_float32_long_rows_stay_accurate():
    gen = torch.Generator().manual_seed(1)
    values = torch.randn(8, 3072, generator=gen) * 0.1
    mask = torch.ones(8, 3072, dtype=torch.bool)
    exact = values.double().flip(-1).cumsum(-1).flip(-1)
    err = (suffix_sums(values, mask).double() - exact).abs().max().item()
    assert err < 1e-4


# ── PRL ───────────────────────────────────────────────────────────────────────────

@given(
    batches(),
    st.sampled_from([0.3, 1.0, 100.0, math.inf]),
    st.sampled_from(["token", "fixed:1", "fixed:2", "fixed:3", None]),
    st.sampled_from(["advantage_first", "process_first"]),
    st.booleans(),
)
def test_prl_advantages_match_loop(batch, eta, split, order, normalize_std):
    mask = batch["mask"]
    bnd = step_boundaries(mask, split) if split else None
    got = prl_advantages(
        batch["rewards"], batch["groups"], batch["old"], batch["ref"], mask,
        eta=eta, boundaries=bnd, order=order, normalize_std=normalize_std,
    )
    want = loops.prl(
        batch["rewards"].tolist(), batch["groups"].tolist(), batch["old"].tolist(), batch["ref"].tolist(),
        mask.tolist(), eta, bnd.tolist() if bnd is not None else None, order, normalize_std,
    )
    assert_close_to(got, want, rtol=1e-7, atol=1e-7)


@given(batches())
def test_eta_inf_equals_grpo_exactly(batch):
    mask = batch["mask"]
    got = prl_advantages(batch["rewards"], batch["groups"], batch["old"], batch["ref"], mask, eta=math.inf)
    grpo = group_advantages(batch["rewards"], batch["groups"])
    assert torch.equal(got, grpo[:, None].expand_as(mask) * mask)
    seg = prl_advantages(batch["rewards"], batch["groups"], batch["old"], batch["ref"], mask,
                         eta=math.inf, boundaries=step_boundaries(mask, "fixed:3"))
    assert torch.equal(seg, got)


def test_large_eta_approaches_grpo():
    b = {"rewards": torch.tensor([1.0, 0.0, 1.0, 1.0]), "groups": torch.tensor([0, 0, 0, 0])}
    old, ref = torch.randn(4, 6, dtype=torch.float64), torch.randn(4, 6, dtype=torch.float64)
    mask = torch.ones(4, 6, dtype=torch.bool)
    far = prl_advantages(b["rewards"], b["groups"], old, ref, mask, eta=1e12)
    inf = prl_advantages(b["rewards"], b["groups"], old, ref, mask, eta=math.inf)
    torch.testing.assert_close(far, inf, rtol=0, atol=1e-10)
    assert not torch.equal(prl_advantages(b["rewards"], b["groups"], old, ref, mask, eta=1.0), inf)


def test_process_first_normalizes_over_boundary_values():
    # one group of two responses, token level, eta=1: boundary values r_t = R - S_t
    rewards = torch.tensor([1.0, 0.0], dtype=torch.float64)
    groups = torch.tensor([0, 0])
    old = torch.tensor([[0.5, 0.2, 0.0], [0.1, 0.0, 0.0]], dtype=torch.float64)
    ref = torch.zeros(2, 3, dtype=torch.float64)
    mask = torch.tensor([[True, True, True], [True, True, False]])
    got = prl_advantages(rewards, groups, old, ref, mask, eta=1.0, order="process_first")
    r = torch.tensor([1 - 0.7, 1 - 0.2, 1 - 0.0, 0 - 0.1, 0 - 0.0], dtype=torch.float64)  # 5 boundary values
    z = (r - r.mean()) / (r.std(unbiased=True) + 1e-6)
    torch.testing.assert_close(got[mask], z)
    assert got[1, 2] == 0.0
    # process-first is not advantage-first: its mean is over boundaries, not responses
    adv_first = prl_advantages(rewards, groups, old, ref, mask, eta=1.0)
    assert not torch.allclose(adv_first[mask], got[mask])


def test_zero_valued_boundary_keeps_its_zero():
    # Segment 1 = tokens 0-1 with boundary at 1; its value A - S_1/eta is exactly 0 here.
    rewards = torch.tensor([0.5], dtype=torch.float64)  # group of one: A = R = 0.5
    old = torch.tensor([[0.3, 0.25, 0.1, 0.2]], dtype=torch.float64)
    ref = torch.tensor([[0.0, 0.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.ones(1, 4, dtype=torch.bool)
    bnd = torch.tensor([[False, True, False, True]])
    # S_1 = 0.25 + 0.1 + 0.2 = 0.55; choose eta so 0.5 - 0.55/eta == 0 → eta = 1.1
    got = prl_advantages(rewards, torch.tensor([0]), old, ref, mask, eta=1.1, boundaries=bnd)
    assert got[0, 0] == got[0, 1]
    assert abs(got[0, 1].item()) < 1e-15  # the zero is kept, not replaced by the next segment's value
    assert got[0, 2].item() == pytest.approx(0.5 - 0.2 / 1.1)
    # And a boundary value that is exactly 0.0 in the input stays 0.0 through the fill
    values = torch.tensor([[5.0, 0.0, 7.0, 3.0]])
    filled = fill_segments(values, bnd, mask)
    assert filled.tolist() == [[0.0, 0.0, 3.0, 3.0]]


def test_result_carries_no_gradient():
    old = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    ref = torch.randn(2, 3, dtype=torch.float64, requires_grad=True)
    out = prl_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), old, ref,
                         torch.ones(2, 3, dtype=torch.bool), eta=2.0)
    assert not out.requires_grad and out.grad_fn is None


def test_float32_and_bfloat16_dtypes_are_kept():
    for dtype in (torch.float32, torch.bfloat16):
        old = torch.randn(3, 5).to(dtype)
        out = prl_advantages(torch.tensor([1.0, 0.0, 1.0]), torch.tensor([0, 0, 0]), old, torch.zeros_like(old),
                             torch.ones(3, 5, dtype=torch.bool), eta=10.0,
                             boundaries=step_boundaries(torch.ones(3, 5, dtype=torch.bool), "fixed:2"))
        assert out.dtype == dtype


def test_empty_batch_and_empty_rows():
    out = prl_advantages(torch.zeros(0), torch.zeros(0, dtype=torch.long), torch.zeros(0, 4), torch.zeros(0, 4),
                         torch.zeros(0, 4, dtype=torch.bool), eta=1.0)
    assert out.shape == (0, 4)
    mask = torch.tensor([[False, False], [True, True]])
    out = prl_advantages(torch.tensor([1.0, 0.0]), torch.tensor([0, 0]), torch.randn(2, 2), torch.randn(2, 2), mask,
                         eta=1.0, boundaries=step_boundaries(mask, "fixed:5"))
    assert out[0].tolist() == [0.0, 0.0]


@given(
    batches(),
    st.sampled_from([0.5, 50.0, math.inf]),
    st.sampled_from(["token", "fixed:1", "fixed:2", "fixed:3", "fixed:4", "fixed:64"]),
    st.sampled_from(["advantage_first", "process_first"]),
)
def test_split_string_equals_explicit_boundaries(batch, eta, split, order):
    """A split string gives what its explicit boundary mask gives, and both agree with the loop."""
    mask = batch["mask"]
    args = (batch["rewards"], batch["groups"], batch["old"], batch["ref"], mask)
    by_string = prl_advantages(*args, eta=eta, boundaries=split, order=order)
    bnd = step_boundaries(mask, split)
    by_tensor = prl_advantages(*args, eta=eta, boundaries=bnd, order=order)
    torch.testing.assert_close(by_string, by_tensor, rtol=1e-12, atol=1e-12)
    want = loops.prl(batch["rewards"].tolist(), batch["groups"].tolist(), batch["old"].tolist(),
                     batch["ref"].tolist(), mask.tolist(), eta, bnd.tolist(), order)
    assert_close_to(by_string, want, rtol=1e-7, atol=1e-7)


def test_fixed_split_string_on_a_right_padded_batch_keeps_exact_zeros():
    # a zero-valued step must stay exactly 0 when the split comes as a string
    rewards = torch.tensor([0.5], dtype=torch.float64)
    old = torch.tensor([[0.3, 0.25, 0.1, 0.2, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, True, False]])
    got = prl_advantages(rewards, torch.tensor([0]), old, torch.zeros_like(old), mask, eta=1.1, boundaries="fixed:2")
    assert abs(got[0, 0].item()) < 1e-15 and abs(got[0, 1].item()) < 1e-15
    assert got[0, 4].item() == 0.0


@pytest.mark.parametrize("order", ["advantage_first", "process_first"])
def test_fixed_split_string_on_an_empty_row_with_nan_padding_gives_zero(order):
    """Regression: a row with no response tokens and NaN in its padding gave NaN for a
    ``fixed:N`` split string (the removed chunked fast path multiplied NaN by the 0 mask); it
    must give 0, as the explicit boundary mask and the loop do."""
    nan = float("nan")
    old = torch.tensor([[nan, nan, nan, nan], [-0.5, -0.2, -0.1, nan]], dtype=torch.float64)
    ref = torch.tensor([[nan, nan, nan, nan], [-0.3, -0.3, -0.3, nan]], dtype=torch.float64)
    mask = torch.tensor([[False, False, False, False], [True, True, True, False]])
    rewards, groups = torch.tensor([1.0, 0.0], dtype=torch.float64), torch.tensor([0, 0])
    by_string = prl_advantages(rewards, groups, old, ref, mask, eta=2.0, boundaries="fixed:2", order=order)
    by_mask = prl_advantages(rewards, groups, old, ref, mask, eta=2.0, boundaries=step_boundaries(mask, "fixed:2"),
                             order=order)
    assert by_string[0].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert not bool(torch.isnan(by_string).any())
    torch.testing.assert_close(by_string, by_mask, rtol=0, atol=0)
    want = loops.prl(rewards.tolist(), groups.tolist(), old.tolist(), ref.tolist(), mask.tolist(), 2.0,
                     step_boundaries(mask, "fixed:2").tolist(), order)
    assert_close_to(by_string, want, rtol=1e-12, atol=1e-12)


def test_text_split_string_is_refused_with_the_fix():
    with pytest.raises(ValueError, match=r"^boundaries: a 'text:\\\\n\\\\n' split needs each token's text"):
        prl_advantages(torch.tensor([1.0]), torch.tensor([0]), torch.zeros(1, 3), torch.zeros(1, 3),
                       torch.ones(1, 3, dtype=torch.bool), eta=1.0, boundaries="text:\\n\\n")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("order", ["advantage_first", "process_first"])
def test_half_precision_inputs_compute_in_float32(dtype, order):
    """Group counts/sums in bf16 stop at 256: the arithmetic must run in float32 and only the
    result be rounded to the input dtype."""
    gen = torch.Generator().manual_seed(5)
    B, T = 8, 1000
    rewards = torch.tensor([1.0, 0, 0, 0, 0.501, 0.502, 1, 1])
    groups = torch.arange(B) // 4
    old = (-torch.rand(B, T, generator=gen)).to(dtype)
    ref = (-torch.rand(B, T, generator=gen)).to(dtype)
    mask = torch.ones(B, T, dtype=torch.bool)
    for eta, split in ((math.inf, None), (300.0, "fixed:256"), (300.0, None)):
        got = prl_advantages(rewards, groups, old, ref, mask, eta=eta, boundaries=split, order=order)
        want = prl_advantages(rewards, groups, old.float(), ref.float(), mask, eta=eta, boundaries=split, order=order)
        assert got.dtype == dtype
        torch.testing.assert_close(got, want.to(dtype), rtol=0, atol=0)


def test_fp16_long_rows_with_explicit_boundaries():
    T = 2100
    m = torch.ones(1, T, dtype=torch.bool)
    x = torch.zeros(1, T).half()
    out = prl_advantages(torch.ones(1), torch.zeros(1, dtype=torch.long), x, x, m, eta=1.0,
                         boundaries=step_boundaries(m, "token"))
    assert out.shape == (1, T) and bool((out == 1).all())


def test_zero_width_batches():
    for B in (0, 3):
        mask = torch.zeros(B, 0, dtype=torch.bool)
        x = torch.zeros(B, 0)
        r, g = torch.ones(B), torch.zeros(B, dtype=torch.long)
        for bnd in (None, "token", "fixed:3", step_boundaries(mask, "fixed:2")):
            assert prl_advantages(r, g, x, x, mask, eta=1.0, boundaries=bnd).shape == (B, 0)
        assert fill_segments(x, mask, mask).shape == (B, 0)


def test_fill_segments_accepts_tensors_that_require_grad():
    m = torch.ones(2, 4, dtype=torch.bool)
    v = torch.randn(2, 4, requires_grad=True)
    out = fill_segments(v, step_boundaries(m, "fixed:2"), m)
    assert torch.equal(out, v.detach()[:, [1, 1, 3, 3]]) and not out.requires_grad
