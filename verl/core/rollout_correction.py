"""How far the rollout engine's log-probs are from the trainer's, and the corrections for it.

The engine samples a token with log-prob log pi_rollout (its kernels, its precision: SGLang in bf16);
the trainer computes log pi_old for the same token in the same context before the update. Both should
be the same distribution; per token the ratio r = pi_old / pi_rollout = exp(log pi_old - log pi_rollout)
is 1 when they are.

Everything here works on [S, L] tensors whose rows are whole sequences: a trajectory's trained tokens
in order (LongCoT: its one row; Delethink: all its chunk rows, laid end to end by
`verl.core.batch.TokenLayout`), so a sequence's ratio R = prod_t r_t runs over every chunk of a
Delethink trajectory and its weight or rejection is the trajectory's. Sequences without trained tokens
are left out of every statistic and are never weighted or rejected.

The metrics carry verl's names and formulas (its rollout_corr_helper; docs/TRAINING.md lists each
one), under "rollout_corr/"; the reference implementation's probability differences stay under
"train/rollout_prob_diff_*". The corrections, verl's `algorithm.rollout_correction` keys:
  rollout_is=sequence   each sequence's loss is weighted by min(R, rollout_is_threshold), R bounded to
                        exp(+-MAX_LOG_RATIO) first (truncated importance sampling)
  rollout_rs=sequence | geometric   a sequence whose R (geometric: exp(mean_t log r_t)) lies outside
                        [lower, upper] is rejected (lower defaults to 1 / upper); verl's seq_sum_k1 and
                        seq_mean_k1, whose statistic is k1 = -log r summed or averaged, bounded by
                        [1 / upper, 1 / lower] in ratio space
  rollout_token_veto_threshold   a sequence with a token whose r_t is below it is rejected
A rejected sequence's tokens leave the response mask (`on_rows`) before advantages, losses and their
statistics; token-level TIS is `core_algos.compute_policy_loss`'s tis_imp_ratio_cap.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from verl.core.core_algos import MAX_LOG_RATIO
from verl.core.names import IS_LEVELS

# verl's name of each rejection level: the option whose statistic and bounds it logs under
RS_OPTIONS = {"sequence": "seq_sum_k1", "geometric": "seq_mean_k1"}
PREFIX = "rollout_corr/"


def _check_shapes(old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor) -> None:
    if not old_log_prob.shape == rollout_log_prob.shape == response_mask.shape or old_log_prob.dim() != 2:
        raise ValueError(
            f"expected three equal [sequences, T] shapes, got {tuple(old_log_prob.shape)}, "
            f"{tuple(rollout_log_prob.shape)}, {tuple(response_mask.shape)}"
        )


def token_log_ratios(old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor) -> Tensor:
    """log r = log pi_old - log pi_rollout per token, float64, 0 outside the mask."""
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    diff = old_log_prob.double() - rollout_log_prob.double()
    return torch.where(response_mask.bool(), diff, torch.zeros_like(diff))


@dataclass(frozen=True)
class _Sequences:
    """The sequences with trained tokens, float64: log-probs and log-ratios (0 outside the mask)."""

    old: Tensor
    rollout: Tensor
    log_r: Tensor
    mask: Tensor  # 0/1
    tokens: Tensor  # [S] trained tokens of each

    def token_mean(self, values: Tensor) -> Tensor:
        """Mean over every trained token of the batch ([S, L] values, or [S] values per sequence)."""
        if values.dim() == 1:
            return (values * self.tokens).sum() / self.tokens.sum()
        return torch.where(self.mask.bool(), values, 0.0).sum() / self.tokens.sum()

    def sequence_sum(self, values: Tensor) -> Tensor:
        return torch.where(self.mask.bool(), values, 0.0).sum(dim=-1)


def _sequences(old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor) -> _Sequences:
    log_r = token_log_ratios(old_log_prob, rollout_log_prob, response_mask)
    keep = response_mask.bool().any(dim=-1)
    mask = response_mask[keep].double()
    zero = torch.zeros_like(log_r[keep])
    inside = mask.bool()
    return _Sequences(
        torch.where(inside, old_log_prob[keep].double(), zero),
        torch.where(inside, rollout_log_prob[keep].double(), zero),
        log_r[keep], mask, mask.sum(dim=-1),
    )  # fmt: skip


def _std(values: Tensor) -> float:
    """torch's (unbiased) std, 0 for a single value."""
    return float(values.std()) if values.numel() > 1 else 0.0


def _token_weighted_std(seq: _Sequences, values: Tensor, low: float, high: float) -> float:
    """verl's spread of a per-sequence quantity over the tokens: values clamped to [low, high], then the
    population std with each sequence weighted by its tokens (0 with a single token)."""
    if seq.tokens.sum() <= 1:
        return 0.0
    clamped = values.clamp(low, high)
    variance = seq.token_mean(clamped.square()) - seq.token_mean(clamped).square()
    return float(variance.clamp(min=0).sqrt())


def probability_difference_metrics(
    old_log_prob: Tensor, rollout_log_prob: Tensor, response_mask: Tensor
) -> dict[str, float]:
    """The reference implementation's mean and max of |pi_old - pi_rollout| over the trained tokens
    (probabilities, not log-probs); {} without trained tokens."""
    _check_shapes(old_log_prob, rollout_log_prob, response_mask)
    mask = response_mask.bool()
    if not bool(mask.any()):
        return {}
    diff = (old_log_prob.double().exp() - rollout_log_prob.double().exp()).abs()[mask]
    return {
        "train/rollout_prob_diff_mean": float(diff.mean()),
        "train/rollout_prob_diff_max": float(diff.max()),
    }


def offpolicy_metrics(seq: _Sequences) -> dict[str, float]:
    """verl's off-policy diagnostics: token means (kl, k3_kl, chi2_token) and means over sequences of a
    per-sequence quantity (the perplexities, their log difference, chi2_seq)."""
    mean_old = seq.sequence_sum(seq.old) / seq.tokens
    mean_rollout = seq.sequence_sum(seq.rollout) / seq.tokens
    log_ppl_diff = mean_rollout - mean_old  # log(training ppl / rollout ppl) per sequence
    bounded = seq.log_r.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    sequence_log_r = seq.sequence_sum(seq.log_r).clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO)
    return {
        "training_ppl": float((-mean_old).exp().mean()),
        "training_log_ppl": float((-mean_old).mean()),
        "kl": float(seq.token_mean(seq.rollout - seq.old)),
        "k3_kl": float(seq.token_mean(seq.log_r.exp() - seq.log_r - 1)),
        "rollout_ppl": float((-mean_rollout).exp().mean()),
        "rollout_log_ppl": float((-mean_rollout).mean()),
        "log_ppl_diff": float(log_ppl_diff.mean()),
        "log_ppl_abs_diff": float(log_ppl_diff.abs().mean()),
        "log_ppl_diff_max": float(log_ppl_diff.max()),
        "log_ppl_diff_min": float(log_ppl_diff.min()),
        "ppl_ratio": float(log_ppl_diff.exp().mean()),
        "chi2_token": float(seq.token_mean((2 * bounded).exp()) - 1),
        "chi2_seq": float((2 * sequence_log_r).exp().mean() - 1),
    }


def sequence_is_weights(seq: _Sequences, threshold: float) -> tuple[Tensor, dict[str, float]]:
    """([S] weights min(R, threshold), verl's rollout_is_* metrics of R before the cap)."""
    log_ratio = seq.sequence_sum(seq.log_r)
    ratio = log_ratio.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO).exp()
    low = 1.0 / threshold
    clamped = ratio.clamp(low, threshold)
    normalised = clamped / (seq.token_mean(clamped) + 1e-8)
    metrics = {
        "rollout_is_mean": float(seq.token_mean(ratio)),
        "rollout_is_max": math.exp(min(float(log_ratio.max()), MAX_LOG_RATIO)),
        "rollout_is_min": math.exp(float(log_ratio.min())),
        "rollout_is_ratio_fraction_high": float((log_ratio > math.log(threshold)).double().mean()),
        "rollout_is_ratio_fraction_low": float((log_ratio < -math.log(threshold)).double().mean()),
        "rollout_is_std": _token_weighted_std(seq, ratio, low, threshold),
        "rollout_is_eff_sample_size": float(1 / seq.token_mean(normalised.square())),
        "rollout_is_seq_mean": float(ratio.mean()),
        "rollout_is_seq_std": _std(ratio),
        "rollout_is_seq_max": float(ratio.max()),
        "rollout_is_seq_min": float(ratio.min()),
        "rollout_is_seq_max_deviation": float((ratio - 1).abs().max()),
        "rollout_is_seq_fraction_high": float((ratio > threshold).double().mean()),
        "rollout_is_seq_fraction_low": float((ratio < low).double().mean()),
    }
    return ratio.clamp(max=threshold), metrics


def rejected_by_ratio(
    seq: _Sequences, level: str, upper: float, lower: float | None
) -> tuple[Tensor, dict[str, float]]:
    """([S] bool: R (geometric: its per-token geometric mean) outside [lower, upper], lower None:
    1 / upper), verl's metrics of the equivalent k1 option (module docstring)."""
    if level not in RS_OPTIONS:
        raise ValueError(f"rollout_rs={level!r}: expected one of {list(RS_OPTIONS)}")
    k1 = seq.sequence_sum(-seq.log_r.clamp(-MAX_LOG_RATIO, MAX_LOG_RATIO))  # log(1 / R)
    if level == "geometric":
        k1 = k1 / seq.tokens
    low, high = -math.log(upper), -math.log(lower if lower is not None else 1.0 / upper)
    rejected = (k1 < low) | (k1 > high)
    name = f"rollout_rs_{RS_OPTIONS[level]}"
    masked = rejected.double()
    metrics = {
        f"{name}_mean": float(seq.token_mean(k1)),
        f"{name}_max": float(k1.max()),
        f"{name}_min": float(k1.min()),
        f"{name}_fraction_high": float((k1 > high).double().mean()),
        f"{name}_fraction_low": float((k1 < low).double().mean()),
        f"{name}_std": _token_weighted_std(seq, k1, low, high),
        f"{name}_seq_mean": float(k1.mean()),
        f"{name}_seq_std": _std(k1),
        f"{name}_seq_max": float(k1.max()),
        f"{name}_seq_min": float(k1.min()),
        f"{name}_seq_max_deviation": float(k1.abs().max()),
        f"{name}_seq_fraction_high": float((k1 > high).double().mean()),
        f"{name}_seq_fraction_low": float((k1 < low).double().mean()),
        f"{name}_masked_fraction": float(seq.token_mean(masked)),
        f"{name}_seq_masked_fraction": float(masked.mean()),
        "rollout_rs_masked_fraction": float(seq.token_mean(masked)),
        "rollout_rs_seq_masked_fraction": float(masked.mean()),
    }
    return rejected, metrics


def vetoed(seq: _Sequences, threshold: float) -> tuple[Tensor, dict[str, float]]:
    """([S] bool: holds a token with r_t < threshold, verl's veto metrics)."""
    catastrophic = (seq.log_r < math.log(threshold)) & seq.mask.bool()
    has = catastrophic.any(dim=-1)
    return has, {
        "rollout_is_veto_fraction": float(has.double().mean()),
        "rollout_is_catastrophic_token_fraction": float(seq.token_mean(catastrophic.double())),
    }


@dataclass(frozen=True)
class Correction:
    weights: Tensor | None  # [N] float64 weight of each sequence's loss; None: rollout_is off
    rejected: Tensor  # [N] bool: the sequence leaves the loss
    metrics: dict[str, float]  # "rollout_corr/..."; {} when no sequence has trained tokens


def correct(
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
) -> Correction:
    """The corrections the keywords (algorithm.rollout_correction's fields) turn on for [N, L]
    sequences, and the metrics: verl's off-policy ones always, each correction's when it is on."""
    if rollout_is not in IS_LEVELS:
        raise ValueError(f"rollout_is={rollout_is!r}: expected one of {IS_LEVELS}")
    if rollout_rs is not None and rollout_rs_threshold is None:
        raise ValueError(f"rollout_rs={rollout_rs!r} needs rollout_rs_threshold (its upper bound)")
    seq = _sequences(old_log_prob, rollout_log_prob, response_mask)
    has_tokens = response_mask.bool().any(dim=-1)
    weights = (
        None
        if rollout_is is None
        else torch.ones(has_tokens.shape, dtype=torch.float64, device=has_tokens.device)
    )
    rejected = torch.zeros_like(has_tokens)
    if not bool(has_tokens.any()):
        return Correction(weights, rejected, {})
    metrics = offpolicy_metrics(seq)
    if rollout_is is not None:
        sequence_weights, is_metrics = sequence_is_weights(seq, rollout_is_threshold)
        weights[has_tokens] = sequence_weights
        metrics |= is_metrics
    out = torch.zeros(seq.tokens.shape, dtype=torch.bool, device=has_tokens.device)
    if rollout_rs is not None:
        by_ratio, rs_metrics = rejected_by_ratio(
            seq, rollout_rs, rollout_rs_threshold, rollout_rs_threshold_lower
        )
        out |= by_ratio
        metrics |= rs_metrics
    if rollout_token_veto_threshold is not None:
        by_veto, veto_metrics = vetoed(seq, rollout_token_veto_threshold)
        out |= by_veto
        metrics |= veto_metrics
    rejected[has_tokens] = out
    return Correction(weights, rejected, {PREFIX + name: value for name, value in metrics.items()})


def on_rows(
    correction: Correction, sequence_index: Tensor, response_mask: Tensor
) -> tuple[Tensor | None, Tensor]:
    """Onto training rows: ([R] float32 loss weight of each row's sequence, or None; the response mask
    without the rejected sequences' rows). `sequence_index` [R] is each row's sequence (Delethink: the
    trajectory whose chunk the row is)."""
    kept = (~correction.rejected[sequence_index]).to(response_mask.dtype)
    weights = None if correction.weights is None else correction.weights[sequence_index].float()
    return weights, response_mask * kept[:, None]
