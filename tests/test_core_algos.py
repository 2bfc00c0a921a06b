"""core_algos against numbers worked out by hand (the arithmetic is in the comments)."""

import math
import re

import pytest
import torch
from torch.testing import assert_close

from verl.core import core_algos, names
from verl.core.core_algos import (
    LOSS_AGG_MODES,
    agg_loss,
    compute_grpo_outcome_advantage,
    compute_outcome_advantage,
    compute_policy_loss,
    compute_rloo_outcome_advantage,
    kl_penalty,
    masked_mean,
    zero_std_ratio,
)

# ---------------------------------------------------------------------------------------------
# advantages

# group a = [2, 0, 1] (interleaved with b), group b = [0.5, 0.5] (constant), group c = [1] (singleton)
SCORES = torch.tensor([2.0, 0.5, 0.0, 0.5, 1.0, 1.0])
GROUPS = ["a", "b", "a", "b", "a", "c"]


def test_grpo_normalised_by_unbiased_std():
    # a: mean 1, deviations [1, -1, 0], unbiased var (1 + 1 + 0) / 2 = 1, std 1 -> [1, -1, 0] / (1 + eps)
    # (the population std sqrt(2/3) would give +-1.2247 instead)
    # b: constant -> deviations 0 -> 0; c: singleton -> 0
    eps = 1e-6
    expected = torch.tensor([1 / (1 + eps), 0.0, -1 / (1 + eps), 0.0, 0.0, 0.0])
    assert_close(compute_grpo_outcome_advantage(SCORES, GROUPS), expected)


def test_grpo_without_std_norm_is_mean_centred():
    # a: [2, 0, 1] - 1 = [1, -1, 0]; b: 0.5 - 0.5 = 0; c: singleton -> 0
    expected = torch.tensor([1.0, 0.0, -1.0, 0.0, 0.0, 0.0])
    assert_close(compute_grpo_outcome_advantage(SCORES, GROUPS, norm_adv_by_std=False), expected)


def test_grpo_std_scales_deviation():
    # [3, 0, 0]: mean 1, deviations [2, -1, -1], unbiased var (4 + 1 + 1) / 2 = 3, std sqrt(3)
    adv = compute_grpo_outcome_advantage(torch.tensor([3.0, 0.0, 0.0]), [7, 7, 7], eps=0.0)
    s3 = math.sqrt(3)
    assert_close(adv, torch.tensor([2 / s3, -1 / s3, -1 / s3]))


def test_rloo_leave_one_out_baseline():
    # a: 2 - (0 + 1)/2 = 1.5; 0 - (2 + 1)/2 = -1.5; 1 - (2 + 0)/2 = 0
    # b: 0.5 - 0.5 = 0; c: singleton -> 0
    expected = torch.tensor([1.5, 0.0, -1.5, 0.0, 0.0, 0.0])
    assert_close(compute_rloo_outcome_advantage(SCORES, GROUPS), expected)
    # group of 4 = [1, 0, 0, 0]: 1 - 0 = 1; 0 - (1 + 0 + 0)/3 = -1/3
    assert_close(
        compute_rloo_outcome_advantage(torch.tensor([1.0, 0.0, 0.0, 0.0]), ["d"] * 4),
        torch.tensor([1.0, -1 / 3, -1 / 3, -1 / 3]),
    )


def test_outcome_advantage_dispatch_and_errors():
    assert_close(
        compute_outcome_advantage(SCORES, GROUPS, "rloo"), compute_rloo_outcome_advantage(SCORES, GROUPS)
    )
    assert_close(
        compute_outcome_advantage(SCORES, GROUPS, "grpo", norm_adv_by_std_in_grpo=False),
        torch.tensor([1.0, 0.0, -1.0, 0.0, 0.0, 0.0]),
    )
    with pytest.raises(ValueError, match="'gae'.*grpo.*rloo"):
        compute_outcome_advantage(SCORES, GROUPS, "gae")
    with pytest.raises(ValueError, match="group_ids has 2 entries but scores has 6"):
        compute_grpo_outcome_advantage(SCORES, ["a", "b"])


def test_a_pair_a_lone_sample_and_an_empty_batch():
    # pair p = [1, 0]: mean 0.5, deviations +-0.5, unbiased var (0.25 + 0.25) / (2 - 1) = 0.5
    #   grpo (eps 0): +-0.5 / sqrt(0.5) = +-sqrt(0.5); rloo: 1 - 0 = 1, 0 - 1 = -1
    # lone s = [3]: 0 from both, even with eps 0 (its 0 / 0 never shows)
    scores, groups = torch.tensor([1.0, 3.0, 0.0]), ["p", "s", "p"]
    half = math.sqrt(0.5)
    assert_close(compute_grpo_outcome_advantage(scores, groups, eps=0.0), torch.tensor([half, 0.0, -half]))
    assert_close(compute_rloo_outcome_advantage(scores, groups), torch.tensor([1.0, 0.0, -1.0]))
    for estimator in (compute_grpo_outcome_advantage, compute_rloo_outcome_advantage):
        assert estimator(torch.zeros(0), []).shape == (0,)


def test_grpo_adds_eps_to_the_std():
    # group a of SCORES: deviations [1, -1, 0], std 1 -> [1, -1, 0] / (1 + 1) with eps 1
    expected = torch.tensor([0.5, 0.0, -0.5, 0.0, 0.0, 0.0])
    assert_close(compute_grpo_outcome_advantage(SCORES, GROUPS, eps=1.0), expected)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.int64, torch.float64])
def test_outcome_advantages_are_at_least_float32(dtype):
    # [2, 0, 1] in one group: grpo [1, -1, 0] / (1 + eps), rloo [2 - 0.5, 0 - 1.5, 1 - 1] = [1.5, -1.5, 0]
    scores = torch.tensor([2, 0, 1], dtype=dtype)
    wanted = torch.float64 if dtype == torch.float64 else torch.float32
    grpo = compute_grpo_outcome_advantage(scores, [0, 0, 0])
    rloo = compute_rloo_outcome_advantage(scores, [0, 0, 0])
    assert grpo.dtype == rloo.dtype == wanted
    assert_close(grpo, torch.tensor([1.0, -1.0, 0.0], dtype=wanted) / (1 + 1e-6))
    assert_close(rloo, torch.tensor([1.5, -1.5, 0.0], dtype=wanted))


def test_outcome_advantage_normalises_grpo_by_the_std_unless_told_not_to():
    # [3, 0, 0]: deviations [2, -1, -1], unbiased std sqrt(3) (test_grpo_std_scales_deviation)
    scores, groups = torch.tensor([3.0, 0.0, 0.0]), ["g"] * 3
    s3 = math.sqrt(3)
    assert_close(compute_outcome_advantage(scores, groups, "grpo"), torch.tensor([2 / s3, -1 / s3, -1 / s3]))
    assert_close(
        compute_outcome_advantage(scores, groups, "grpo", norm_adv_by_std_in_grpo=False),
        torch.tensor([2.0, -1.0, -1.0]),
    )


def test_scores_must_be_one_per_trajectory():
    with pytest.raises(
        ValueError, match=r"^scores must be 1-D \(one score per trajectory\), got shape \(2, 1\)$"
    ):
        compute_grpo_outcome_advantage(torch.zeros(2, 1), ["a", "b"])


def test_zero_std_ratio_is_the_share_of_groups_whose_scores_are_all_equal():
    # groups in order of first appearance: a = [1, 1] equal, b = [0, 1] differ, d = [2, 2, 2] equal
    # (interleaved with the others), c = [0.5] alone (equal: no spread) -> 3 of 4
    scores = torch.tensor([1.0, 0.0, 1.0, 2.0, 0.5, 2.0, 1.0, 2.0], dtype=torch.float64)
    assert zero_std_ratio(scores, ["a", "b", "a", "d", "c", "d", "b", "d"]) == 0.75
    # negative scores, all equal; a float64 spread that float32 would round away still counts
    assert zero_std_ratio(torch.tensor([-3.0, -3.0]), ["x", "x"]) == 1.0
    assert zero_std_ratio(torch.tensor([1.0, 1.0 + 1e-12], dtype=torch.float64), [0, 0]) == 0.0
    assert zero_std_ratio(torch.tensor([0.2, -0.7, 0.2]), [1, 1, 2]) == 0.5


# ---------------------------------------------------------------------------------------------
# masked_mean and agg_loss


def test_masked_mean():
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1, 0], [1, 1]])
    assert_close(masked_mean(values, mask), torch.tensor(8 / 3))  # (1 + 3 + 4) / 3
    assert_close(masked_mean(values, mask, dim=-1), torch.tensor([1.0, 3.5]))  # [1/1, (3 + 4)/2]
    assert_close(masked_mean(values, torch.zeros_like(mask)), torch.tensor(0.0))


# row 2 is padding (mask all zero). Masked row sums: 1+2 = 3, 4+5+6 = 15, 0; tokens per row 2, 3, 0
LOSS = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0]])
TRACE = torch.tensor([5, 5, 0])


@pytest.mark.parametrize(
    "mode, kwargs, expected",
    [
        ("token-mean", {}, 18 / 5),  # (3 + 15) / 5 tokens
        ("seq-mean-token-sum", {}, 18 / 3),  # (3 + 15 + 0) / 3 rows, padding row counts
        ("seq-mean-token-mean", {}, (3 / 2 + 15 / 3 + 0) / 3),  # = 6.5 / 3
        ("seq-mean-token-sum-norm", {}, 18 / 3 / 3),  # norm_length defaults to T = 3
        ("seq-mean-token-sum-norm", {"norm_length": 6}, 18 / 6 / 3),
        ("seq-mean-token-norm-trace-length", {"trace_lengths": TRACE}, (3 / 5 + 15 / 5 + 0) / 3),  # = 1.2
        ("seq-mean-token-sum", {"global_num_rows": 2}, 18 / 2),  # count only the real rows
        ("token-mean", {"global_num_tokens": 9}, 18 / 9),
    ],
)
def test_agg_loss_modes(mode, kwargs, expected):
    assert_close(agg_loss(LOSS, MASK, mode, **kwargs), torch.tensor(expected))


@pytest.mark.parametrize("mode", LOSS_AGG_MODES)
def test_agg_loss_micro_batches_sum_to_mini_batch(mode):
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0], [0.5, -1.0, 2.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [0, 0, 0], [1, 0, 0]])
    trace = torch.tensor([5, 5, 0, 4])
    whole = agg_loss(loss, mask, mode, trace_lengths=trace)
    totals = {"global_num_rows": 4, "global_num_tokens": 6}  # 4 rows, 2 + 3 + 0 + 1 tokens
    parts = [
        agg_loss(loss[rows], mask[rows], mode, trace_lengths=trace[rows], **totals)
        for rows in (slice(0, 1), slice(1, 4))
    ]
    assert_close(parts[0] + parts[1], whole)


def test_trace_length_mode_chunks_sum_to_trajectory_token_mean():
    # trajectory A = rows 0 and 1 (two chunks, tokens 1, 2 | 4, 5, 6: trace length 5, token-mean 18/5)
    # trajectory B = row 2 (one chunk, tokens 2, 4: trace length 2, token-mean 3)
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [2.0, 4.0, 9.0]])
    mask = torch.tensor([[1, 1, 0], [1, 1, 1], [1, 1, 0]])
    trace = torch.tensor([5, 5, 2])
    # A's chunk rows alone, one trajectory: 3/5 + 15/5 = 3.6 = 18/5
    assert_close(
        agg_loss(
            loss[:2], mask[:2], "seq-mean-token-norm-trace-length", trace_lengths=trace[:2], global_num_rows=1
        ),
        torch.tensor(18 / 5),
    )
    # both trajectories: (3/5 + 15/5 + 6/2) / 2 = (3.6 + 3) / 2 = 3.3
    assert_close(
        agg_loss(loss, mask, "seq-mean-token-norm-trace-length", trace_lengths=trace, global_num_rows=2),
        torch.tensor(3.3),
    )


def test_agg_loss_errors():
    with pytest.raises(ValueError, match="needs trace_lengths"):
        agg_loss(LOSS, MASK, "seq-mean-token-norm-trace-length")
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        agg_loss(LOSS, MASK, "seq-mean-token-norm-trace-length", trace_lengths=torch.tensor([5, 0, 0]))
    with pytest.raises(ValueError, match="trace_lengths must have shape"):
        agg_loss(LOSS, MASK, "seq-mean-token-norm-trace-length", trace_lengths=torch.tensor([5, 5]))
    with pytest.raises(ValueError, match="'sum'.*token-mean"):
        agg_loss(LOSS, MASK, "sum")
    with pytest.raises(ValueError, match=r"\[B, T\]"):
        agg_loss(LOSS, MASK[:2], "token-mean")
    with pytest.raises(ValueError, match="global_num_rows must be > 0"):
        agg_loss(LOSS, MASK, "seq-mean-token-sum", global_num_rows=0)


def test_masked_mean_of_one_selected_value_is_that_value():
    assert_close(masked_mean(torch.tensor([[5.0, 7.0]]), torch.tensor([[0, 1]])), torch.tensor(7.0))


def test_agg_loss_at_one_token_and_a_trace_length_of_one():
    # one masked token (4) in the batch; row 1 is padding
    loss, mask = torch.tensor([[4.0, 9.0], [6.0, 7.0]]), torch.tensor([[1, 0], [0, 0]])
    assert_close(agg_loss(loss, mask, "token-mean"), torch.tensor(4.0))  # 4 / 1 token
    # trace length 1 is allowed where the row has tokens: (4 / 1 + 0) / 2 rows
    trace = torch.tensor([1, 0])
    assert_close(agg_loss(loss, mask, TRAJECTORY_MEAN, trace_lengths=trace), torch.tensor(2.0))
    # a row with a single token still needs a trace length of at least 1
    with pytest.raises(ValueError, match=r"rows \[0\] are not$"):
        agg_loss(loss, mask, TRAJECTORY_MEAN, trace_lengths=torch.tensor([0, 0]))


TRAJECTORY_MEAN = names.TRAJECTORY_MEAN_MODE


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"loss_agg_mode": "token-mean", "global_num_tokens": 0}, "global_num_tokens must be > 0, got 0"),
        (
            {"loss_agg_mode": "seq-mean-token-sum-norm", "norm_length": -2.0},
            "norm_length must be > 0, got -2.0",
        ),
        (
            {"loss_agg_mode": TRAJECTORY_MEAN},
            "loss_agg_mode 'seq-mean-token-norm-trace-length' needs trace_lengths (one per row)",
        ),
    ],
)
def test_agg_loss_refusals_name_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        agg_loss(LOSS, MASK, **kwargs)


# ---------------------------------------------------------------------------------------------
# policy loss: clip_ratio_low 0.2 -> lower bound 0.8; clip_ratio_high 0.28 -> upper bound 1.28; c = 3
#   row 0, A = +1, ratios [1.1, 1.5, 0.5]
#     1.1: max(-1.1, -1.1) = -1.1                        not clipped
#     1.5: max(-1.5, -1.28) = -1.28                      upper clip
#     0.5: max(-0.5, -0.8) = -0.5                        not clipped (A > 0 ignores the lower bound)
#   row 1, A = -1, ratios [0.5, 1.2, 5.0]
#     0.5: max(0.5, 0.8) = 0.8, min(0.8, 3) = 0.8        lower clip
#     1.2: max(1.2, 1.2) = 1.2                           not clipped
#     5.0: max(5.0, 1.28) = 5.0, min(5.0, 3) = 3.0       dual clip

RATIOS = torch.tensor([[1.1, 1.5, 0.5], [0.5, 1.2, 5.0]], dtype=torch.float64)
ADV = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, -1.0]], dtype=torch.float64)
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -1.5, -4.0]], dtype=torch.float64)
CLIP = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28, "clip_ratio_c": 3.0}


def _new_log_prob() -> torch.Tensor:
    return (OLD + RATIOS.log()).requires_grad_(True)


def test_policy_loss_values_and_clip_fractions():
    out = compute_policy_loss(OLD, _new_log_prob(), ADV, torch.ones_like(ADV), **CLIP)
    expected = torch.tensor([[-1.1, -1.28, -0.5], [0.8, 1.2, 3.0]], dtype=torch.float64)
    assert_close(out.loss_mat, expected)
    assert_close(
        out.clipfrac, torch.tensor(2 / 6, dtype=torch.float64)
    )  # 1.5 (upper) and 0.5 with A<0 (lower)
    assert_close(out.clipfrac_lower, torch.tensor(1 / 6, dtype=torch.float64))  # ratio 5 with A<0
    # approx_kl = mean(old - new) = -mean(log ratio)
    logs = [math.log(r) for r in (1.1, 1.5, 0.5, 0.5, 1.2, 5.0)]
    assert_close(out.approx_kl, torch.tensor(-sum(logs) / 6, dtype=torch.float64))
    assert_close(out.tis_weight_mean, torch.tensor(1.0, dtype=torch.float64))


def test_policy_loss_statistics_respect_mask():
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])  # drop the dual-clipped token
    out = compute_policy_loss(OLD, _new_log_prob(), ADV, mask, **CLIP)
    assert_close(out.clipfrac, torch.tensor(2 / 5, dtype=torch.float64))
    assert_close(out.clipfrac_lower, torch.tensor(0.0, dtype=torch.float64))


def test_clipped_tokens_get_zero_gradient():
    log_prob = _new_log_prob()
    out = compute_policy_loss(OLD, log_prob, ADV, torch.ones_like(ADV), **CLIP)
    out.loss_mat.sum().backward()
    # unclipped: d(-A * exp(lp - old)) / d lp = -A * ratio; clipped (upper, lower, dual): 0
    expected = torch.tensor([[-1.1, 0.0, -0.5], [0.0, 1.2, 0.0]], dtype=torch.float64)
    assert_close(log_prob.grad, expected)


def test_truncated_importance_sampling_weights_are_capped():
    # old - rollout = log w_raw; cap 2: row 0 [0.5, 1, 4] -> [0.5, 1, 2]; row 1 [2, 3, 1.5] -> [2, 2, 1.5]
    w_raw = torch.tensor([[0.5, 1.0, 4.0], [2.0, 3.0, 1.5]], dtype=torch.float64)
    rollout = OLD - w_raw.log()
    log_prob = _new_log_prob()
    out = compute_policy_loss(
        OLD, log_prob, ADV, torch.ones_like(ADV), rollout_log_prob=rollout, tis_imp_ratio_cap=2.0, **CLIP
    )
    # [[-1.1, -1.28, -0.5], [0.8, 1.2, 3.0]] * [[0.5, 1, 2], [2, 2, 1.5]]
    expected = torch.tensor([[-0.55, -1.28, -1.0], [1.6, 2.4, 4.5]], dtype=torch.float64)
    assert_close(out.loss_mat, expected)
    assert_close(out.tis_weight_mean, torch.tensor(9 / 6, dtype=torch.float64))  # (0.5+1+2+2+2+1.5) / 6
    out.loss_mat.sum().backward()
    # the weight is a constant: unclipped gradients [-1.1, -0.5 | 1.2] scaled by 0.5, 2 | 2
    assert_close(log_prob.grad, torch.tensor([[-0.55, 0.0, -1.0], [0.0, 2.4, 0.0]], dtype=torch.float64))

    # a non-positive cap turns TIS off even when rollout log-probs are given
    off = compute_policy_loss(
        OLD, _new_log_prob(), ADV, torch.ones_like(ADV), rollout_log_prob=rollout, **CLIP
    )
    assert_close(off.loss_mat, torch.tensor([[-1.1, -1.28, -0.5], [0.8, 1.2, 3.0]], dtype=torch.float64))
    assert_close(off.tis_weight_mean, torch.tensor(1.0, dtype=torch.float64))


def test_row_weights_scale_each_rows_loss_as_constants():
    # the trajectory weights of core/rollout_correction.py: row 0 weighted 0.5, row 1 weighted 0
    log_prob = _new_log_prob()
    weights = torch.tensor([0.5, 0.0], dtype=torch.float32)
    out = compute_policy_loss(OLD, log_prob, ADV, torch.ones_like(ADV), row_weights=weights, **CLIP)
    expected = torch.tensor([[-0.55, -0.64, -0.25], [0.0, 0.0, 0.0]], dtype=torch.float64)
    assert_close(out.loss_mat, expected)
    out.loss_mat.sum().backward()
    # row 0's unclipped gradients [-1.1, 0, -0.5] halved; row 1 none
    assert_close(log_prob.grad, torch.tensor([[-0.55, 0.0, -0.25], [0.0, 0.0, 0.0]], dtype=torch.float64))
    # with TIS both apply: row 0's token weights [0.5, 1, 2] times 0.5
    w_raw = torch.tensor([[0.5, 1.0, 4.0], [2.0, 3.0, 1.5]], dtype=torch.float64)
    both = compute_policy_loss(
        OLD, _new_log_prob(), ADV, torch.ones_like(ADV), rollout_log_prob=OLD - w_raw.log(),
        tis_imp_ratio_cap=2.0, row_weights=weights, **CLIP,
    )  # fmt: skip
    assert_close(both.loss_mat[0], torch.tensor([-0.275, -0.64, -0.5], dtype=torch.float64))
    with pytest.raises(ValueError, match=r"row_weights: one per row\); got \{'row_weights': \(3,\)\}"):
        compute_policy_loss(
            OLD, _new_log_prob(), ADV, torch.ones_like(ADV), row_weights=torch.ones(3), **CLIP
        )


def test_policy_loss_errors():
    with pytest.raises(ValueError, match="clip_ratio_c must be > 1"):
        compute_policy_loss(
            OLD,
            _new_log_prob(),
            ADV,
            torch.ones_like(ADV),
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
            clip_ratio_c=1.0,
        )
    with pytest.raises(ValueError, match="advantages"):
        compute_policy_loss(OLD, _new_log_prob(), ADV[:, :2], torch.ones_like(ADV), **CLIP)


def test_policy_loss_defaults_to_a_dual_clip_of_3_and_takes_any_above_1():
    # row 1's ratio 5 with A = -1: capped at -A * 3 by default, at 1.5 with clip_ratio_c 1.5
    clips = {"clip_ratio_low": 0.2, "clip_ratio_high": 0.28}
    out = compute_policy_loss(OLD, _new_log_prob(), ADV, torch.ones_like(ADV), **clips)
    assert_close(out.loss_mat[1, 2], torch.tensor(3.0, dtype=torch.float64))
    out = compute_policy_loss(OLD, _new_log_prob(), ADV, torch.ones_like(ADV), clip_ratio_c=1.5, **clips)
    assert_close(out.loss_mat[1], torch.tensor([0.8, 1.2, 1.5], dtype=torch.float64))


def test_a_small_positive_advantage_is_not_dual_clipped():
    # A = 0.5 at ratios [1.5, 0.5]: max(-0.75, -0.5 * 1.28) = -0.64 and max(-0.25, -0.4) = -0.25; the
    # dual cap -A * 3 = -1.5 applies to negative advantages only
    old = torch.zeros(1, 2, dtype=torch.float64)
    log_prob = torch.tensor([[1.5, 0.5]], dtype=torch.float64).log()
    adv = torch.full((1, 2), 0.5, dtype=torch.float64)
    out = compute_policy_loss(old, log_prob, adv, torch.ones(1, 2), **CLIP)
    assert_close(out.loss_mat, torch.tensor([[-0.64, -0.25]], dtype=torch.float64))
    assert float(out.clipfrac_lower) == 0.0


def test_a_loss_exactly_at_the_dual_cap_is_not_counted_as_dual_clipped():
    # A = -1, ratio e^1.5 = 4.48 and clip_ratio_c the same float: the loss equals the cap, which
    # therefore changes nothing
    log_prob = torch.tensor([[1.5]], dtype=torch.float64)
    c = float(torch.exp(log_prob))
    old, adv = torch.zeros(1, 1, dtype=torch.float64), -torch.ones(1, 1, dtype=torch.float64)
    out = compute_policy_loss(old, log_prob, adv, torch.ones(1, 1), clip_ratio_low=0.2, clip_ratio_high=0.28,
                              clip_ratio_c=c)  # fmt: skip
    assert_close(out.loss_mat, torch.tensor([[c]], dtype=torch.float64))
    assert float(out.clipfrac_lower) == 0.0 and float(out.clipfrac) == 0.0


@pytest.mark.parametrize(
    "cap, expected",
    [
        (0.0, [[-1.1, -1.28, -0.5], [0.8, 1.2, 3.0]]),  # cap 0: TIS off
        # cap 0.5 (below 1 is still a cap): weights [0.5, 0.5, 0.5 | 0.5, 0.5, 0.5]
        (0.5, [[-0.55, -0.64, -0.25], [0.4, 0.6, 1.5]]),
    ],
)
def test_any_positive_tis_cap_turns_tis_on(cap, expected):
    w_raw = torch.tensor([[0.5, 1.0, 4.0], [2.0, 3.0, 1.5]], dtype=torch.float64)
    out = compute_policy_loss(
        OLD, _new_log_prob(), ADV, torch.ones_like(ADV), rollout_log_prob=OLD - w_raw.log(),
        tis_imp_ratio_cap=cap, **CLIP,
    )  # fmt: skip
    assert_close(out.loss_mat, torch.tensor(expected, dtype=torch.float64))


def test_log_ratios_past_20_are_clamped_in_the_ratio_the_kl_and_the_tis_weight():
    # A = 1 and log_prob = old: the loss is -1 times the TIS weight. old - rollout = +25 and -25 ->
    # weights e^20 and e^-20 (a cap of 1e10 lets e^20 = 4.85e8 through); log_prob - old = -25 on a
    # third token gives ratio e^-20 (loss -e^-20 without TIS) and approx_kl mean(0, 0, 20) = 20 / 3
    old = torch.zeros(1, 3, dtype=torch.float64)
    log_prob = torch.tensor([[0.0, 0.0, -25.0]], dtype=torch.float64)
    rollout = torch.tensor([[-25.0, 25.0, 0.0]], dtype=torch.float64)
    out = compute_policy_loss(
        old, log_prob, torch.ones_like(old), torch.ones_like(old), clip_ratio_low=1.0, clip_ratio_high=0.28,
        rollout_log_prob=rollout, tis_imp_ratio_cap=1e10,
    )  # fmt: skip
    e20 = math.exp(20)
    assert_close(
        out.loss_mat, -torch.tensor([[e20, 1 / e20, 1 / e20]], dtype=torch.float64), rtol=1e-9, atol=0
    )
    assert_close(out.approx_kl, torch.tensor(20 / 3, dtype=torch.float64))


def test_policy_loss_shape_refusal_names_every_wrong_input():
    mask = torch.ones(2, 3)
    message = (
        "expected shape (2, 3) like response_mask (row_weights: one per row); got {'old_log_prob': (2, 2), "
        "'log_prob': (1, 3), 'advantages': (3,), 'rollout_log_prob': (2, 4), 'row_weights': (3,)}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        compute_policy_loss(
            torch.zeros(2, 2), torch.zeros(1, 3), torch.zeros(3), mask, clip_ratio_low=0.2,
            clip_ratio_high=0.2, rollout_log_prob=torch.zeros(2, 4), tis_imp_ratio_cap=2.0,
            row_weights=torch.ones(3),
        )  # fmt: skip


def test_extreme_log_ratio_stays_finite():
    log_prob = torch.tensor([[100.0]], requires_grad=True)
    out = compute_policy_loss(
        torch.tensor([[-100.0]]), log_prob, torch.tensor([[-1.0]]), torch.ones(1, 1), **CLIP
    )
    assert_close(out.loss_mat, torch.tensor([[3.0]]))  # dual-clipped at -A * c
    out.loss_mat.sum().backward()
    assert torch.isfinite(log_prob.grad).all()


# ---------------------------------------------------------------------------------------------
# kl (entropy and log-probs: tests/test_log_softmax.py)


def test_kl_penalty_types():
    lp = torch.tensor([-1.0, -2.0])
    ref = torch.tensor([-1.5, -1.0])  # lp - ref = [0.5, -1.0]; ref - lp = [-0.5, 1.0]
    assert_close(kl_penalty(lp, ref, "kl"), torch.tensor([0.5, -1.0]))
    assert_close(kl_penalty(lp, ref, "abs"), torch.tensor([0.5, 1.0]))
    assert_close(kl_penalty(lp, ref, "mse"), torch.tensor([0.125, 0.5]))  # 0.5 * [0.25, 1]
    # exp(-0.5) + 0.5 - 1 = 0.1065307; exp(1) - 1 - 1 = 0.7182818
    assert_close(kl_penalty(lp, ref, "low_var_kl"), torch.tensor([math.exp(-0.5) - 0.5, math.e - 2]))
    # ref - lp = 30: exp(30) - 31 is huge -> clamped to 10
    assert_close(kl_penalty(torch.tensor([-30.0]), torch.tensor([0.0]), "low_var_kl"), torch.tensor([10.0]))
    with pytest.raises(ValueError, match="'k2'.*low_var_kl"):
        kl_penalty(lp, ref, "k2")


def test_low_var_kl_of_a_log_prob_of_minus_infinity_is_capped_not_nan():
    # ref - lp = +inf: exp(inf) - inf would be nan; the clamped log ratio keeps it at the cap 10
    assert_close(
        kl_penalty(torch.tensor([-math.inf]), torch.tensor([0.0]), "low_var_kl"), torch.tensor([10.0])
    )
    # lp - ref = +inf (ref - lp = -inf): exp(-inf) + inf is past the cap as well
    assert_close(
        kl_penalty(torch.tensor([0.0]), torch.tensor([-math.inf]), "low_var_kl"), torch.tensor([10.0])
    )


# ---------------------------------------------------------------------------------------------
# dtypes and devices

F32_LOSS = torch.tensor([[0.3, -1.7, 2.1], [0.9, 0.4, -0.6]])
F32_MASK = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])


def _results_for(mask_dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """Each function of float32 numbers with the mask (and the trace lengths, row weights, critic values
    and greedy baselines) in `mask_dtype`."""
    mask = F32_MASK.to(mask_dtype)
    other = torch.float32 if mask_dtype == torch.float32 else torch.float64  # the side inputs
    out = {
        "masked_mean": masked_mean(F32_LOSS, mask),
        "masked_whiten": core_algos.masked_whiten(F32_LOSS, mask),
        "discounted_returns": core_algos.discounted_returns(F32_LOSS, mask, 0.99),
        "reinforce_plus_plus": core_algos.compute_reinforce_plus_plus_advantage(F32_LOSS, mask, 0.99),
        "reinforce_plus_plus_baseline": core_algos.compute_reinforce_plus_plus_baseline_advantage(
            F32_LOSS, mask, ["g", "g"]
        ),
        "remax": core_algos.compute_remax_advantage(F32_LOSS, mask, torch.tensor([0.25, -0.5]).to(other)),
        "kl_in_reward": core_algos.apply_kl_penalty(F32_LOSS, F32_LOSS.flip(-1), mask, 0.1)[0],
        "policy_loss": compute_policy_loss(
            torch.zeros_like(F32_LOSS),
            F32_LOSS / 4,
            F32_LOSS,
            mask,
            clip_ratio_low=0.2,
            clip_ratio_high=0.2,
            row_weights=torch.tensor([0.5, 2.0]).to(other),
        ).loss_mat,  # fmt: skip
    }
    adv, returns = core_algos.compute_gae_advantage_return(
        F32_LOSS, F32_LOSS.flip(0).to(other), mask, 0.9, 0.8
    )
    out |= {"gae_advantages": adv, "gae_returns": returns}
    trace = torch.tensor([4, 3]).to(other)
    for mode in LOSS_AGG_MODES:
        out[mode] = agg_loss(F32_LOSS, mask, mode, trace_lengths=trace)
    return out


@pytest.mark.parametrize("mask_dtype", [torch.float64, torch.bool, torch.int64])
def test_masks_and_side_inputs_of_another_dtype_give_the_same_float32_results(mask_dtype):
    # every result is computed in the float32 of the losses / rewards, bit for bit the same as with a
    # float32 mask (returns discounted by 0.99 round differently when accumulated in float64)
    expected = _results_for(torch.float32)
    for name, result in _results_for(mask_dtype).items():
        assert result.dtype == torch.float32, name
        assert torch.equal(result, expected[name]), name


def test_value_loss_clip_fraction_has_the_values_dtype():
    # vpreds 0.5 and 2.0 from old 0 clip to 0.2, further from the returns 1 and 3: both clipped
    vpreds, returns = torch.tensor([[0.5, 2.0]], dtype=torch.float64), torch.tensor([[1.0, 3.0]])
    out = core_algos.compute_value_loss(vpreds, torch.zeros_like(vpreds), returns, torch.ones(1, 2), 0.2)
    assert out.clipfrac.dtype == torch.float64
    assert float(out.clipfrac) == 1.0


def test_new_tensors_are_made_on_the_inputs_device():
    # the meta device stands in for a GPU: a tensor made on the default device (the CPU) would not mix
    mask = torch.ones(2, 3, device="meta")
    assert core_algos.place_on_last_token(torch.zeros(2, device="meta"), mask).device.type == "meta"
    out = compute_policy_loss(mask, mask, mask, mask, clip_ratio_low=0.2, clip_ratio_high=0.2)
    assert {t.device.type for t in vars(out).values()} == {"meta"}
