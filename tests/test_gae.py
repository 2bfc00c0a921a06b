"""GAE and the clipped value loss against numbers worked out by hand (the arithmetic is in the comments),
across Delethink chunk boundaries through TokenLayout, and the invariant that a trajectory's chunking does
not change its advantages (Delethink with I = 1 is LongCoT)."""

import math
import re
import statistics

import pytest
import torch
from torch.testing import assert_close

from tests.e2e_utils import DELETHINK, ONE_PROCESS, tiny_config, tiny_longcot_with
from tests.tolerances import assert_forward_close, assert_gradients_close, metric_approx
from verl.config import ConfigError
from verl.core import core_algos
from verl.core.batch import TokenLayout, collate_rows, pad_rows_to_multiple, trajectory_rows
from verl.core.trajectory import Trajectory, Turn

GAMMA, LAM = 0.9, 0.8  # gamma * lam = 0.72


def turn(prompt: list[int], response: list[int]) -> Turn:
    return Turn(prompt, response, [0.0] * len(response), "length")


def whitened(values: list[float]) -> list[float]:
    mean, var = statistics.mean(values), statistics.variance(values)  # unbiased, as masked_whiten
    return [(v - mean) / (var + 1e-8) ** 0.5 for v in values]


# trajectory 0: three Delethink chunks of 2, 1 and 2 thinking tokens, each row with its own prompt
# (question + carry-over); the critic's values per row, each computed in its chunk's context:
#   chunk 1: [0.5, 0.4]   chunk 2: [0.2]   chunk 3: [0.6, 0.7]        score 1
# trajectory 1: one row of 2 tokens, values [0.1, -0.2], score 0
CHUNKED = [
    Trajectory([turn([1, 2], [10, 11]), turn([1, 2, 11], [12]), turn([1, 2, 12], [13, 14])]),
    Trajectory([turn([3], [20, 21])]),
]
ROW_VALUES = torch.tensor([[0.5, 0.4], [0.2, 0.0], [0.6, 0.7], [0.1, -0.2], [9.0, 9.0]])  # last: padding
# GAE on trajectory 0, backwards (delta_t = r_t + 0.9 V_{t+1} - V_t, A_t = delta_t + 0.72 A_{t+1}):
#   t4 (last of chunk 3): delta = 1 + 0 - 0.7 = 0.3          A = 0.3
#   t3:                   delta = 0.9 * 0.7 - 0.6 = 0.03     A = 0.03 + 0.72 * 0.3 = 0.246
#   t2 (chunk 2, alone):  delta = 0.9 * 0.6 - 0.2 = 0.34     A = 0.34 + 0.72 * 0.246 = 0.51712
#                         (0.6: the value of chunk 3's first token, computed in chunk 3's context)
#   t1 (last of chunk 1): delta = 0.9 * 0.2 - 0.4 = -0.22    A = -0.22 + 0.72 * 0.51712 = 0.1523264
#                         (0.2: the value of chunk 2's first token)
#   t0:                   delta = 0.9 * 0.4 - 0.5 = -0.14    A = -0.14 + 0.72 * 0.1523264 = -0.030325
# trajectory 1: t1: delta = 0 + 0 + 0.2 = 0.2, A = 0.2; t0: delta = 0.9 * -0.2 - 0.1 = -0.28,
#   A = -0.28 + 0.72 * 0.2 = -0.136
RAW_ADVANTAGES = [[-0.030325, 0.1523264, 0.51712, 0.246, 0.3], [-0.136, 0.2]]
# returns = A + V
RETURNS = [[0.469675, 0.5523264, 0.71712, 0.846, 1.0], [-0.036, 0.0]]


def gae_on_rows(trajectories, row_values, scores):
    """What the trainer does: rows -> per-trajectory tokens -> GAE -> back onto the rows."""
    rows = trajectory_rows(trajectories, [0.0] * len(trajectories))
    padded = pad_rows_to_multiple(rows, 5 if len(rows) == 4 else 1)
    batch = collate_rows(padded, pad_token_id=0)
    layout = TokenLayout.of(rows, len(trajectories), len(padded), batch["responses"].shape[1])
    mask = layout.to_trajectories(batch["response_mask"])
    rewards = core_algos.place_on_last_token(torch.tensor(scores), mask)
    advantages, returns = core_algos.compute_gae_advantage_return(
        rewards, layout.to_trajectories(row_values * batch["response_mask"]), mask, GAMMA, LAM
    )
    return layout.to_rows(advantages), layout.to_rows(returns), batch["response_mask"]


def test_gae_bootstraps_each_chunk_from_the_next_chunks_first_value():
    advantages, returns, mask = gae_on_rows(CHUNKED, ROW_VALUES, [1.0, 0.0])
    (a0, a1, a2, a3, a4), (b0, b1) = RETURNS
    expected_returns = torch.tensor([[a0, a1], [a2, 0.0], [a3, a4], [b0, b1], [0.0, 0.0]])
    assert_close(returns, expected_returns, atol=1e-6, rtol=0)
    w = whitened(RAW_ADVANTAGES[0] + RAW_ADVANTAGES[1])
    expected = torch.tensor([[w[0], w[1]], [w[2], 0.0], [w[3], w[4]], [w[5], w[6]], [0.0, 0.0]])
    assert_close(advantages, expected, atol=1e-5, rtol=0)
    assert float(advantages[mask.bool()].mean()) == pytest.approx(0.0, abs=1e-6)
    assert (advantages * (1 - mask)).abs().sum() == 0  # nothing on padding


def test_gae_raw_numbers_and_the_end_of_a_trajectory():
    # one trajectory of 5 tokens with the values above (the 6th column is past its end: V = 0 there,
    # whatever the input holds) and 2 tokens for the second; the returns are A + V before whitening
    values = torch.tensor([[0.5, 0.4, 0.2, 0.6, 0.7, 5.0], [0.1, -0.2, 5.0, 5.0, 5.0, 5.0]])
    mask = torch.tensor([[1.0] * 5 + [0.0], [1.0, 1.0, 0.0, 0.0, 0.0, 0.0]])
    rewards = core_algos.place_on_last_token(torch.tensor([1.0, 0.0]), mask)
    _, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, GAMMA, LAM)
    assert_close(returns, torch.tensor([RETURNS[0] + [0.0], RETURNS[1] + [0.0] * 4]), atol=1e-6, rtol=0)


def test_gae_with_lambda_one_and_zero_values_is_the_discounted_return():
    # lam = 1, V = 0: A_t = sum_k gamma^k r_{t+k}, the REINFORCE return: 0.81, 0.9, 1 before whitening
    rewards, mask = torch.tensor([[0.0, 0.0, 1.0]]), torch.ones(1, 3)
    _, returns = core_algos.compute_gae_advantage_return(rewards, torch.zeros(1, 3), mask, 0.9, 1.0)
    assert_close(returns, torch.tensor([[0.81, 0.9, 1.0]]))
    assert_close(returns, core_algos.discounted_returns(rewards, mask, 0.9))


@pytest.mark.parametrize(
    ("gamma", "lam", "message"), [(0.0, 0.5, "gamma must be in"), (1.0, 1.5, "lam must be in")]
)
def test_gae_rejects_bad_gamma_and_lambda(gamma, lam, message):
    x = torch.zeros(1, 2)
    with pytest.raises(ValueError, match=message):
        core_algos.compute_gae_advantage_return(x, x, x, gamma, lam)


def test_gae_with_lambda_zero_is_one_step_td_and_gamma_one_is_allowed():
    # lam 0: A_t = delta_t. gamma 0.5, values [0.5, 0.25], reward 1 on the last token:
    # delta_1 = 1 + 0 - 0.25 = 0.75, delta_0 = 0 + 0.5 * 0.25 - 0.5 = -0.375; returns A + V = [0.125, 1]
    rewards, values, mask = torch.tensor([[0.0, 1.0]]), torch.tensor([[0.5, 0.25]]), torch.ones(1, 2)
    advantages, returns = core_algos.compute_gae_advantage_return(rewards, values, mask, 0.5, 0.0)
    assert_close(returns, torch.tensor([[0.125, 1.0]]))
    # two tokens whiten to -+0.5 / sqrt(0.5): (x - mean) / unbiased std
    assert_close(advantages, torch.tensor([[-1.0, 1.0]]) * 0.5 / math.sqrt(0.5 + 1e-8))
    # gamma 1, one token: delta = 2 - 0.5 = 1.5, return 2; it whitens to 0 (a single token)
    advantages, returns = core_algos.compute_gae_advantage_return(
        torch.tensor([[2.0]]), torch.tensor([[0.5]]), torch.ones(1, 1), 1.0, 0.8
    )
    assert_close(returns, torch.tensor([[2.0]]))
    assert_close(advantages, torch.tensor([[0.0]]))


def test_gae_refuses_gamma_above_1_and_inputs_that_are_not_matching_n_by_l():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"^gamma must be in \(0, 1\], got 1.5$"):
        core_algos.compute_gae_advantage_return(x, x, x, 1.5, 0.5)
    for rewards, values, mask in [(x[0], x[0], x[0]), (x, x[:, :2], x[:1])]:
        shapes = ", ".join(str(tuple(t.shape)) for t in (rewards, values, mask))
        message = f"expected [N, L] rewards, values and mask; got {shapes}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            core_algos.compute_gae_advantage_return(rewards, values, mask, 0.9, 0.5)


def test_delethink_chunks_do_not_change_the_advantages_and_one_chunk_is_longcot():
    # the same thinking tokens with the same per-token values as one LongCoT row each: identical
    # advantages and returns, laid out per chunk; with I = 1 (one chunk row per trajectory) the layout
    # is the identity
    longcot = [Trajectory([turn([1, 2], [10, 11, 12, 13, 14])]), Trajectory([turn([3], [20, 21])])]
    long_values = torch.tensor([[0.5, 0.4, 0.2, 0.6, 0.7], [0.1, -0.2, 0.0, 0.0, 0.0]])
    long_adv, long_ret, long_mask = gae_on_rows(longcot, long_values, [1.0, 0.0])
    chunk_adv, chunk_ret, _ = gae_on_rows(CHUNKED, ROW_VALUES, [1.0, 0.0])
    # chunk rows [2, 1, 2] of trajectory 0 side by side are LongCoT's row 0
    joined = torch.cat([chunk_adv[0, :2], chunk_adv[1, :1], chunk_adv[2, :2]])
    assert_close(joined, long_adv[0], atol=1e-6, rtol=0)
    assert_close(chunk_adv[3], long_adv[1, :2], atol=1e-6, rtol=0)
    assert_close(torch.cat([chunk_ret[0, :2], chunk_ret[1, :1], chunk_ret[2, :2]]), long_ret[0])
    # I = 1: GAE on the rows themselves equals GAE through the layout
    rewards = core_algos.place_on_last_token(torch.tensor([1.0, 0.0]), long_mask)
    direct_adv, direct_ret = core_algos.compute_gae_advantage_return(
        rewards, long_values, long_mask, GAMMA, LAM
    )
    assert_close(long_adv, direct_adv)
    assert_close(long_ret, direct_ret)


# ---------------------------------------------------------------------------------------------
# the clipped value loss, cliprange_value 0.2
#   token 0: vpred 1.0, old 0.5, R 2.0: vclipped 0.7; (1 - 2)^2 = 1 < (0.7 - 2)^2 = 1.69 -> 0.845, clipped
#   token 1: vpred 0.2, old 0.5, R 0.0: vclipped 0.3; 0.04 < 0.09 -> 0.045, clipped
#   token 2: vpred 1.0, old 0.0, R 0.5: vclipped 0.2; 0.25 > 0.09 -> 0.125, not clipped
#   token 3: padding


def test_value_loss_clipping_numbers_and_gradient():
    vpreds = torch.tensor([[1.0, 0.2], [1.0, 7.0]], requires_grad=True)
    old = torch.tensor([[0.5, 0.5], [0.0, 0.0]])
    returns = torch.tensor([[2.0, 0.0], [0.5, 0.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    out = core_algos.compute_value_loss(vpreds, old, returns, mask, cliprange_value=0.2)
    assert_close(out.loss_mat * mask, torch.tensor([[0.845, 0.045], [0.125, 0.0]]))
    assert float(out.clipfrac) == pytest.approx(2 / 3)
    loss = core_algos.agg_loss(out.loss_mat, mask, "token-mean")
    assert loss.item() == pytest.approx((0.845 + 0.045 + 0.125) / 3)
    loss.backward()
    # where the clipped prediction wins its gradient is 0 (the clamp is saturated); token 2: (1 - 0.5) / 3
    assert_close(vpreds.grad, torch.tensor([[0.0, 0.0], [0.5 / 3, 0.0]]))


def test_a_prediction_inside_the_clip_range_is_not_counted_as_clipped():
    # vpred 0.625 from old 0.5 moves 0.125 < 0.2: vclipped = vpred, the two errors are the same float
    # 0.625^2 = 0.390625 -> loss 0.1953125, clip fraction 0
    vpreds = torch.tensor([[0.625]])
    out = core_algos.compute_value_loss(
        vpreds, torch.tensor([[0.5]]), torch.zeros(1, 1), torch.ones(1, 1), 0.2
    )
    assert_close(out.loss_mat, torch.tensor([[0.1953125]]))
    assert float(out.clipfrac) == 0.0


def test_value_loss_checks_shapes_and_the_clip_range():
    x = torch.zeros(2, 3)
    message = (
        "expected shape (2, 3) like response_mask; "
        "got {'vpreds': (2, 2), 'old_values': (1, 3), 'returns': (3,)}"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        core_algos.compute_value_loss(x[:, :2], x[:1], x[0], x, 0.5)
    with pytest.raises(ValueError, match="cliprange_value must be > 0"):
        core_algos.compute_value_loss(x, x, x, x, 0.0)


# ---------------------------------------------------------------------------------------------
# the critic's forward and update in one process (the data-parallel contract is the actor's)


@pytest.fixture(scope="module")
def value_model(tiny_assets):
    from verl.single_controller.fsdp_workers import load_value_model

    torch.manual_seed(0)
    return load_value_model(str(tiny_assets / "model"))


def critic_batch() -> dict[str, torch.Tensor]:
    """Rows of uneven prompt and response lengths (left-padded prompts), with old values and returns."""
    g = torch.Generator().manual_seed(1)
    trajectories = [
        Trajectory([turn(torch.randint(3, 200, (2 + i,), generator=g).tolist(),
                         torch.randint(3, 200, (1 + (3 * i) % 4,), generator=g).tolist())])
        for i in range(4)
    ]  # fmt: skip
    batch = collate_rows(trajectory_rows(trajectories, [0.0] * 4), pad_token_id=0)
    mask = batch["response_mask"]
    batch["values"] = torch.randn(mask.shape, generator=g) * 0.1 * mask
    batch["returns"] = torch.randn(mask.shape, generator=g) * mask
    return batch


def make_critic(model, **overrides):
    import copy

    from verl.config import CriticConfig
    from verl.workers.critic.dp_critic import DataParallelPPOCritic

    model = copy.deepcopy(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    return DataParallelPPOCritic(model, optimizer, CriticConfig(**overrides), norm_length=8)


@pytest.mark.compares_runs
def test_values_are_read_at_the_position_before_each_response_token(value_model):
    batch = critic_batch()
    values = make_critic(value_model, forward_micro_batch_size_per_gpu=3).compute_values(batch)
    t = batch["responses"].shape[1]
    with torch.no_grad():
        for i in range(4):
            ids = batch["input_ids"][i][batch["attention_mask"][i].bool()]
            n = int(batch["response_mask"][i].sum())
            alone = value_model(input_ids=ids[None]).logits[0, :, 0]  # the row by itself, no padding
            prompt = len(ids) - n
            assert_forward_close(values[i, :n], alone[prompt - 1 : prompt - 1 + n])
            assert values[i, n:t].abs().sum() == 0


@pytest.mark.compares_runs
def test_micro_batches_sum_to_the_mini_batch_value_loss_step(value_model):
    batch = critic_batch()
    one, four = make_critic(value_model, ppo_micro_batch_size_per_gpu=1), make_critic(value_model)
    m1, m4 = one.update_critic(batch, num_mini_batches=1), four.update_critic(batch, num_mini_batches=1)
    assert m1["critic/vf_loss"] == metric_approx(m4["critic/vf_loss"])
    assert m1["critic/grad_norm"] == metric_approx(m4["critic/grad_norm"]) and m1["critic/grad_norm"] > 0
    # plain SGD: the step is lr times the gradient
    assert_gradients_close(dict(one.model.named_parameters()), dict(four.model.named_parameters()))
    moved = zip(one.model.parameters(), value_model.parameters(), strict=True)
    assert any(not torch.equal(a, b) for a, b in moved)
    # the loss it reports is the clipped value loss of the values before the step
    mask = batch["response_mask"]
    vpreds = make_critic(value_model).compute_values(batch)
    out = core_algos.compute_value_loss(vpreds, batch["values"], batch["returns"], mask, 0.5)
    assert m4["critic/vf_loss"] == metric_approx(float(core_algos.agg_loss(out.loss_mat, mask, "token-mean")))
    assert m4["critic/vf_clipfrac"] == metric_approx(float(out.clipfrac))


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["algorithm.lam=1.5"], r"algorithm.lam=1.5: must be in \[0, 1\]"),
        (["critic.cliprange_value=0"], r"critic.cliprange_value=0.0: must be > 0"),
        (["critic.ppo_micro_batch_size_per_gpu=0"], r"critic.ppo_micro_batch_size_per_gpu=0: must be > 0"),
        (["critic.loss_agg_mode=sum"], r"critic.loss_agg_mode='sum': must be one of"),
        (["critic.optim.lr=0"], r"critic.optim.lr=0.0: must be > 0"),
        (["critic.fsdp_config.param_offload=true"], r"critic.fsdp_config.param_offload=True: offloading"),
        (["trainer.critic_warmup=1"], r"trainer.critic_warmup=1: warms up the critic, which only"),
        (
            ["algorithm.adv_estimator=gae", "critic.model.path=no/such/dir"],
            r"critic.model.path='no/such/dir': no such model directory",
        ),
    ],
)
def test_critic_config_is_checked(tiny_assets, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_longcot_with(tiny_assets, *overrides)


def test_critic_defaults_to_the_actors_model(tiny_assets):
    config = tiny_longcot_with(tiny_assets, "algorithm.adv_estimator=gae", "actor_rollout_ref.rollout.n=1")
    assert config.uses_critic and config.critic_model_path == str(tiny_assets / "model")
    assert not tiny_longcot_with(tiny_assets).uses_critic


# ---------------------------------------------------------------------------------------------
# end to end on the tiny model, both environments: the critic trains, checkpoints and resumes

LONGCOT = ("data.max_response_length=24",)
ENVIRONMENTS = {"tiny_longcot": LONGCOT, "tiny_delethink": DELETHINK}
GAE = ("algorithm.adv_estimator=gae", "algorithm.gamma=0.99", "algorithm.lam=0.95", "critic.optim.lr=1e-3")


def backbone(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The transformer's weights, shared by the causal LM and the value model ("model.*")."""
    return {k: v for k, v in state.items() if k.startswith("model.")}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_gae_trains_the_critic_and_resumes_it(name, tiny_assets, ray_session, tmp_path):
    from transformers import AutoModelForCausalLM, AutoModelForTokenClassification

    from verl.trainer.launch import run
    from verl.utils.fs import read_jsonl

    run_dir = tmp_path / name
    # Delethink also warms the critic up for one step (the actor waits for its values) and runs on two
    # ranks: the critic's rows, micro-batch counts and gradients go through the data-parallel path
    # (LongCoT's one rank runs in this process)
    two_ranks = ("trainer.critic_warmup=1", "trainer.n_gpus_per_node=2")
    extra = two_ranks if name == "tiny_delethink" else (ONE_PROCESS,)
    config = (*ENVIRONMENTS[name], *GAE, *extra, "trainer.save_freq=1")
    run(tiny_config(name, tiny_assets, run_dir, *config, "trainer.total_training_steps=2"))
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    for m in metrics:
        for key in ("critic/vf_loss", "critic/vf_clipfrac", "critic/vpred_mean", "critic/returns_mean",
                    "critic/values_mean"):  # fmt: skip
            assert math.isfinite(m[key]), key
        assert m["critic/vf_loss"] > 0 and m["critic/grad_norm"] > 0 and m["critic/lr"] == 1e-3
        assert m["timing/values_s"] > 0 and m["timing/update_critic_s"] > 0
        # per-token GAE advantages, whitened over the batch's trained tokens
        assert abs(m["train/token_advantage_mean"]) < 1e-4
        assert m["train/token_advantage_std"] == pytest.approx(1.0, abs=1e-3)
    first, second = metrics
    assert ("actor/grad_norm" in first) == (name == "tiny_longcot")  # no actor update while warming up
    assert second["actor/grad_norm"] > 0
    # the value model the critic trained: the base model's transformer with a value head, now moved
    critic_dir = run_dir / "global_step_2" / "critic"
    trained = AutoModelForTokenClassification.from_pretrained(critic_dir / "huggingface", num_labels=1)
    assert trained.score.weight.shape[0] == 1
    before = backbone(AutoModelForCausalLM.from_pretrained(tiny_assets / "model").state_dict())
    after = backbone(trained.state_dict())
    assert before.keys() == after.keys()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    if name == "tiny_delethink":
        assert first["delethink/num_turns_max"] > 1  # the values span chunk boundaries
        return
    # resume: step 3 continues the critic's optimizer and schedule (2 optimizer steps per training step)
    run(tiny_config(name, tiny_assets, run_dir, *config, "trainer.total_training_steps=3"))
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    state = torch.load(run_dir / "global_step_3" / "critic" / "state.pt", weights_only=False)
    assert state["lr_scheduler"]["last_epoch"] == 6
    assert {float(s["step"]) for s in state["optimizer"]["state"].values()} == {6.0}
