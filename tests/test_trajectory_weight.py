"""Delethink's `rows_per_trajectory` (a step's rows per trajectory) weighs the one loss mode that is a mean
over trajectories, and only the actor's loss: with token-mean the actor's and the critic's gradients on a
Delethink batch are the plain token-mean gradients; with the trace-length mode the loss is the mean over
trajectories of each trajectory's token mean."""

import copy

import pytest
import torch

from tests.e2e_utils import DELETHINK, tiny_config
from tests.tolerances import assert_gradients_close, metric_approx
from verl.config import ActorConfig, CriticConfig
from verl.core import core_algos, log_softmax, names
from verl.core.batch import collate_rows, rows_per_trajectory, trajectory_rows
from verl.core.trajectory import Trajectory, Turn
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.actor.dp_actor import DataParallelPPOActor, response_logits
from verl.workers.critic.dp_critic import DataParallelPPOCritic, response_values
from verl.workers.data_parallel import mini_batch_denominators

MODE = names.TRAJECTORY_MEAN_MODE

# ---------------------------------------------------------------------------------------------
# agg_loss by hand
#   trajectory A: two chunk rows, token losses [1, 2] and [3]; trace length 3 -> token mean 6 / 3 = 2
#   trajectory B: one row, token losses [4, 6]; trace length 2                 -> token mean 10 / 2 = 5
#   a padding row (mask all zero), as the trainer adds to fill a multiple of mini-batches x ranks
LOSS = torch.tensor([[1.0, 2.0], [3.0, 0.0], [4.0, 6.0], [9.0, 9.0]])
MASK = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [0.0, 0.0]])
TRACE_LENGTHS = torch.tensor([3.0, 3.0, 2.0, 2.0])


def test_the_trace_length_mode_is_the_mean_over_trajectories_of_their_token_means():
    ratio = rows_per_trajectory(num_rows=4, num_trajectories=2)
    assert ratio == 2.0
    loss = core_algos.agg_loss(
        LOSS, MASK, MODE, trace_lengths=TRACE_LENGTHS, global_num_rows=4, global_num_trajectories=4 / ratio
    )
    assert float(loss) == pytest.approx((2 + 5) / 2)  # 3.5
    # without the trajectory count the rows are the denominator: (1 + 1 + 5 + 0) / 4
    assert float(core_algos.agg_loss(LOSS, MASK, MODE, trace_lengths=TRACE_LENGTHS)) == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("token-mean", (1 + 2 + 3 + 4 + 6) / 5),  # 3.2
        ("seq-mean-token-sum", (3 + 3 + 10 + 0) / 4),  # 4
        ("seq-mean-token-mean", (1.5 + 3 + 5 + 0) / 4),  # 2.375
        ("seq-mean-token-sum-norm", (3 + 3 + 10 + 0) / 2 / 4),  # norm_length 2: 2
    ],
)
def test_every_other_mode_ignores_the_trajectory_count(mode, expected):
    loss = core_algos.agg_loss(
        LOSS, MASK, mode, trace_lengths=TRACE_LENGTHS, norm_length=2, global_num_trajectories=2
    )
    assert float(loss) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        # the exact means 3.5 (above) and 2.375, x the mini-batch's 4 rows / 8
        (MODE, 3.5 * 4 / 8),
        ("seq-mean-token-mean", 2.375 * 4 / 8),
        ("seq-mean-token-sum", 4 * 4 / 8),
    ],
)
def test_the_loss_divisor_is_the_reference_implementations_scale(mode, expected):
    """The reference multiplies each micro-batch's own mean (in the trace-length mode over trace lengths
    times trajectories / rows) by its rows / its configured mini-batch size M (ppo_mini_batch_size x
    rollout.n), and sums the micro-batches; loss_divisor_rows = M gives the same loss."""
    rows, trajectories, divisor = 4, 2, 8
    batch = {"responses": torch.zeros_like(MASK), "response_mask": MASK}

    def denominators(loss_divisor_rows):
        (out,) = mini_batch_denominators(
            batch, [torch.arange(rows)], 2, rows / trajectories, loss_divisor_rows
        )
        return out

    def ours(micro_batches, loss_divisor_rows=divisor):
        return sum(
            float(core_algos.agg_loss(LOSS[m], MASK[m], mode, trace_lengths=TRACE_LENGTHS[m],
                                      **denominators(loss_divisor_rows)))
            for m in micro_batches
        )  # fmt: skip

    def reference(micro_batches):
        total = 0.0
        for m in micro_batches:
            sums = (LOSS[m] * MASK[m]).sum(dim=-1)
            if mode == MODE:
                per_row = sums / (TRACE_LENGTHS[m] * trajectories / rows)
            elif mode == "seq-mean-token-mean":
                # the padding row gives 0 (the reference deletes rows instead of padding)
                per_row = sums / MASK[m].sum(dim=-1).clamp(min=1)
            else:
                per_row = sums
            total += float(per_row.mean()) * len(m) / divisor
        return total

    for micro_batches in ([[0, 1], [2, 3]], [[0], [1], [2], [3]], [[0, 1, 2, 3]]):
        assert ours(micro_batches) == pytest.approx(reference(micro_batches))
        assert ours(micro_batches) == pytest.approx(expected)
        # null: the exact mean, whatever the micro-batches
        assert ours(micro_batches, None) == pytest.approx(expected * divisor / rows)


def test_the_trajectory_count_must_be_positive():
    with pytest.raises(ValueError, match="global_num_trajectories must be > 0, got 0"):
        core_algos.agg_loss(LOSS, MASK, MODE, trace_lengths=TRACE_LENGTHS, global_num_trajectories=0)


# ---------------------------------------------------------------------------------------------
# the actor and the critic on a Delethink batch: 6 trajectories, every other one in two chunks (9 rows)


def chunked_trajectories(num_trajectories=6) -> list[Trajectory]:
    g = torch.Generator().manual_seed(1)
    trajectories = []
    for i in range(num_trajectories):
        turns = []
        for c in range(1 + i % 2):
            prompt = torch.randint(3, 200, (3 + i + c,), generator=g).tolist()
            response = torch.randint(3, 200, (2 + (i * 3 + c) % 5,), generator=g).tolist()
            turns.append(Turn(prompt, response, [0.0] * len(response), "length"))
        trajectories.append(Trajectory(turns))
    return trajectories


TRAJECTORIES = chunked_trajectories()
RATIO = rows_per_trajectory(9, len(TRAJECTORIES))  # 1.5


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(build_tokenizer(), seed=0)


def actor_batch(model) -> dict[str, torch.Tensor]:
    batch = collate_rows(trajectory_rows(TRAJECTORIES, [1.0, -0.5, 0.25, 2.0, -1.0, 0.5]), 0)
    with torch.no_grad():
        old = log_softmax.log_probs_from_logits(response_logits(model, batch), batch["responses"])
    # every other row off-policy by a ratio of e^0.3 = 1.35 > 1 + clip_ratio_high: those tokens clip
    batch["old_log_probs"] = old - 0.3 * (torch.arange(old.shape[0])[:, None] % 2)
    return batch


def actor_update(model, batch, mode, ratio, loss_divisor_rows=None):
    """One update (lr 0) of a copy of `model`; its gradients and metrics."""
    m = copy.deepcopy(model)
    config = ActorConfig(
        loss_agg_mode=mode, grad_clip=1e9, ppo_micro_batch_size_per_gpu=2, loss_divisor_rows=loss_divisor_rows
    )
    actor = DataParallelPPOActor(m, torch.optim.SGD(m.parameters(), lr=0.0), config, 1.0, norm_length=8)
    metrics = actor.update_policy(batch, num_mini_batches=1, rows_per_trajectory=ratio)
    return {n: p.grad.clone() for n, p in m.named_parameters()}, metrics


def plain_loss_matrix(model, batch) -> torch.Tensor:
    """The PPO clipped loss per token, from one forward of every row (no micro-batches, no denominators)."""
    log_prob = log_softmax.log_probs_from_logits(response_logits(model, batch), batch["responses"])
    return core_algos.compute_policy_loss(
        batch["old_log_probs"], log_prob, batch["advantages"], batch["response_mask"],
        clip_ratio_low=0.2, clip_ratio_high=0.2, clip_ratio_c=3.0,
    ).loss_mat  # fmt: skip


def gradients_of(model, loss_of) -> dict[str, torch.Tensor]:
    m = copy.deepcopy(model)
    loss_of(m).backward()
    return {n: p.grad for n, p in m.named_parameters()}


@pytest.mark.compares_runs
def test_token_mean_actor_gradient_on_a_delethink_batch_is_the_plain_token_mean_gradient(model):
    batch = actor_batch(model)
    mask = batch["response_mask"].bool()
    grads, metrics = actor_update(model, batch, "token-mean", RATIO)
    plain = gradients_of(model, lambda m: plain_loss_matrix(m, batch)[mask].mean())
    assert_gradients_close(grads, plain)
    with torch.no_grad():
        assert metrics["actor/pg_loss"] == metric_approx(float(plain_loss_matrix(model, batch)[mask].mean()))


@pytest.mark.compares_runs
def test_trace_length_actor_loss_is_the_mean_over_trajectories_of_their_token_means(model):
    batch = actor_batch(model)

    def trajectory_mean(m: torch.nn.Module) -> torch.Tensor:
        loss_mat = plain_loss_matrix(m, batch) * batch["response_mask"]
        owner = batch["trajectory_index"]
        token_means = [
            loss_mat[owner == i].sum() / batch["response_mask"][owner == i].sum() for i in range(6)
        ]
        return torch.stack(token_means).mean()

    grads, metrics = actor_update(model, batch, MODE, RATIO)
    with torch.no_grad():
        assert metrics["actor/pg_loss"] == metric_approx(float(trajectory_mean(model)))
    plain = gradients_of(model, trajectory_mean)
    assert_gradients_close(grads, plain)
    # the ratio is what makes it a mean over trajectories: without it the 9 rows are the denominator
    _, by_rows = actor_update(model, batch, MODE, 1.0)
    assert by_rows["actor/pg_loss"] == metric_approx(metrics["actor/pg_loss"] / RATIO)


def test_the_actor_scales_its_loss_by_a_mini_batchs_rows_over_the_divisor(model):
    """loss_divisor_rows = 12 on the 9 rows: the trajectory mean x 9 / 12, its gradient too."""
    batch = actor_batch(model)
    grads, metrics = actor_update(model, batch, MODE, RATIO)
    scaled_grads, scaled = actor_update(model, batch, MODE, RATIO, loss_divisor_rows=12)
    assert scaled["actor/pg_loss"] == metric_approx(metrics["actor/pg_loss"] * 9 / 12)
    assert_gradients_close(scaled_grads, {name: grad * 9 / 12 for name, grad in grads.items()})


@pytest.fixture(scope="module")
def value_model(tiny_assets):
    from verl.single_controller.fsdp_workers import load_value_model

    torch.manual_seed(0)
    return load_value_model(str(tiny_assets / "model"))


@pytest.mark.compares_runs
def test_token_mean_critic_gradient_on_a_delethink_batch_is_the_plain_token_mean_gradient(value_model):
    batch = collate_rows(trajectory_rows(TRAJECTORIES, [0.0] * 6), 0)
    mask = batch["response_mask"]
    g = torch.Generator().manual_seed(2)
    batch["values"] = torch.randn(mask.shape, generator=g) * 0.1 * mask
    batch["returns"] = torch.randn(mask.shape, generator=g) * mask
    m = copy.deepcopy(value_model)
    config = CriticConfig(loss_agg_mode="token-mean", grad_clip=1e9, ppo_micro_batch_size_per_gpu=2)
    critic = DataParallelPPOCritic(m, torch.optim.SGD(m.parameters(), lr=0.0), config, norm_length=8)
    metrics = critic.update_critic(batch, num_mini_batches=1)

    def value_loss(model):
        vpreds = response_values(model, batch)
        out = core_algos.compute_value_loss(vpreds, batch["values"], batch["returns"], mask, 0.5)
        return out.loss_mat[mask.bool()].mean()

    plain = gradients_of(value_model, value_loss)
    assert_gradients_close({name: p.grad for name, p in m.named_parameters()}, plain)
    with torch.no_grad():
        assert metrics["critic/vf_loss"] == metric_approx(float(value_loss(value_model)))


@pytest.mark.slow
def test_the_worker_gives_the_ratio_to_the_trajectory_mean_actor_loss_alone(tiny_assets, tmp_path):
    """The whole path (worker.update with the critic and the actor): with token-mean on both, the ratio
    changes nothing; the same update with ratio 1 and with ratio 1.5 from the same saved state."""
    from verl.single_controller.fsdp_workers import ActorRolloutRefWorker

    token_mean = ("actor_rollout_ref.actor.loss_agg_mode=token-mean", "algorithm.adv_estimator=gae")
    worker = ActorRolloutRefWorker(
        tiny_config("tiny_delethink", tiny_assets, tmp_path, *DELETHINK, *token_mean)
    )
    worker.init_model()
    try:
        batch = actor_batch(load_causal_lm_of(tiny_assets))
        batch["values"] = worker.compute_values(batch)
        batch["returns"] = batch["values"] + batch["advantages"]
        worker.save_checkpoint(str(tmp_path / "actor"))
        worker.save_critic_checkpoint(str(tmp_path / "critic"))
        runs = []
        for ratio in (1.0, RATIO):
            worker.load_checkpoint(str(tmp_path / "actor"))
            worker.load_critic_checkpoint(str(tmp_path / "critic"))
            runs.append(worker.update(batch, 1, ratio, actor=True, critic=True))
    finally:
        worker.shutdown()
    assert runs[0]["actor/grad_norm"] > 0 and runs[0]["critic/grad_norm"] > 0
    for key in ("actor/pg_loss", "actor/grad_norm", "critic/vf_loss", "critic/grad_norm"):
        assert runs[1][key] == runs[0][key], key


def load_causal_lm_of(assets):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(assets / "model")


@pytest.mark.parametrize(("mode", "logged"), [(MODE, True), ("token-mean", False)])
def test_the_delethink_trainer_logs_the_ratio_only_for_the_trajectory_mean_mode(
    tiny_assets, tmp_path, mode, logged
):
    from verl.core.trajectory import PromptItem
    from verl.trainer.delethink_ppo.ray_trainer import RayDelethinkTrainer

    config = tiny_config(
        "tiny_delethink", tiny_assets, tmp_path, *DELETHINK, f"actor_rollout_ref.actor.loss_agg_mode={mode}"
    )
    items = [PromptItem([1, 2], "test", "0")] * 4
    trainer = RayDelethinkTrainer(config, build_tokenizer(), items, items, None, None)
    batch, ratio, metrics, _ = trainer.build_training_batch(TRAJECTORIES, [0.0] * 6)
    # 9 chunk rows padded to 10 (2 mini-batches x 1 rank): 10 rows for 6 trajectories
    assert batch["responses"].shape[0] == 10 and ratio == 10 / 6
    assert metrics["delethink/flat_batch_size"] == 9
    assert ("delethink/rows_per_trajectory" in metrics) == logged
    if logged:
        assert metrics["delethink/rows_per_trajectory"] == 10 / 6
