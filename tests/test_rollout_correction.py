"""The rollout/training mismatch: its metrics (verl's names and formulas) and corrections as pure functions
against hand-computed numbers, by whole trajectory (a Delethink trajectory's chunks together), a rejected
trajectory's absence from every loss and statistic, their config rules, and on real CPU runs in both
environments: the engine sampling in bfloat16 against the actor in float32 shows a mismatch, float32
against float32 about none, a correction that rejects every trajectory leaves no gradient, and bypass mode
trains against the engine's log-probs."""

import copy
import json
import math
import time
from pathlib import Path

import pytest
import torch
from wandb.proto import wandb_internal_pb2

from tests.e2e_utils import DELETHINK, HANG_S, ONE_PROCESS, tiny_config, tiny_longcot_with
from tests.test_checkpoint_retention import _entry_point
from tests.test_local_launcher import assert_refused
from tests.test_trajectory_weight import TRAJECTORIES, actor_batch
from tests.tolerances import ULPS_PER_REDUCTION, assert_gradients_close, metric_approx, reordered_atol
from verl.config import ActorConfig, ConfigError, CriticConfig
from verl.core.batch import TokenLayout, TrainRow, collate_rows, pad_rows_to_multiple, select_rows
from verl.core.names import TRAJECTORY_MEAN_MODE
from verl.core.rollout_correction import (
    PREFIX,
    Correction,
    correct,
    on_rows,
    probability_difference_metrics,
)
from verl.models.tiny import build_model, build_tokenizer
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.critic.dp_critic import DataParallelPPOCritic

# Two sequences of three tokens; the third token of sequence A is not trained (masked), and its ratio would
# trip every bound. Token ratios r = pi_old / pi_rollout:
#   A: 0.5 / 0.4 = 1.25, 0.25 / 0.25 = 1              (masked: 0.01 / 0.9)   R_A = 1.25, 2 tokens
#   B: 0.2 / 0.1 = 2,    0.4 / 0.5 = 0.8,  0.9 / 0.9 = 1                     R_B = 1.6,  3 tokens
OLD = torch.tensor([[0.5, 0.25, 0.01], [0.2, 0.4, 0.9]], dtype=torch.float64).log()
ROLLOUT = torch.tensor([[0.4, 0.25, 0.9], [0.1, 0.5, 0.9]], dtype=torch.float64).log()
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])
LN = math.log


def test_offpolicy_metrics_are_verls_formulas_by_hand():
    metrics = correct(OLD, ROLLOUT, MASK).metrics
    # per sequence: mean log-probs, trainer (old) and engine (rollout)
    old_a, old_b = LN(0.5 * 0.25) / 2, LN(0.2 * 0.4 * 0.9) / 3
    rollout_a, rollout_b = LN(0.4 * 0.25) / 2, LN(0.1 * 0.5 * 0.9) / 3
    diff_a, diff_b = rollout_a - old_a, rollout_b - old_b  # = -log R / tokens: -log(1.25) / 2, -log(1.6) / 3
    expected = {
        # perplexities: the mean over sequences of each one's exp(-mean log-prob)
        "training_ppl": (math.exp(-old_a) + math.exp(-old_b)) / 2,
        "training_log_ppl": -(old_a + old_b) / 2,
        "rollout_ppl": (math.exp(-rollout_a) + math.exp(-rollout_b)) / 2,
        "rollout_log_ppl": -(rollout_a + rollout_b) / 2,
        # token means over the 5 tokens: log(pi_rollout / pi_old) = -log r, and k3 = r - 1 - log r
        "kl": -LN(1.25 * 2 * 0.8) / 5,
        "k3_kl": ((0.25 - LN(1.25)) + (1 - LN(2)) + (-0.2 - LN(0.8))) / 5,
        "log_ppl_diff": (diff_a + diff_b) / 2,
        "log_ppl_abs_diff": (abs(diff_a) + abs(diff_b)) / 2,
        "log_ppl_diff_max": max(diff_a, diff_b),
        "log_ppl_diff_min": min(diff_a, diff_b),
        # the mean of the per-sequence ratios, not one ratio of pooled tokens
        "ppl_ratio": (1.25 ** (-1 / 2) + 1.6 ** (-1 / 3)) / 2,
        "chi2_token": (1.25**2 + 1 + 2**2 + 0.8**2 + 1) / 5 - 1,  # 0.6405
        "chi2_seq": (1.25**2 + 1.6**2) / 2 - 1,  # 1.06125
    }
    assert metrics == pytest.approx({f"rollout_corr/{k}": v for k, v in expected.items()}, rel=1e-12)
    # the reference implementation's |pi_old - pi_rollout|: 0.1, 0, 0.1, 0.1, 0
    assert probability_difference_metrics(OLD, ROLLOUT, MASK) == pytest.approx(
        {"train/rollout_prob_diff_mean": 0.3 / 5, "train/rollout_prob_diff_max": 0.1}
    )
    # two rows, 10 tokens at log r = -0.1 and 1000 at 0: verl's ppl_ratio is 1.053, a pooled one 1.001
    old, mask = torch.zeros(2, 1000), torch.zeros(2, 1000)
    old[0, :10], mask[0, :10], mask[1] = -0.1, 1, 1
    pooled = math.exp(0.1 * 10 / 1010)
    ppl_ratio = correct(old, torch.zeros(2, 1000), mask).metrics["rollout_corr/ppl_ratio"]
    assert ppl_ratio == pytest.approx((math.exp(0.1) + 1) / 2) and ppl_ratio > pooled + 0.05
    # nothing trained, nothing measured
    assert correct(OLD, ROLLOUT, torch.zeros_like(MASK)).metrics == {}
    assert probability_difference_metrics(OLD, ROLLOUT, torch.zeros_like(MASK)) == {}
    with pytest.raises(ValueError, match=r"expected three equal \[sequences, T\] shapes"):
        correct(OLD, ROLLOUT[:, :2], MASK)


def test_sequence_weights_and_their_metrics_by_hand():
    correction = correct(OLD, ROLLOUT, MASK, rollout_is="sequence", rollout_is_threshold=1.5)
    # R = 1.25 and 1.6, capped at 1.5
    assert correction.weights.tolist() == pytest.approx([1.25, 1.5])
    assert not correction.rejected.any()
    # the spread: R clamped to [1 / 1.5, 1.5] = 1.25 and 1.5, weighted by tokens (2 and 3)
    mean = (2 * 1.25 + 3 * 1.5) / 5  # 1.4
    second = (2 * 1.25**2 + 3 * 1.5**2) / 5  # 1.975
    expected = {
        "rollout_is_mean": (2 * 1.25 + 3 * 1.6) / 5,  # before the cap, weighted by tokens: 1.46
        "rollout_is_max": 1.6,
        "rollout_is_min": 1.25,
        "rollout_is_ratio_fraction_high": 0.5,  # 1.6 > 1.5
        "rollout_is_ratio_fraction_low": 0.0,  # none below 1 / 1.5
        "rollout_is_std": math.sqrt(second - mean**2),
        "rollout_is_eff_sample_size": mean**2 / second,  # 1 / E[(w / E[w])^2]
        "rollout_is_seq_mean": (1.25 + 1.6) / 2,
        "rollout_is_seq_std": 0.35 / math.sqrt(2),  # unbiased over the 2 sequences
        "rollout_is_seq_max": 1.6,
        "rollout_is_seq_min": 1.25,
        "rollout_is_seq_max_deviation": 0.6,
        "rollout_is_seq_fraction_high": 0.5,
        "rollout_is_seq_fraction_low": 0.0,
    }
    metrics = {k: v for k, v in correction.metrics.items() if k.startswith("rollout_corr/rollout_is")}
    # verl divides the effective sample size's mean by (mean + 1e-8): 1e-8 relative here
    assert metrics == pytest.approx({f"rollout_corr/{k}": v for k, v in expected.items()}, rel=1e-7)
    # R is bounded to exp(20) before the cap: no overflow from a long sequence
    huge = correct(torch.full((1, 3), 30.0), torch.zeros(1, 3), torch.ones(1, 3), rollout_is="sequence",
                   rollout_is_threshold=float("inf"))  # fmt: skip
    assert huge.weights.item() == pytest.approx(math.exp(20))


def test_rejection_and_its_metrics_by_hand():
    # sequence: R_A = 1.25 inside [1 / 1.5, 1.5], R_B = 1.6 above: verl's seq_sum_k1, whose statistic is
    # k1 = -log R, inside [log(1 / 1.5), log 1.5]
    correction = correct(OLD, ROLLOUT, MASK, rollout_rs="sequence", rollout_rs_threshold=1.5)
    assert correction.rejected.tolist() == [False, True] and correction.weights is None
    k1_a, k1_b = -LN(1.25), -LN(1.6)
    low = -LN(1.5)  # the bounds [log(1 / 1.5), log 1.5]
    clamped = (2 * k1_a + 3 * low) / 5, (2 * k1_a**2 + 3 * low**2) / 5  # k1_b clamps to low
    expected = {
        "mean": (2 * k1_a + 3 * k1_b) / 5,
        "max": k1_a,
        "min": k1_b,
        "fraction_high": 0.0,
        "fraction_low": 0.5,
        "std": math.sqrt(clamped[1] - clamped[0] ** 2),
        "seq_mean": (k1_a + k1_b) / 2,
        "seq_std": (k1_a - k1_b) / math.sqrt(2),
        "seq_max": k1_a,
        "seq_min": k1_b,
        "seq_max_deviation": -k1_b,
        "seq_fraction_high": 0.0,
        "seq_fraction_low": 0.5,
        "masked_fraction": 3 / 5,  # B's 3 tokens of 5
        "seq_masked_fraction": 0.5,
    }
    want = {f"rollout_corr/rollout_rs_seq_sum_k1_{k}": v for k, v in expected.items()}
    want |= {"rollout_corr/rollout_rs_masked_fraction": 3 / 5,
             "rollout_corr/rollout_rs_seq_masked_fraction": 0.5}  # fmt: skip
    metrics = {k: v for k, v in correction.metrics.items() if k.startswith("rollout_corr/rollout_rs")}
    assert metrics == pytest.approx(want, rel=1e-12)

    def rejected(**bounds):
        return correct(OLD, ROLLOUT, MASK, **bounds).rejected.tolist()

    # an explicit lower bound: 1.25 < 1.3
    assert rejected(rollout_rs="sequence", rollout_rs_threshold=1.7, rollout_rs_threshold_lower=1.3) == [
        True, False,
    ]  # fmt: skip
    # geometric: 1.25 ** (1/2) = 1.118 and 1.6 ** (1/3) = 1.170 against [1 / 1.15, 1.15]; verl's seq_mean_k1
    geometric = correct(OLD, ROLLOUT, MASK, rollout_rs="geometric", rollout_rs_threshold=1.15)
    assert geometric.rejected.tolist() == [False, True]
    assert geometric.metrics["rollout_corr/rollout_rs_seq_mean_k1_seq_mean"] == pytest.approx(
        -(LN(1.25) / 2 + LN(1.6) / 3) / 2
    )
    # veto: B holds a token at 0.8 (A's masked 0.011 does not count)
    vetoed = correct(OLD, ROLLOUT, MASK, rollout_token_veto_threshold=0.85)
    assert vetoed.rejected.tolist() == [False, True]
    assert vetoed.metrics["rollout_corr/rollout_is_veto_fraction"] == 0.5
    assert vetoed.metrics["rollout_corr/rollout_is_catastrophic_token_fraction"] == pytest.approx(1 / 5)
    assert rejected(rollout_token_veto_threshold=0.75) == [False, False]
    # a sequence without trained tokens is never rejected, and counts in no statistic
    empty = correct(OLD, ROLLOUT, torch.tensor([[0, 0, 0], [1, 1, 1]]), rollout_rs="sequence",
                    rollout_rs_threshold=1.5, rollout_token_veto_threshold=0.85)  # fmt: skip
    assert empty.rejected.tolist() == [False, True]
    assert empty.metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == 1.0


# -- Delethink: one weight and one verdict per trajectory, over all its chunks ---------------------------


def chunked_batch(chunks_of: list[list[list[float]]], multiple: int = 1):
    """Collated rows (padded to a multiple of `multiple`) and the layout of trajectories whose chunks carry
    the given token ratios: the engine sampled each token with probability 0.5, the trainer gives it
    0.5 x its ratio."""
    rows, old = [], []
    for i, chunks in enumerate(chunks_of):
        for ratios in chunks:
            rows.append(TrainRow([1, 2], [7] * len(ratios), [LN(0.5)] * len(ratios), 1.0, 0, i))
            old.append([LN(0.5 * r) for r in ratios])
    padded = pad_rows_to_multiple(rows, multiple)
    batch = collate_rows(padded, 0)
    batch["old_log_probs"] = torch.zeros_like(batch["rollout_log_probs"])
    for r, logps in enumerate(old):
        batch["old_log_probs"][r, : len(logps)] = torch.tensor(logps)
    return batch, TokenLayout.of(rows, len(chunks_of), len(padded), batch["responses"].shape[1])


def correct_trajectories(batch, layout, **settings):
    correction = correct(
        *(layout.to_trajectories(batch[k]) for k in ("old_log_probs", "rollout_log_probs", "response_mask")),
        **settings,
    )
    return correction, *on_rows(correction, batch["trajectory_index"], batch["response_mask"])


def test_a_three_chunk_trajectorys_weight_is_the_product_over_its_chunks():
    # trajectory 0: three chunks whose own ratios are 1.1 x 1.0 = 1.1, 0.9 and 1.2 x 1.0 = 1.2; trajectory 1:
    # one chunk, ratio 1.05; padded to 6 rows with two copies of the last row
    batch, layout = chunked_batch([[[1.1, 1.0], [0.9], [1.2, 1.0, 1.0]], [[1.05]]], multiple=6)
    correction, weights, mask = correct_trajectories(batch, layout, rollout_is="sequence",
                                                     rollout_is_threshold=2.0)  # fmt: skip
    product = 1.1 * 0.9 * 1.2  # 1.188: one weight for the trajectory, not one per chunk
    assert correction.weights.tolist() == pytest.approx([product, 1.05])
    assert weights.tolist() == pytest.approx([product] * 3 + [1.05] * 3)  # padding rows: their copy's
    assert torch.equal(mask, batch["response_mask"])  # nothing rejected
    # the statistics count trajectories: 2 of them, not 4 chunk rows
    assert correction.metrics["rollout_corr/rollout_is_seq_mean"] == pytest.approx((product + 1.05) / 2)
    assert correction.metrics["rollout_corr/chi2_seq"] == pytest.approx((product**2 + 1.05**2) / 2 - 1)
    # the cap applies to the product
    capped, weights, _ = correct_trajectories(batch, layout, rollout_is="sequence", rollout_is_threshold=1.1)
    assert weights.tolist()[:4] == pytest.approx([1.1, 1.1, 1.1, 1.05])


def test_a_trajectory_is_rejected_whole_by_its_ratio_over_every_chunk():
    # every chunk of trajectory 0 has ratio 1.3, inside [1 / 1.5, 1.5]; the trajectory's is 1.3^3 = 2.197
    batch, layout = chunked_batch([[[1.3], [1.3], [1.3]], [[1.3]]])
    correction, weights, mask = correct_trajectories(batch, layout, rollout_rs="sequence",
                                                     rollout_rs_threshold=1.5)  # fmt: skip
    assert correction.rejected.tolist() == [True, False] and weights is None
    assert mask.sum(dim=-1).tolist() == [0, 0, 0, 1]  # all three chunk rows leave the mask
    metrics = correction.metrics
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == 0.5  # 1 trajectory of 2
    assert metrics["rollout_corr/rollout_rs_masked_fraction"] == pytest.approx(3 / 4)  # 3 tokens of 4
    assert metrics["rollout_corr/rollout_rs_seq_sum_k1_seq_min"] == pytest.approx(-3 * LN(1.3))
    # geometric: the mean over all the trajectory's tokens, 1.3 here too: both kept
    geometric, _, _ = correct_trajectories(batch, layout, rollout_rs="geometric", rollout_rs_threshold=1.5)
    assert not geometric.rejected.any()
    # the veto rejects the whole trajectory for one chunk's token
    batch, layout = chunked_batch([[[1.0], [1.0, 0.5], [1.0]], [[1.0]]])
    _, _, mask = correct_trajectories(batch, layout, rollout_token_veto_threshold=0.6)
    assert mask.sum(dim=-1).tolist() == [0, 0, 0, 1]


# -- a rejected trajectory adds nothing to any loss or training statistic --------------------------------

REJECTED = 3  # of the 6 trajectories of tests/test_trajectory_weight.py; it has two chunk rows


def reject(batch: dict[str, torch.Tensor], trajectory: int = REJECTED) -> dict[str, torch.Tensor]:
    """`batch` with `trajectory` rejected, as `on_rows` hands it to the actor and the critic."""
    rejected = torch.arange(len(TRAJECTORIES)) == trajectory
    _, mask = on_rows(Correction(None, rejected, {}), batch["trajectory_index"], batch["response_mask"])
    return {**batch, "response_mask": mask, "advantages": batch["advantages"] * mask}


def scrambled(batch: dict[str, torch.Tensor], trajectory: int = REJECTED) -> dict[str, torch.Tensor]:
    """`batch` with everything the losses read changed on `trajectory`'s rows."""
    rows = (batch["trajectory_index"] == trajectory)[:, None]
    out = dict(batch)
    out["advantages"] = torch.where(rows, -5.0 * batch["response_mask"], batch["advantages"])
    for key, shift in (("old_log_probs", 0.7), ("ref_log_prob", -1.0), ("values", 3.0), ("returns", -2.0)):
        out[key] = torch.where(rows, batch[key] + shift, batch[key])
    return out


@pytest.fixture(scope="module")
def model():
    return build_model(build_tokenizer(), seed=0)


MODE = TRAJECTORY_MEAN_MODE


def policy_update(model, batch, mode):
    """One update (lr 0) of a copy of `model` with an entropy bonus and a KL loss: gradients and metrics."""
    m = copy.deepcopy(model)
    config = ActorConfig(loss_agg_mode=mode, grad_clip=1e9, ppo_micro_batch_size_per_gpu=2,
                         entropy_coeff=0.01, use_kl_loss=True, kl_loss_coef=0.1)  # fmt: skip
    actor = DataParallelPPOActor(m, torch.optim.SGD(m.parameters(), lr=0.0), config, 1.0, norm_length=8)
    metrics = actor.update_policy(batch, num_mini_batches=1, rows_per_trajectory=9 / 6)
    return {n: p.grad.clone() for n, p in m.named_parameters()}, metrics


def value_update(value_model, batch):
    m = copy.deepcopy(value_model)
    config = CriticConfig(loss_agg_mode="token-mean", grad_clip=1e9, ppo_micro_batch_size_per_gpu=2)
    critic = DataParallelPPOCritic(m, torch.optim.SGD(m.parameters(), lr=0.0), config, norm_length=8)
    metrics = critic.update_critic(batch, num_mini_batches=1)
    return {n: p.grad.clone() for n, p in m.named_parameters()}, metrics


def full_batch(model) -> dict[str, torch.Tensor]:
    batch = actor_batch(model)
    g = torch.Generator().manual_seed(3)
    shape = batch["response_mask"].shape
    batch["ref_log_prob"] = batch["old_log_probs"] - 0.2 * torch.rand(shape, generator=g)
    batch["values"] = 0.1 * torch.randn(shape, generator=g)
    batch["returns"] = torch.randn(shape, generator=g)
    return batch


def test_a_rejected_trajectory_adds_nothing_to_the_actors_loss_or_statistics(model):
    """Whatever its advantages and log-probs, a rejected trajectory changes no gradient and no metric of
    Delethink's trajectory-mean loss: the policy loss, the entropy bonus, the KL loss and every token
    statistic (clip fractions, ppo_kl, entropy)."""
    batch = full_batch(model)
    grads, metrics = policy_update(model, reject(batch), MODE)
    other_grads, other_metrics = policy_update(model, reject(scrambled(batch)), MODE)
    assert metrics == other_metrics
    for name, grad in grads.items():
        assert torch.equal(grad, other_grads[name]), name
    # not rejected, the same change moves the loss: the test can see the trajectory
    assert policy_update(model, scrambled(batch), MODE)[1]["actor/pg_loss"] != metrics["actor/pg_loss"]


@pytest.mark.compares_runs
def test_a_rejected_trajectorys_tokens_leave_the_token_mean_denominator(model):
    """With token-mean the loss and statistics are those of the batch without the trajectory's rows (up to
    float32 rounding: the rows group into other micro-batches, which sum in another order)."""
    batch = full_batch(model)
    grads, metrics = policy_update(model, reject(batch), "token-mean")
    kept = select_rows(batch, batch["trajectory_index"] != REJECTED)
    without_grads, without = policy_update(model, kept, "token-mean")
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy", "actor/pg_clipfrac", "actor/ppo_kl"):
        assert without[key] == metric_approx(metrics[key]), key
    assert_gradients_close(grads, without_grads)


def test_a_rejected_trajectory_adds_nothing_to_the_critics_loss(model, tiny_assets):
    from verl.single_controller.fsdp_workers import load_value_model

    value_model = load_value_model(str(tiny_assets / "model"))
    batch = full_batch(model)
    grads, metrics = value_update(value_model, reject(batch))
    other_grads, other_metrics = value_update(value_model, reject(scrambled(batch)))
    assert metrics == other_metrics
    for name, grad in grads.items():
        assert torch.equal(grad, other_grads[name]), name
    assert value_update(value_model, scrambled(batch))[1]["critic/vf_loss"] != metrics["critic/vf_loss"]


@pytest.mark.compares_runs
def test_the_trainer_rejects_before_the_advantages(tiny_assets, tmp_path):
    """The trainer's correction on a Delethink batch: the rejected trajectory's chunk rows leave the mask
    and keep no advantage, and a token-level estimator (REINFORCE++, which whitens over the batch's
    tokens) gives the other trajectories what it gives them without it, up to the rounding of the
    whitening's three reductions (mean, variance, the returns' sums) over tokens in another layout."""
    from verl.core.trajectory import PromptItem
    from verl.trainer.delethink_ppo.ray_trainer import RayDelethinkTrainer
    from verl.trainer.ppo.ray_trainer import TokenAdvantageInputs

    config = tiny_config(
        "tiny_delethink", tiny_assets, tmp_path, *DELETHINK, "algorithm.adv_estimator=reinforce_plus_plus",
        "algorithm.rollout_correction.rollout_rs=sequence",
        "algorithm.rollout_correction.rollout_rs_threshold=1.5",
    )  # fmt: skip
    items = [PromptItem([1, 2], "test", "0")] * 4
    trainer = RayDelethinkTrainer(config, build_tokenizer(), items, items, None, None)
    scores, groups = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0], [0, 0, 1, 1, 2, 2]

    def advantages(kept: list[int]):
        batch, _, _, layout = trainer.build_training_batch([TRAJECTORIES[i] for i in kept], [1.0] * len(kept))
        # the engine and the trainer agree but on REJECTED's tokens: ratio e^0.5 each
        off = torch.tensor([kept[i] == REJECTED for i in batch["trajectory_index"]])[:, None]
        batch["old_log_probs"] = batch["rollout_log_probs"] + 0.5 * off * batch["response_mask"]
        metrics = trainer.correct_rollouts(batch, layout)
        inputs = TokenAdvantageInputs([scores[i] for i in kept], [groups[i] for i in kept], None)
        targets, _ = trainer.token_advantages(batch, layout, inputs)
        return batch, layout.to_trajectories(targets["advantages"]), metrics

    batch, with_rejected, metrics = advantages(list(range(6)))
    rows = batch["trajectory_index"] == REJECTED
    assert rows.sum() == 2 and not batch["response_mask"][rows].any() and not batch["advantages"][rows].any()
    assert metrics["rollout_corr/rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 6)
    assert not with_rejected[REJECTED].any()
    kept = [i for i in range(6) if i != REJECTED]
    _, without, _ = advantages(kept)
    width = without.shape[1]
    atol = reordered_atol(without, 3 * ULPS_PER_REDUCTION)
    torch.testing.assert_close(with_rejected[kept][:, :width], without, rtol=0, atol=atol)
    assert with_rejected[kept].abs().sum() > 0


def test_correction_keys_are_checked(tiny_assets, tmp_path):
    key = "algorithm.rollout_correction"
    cases = {
        f"{key}.rollout_is=token": f"{key}.rollout_is='token': must be one of [None, 'sequence'] (the "
        "token-level weight is actor_rollout_ref.actor.tis_imp_ratio_cap)",
        f"{key}.rollout_is_threshold=0.5": f"{key}.rollout_is_threshold=0.5: must be >= 1: a cap below 1 "
        "would shrink the weight of trajectories the engine and trainer agree on",
        f"{key}.rollout_rs=token": f"{key}.rollout_rs='token': must be one of "
        "[None, 'sequence', 'geometric']",
        f"{key}.rollout_rs=geometric": f"{key}.rollout_rs_threshold=None: must be set (> 1) with "
        "rollout_rs='geometric'",
        f"{key}.rollout_rs_threshold=0.9": f"{key}.rollout_rs_threshold=0.9: must be null or > 1 (the upper "
        "bound of a trajectory's ratio)",
        f"{key}.rollout_rs_threshold_lower=1.5": f"{key}.rollout_rs_threshold_lower=1.5: must be null (off) "
        "or in (0, 1)",
        f"{key}.rollout_token_veto_threshold=0": f"{key}.rollout_token_veto_threshold=0.0: must be null "
        "(off) or in (0, 1)",
        "actor_rollout_ref.rollout.dtype=int8": "actor_rollout_ref.rollout.dtype='int8': must be null or one "
        "of ['float32', 'bfloat16', 'float16']",
        "actor_rollout_ref.actor.loss_divisor_rows=0": "actor_rollout_ref.actor.loss_divisor_rows=0: must be "
        "null (the exact mean) or the rows to divide each mini-batch's loss by (>= 1)",
    }
    for override, line in cases.items():
        with pytest.raises(ConfigError) as refused:
            tiny_longcot_with(tiny_assets, override)
        assert str(refused.value) == line
    with pytest.raises(ConfigError) as refused:
        tiny_longcot_with(
            tiny_assets, f"{key}.rollout_is=sequence", "actor_rollout_ref.actor.tis_imp_ratio_cap=2"
        )
    assert str(refused.value) == (
        f"{key}.rollout_is='sequence': weights trajectories by the same ratios that actor_rollout_ref.actor."
        "tis_imp_ratio_cap=2 weights tokens by (TIS); use one of them"
    )
    # bypass mode: the old log-probs are the engine's, so no ratio is left to correct by
    with pytest.raises(ConfigError) as refused:
        tiny_longcot_with(tiny_assets, f"{key}.bypass_mode=true", f"{key}.rollout_rs=geometric",
                          f"{key}.rollout_rs_threshold=1.5")  # fmt: skip
    assert str(refused.value) == (
        f"{key}.rollout_rs='geometric': must be null with bypass_mode=true: the old log-probs are the "
        "engine's, so its ratios are 1"
    )
    with pytest.raises(ConfigError) as refused:
        tiny_longcot_with(tiny_assets, f"{key}.bypass_mode=true",
                          "actor_rollout_ref.actor.tis_imp_ratio_cap=2")  # fmt: skip
    assert str(refused.value) == (
        "actor_rollout_ref.actor.tis_imp_ratio_cap=2.0: must be <= 0 (off) with algorithm.rollout_correction."
        "bypass_mode=true: the old log-probs are then the engine's, so every TIS ratio is 1"
    )
    # the entry point: exit code 2, one line naming the key, before any model
    done = _entry_point(tiny_assets, tmp_path, f"{key}.rollout_token_veto_threshold=1.5")
    assert_refused(done, f"{key}.rollout_token_veto_threshold")


# -- on real runs -----------------------------------------------------------------------------------

MISMATCH = ("train/rollout_prob_diff_mean", "train/rollout_prob_diff_max", "rollout_corr/k3_kl",
            "rollout_corr/ppl_ratio")  # fmt: skip
# verl's metrics every step, and with rollout_is=sequence (verl's rollout_corr_helper)
OFFPOLICY = ("training_ppl", "training_log_ppl", "kl", "k3_kl", "rollout_ppl", "rollout_log_ppl",
             "log_ppl_diff", "log_ppl_abs_diff", "log_ppl_diff_max", "log_ppl_diff_min", "ppl_ratio",
             "chi2_token", "chi2_seq")  # fmt: skip
SEQUENCE_IS = ("rollout_is_mean", "rollout_is_max", "rollout_is_min", "rollout_is_ratio_fraction_high",
               "rollout_is_ratio_fraction_low", "rollout_is_std", "rollout_is_eff_sample_size",
               "rollout_is_seq_mean", "rollout_is_seq_std", "rollout_is_seq_max", "rollout_is_seq_min",
               "rollout_is_seq_max_deviation", "rollout_is_seq_fraction_high",
               "rollout_is_seq_fraction_low")  # fmt: skip
ENVIRONMENTS = {"tiny_longcot": ("data.max_response_length=8",), "tiny_delethink": DELETHINK}


def one_step(name, assets, run_dir, *overrides):
    run(tiny_config(name, assets, run_dir, *ENVIRONMENTS[name], ONE_PROCESS, "trainer.total_training_steps=1",
                    *overrides))  # fmt: skip
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    return metrics


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_the_engine_in_bfloat16_shows_a_mismatch_and_float32_none(name, tiny_assets, tmp_path, capsys):
    """Over every trained row (Delethink: all chunk rows). The thresholds sit orders of magnitude from
    both sides: bfloat16 keeps 8 significant bits (log-probs off by ~1e-3 relative), float32 24 (the two
    float32 forwards differ only in how their kernels sum)."""
    exact = one_step(name, tiny_assets, tmp_path / "float32", "actor_rollout_ref.rollout.dtype=float32")
    low = one_step(
        name, tiny_assets, tmp_path / "bfloat16", "actor_rollout_ref.rollout.dtype=bfloat16",
        "trainer.logger=[console,jsonl,wandb]",
    )  # fmt: skip
    assert exact["train/rollout_prob_diff_max"] < 1e-7 and exact["rollout_corr/k3_kl"] < 1e-10
    assert abs(exact["rollout_corr/ppl_ratio"] - 1) < 1e-6
    assert low["train/rollout_prob_diff_max"] > 1e-6 and low["rollout_corr/k3_kl"] > 1e-8
    assert abs(low["rollout_corr/ppl_ratio"] - 1) > 1e-6
    assert low["rollout_corr/k3_kl"] > 1000 * exact["rollout_corr/k3_kl"]
    assert 0 < low["train/rollout_prob_diff_mean"] <= low["train/rollout_prob_diff_max"]
    # the same numbers on the console and in wandb (what the offline run wrote, read back)
    console = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step 1: ")]
    assert len(console) == 1 and all(f"{key}={low[key]:.4g}" in console[0] for key in MISMATCH)
    (logged,) = logged_to_wandb(tmp_path / "bfloat16")
    assert logged["_step"] == 1 and {key: logged[key] for key in MISMATCH} == {
        key: low[key] for key in MISMATCH
    }


def logged_to_wandb(run_dir: Path) -> list[dict]:
    """The history of the offline wandb run in `run_dir`. wandb's service process writes it to the file
    after run.finish() has returned, so this reads it again until the run's exit record is there (HANG_S
    at most: a safety net); a read in the middle of a write sees a last record cut short."""
    deadline = time.monotonic() + HANG_S
    while True:
        (run_file,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
        rows, ended = wandb_history(run_file)
        if ended or time.monotonic() > deadline:
            return rows
        time.sleep(0.2)


def wandb_history(path: Path) -> tuple[list[dict], bool]:
    """(the history rows, one per wandb.log, whether the run's exit record was written) of an offline
    run's .wandb file: after its 7-byte header, LevelDB's log format, records of protobuf `Record`s in
    32 KiB blocks, each record behind a 7-byte header (CRC, little-endian length, type: 1 whole, 2 first,
    3 middle, 4 last part). Reading stops at a record the file does not hold all of yet."""
    data = path.read_bytes()
    block, pos, pending, rows = 32768, 7, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4 : pos + 6], "little"), data[pos + 6]
        if pos + 7 + length > len(data):
            break
        chunk = data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        pending = chunk if kind in (1, 2) else pending + chunk
        if kind in (1, 4):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            if record.WhichOneof("record_type") == "exit":
                return rows, True
            if record.WhichOneof("record_type") == "history":
                items = record.history.item
                rows.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in items})
    return rows, False


def test_a_wandb_file_read_mid_write_is_not_taken_for_the_whole_run(tmp_path, monkeypatch):
    """wandb's service writes an offline run's file after finish() returns: a read that catches it in the
    middle of a record must neither fail nor say the run ended (it did once: a protobuf decode error)."""
    import wandb

    monkeypatch.setenv("WANDB_MODE", "offline")
    run = wandb.init(project="read-back", dir=tmp_path)
    for step in range(3):
        run.log({"x": step})
    run.finish()
    rows = logged_to_wandb(tmp_path)
    assert [row["x"] for row in rows] == [0, 1, 2]
    (whole,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
    data, cut = whole.read_bytes(), tmp_path / "cut.wandb"
    for size in range(0, len(data), 7):
        cut.write_bytes(data[:size])
        cut_rows, ended = wandb_history(cut)
        assert not ended and cut_rows == rows[: len(cut_rows)], size


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_corrections_reach_the_loss(name, tiny_assets, tmp_path):
    """The engine in bfloat16 with rollout_is=sequence logs verl's metrics under rollout_corr/ (Delethink's
    per trajectory); adding a sequence bound of 1 +- 1e-6 on each trajectory's ratio rejects every one,
    so the step has no gradient; the same step without the bound has one."""
    common = ("actor_rollout_ref.rollout.dtype=bfloat16", "algorithm.rollout_correction.rollout_is=sequence")
    weighted = one_step(name, tiny_assets, tmp_path / "weighted", *common)
    rejected = one_step(
        name, tiny_assets, tmp_path / "rejected", *common,
        "algorithm.rollout_correction.rollout_rs=sequence",
        "algorithm.rollout_correction.rollout_rs_threshold=1.000001",
    )  # fmt: skip
    logged = {key.removeprefix("rollout_corr/") for key in weighted if key.startswith("rollout_corr/")}
    assert logged == set(OFFPOLICY + SEQUENCE_IS)
    assert all(math.isfinite(weighted[f"rollout_corr/{key}"]) for key in logged)
    assert weighted["actor/grad_norm"] > 0 and weighted["actor/pg_loss"] != 0
    assert "rollout_corr/rollout_rs_masked_fraction" not in weighted
    assert rejected["rollout_corr/rollout_rs_seq_masked_fraction"] == 1.0
    assert rejected["rollout_corr/rollout_rs_masked_fraction"] == 1.0
    assert rejected["actor/grad_norm"] == 0.0 and rejected["actor/pg_loss"] == 0.0
    # the same samples: the diagnostics do not depend on the rejection
    assert rejected["rollout_corr/rollout_is_seq_mean"] == weighted["rollout_corr/rollout_is_seq_mean"]
    # bfloat16's per-trajectory ratios sit within a few percent of 1
    assert 0.9 < weighted["rollout_corr/rollout_is_seq_mean"] < 1.1


@pytest.mark.slow
@pytest.mark.compares_runs
def test_bypass_mode_trains_against_the_engines_log_probs(tiny_assets, tmp_path):
    """One mini-batch, so the actor's ppo_kl is measured before its only optimizer step: against the
    trainer's own old log-probs it is about 0, against the engine's (bypass) it is the mean of log
    pi_rollout - log pi over the sampled tokens, which is what rollout_corr/kl reports without bypass. The
    two runs sample the same trajectories (the same seeds). Tolerance: the trainer's log-probs of a token
    come from two float32 forwards of the same weights (the old-log-prob pass and the update), which differ
    only in the order kernels sum in (about 1e-7 relative on log-probs of magnitude up to ~10)."""
    common = ("actor_rollout_ref.rollout.dtype=bfloat16", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
              "data.max_response_length=8")  # fmt: skip
    decoupled = one_step("tiny_longcot", tiny_assets, tmp_path / "decoupled", *common)
    bypass = one_step("tiny_longcot", tiny_assets, tmp_path / "bypass", *common,
                      "algorithm.rollout_correction.bypass_mode=true")  # fmt: skip
    assert bypass["train/thinking_tokens_mean"] == decoupled["train/thinking_tokens_mean"]
    assert not [key for key in bypass if key.startswith(("rollout_corr/", "train/rollout_prob_diff"))]
    assert abs(decoupled["actor/ppo_kl"]) < 1e-5
    assert bypass["actor/ppo_kl"] == pytest.approx(decoupled["rollout_corr/kl"], abs=1e-5)
    assert abs(bypass["actor/ppo_kl"]) > 1e-4  # the engine in bfloat16: far from the trainer's 0


def test_bounds_are_inclusive_and_a_geometric_mean_divides_by_the_sequences_tokens():
    # one token each: ratios 2 (0.5 / 0.25) and 0.5 (0.25 / 0.5); a padding row without tokens
    old = torch.tensor([[0.5, 0.1], [0.25, 0.1], [0.3, 0.3]], dtype=torch.float64).log()
    rollout = torch.tensor([[0.25, 0.1], [0.5, 0.1], [0.3, 0.3]], dtype=torch.float64).log()
    mask = torch.tensor([[1, 0], [1, 0], [0, 0]])

    def rejected(**bounds):
        return correct(old, rollout, mask, **bounds).rejected.tolist()

    # 2 and 1 / 2 sit on the bounds
    assert rejected(rollout_rs="sequence", rollout_rs_threshold=2.0) == [False, False, False]
    assert rejected(rollout_rs="sequence", rollout_rs_threshold=1.99) == [True, True, False]
    # geometric over one token is the token's ratio
    assert rejected(rollout_rs="geometric", rollout_rs_threshold=1.5, rollout_rs_threshold_lower=0.4) == [
        True, False, False
    ]  # fmt: skip
    assert rejected(rollout_token_veto_threshold=0.5) == [False, False, False]  # a token at the veto stays
    assert rejected(rollout_token_veto_threshold=0.51) == [False, True, False]


def test_correction_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"^rollout_is='token': expected one of \(None, 'sequence'\)$"):
        correct(OLD, ROLLOUT, MASK, rollout_is="token")
    with pytest.raises(
        ValueError, match=r"^rollout_rs='token': expected one of \['sequence', 'geometric'\]$"
    ):
        correct(OLD, ROLLOUT, MASK, rollout_rs="token", rollout_rs_threshold=2.0)
    with pytest.raises(
        ValueError, match=r"^rollout_rs='sequence' needs rollout_rs_threshold \(its upper bound\)$"
    ):
        correct(OLD, ROLLOUT, MASK, rollout_rs="sequence")
    with pytest.raises(
        ValueError, match=r"^expected three equal \[sequences, T\] shapes, got \(2, 3\), \(2, 2\), \(2, 3\)$"
    ):
        correct(OLD, ROLLOUT[:, :2], MASK)


@pytest.mark.slow
@pytest.mark.compares_runs
def test_fractional_sequence_weights_scale_each_rows_loss_through_the_trainer(tiny_assets, tmp_path):
    """The PPO trainer's update (LongCoT: a row is a trajectory) on two trajectories whose rollout
    log-probs are set so that their sequence ratios are 0.5 and 0.25. One mini-batch, so the update's only
    optimizer step sees the policy the old log-probs came from: the PPO ratio is 1 and token-mean's loss
    is -sum_i w_i A_i n_i / sum_i n_i. Again from the same state with the weights doubled (1, 0.5): the loss
    and the gradient double. Tolerance: the actor recomputes the log-probs in float32 with other padding
    (about 1e-6 relative), and a rollout log-prob is stored in float32 (its weight exact to about 1e-6)."""
    from transformers import AutoTokenizer

    from verl.core.trajectory import Trajectory, Turn
    from verl.single_controller.local_worker_group import LocalWorkerGroup
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    config = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path, ONE_PROCESS,
        "algorithm.rollout_correction.rollout_is=sequence",
        "actor_rollout_ref.actor.loss_agg_mode=token-mean", "actor_rollout_ref.actor.ppo_mini_batch_size=2",
    )  # fmt: skip
    lengths, advantages = (3, 5), [2.0, -1.0]
    g = torch.Generator().manual_seed(0)

    def tokens(n):
        return torch.randint(3, 200, (n,), generator=g).tolist()

    turns = [(tokens(4), tokens(n)) for n in lengths]  # (prompt, response)
    workers = LocalWorkerGroup(config)
    try:
        trainer = RayPPOTrainer(
            config, AutoTokenizer.from_pretrained(tiny_assets / "model"), [], [], None, workers
        )
        plain = [Trajectory([Turn(p, r, [0.0] * len(r), "length")]) for p, r in turns]
        old = workers.compute_log_prob(trainer.build_training_batch(plain, advantages)[0])

        def trajectories_weighted(weights):
            """The rollout's log-probs equal the old ones but on the first token, off by log w."""
            out = []
            for row, ((p, r), w) in enumerate(zip(turns, weights, strict=True)):
                rollout = old[row, : len(r)].tolist()
                rollout[0] -= math.log(w)
                out.append(Trajectory([Turn(p, r, rollout, "length")]))
            return out

        workers.save_checkpoint(str(tmp_path / "start"))
        first, _ = trainer.update(trajectories_weighted([0.5, 0.25]), advantages, {})
        workers.load_checkpoint(str(tmp_path / "start"))
        doubled, _ = trainer.update(trajectories_weighted([1.0, 0.5]), advantages, {})
    finally:
        workers.shutdown()
    # rows: w A n = 0.5 x 2 x 3 = 3 and 0.25 x -1 x 5 = -1.25; the loss is -(3 - 1.25) / 8
    assert first["rollout_corr/rollout_is_seq_mean"] == pytest.approx(0.375, rel=1e-5)
    assert first["actor/pg_loss"] == pytest.approx(-1.75 / 8, rel=1e-5)
    assert doubled["rollout_corr/rollout_is_seq_mean"] == pytest.approx(0.75, rel=1e-5)
    assert doubled["actor/pg_loss"] == pytest.approx(-3.5 / 8, rel=1e-5)
    assert first["actor/grad_norm"] > 0
    assert doubled["actor/grad_norm"] == pytest.approx(2 * first["actor/grad_norm"], rel=1e-5)


# ---------------------------------------------------------------------------------------------
# edges: one value, bounds met exactly, ratios past e^20, corrections together


def one_token_each(log_ratios: list[float]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sequences of one trained token each (float64: the log-ratios are exact), rollout log-prob 0."""
    old = torch.tensor(log_ratios, dtype=torch.float64)[:, None]
    return old, torch.zeros_like(old), torch.ones_like(old)


def test_one_sequence_of_one_token_has_no_spread():
    c = correct(*one_token_each([math.log(3.0)]), rollout_is="sequence", rollout_rs="sequence",
                rollout_rs_threshold=4.0)  # fmt: skip
    for key in (
        "rollout_is_seq_std",
        "rollout_is_std",
        "rollout_rs_seq_sum_k1_seq_std",
        "rollout_rs_seq_sum_k1_std",
    ):
        assert c.metrics[PREFIX + key] == 0.0, key
    # two one-token sequences: ratios 3 and 1 (cap 2: 2 and 1), k1 -log 3 and 0 (within [-log 4, log 4])
    two = correct(*one_token_each([math.log(3.0), 0.0]), rollout_is="sequence", rollout_rs="sequence",
                  rollout_rs_threshold=4.0)  # fmt: skip
    assert two.metrics[PREFIX + "rollout_is_std"] == pytest.approx(0.5)  # population std of 2 and 1
    assert two.metrics[PREFIX + "rollout_is_seq_std"] == pytest.approx(math.sqrt(2.0))  # unbiased, of 3 and 1
    assert two.metrics[PREFIX + "rollout_rs_seq_sum_k1_std"] == pytest.approx(math.log(3.0) / 2)


def test_the_default_cap_is_two():
    c = correct(*one_token_each([1.0, 0.0]), rollout_is="sequence")
    assert c.weights.tolist() == [2.0, 1.0]


def test_a_batch_without_trained_tokens_keeps_every_sequence_at_weight_one():
    old, rollout, mask = one_token_each([0.5, -0.5])
    c = correct(old, rollout, torch.zeros_like(mask), rollout_is="sequence")
    assert c.weights.tolist() == [1.0, 1.0] and c.rejected.tolist() == [False, False] and c.metrics == {}


def test_rejection_by_ratio_and_by_veto_add_up_and_keep_every_metric():
    # R = e^2 (past the ratio's bound e^1.5), a token at e^-3 (below the veto's e^-2.5), one that passes
    c = correct(*one_token_each([2.0, -3.0, 0.0]), rollout_is="sequence", rollout_rs="sequence",
                rollout_rs_threshold=math.exp(1.5), rollout_rs_threshold_lower=math.exp(-4.0),
                rollout_token_veto_threshold=math.exp(-2.5))  # fmt: skip
    assert c.rejected.tolist() == [True, True, False]
    for key in ("kl", "rollout_is_seq_mean", "rollout_rs_masked_fraction", "rollout_is_veto_fraction"):
        assert PREFIX + key in c.metrics, key


def test_the_fractions_past_a_bound_count_what_lies_strictly_past_it():
    """log-ratios exactly log 2 and -log 2 (ratio 2 and 1/2) meet the bounds 2 and 1/2 of threshold 2,
    and the k1 bounds of an upper bound 2 (k1 = -log R): neither is past them."""
    c = correct(*one_token_each([math.log(2.0), -math.log(2.0)]), rollout_is="sequence",
                rollout_rs="sequence", rollout_rs_threshold=2.0)  # fmt: skip
    for key in ("rollout_is_ratio_fraction_high", "rollout_is_ratio_fraction_low",
                "rollout_is_seq_fraction_high", "rollout_is_seq_fraction_low",
                "rollout_rs_seq_sum_k1_fraction_high", "rollout_rs_seq_sum_k1_fraction_low",
                "rollout_rs_seq_sum_k1_seq_fraction_high",
                "rollout_rs_seq_sum_k1_seq_fraction_low"):  # fmt: skip
        assert c.metrics[PREFIX + key] == 0.0, key
    assert c.rejected.tolist() == [False, False]


def test_ratios_and_spreads_are_bounded():
    """Log-ratios of +-100 count as +-20 (MAX_LOG_RATIO) in the ratios, chi-squares and k1; the IS
    spread clamps the ratios to [1/2, 2], the rejection's spread k1 to its bounds."""
    c = correct(*one_token_each([100.0, -100.0]), rollout_is="sequence", rollout_rs="sequence",
                rollout_rs_threshold=2.0)  # fmt: skip
    m = {key.removeprefix(PREFIX): value for key, value in c.metrics.items()}
    e40 = math.exp(40.0)
    assert m["chi2_token"] == pytest.approx((e40 + math.exp(-40.0)) / 2 - 1)
    assert m["chi2_seq"] == pytest.approx((e40 + math.exp(-40.0)) / 2 - 1)
    assert m["rollout_is_seq_max"] == pytest.approx(math.exp(20.0))
    assert m["rollout_is_seq_min"] == pytest.approx(math.exp(-20.0))
    assert (m["rollout_rs_seq_sum_k1_max"], m["rollout_rs_seq_sum_k1_min"]) == (20.0, -20.0)
    assert m["rollout_is_std"] == pytest.approx(0.75)  # ratios clamped to 2 and 1/2
    assert m["rollout_rs_seq_sum_k1_std"] == pytest.approx(math.log(2.0))  # k1 clamped to +-log 2
    # normalised by their mean (1.25): 1.6 and 0.4, mean square 1.36
    assert m["rollout_is_eff_sample_size"] == pytest.approx(1 / 1.36)
