"""How far the rollout engine's log-probs are from the trainer's, and the corrections for it.

The engine samples a token with log-prob log pi_rollout (its kernels, its precision: SGLang in bf16);
the trainer computes log pi_old for the same token in the same context before the update. Both should
be the same distribution; per token the ratio r = pi_old / pi_rollout = exp(log pi_old - log pi_rollout)
is 1 when they are. Everything here is over the trained tokens (the response mask) of [rows, T]
tensors; a row is a LongCoT trajectory or a Delethink chunk.

Mismatch metrics, every step (`rollout_mismatch_metrics`):
  train/rollout_prob_diff_mean, _max  mean and max of |pi_old - pi_rollout| (probabilities; the
                                      reference implementation's rollout_probs_diff_*)
  train/rollout_kl                    mean of r - 1 - log r: the k3 estimate of KL(pi_rollout || pi_old)
                                      from tokens the engine sampled (>= 0 per token, 0 when they agree)
  train/rollout_ppl_ratio             the trainer's perplexity over the rollout's on the same tokens,
                                      exp(mean(log pi_rollout - log pi_old)); > 1: the trainer is less sure

Corrections (verl's `algorithm.rollout_correction` knobs and meanings; the token-level weight, TIS, is
`core_algos.compute_policy_loss`'s tis_imp_ratio_cap), one weight per row, multiplied into its loss:
  rollout_is=sequence       the row's ratio prod_t r_t, first bounded to exp(+-MAX_LOG_RATIO) like every
                            ratio here, then capped at rollout_is_threshold (truncated IS)
  rollout_rs=sequence|geometric  a row whose ratio (sequence: prod_t r_t; geometric: exp(mean_t log r_t))
                            is outside [lower, upper] is rejected: weight 0 (lower defaults to 1 / upper)
  rollout_token_veto_threshold   a row with a token whose r_t is below it is rejected too
A rejected row adds nothing to the loss but still counts in the loss's row or token denominators. A row
without trained tokens (padding) keeps weight 1 and is left out of the statistics.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from verl.core.core_algos import MAX_LOG_RATIO, masked_mean

IS_LEVELS = (None, "sequence")
RS_LEVELS = (None, "sequence", "geometric")


def _check_shapes(old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor) -> None:
    if not old_log_prob.shape == rollout_log_prob.shape == response_mask.shape or old_log_prob.dim() != 2:
        raise ValueError(
            f"expected three equal [rows, T] shapes, got {tuple(old_log_prob.shape)}, "
            f"{tuple(rollout_log_prob.shape)}, {tuple(response_mask.shape)}"
        )


def token_log_ratios(old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """log r = log pi_old - log pi_rollout per token, float64, 0 outside the mask."""
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    diff = old_log_prob.double() - rollout_log_prob.double()
    return torch.where(response_mask.bool(), diff, torch.zeros_like(diff))


def rollout_mismatch_metrics(
    old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor
) -> dict[str, float]:
    """The four train/rollout_* metrics of the module docstring; all 0 (1 for the ratio) without tokens."""
    log_r = token_log_ratios(old_log_prob, rollout_log_prob, response_mask)
    mask = response_mask.bool()
    if not bool(mask.any()):
        return {
            "train/rollout_prob_diff_mean": 0.0, "train/rollout_prob_diff_max": 0.0,
            "train/rollout_kl": 0.0, "train/rollout_ppl_ratio": 1.0,
        }  # fmt: skip
    prob_diff = (old_log_prob.double().exp() - rollout_log_prob.double().exp()).abs()[mask]
    log_r = log_r[mask]
    return {
        "train/rollout_prob_diff_mean": float(prob_diff.mean()),
        "train/rollout_prob_diff_max": float(prob_diff.max()),
        "train/rollout_kl": float((log_r.exp() - 1 - log_r).mean()),
        "train/rollout_ppl_ratio": float((-log_r).mean().exp()),
    }


def sequence_is_weights(log_r: Tensor, threshold: float) -> Tensor:
    """[rows] truncated sequence weights min(prod_t r_t, threshold) from [rows, T] token log-ratios
    (0 outside the mask); rows without tokens get 1."""
    summed = log_r.sum(dim=-1).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return summed.exp().clamp(max=threshold)


def rejected_rows(
    log_r: Tensor,
    response_mask: Tensor,
    rollout_rs: str | None,
    upper: float | None,
    lower: float | None,
    veto: float | None,
) -> Tensor:
    """[rows] bool: rows whose ratio is outside [lower, upper] (rollout_rs: sequence | geometric; lower
    None: 1 / upper), or that hold a token with r_t < veto. Rows without tokens are never rejected."""
    mask = response_mask.bool()
    tokens = mask.sum(dim=-1)
    rejected = torch.zeros(log_r.shape[0], dtype=torch.bool, device=log_r.device)
    if rollout_rs is not None:
        if rollout_rs not in RS_LEVELS or upper is None:
            raise ValueError(f"rollout_rs={rollout_rs!r} needs one of {RS_LEVELS[1:]} and an upper bound")
        summed = log_r.sum(dim=-1)
        row_log_ratio = summed if rollout_rs == "sequence" else summed / tokens.clamp(min=1)
        low = math.log(lower) if lower is not None else -math.log(upper)
        rejected |= (row_log_ratio < low) | (row_log_ratio > math.log(upper))
    if veto is not None:
        rejected |= ((log_r < math.log(veto)) & mask).any(dim=-1)
    return rejected & (tokens > 0)


def row_weights(
    old_log_prob: Tensor,
    rollout_log_prob: Tensor,
    response_mask: Tensor,
    *,
    rollout_is: str | None = None,
    rollout_is_threshold: float = 2.0,
    rollout_rs: str | None = None,
    rollout_rs_threshold: float | None = None,
    rollout_rs_threshold_lower: float | None = None,
    rollout_token_veto_threshold: float | None = None,
) -> tuple[Tensor | None, dict[str, float]]:
    """([rows] float32 loss weight of each row, or None when every correction is off; metrics). The
    keywords are algorithm.rollout_correction's fields. Metrics, over rows with trained tokens:
    train/rollout_is_weight_mean (rollout_is on) and train/rollout_rejected_rows, the fraction of rows
    rejected (rollout_rs or the veto on)."""
    if rollout_is not in IS_LEVELS:
        raise ValueError(f"rollout_is={rollout_is!r}: expected one of {IS_LEVELS}")
    rejecting = rollout_rs is not None or rollout_token_veto_threshold is not None
    if rollout_is is None and not rejecting:
        return None, {}
    log_r = token_log_ratios(old_log_prob, rollout_log_prob, response_mask)
    has_tokens = response_mask.bool().any(dim=-1)
    weights = torch.ones(log_r.shape[0], dtype=torch.float64, device=log_r.device)
    metrics: dict[str, float] = {}
    if rollout_is is not None:
        weights = torch.where(has_tokens, sequence_is_weights(log_r, rollout_is_threshold), weights)
        metrics["train/rollout_is_weight_mean"] = float(masked_mean(weights, has_tokens))
    if rejecting:
        rejected = rejected_rows(
            log_r, response_mask, rollout_rs, rollout_rs_threshold, rollout_rs_threshold_lower,
            rollout_token_veto_threshold,
        )  # fmt: skip
        weights = torch.where(rejected, torch.zeros_like(weights), weights)
        metrics["train/rollout_rejected_rows"] = float(masked_mean(rejected.double(), has_tokens))
    return weights.float(), metrics
