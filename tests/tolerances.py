"""Tolerances for tests that compare two computations of the same numbers (two ranks against one, packed
rows against padded, micro-batches against one batch, an engine against a full forward, ...), each derived
from what may legitimately differ between the two. Those tests carry the `compares_runs` marker, and
`make test` runs them a second time under ATEN_CPU_CAPABILITY=default (torch's plain, unvectorised
kernels), so a tolerance that holds on one CPU's kernels only fails on every machine.

Float32 rounding: every operation is exact to half an ulp of its result, so two computations that differ
only in the order of their sums (another batch shape, split, rank layout or kernel) differ by rounding
alone, a few ulps per reduction, adding up along the chain of reductions behind a value. Where a value can
be computed the same way twice (a resumed run, the same rows through the same code), tests compare exactly.
"""

import math

import pytest
import torch

# A reordered sum of float32 terms moves by a few ulps of its largest partial sum: the rounding errors of
# the terms mostly cancel (the typical error grows as the square root of their number).
ULPS_PER_REDUCTION = 4
# The reductions in sequence behind a value of the tiny models' forward pass: per layer the two RMS norms,
# q/k/v, the attention scores, their softmax, the weighted values, o_proj, gate/up and down; then the final
# norm, the head and the log-sum-exp of the log-probs (2 layers: 2 * 9 + 3, rounded up).
FORWARD_REDUCTIONS = 24
FORWARD_ULPS = ULPS_PER_REDUCTION * FORWARD_REDUCTIONS
# A gradient: the forward's chain, then two reductions per forward one in the backward (the input's
# gradient and the weight's), then the sum over micro-batches or ranks.
GRADIENT_ULPS = ULPS_PER_REDUCTION * (3 * FORWARD_REDUCTIONS + 1)


def ulp(magnitude: float) -> float:
    """The spacing of float32 numbers at `magnitude` (the unit in the last place; at least the smallest
    normal number's)."""
    exponent = math.frexp(magnitude)[1] if magnitude else -125
    return 2.0 ** (max(exponent, -125) - 24)


def reordered_atol(reference: torch.Tensor | float, ulps: int) -> float:
    """`ulps` float32 ulps of the largest magnitude in `reference`: how far a value computed with its sums
    in another order may lie from it. Scaled by the largest value, not each value's own, because a value
    near zero is a cancellation of terms as large as the others."""
    largest = reference.abs().max().item() if isinstance(reference, torch.Tensor) else abs(reference)
    return ulps * ulp(largest)


def reordered_rel(ulps: int) -> float:
    """`ulps` float32 ulps relative to a value itself (its largest ulp is 2**-23 of it)."""
    return ulps * 2.0**-23


def assert_forward_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Values of the forward pass (logits, log-probs, entropies, values) computed two ways."""
    torch.testing.assert_close(got, want, atol=reordered_atol(want, FORWARD_ULPS), rtol=0)


def assert_gradients_close(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    """Gradients (or weights after plain SGD steps) computed two ways, each tensor on its own scale."""
    assert got.keys() == want.keys()
    for name, value in want.items():
        atol = reordered_atol(value, GRADIENT_ULPS)
        torch.testing.assert_close(got[name], value, atol=atol, rtol=0, msg=lambda m, n=name: f"{n}: {m}")


def metric_approx(value: float, ulps: int = GRADIENT_ULPS):
    """A logged number (a loss, a gradient norm, a mean log-prob) computed two ways, as pytest.approx: its
    terms are O(1) here (advantages, ratios, probabilities), so a cancellation near zero keeps the ulps of
    1.0."""
    return pytest.approx(value, rel=reordered_rel(ulps), abs=reordered_atol(1.0, ulps))


def adam_step_bound(lr: float, betas: tuple[float, float], steps: int) -> float:
    """The most that `steps` AdamW steps of learning rate <= `lr` can move a weight, decay aside.

    Step t moves a weight by lr * m_t / (sqrt(v_t) + eps), m_t and v_t the bias-corrected averages
    sum_k a_k g_k and sum_k b_k g_k^2 of its gradients: by Cauchy-Schwarz |m_t| <= sqrt(v_t) *
    sqrt(sum_k a_k^2 / b_k), whatever the gradients are.
    """
    beta1, beta2 = betas
    total = 0.0
    for t in range(1, steps + 1):
        a = [(1 - beta1) * beta1 ** (t - k) / (1 - beta1**t) for k in range(1, t + 1)]
        b = [(1 - beta2) * beta2 ** (t - k) / (1 - beta2**t) for k in range(1, t + 1)]
        total += lr * math.sqrt(sum(ak * ak / bk for ak, bk in zip(a, b, strict=True)))
    return total


# The share of weights whose gradient is within float rounding of zero, where AdamW's step takes the
# rounding's sign: the rare cancellations (a gradient far below eps = 1e-8 needs its terms to cancel to a
# millionth), and k_proj's bias, whose gradient is zero in exact arithmetic (softmax ignores a shift shared
# by every key): 0.02% of the tiny model. 1% is forty times that, and a wrong gradient is far above it: one
# AdamW step of the tiny model on 6 of test_dp_actor's 9 rows sets 15% of the weights apart from the step
# on all 9, a doubled lr all of them (and a mere reordering, micro-batches of 2 rows, none).
ROUNDING_SIGN_SHARE = 0.01


def assert_same_adam_steps(
    got: dict[str, torch.Tensor],
    want: dict[str, torch.Tensor],
    *,
    lr: float,
    steps: int,
    betas: tuple[float, float] = (0.9, 0.999),
) -> None:
    """`got` and `want`: the weights after `steps` AdamW steps from the same start in two runs whose
    gradients differ by float rounding alone (another reduction order).

    Where a gradient is far above its rounding, both runs take the same step: lr in its direction once it
    is far above eps. Where it is within rounding of zero, the sign of the step is the rounding's, and the
    two runs may differ by up to twice the largest step there. So: every weight within twice
    `adam_step_bound` (and a few ulps of the weights' rounding) of the other run's, and all but
    ROUNDING_SIGN_SHARE of them within a tenth of one step.
    """
    assert got.keys() == want.keys()
    bound = 2 * adam_step_bound(lr, betas, steps)
    apart, total = 0, 0
    for name, value in want.items():
        gap = (got[name].float() - value.float()).abs()
        worst = gap.max().item() if gap.numel() else 0.0
        assert worst <= bound + reordered_atol(value.float(), ULPS_PER_REDUCTION), (name, worst, bound)
        apart += int((gap > lr / 10).sum())
        total += gap.numel()
    assert apart <= ROUNDING_SIGN_SHARE * total, f"{apart} of {total} weights apart by more than lr / 10"
