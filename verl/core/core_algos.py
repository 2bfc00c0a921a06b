"""The arithmetic of policy iteration: advantages, the PPO clipped and value losses, loss aggregation, KL.
(Log-probs and the entropy from the logits are the chunked kernel's, verl/core/log_softmax.py.)

Pure torch over tensors: no I/O, no Ray, no config objects, so every function can be checked against
numbers worked out by hand. Shapes: B rows (one per sample; in Delethink one per chunk), T response
tokens per row.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from verl.core.names import (
    ADV_ESTIMATORS,
    KL_CTRL_TYPES,
    KL_PENALTY_TYPES,
    LOSS_AGG_MODES,
    OUTCOME_ESTIMATORS,
)

# exp() of a log-ratio beyond this overflows float32 or produces useless weights; clamping keeps
# the forward finite and the backward free of inf * 0 = nan
MAX_LOG_RATIO = 20.0


# --------------------------------------------------------------------------------------------------
# Outcome advantages: one scalar score per trajectory, compared within its group (same prompt)


def _group_index(scores: Tensor, group_ids: Sequence[Hashable]) -> tuple[Tensor, int]:
    """Dense group numbers 0..G-1 in order of first appearance, and G."""
    if scores.dim() != 1:
        raise ValueError(f"scores must be 1-D (one score per trajectory), got shape {tuple(scores.shape)}")
    if len(group_ids) != scores.shape[0]:
        raise ValueError(f"group_ids has {len(group_ids)} entries but scores has {scores.shape[0]}")
    dense: dict[Hashable, int] = {}
    index = [dense.setdefault(g, len(dense)) for g in group_ids]
    return scores.new_tensor(index, dtype=torch.long), len(dense)


def _group_sums(values: Tensor, index: Tensor, num_groups: int) -> Tensor:
    return values.new_zeros(num_groups).index_add_(0, index, values)


def compute_grpo_outcome_advantage(
    scores: Tensor, group_ids: Sequence[Hashable], norm_adv_by_std: bool = True, eps: float = 1e-6
) -> Tensor:
    """(score - group mean) / (group std + eps), or only score - group mean when norm_adv_by_std is off.

    The std is the unbiased one (divides by n - 1, torch.std's default), the estimate of the spread
    of the prompt's reward distribution from n samples. A group of size 1 has no baseline to compare
    with and gets advantage 0; a group whose members all scored the same gets 0 as well.
    """
    scores = scores.detach().to(torch.promote_types(scores.dtype, torch.float32))
    index, num_groups = _group_index(scores, group_ids)
    counts = torch.bincount(index)  # every group 0..G-1 has a member: G counts
    centred = scores - (_group_sums(scores, index, num_groups) / counts)[index]
    if norm_adv_by_std:
        variance = _group_sums(centred**2, index, num_groups) / (counts - 1).clamp(min=1)
        centred = centred / (variance.sqrt()[index] + eps)
    return torch.where(counts[index] > 1, centred, torch.zeros_like(centred))


def compute_rloo_outcome_advantage(scores: Tensor, group_ids: Sequence[Hashable]) -> Tensor:
    """score - mean score of the OTHER members of its group (leave-one-out baseline); size-1 group -> 0."""
    scores = scores.detach().to(torch.promote_types(scores.dtype, torch.float32))
    index, num_groups = _group_index(scores, group_ids)
    counts = torch.bincount(index)[index]
    others_mean = (_group_sums(scores, index, num_groups)[index] - scores) / (counts - 1).clamp(min=1)
    return torch.where(counts > 1, scores - others_mean, torch.zeros_like(scores))


def compute_outcome_advantage(
    scores: Tensor, group_ids: Sequence[Hashable], estimator: str, norm_adv_by_std_in_grpo: bool = True
) -> Tensor:
    if estimator == "grpo":
        return compute_grpo_outcome_advantage(scores, group_ids, norm_adv_by_std=norm_adv_by_std_in_grpo)
    if estimator == "rloo":
        return compute_rloo_outcome_advantage(scores, group_ids)
    raise ValueError(f"unknown advantage estimator {estimator!r}; choose one of {ADV_ESTIMATORS}")


def zero_std_ratio(scores: Tensor, group_ids: Sequence[Hashable]) -> float:
    """Share of groups whose members all scored the same: they get advantage 0 and teach nothing."""
    index, num_groups = _group_index(scores, group_ids)
    lowest = scores.new_full((num_groups,), torch.inf).scatter_reduce(0, index, scores, "amin")
    highest = scores.new_full((num_groups,), -torch.inf).scatter_reduce(0, index, scores, "amax")
    return float((lowest == highest).to(torch.float32).mean())


# --------------------------------------------------------------------------------------------------
# Token-level advantages: [N, L] per trajectory, L covering its trained response tokens in order (for
# Delethink all its chunks' tokens; batch.TokenLayout maps them to and from the training rows)


def place_on_last_token(values: Tensor, mask: Tensor) -> Tensor:
    """[N] values -> [N, L] token rewards: each value on its trajectory's last masked token, 0 elsewhere
    (the outcome score is earned by the whole response, so it arrives when the response ends)."""
    if values.dim() != 1 or mask.dim() != 2 or values.shape[0] != mask.shape[0]:
        raise ValueError(
            f"expected values [N] and mask [N, L]; got {tuple(values.shape)}, {tuple(mask.shape)}"
        )
    positions = torch.arange(1, mask.shape[1] + 1, device=mask.device)
    last = (mask.bool() * positions).amax(dim=-1, keepdim=True)  # 0: no masked token, nothing to place
    return torch.where(positions == last, values[:, None], 0)


def discounted_returns(token_rewards: Tensor, mask: Tensor, gamma: float) -> Tensor:
    """G_t = r_t + gamma * G_{t+1} over each row's masked tokens (0 outside them)."""
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    mask = mask.to(token_rewards.dtype)
    returns = torch.zeros_like(token_rewards)
    running = torch.zeros_like(token_rewards[:, 0])
    for t in reversed(range(token_rewards.shape[1])):
        running = (token_rewards[:, t] + gamma * running) * mask[:, t]
        returns[:, t] = running
    return returns


def masked_whiten(values: Tensor, mask: Tensor, eps: float = 1e-8) -> Tensor:
    """(values - mean) / sqrt(var + eps) over the masked entries, 0 outside them; var is the unbiased
    one (divides by count - 1), so a single token (or identical ones) whitens to 0."""
    mask = mask.to(values.dtype)
    count = mask.sum()
    centred = (values - masked_mean(values, mask)) * mask
    variance = centred.square().sum() / (count - 1).clamp(min=1)
    return centred * torch.rsqrt(variance + eps)


def compute_reinforce_plus_plus_advantage(token_rewards: Tensor, mask: Tensor, gamma: float = 1.0) -> Tensor:
    """REINFORCE++: each token's discounted return, whitened over all masked tokens of the batch (the
    batch mean is the baseline, so no group of samples per prompt is needed)."""
    return masked_whiten(discounted_returns(token_rewards, mask, gamma), mask)


def compute_reinforce_plus_plus_baseline_advantage(
    token_rewards: Tensor, mask: Tensor, group_ids: Sequence[Hashable]
) -> Tensor:
    """REINFORCE++ with a group baseline: a trajectory's summed token rewards minus its group's mean,
    on every one of its tokens, then whitened over all masked tokens of the batch.

    As in verl, a group of one has baseline 0 (it keeps its own score): the batch whitening is then its
    only baseline, so the estimator also works with one sample per prompt.
    """
    if token_rewards.shape != mask.shape or mask.dim() != 2:
        raise ValueError(
            f"expected [N, L] token_rewards and mask; got {tuple(token_rewards.shape)}, {tuple(mask.shape)}"
        )
    sums = (token_rewards * mask.to(token_rewards.dtype)).sum(dim=-1)
    index, num_groups = _group_index(sums, group_ids)
    counts = torch.bincount(index)
    means = torch.where(counts > 1, _group_sums(sums, index, num_groups) / counts, 0.0)
    centred = (sums - means[index])[:, None] * mask.to(sums.dtype)
    return masked_whiten(centred, mask)


def compute_remax_advantage(token_rewards: Tensor, mask: Tensor, baseline_scores: Tensor) -> Tensor:
    """ReMax: each token's reward-to-go (undiscounted) minus the score of a greedy rollout of the same
    prompt, the baseline a sample must beat; not whitened."""
    if baseline_scores.shape != token_rewards.shape[:1]:
        raise ValueError(
            f"baseline_scores must have shape {tuple(token_rewards.shape[:1])} (one per trajectory), "
            f"got {tuple(baseline_scores.shape)}"
        )
    mask = mask.to(token_rewards.dtype)
    return (discounted_returns(token_rewards, mask, 1.0) - baseline_scores[:, None].to(mask.dtype)) * mask


def compute_gae_advantage_return(
    token_rewards: Tensor, values: Tensor, mask: Tensor, gamma: float, lam: float
) -> tuple[Tensor, Tensor]:
    """Generalised advantage estimation over each trajectory's masked tokens: (advantages, returns).

    delta_t = r_t + gamma * V_{t+1} - V_t, A_t = delta_t + gamma * lam * A_{t+1}; past a trajectory's
    last masked token V and A are 0 (the episode ends there). returns = A + V is the critic's target;
    the advantages are whitened over the masked tokens (as in verl). The rows are trajectories, so for
    Delethink V_{t+1} of a chunk's last token is the next chunk's first value (see TokenLayout).
    """
    if not 0 < gamma <= 1:
        raise ValueError(f"gamma must be in (0, 1], got {gamma}")
    if not 0 <= lam <= 1:
        raise ValueError(f"lam must be in [0, 1], got {lam}")
    if not token_rewards.shape == values.shape == mask.shape or token_rewards.dim() != 2:
        raise ValueError(
            f"expected [N, L] rewards, values and mask; got {tuple(token_rewards.shape)}, "
            f"{tuple(values.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.to(token_rewards.dtype)
    values = values.detach().to(token_rewards.dtype) * mask
    advantages = torch.zeros_like(token_rewards)
    next_value = running = torch.zeros_like(token_rewards[:, 0])
    for t in reversed(range(token_rewards.shape[1])):
        delta = token_rewards[:, t] + gamma * next_value - values[:, t]
        running = (delta + gamma * lam * running) * mask[:, t]
        advantages[:, t] = running
        next_value = values[:, t]
    returns = advantages + values
    return masked_whiten(advantages, mask), returns


def compute_token_advantage(
    estimator: str,
    token_rewards: Tensor,
    mask: Tensor,
    *,
    group_ids: Sequence[Hashable],
    gamma: float = 1.0,
    baseline_scores: Tensor | None = None,
) -> Tensor:
    """[N, L] advantages of a token-level estimator without a critic (every one but OUTCOME_ESTIMATORS
    and gae, whose values come from the critic: compute_gae_advantage_return)."""
    if estimator == "reinforce_plus_plus":
        return compute_reinforce_plus_plus_advantage(token_rewards, mask, gamma)
    if estimator == "reinforce_plus_plus_baseline":
        return compute_reinforce_plus_plus_baseline_advantage(token_rewards, mask, group_ids)
    if estimator == "remax":
        if baseline_scores is None:
            raise ValueError(
                "remax needs baseline_scores: the greedy rollout's score of each trajectory's prompt"
            )
        return compute_remax_advantage(token_rewards, mask, baseline_scores)
    token_level = [e for e in ADV_ESTIMATORS if e not in (*OUTCOME_ESTIMATORS, "gae")]
    raise ValueError(f"unknown token-level advantage estimator {estimator!r}; choose one of {token_level}")


# --------------------------------------------------------------------------------------------------
# KL to the reference policy as a reward penalty


def apply_kl_penalty(token_rewards: Tensor, kl: Tensor, mask: Tensor, kl_coef: float) -> tuple[Tensor, float]:
    """(token_rewards - kl_coef * kl on masked tokens, the batch's KL): the KL is each trajectory's mean
    per-token KL, averaged over the trajectories that have masked tokens."""
    if not token_rewards.shape == kl.shape == mask.shape or mask.dim() != 2:
        raise ValueError(
            f"expected [N, L] token_rewards, kl and mask; got {tuple(token_rewards.shape)}, "
            f"{tuple(kl.shape)}, {tuple(mask.shape)}"
        )
    mask = mask.to(token_rewards.dtype)
    kl = kl * mask
    has_tokens = mask.sum(dim=-1) > 0
    per_trajectory = masked_mean(kl, mask, dim=-1)[has_tokens]
    current_kl = float(per_trajectory.mean()) if per_trajectory.numel() else 0.0
    return token_rewards - kl_coef * kl, current_kl


def adaptive_kl_coef(
    kl_coef: float, current_kl: float, target_kl: float, n_steps: int, horizon: int
) -> float:
    """The PPO paper's proportional controller: the coefficient grows when the KL is above target and
    shrinks below it, by at most 20% of n_steps / horizon per update."""
    error = min(max(current_kl / target_kl - 1.0, -0.2), 0.2)
    return kl_coef * (1.0 + error * n_steps / horizon)


@dataclass
class KLController:
    """The KL-in-reward coefficient; `value` is what a checkpoint saves and a resume restores."""

    value: float
    kind: str = "fixed"  # fixed: value never changes | adaptive: adaptive_kl_coef after every step
    target_kl: float = 0.1
    horizon: int = 10000

    def __post_init__(self) -> None:
        if self.kind not in KL_CTRL_TYPES:
            raise ValueError(f"unknown KL controller {self.kind!r}; choose one of {KL_CTRL_TYPES}")

    def update(self, current_kl: float, n_steps: int) -> None:
        """After a step that saw `n_steps` trajectories with mean KL `current_kl`."""
        if self.kind == "adaptive":
            self.value = adaptive_kl_coef(self.value, current_kl, self.target_kl, n_steps, self.horizon)


# --------------------------------------------------------------------------------------------------
# Loss aggregation


def masked_mean(values: Tensor, mask: Tensor, dim: int | None = None) -> Tensor:
    """Mean of `values` where the 0/1 `mask` is 1; 0 (not nan) where nothing is selected."""
    mask = mask.to(values.dtype)
    if dim is None:
        return (values * mask).sum() / mask.sum().clamp(min=1)
    return (values * mask).sum(dim) / mask.sum(dim).clamp(min=1)


def _positive(name: str, value: float) -> float:
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value}")
    return float(value)


def agg_loss(
    loss_mat: Tensor,
    loss_mask: Tensor,
    loss_agg_mode: str,
    *,
    trace_lengths: Tensor | None = None,
    norm_length: float | None = None,
    global_num_rows: float | None = None,
    global_num_tokens: float | None = None,
    global_num_trajectories: float | None = None,
) -> Tensor:
    """Reduce a [B, T] per-token loss to a scalar.

    The denominators global_num_rows / global_num_tokens / global_num_trajectories default to this
    batch's row count B, token count mask.sum() and row count B again (one row per trajectory). A
    caller that splits a mini-batch into micro-batches passes the mini-batch's counts instead, so the
    micro-batch losses add up to exactly the mini-batch loss.

    Rows whose mask is all zero (padding rows) add 0 to the numerator but still count in the default
    row count; pass global_num_rows to count only real rows.

    Modes (n_rows, n_tokens, n_trajectories are the denominators above; sums over t run over masked
    tokens):
      token-mean                        sum(loss) / n_tokens
      seq-mean-token-sum                sum_rows(sum_t loss) / n_rows
      seq-mean-token-mean               sum_rows(sum_t loss / tokens_in_row) / n_rows
      seq-mean-token-sum-norm           sum_rows(sum_t loss) / norm_length / n_rows   (norm_length
                                        defaults to T; usually the max response length)
      seq-mean-token-norm-trace-length  sum_rows(sum_t loss / trace_length_row) / n_trajectories
    The last (TRAJECTORY_MEAN_MODE) is Delethink's: every chunk row of a trajectory carries the token
    count of the WHOLE trace, so a trajectory's chunk rows together weigh like one token-mean over its
    full trace, and dividing by the trajectories (not the rows) makes the loss the mean over
    trajectories however many chunks each has. It is the only mode that reads n_trajectories.
    """
    if loss_mat.dim() != 2 or loss_mat.shape != loss_mask.shape:
        raise ValueError(
            f"loss_mat and loss_mask must both be [B, T]; "
            f"got {tuple(loss_mat.shape)} and {tuple(loss_mask.shape)}"
        )
    if loss_agg_mode not in LOSS_AGG_MODES:
        raise ValueError(f"unknown loss_agg_mode {loss_agg_mode!r}; choose one of {LOSS_AGG_MODES}")
    mask = loss_mask.to(loss_mat.dtype)
    row_sums = (loss_mat * mask).sum(dim=-1)

    if loss_agg_mode == "token-mean":
        if global_num_tokens is None:
            num_tokens = mask.sum().clamp(min=1)
        else:
            num_tokens = _positive("global_num_tokens", global_num_tokens)
        return row_sums.sum() / num_tokens

    num_rows = loss_mat.shape[0] if global_num_rows is None else _positive("global_num_rows", global_num_rows)
    if loss_agg_mode == "seq-mean-token-sum":
        return row_sums.sum() / num_rows
    if loss_agg_mode == "seq-mean-token-mean":
        return (row_sums / mask.sum(dim=-1).clamp(min=1)).sum() / num_rows
    if loss_agg_mode == "seq-mean-token-sum-norm":
        horizon = loss_mat.shape[-1] if norm_length is None else _positive("norm_length", norm_length)
        return row_sums.sum() / horizon / num_rows

    # seq-mean-token-norm-trace-length
    if trace_lengths is None:
        raise ValueError("loss_agg_mode 'seq-mean-token-norm-trace-length' needs trace_lengths (one per row)")
    if trace_lengths.shape != row_sums.shape:
        raise ValueError(
            f"trace_lengths must have shape {tuple(row_sums.shape)} (one per row), "
            f"got {tuple(trace_lengths.shape)}"
        )
    has_tokens = mask.sum(dim=-1) > 0
    bad_rows = (has_tokens & (trace_lengths < 1)).nonzero().flatten().tolist()
    if bad_rows:
        raise ValueError(f"trace_lengths must be >= 1 for rows with response tokens; rows {bad_rows} are not")
    num_trajectories = (
        num_rows
        if global_num_trajectories is None
        else _positive("global_num_trajectories", global_num_trajectories)
    )
    # padding rows have row sum 0; clamping their length keeps 0 / 0 out of the sum
    return (row_sums / trace_lengths.to(loss_mat.dtype).clamp(min=1)).sum() / num_trajectories


# --------------------------------------------------------------------------------------------------
# PPO clipped policy loss


@dataclass
class PolicyLossOutput:
    loss_mat: Tensor  # [B, T] per-token loss, already multiplied by TIS and row weights; not aggregated
    clipfrac: Tensor  # masked fraction of tokens where the clipped branch (upper or lower) was taken
    clipfrac_lower: Tensor  # masked fraction where the dual clip (negative advantages) was active
    approx_kl: Tensor  # masked mean of old_log_prob - log_prob
    tis_weight_mean: Tensor  # masked mean of the TIS weights (1.0 when TIS is off)


def compute_policy_loss(
    old_log_prob: Tensor,
    log_prob: Tensor,
    advantages: Tensor,
    response_mask: Tensor,
    *,
    clip_ratio_low: float,
    clip_ratio_high: float,
    clip_ratio_c: float = 3.0,
    rollout_log_prob: Tensor | None = None,
    tis_imp_ratio_cap: float = -1.0,
    row_weights: Tensor | None = None,
) -> PolicyLossOutput:
    """Per-token PPO loss with dual clipping and optional truncated importance sampling (TIS).

    All inputs are [B, T] (advantages already broadcast to tokens). Only `log_prob` should carry grad.
    TIS runs when tis_imp_ratio_cap > 0 and rollout_log_prob is given: the rollout engine sampled from
    slightly different numbers than the trainer computes (kernels, precision), so each token's loss is
    reweighted by min(pi_old / pi_rollout, cap), detached. `row_weights` ([B], constants) multiply each
    row's loss: the trajectory weights of core/rollout_correction.py, one per row's trajectory.
    """
    if clip_ratio_c <= 1.0:
        raise ValueError(
            f"clip_ratio_c must be > 1 (it caps the loss of negative advantages), got {clip_ratio_c}"
        )
    shapes = {"old_log_prob": old_log_prob.shape, "log_prob": log_prob.shape, "advantages": advantages.shape}
    if rollout_log_prob is not None:
        shapes["rollout_log_prob"] = rollout_log_prob.shape
    wrong = {name: tuple(shape) for name, shape in shapes.items() if shape != response_mask.shape}
    if row_weights is not None and row_weights.shape != response_mask.shape[:1]:
        wrong["row_weights"] = tuple(row_weights.shape)
    if wrong:
        raise ValueError(
            f"expected shape {tuple(response_mask.shape)} like response_mask (row_weights: one per row); "
            f"got {wrong}"
        )

    log_ratio = (log_prob - old_log_prob).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    ratio = torch.exp(log_ratio)
    unclipped = -advantages * ratio
    clipped = -advantages * ratio.clamp(1.0 - clip_ratio_low, 1.0 + clip_ratio_high)
    # max of the two = pessimistic bound; where the clipped term wins its gradient is zero
    clip_loss = torch.maximum(unclipped, clipped)
    # dual clip: with A < 0 and a huge ratio the loss above grows without bound; cap it at -A * c
    dual_cap = -advantages * clip_ratio_c
    negative = advantages < 0
    loss_mat = torch.where(negative, torch.minimum(clip_loss, dual_cap), clip_loss)

    if tis_imp_ratio_cap > 0 and rollout_log_prob is not None:
        tis_log_ratio = (old_log_prob - rollout_log_prob).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
        tis_weight = torch.exp(tis_log_ratio).clamp(max=tis_imp_ratio_cap).detach()
        loss_mat = loss_mat * tis_weight
        tis_weight_mean = masked_mean(tis_weight, response_mask)
    else:
        tis_weight_mean = torch.ones((), dtype=loss_mat.dtype, device=loss_mat.device)
    if row_weights is not None:
        loss_mat = loss_mat * row_weights.detach().to(loss_mat.dtype).unsqueeze(-1)

    with torch.no_grad():
        clipfrac = masked_mean((clipped > unclipped).to(loss_mat.dtype), response_mask)
        clipfrac_lower = masked_mean((negative & (clip_loss > dual_cap)).to(loss_mat.dtype), response_mask)
        approx_kl = masked_mean(-log_ratio, response_mask)
    return PolicyLossOutput(loss_mat, clipfrac, clipfrac_lower, approx_kl, tis_weight_mean)


# --------------------------------------------------------------------------------------------------
# Clipped value loss (the critic)


@dataclass
class ValueLossOutput:
    loss_mat: Tensor  # [B, T] per-token loss, not aggregated
    clipfrac: Tensor  # masked fraction of tokens where the clipped prediction gave the larger error


def compute_value_loss(
    vpreds: Tensor, old_values: Tensor, returns: Tensor, response_mask: Tensor, cliprange_value: float
) -> ValueLossOutput:
    """0.5 * max((vpred - R)^2, (vclipped - R)^2), vclipped = old + clamp(vpred - old, +-cliprange_value):
    like the policy's ratio clip, a prediction may not move far from the values the advantages were
    computed with in one step. Only `vpreds` should carry grad."""
    wrong = {
        name: tuple(t.shape)
        for name, t in (("vpreds", vpreds), ("old_values", old_values), ("returns", returns))
        if t.shape != response_mask.shape
    }
    if wrong:
        raise ValueError(f"expected shape {tuple(response_mask.shape)} like response_mask; got {wrong}")
    cliprange_value = _positive("cliprange_value", cliprange_value)
    vclipped = old_values + (vpreds - old_values).clamp(-cliprange_value, cliprange_value)
    unclipped_loss = (vpreds - returns).square()
    clipped_loss = (vclipped - returns).square()
    with torch.no_grad():
        clipfrac = masked_mean((clipped_loss > unclipped_loss).to(vpreds.dtype), response_mask)
    return ValueLossOutput(0.5 * torch.maximum(unclipped_loss, clipped_loss), clipfrac)


# --------------------------------------------------------------------------------------------------
# Per-token quantities from logits


def kl_penalty(log_prob: Tensor, ref_log_prob: Tensor, kl_type: str) -> Tensor:
    """Per-token estimate of KL(policy || reference) from log-probs of the sampled tokens.

    kl: k1 = lp - ref (unbiased, high variance); abs: |lp - ref|; mse: 0.5 * (lp - ref)^2;
    low_var_kl: k3 = exp(ref - lp) - (ref - lp) - 1 (unbiased, never negative), capped at 10.
    """
    diff = log_prob - ref_log_prob
    if kl_type == "kl":
        return diff
    if kl_type == "abs":
        return diff.abs()
    if kl_type == "mse":
        return 0.5 * diff.square()
    if kl_type == "low_var_kl":
        # below -MAX_LOG_RATIO k3 is past the cap anyway; above it exp() would overflow
        ref_minus_lp = (-diff).clamp(max=MAX_LOG_RATIO)
        return (torch.exp(ref_minus_lp) - ref_minus_lp - 1).clamp(max=10.0)
    raise ValueError(f"unknown kl_type {kl_type!r}; choose one of {KL_PENALTY_TYPES}")
