"""The actor's update: micro-batching gives exactly the mini-batch gradient, in every loss mode."""

import copy

import pytest
import torch

from verl.agent_loop.base import Trajectory, Turn
from verl.models.tiny import build_model, build_tokenizer
from verl.trainer.config_schema import ActorConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.batch import collate_rows, trajectory_rows
from verl.workers.actor.dp_actor import DataParallelPPOActor


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(build_tokenizer(), seed=0)


def make_batch(actor):
    g = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(6):  # uneven prompt and response lengths, some trajectories with two chunks
        turns = []
        for c in range(1 + i % 2):
            prompt = torch.randint(3, 200, (3 + i + c,), generator=g).tolist()
            resp = torch.randint(3, 200, (2 + (i * 3 + c) % 5,), generator=g).tolist()
            turns.append(Turn(prompt, resp, [0.0] * len(resp), "length"))
        trajs.append(Trajectory(turns))
    batch = collate_rows(trajectory_rows(trajs, [1.0, -0.5, 0.25, 2.0, -1.0, 0.5]), pad_token_id=0)
    old = actor.compute_log_prob(batch, rows_per_micro=4)
    # every other row off-policy by a ratio of e^0.3 = 1.35 > 1 + clip_ratio_high: those tokens clip
    batch["old_log_probs"] = old - 0.3 * (torch.arange(old.shape[0])[:, None] % 2)
    batch["rollout_log_probs"] = old + 0.1
    batch["ref_log_prob"] = old + 0.2
    return batch


def grads_after_update(model, mode, rows_per_micro):
    m = copy.deepcopy(model)
    cfg = ActorConfig(
        loss_agg_mode=mode,
        ppo_micro_batch_size_per_gpu=rows_per_micro,
        tis_imp_ratio_cap=2.0,
        use_kl_loss=True,
        entropy_coeff=0.01,
        grad_clip=1e9,
    )
    optimizer = torch.optim.SGD(m.parameters(), lr=0.0)  # lr 0: keep weights, inspect gradients
    actor = DataParallelPPOActor(m, optimizer, cfg, temperature=1.0, norm_length=8)
    batch = make_batch(actor)
    metrics = actor.update_policy(batch, num_mini_batches=1, correction_ratio=1.5)
    return {n: p.grad.clone() for n, p in m.named_parameters()}, metrics


@pytest.mark.parametrize("mode", core_algos.LOSS_AGG_MODES)
def test_micro_batches_sum_to_the_mini_batch_gradient(model, mode):
    whole, m_whole = grads_after_update(model, mode, rows_per_micro=64)
    split, m_split = grads_after_update(model, mode, rows_per_micro=2)
    for name in whole:
        torch.testing.assert_close(split[name], whole[name], atol=1e-6, rtol=1e-4)
    assert m_split["actor/pg_loss"] == pytest.approx(m_whole["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert m_split["actor/kl_loss"] == pytest.approx(m_whole["actor/kl_loss"], rel=1e-5, abs=1e-7)
    assert 0 < m_whole["actor/pg_clipfrac"] < 1 and m_whole["actor/grad_norm"] > 0


def test_rows_must_split_into_mini_batches(model):
    actor = DataParallelPPOActor(copy.deepcopy(model), None, ActorConfig(), temperature=1.0, norm_length=8)
    batch = make_batch(actor)
    with pytest.raises(ValueError, match="do not split into 4 mini-batches"):
        actor.update_policy(batch, num_mini_batches=4)
