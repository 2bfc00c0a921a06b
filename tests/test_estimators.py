"""The token-level advantage estimators (REINFORCE++, its group-baseline variant, ReMax), the KL penalty
in the reward with its fixed and adaptive controllers, Dr. GRPO's aggregation, and the plumbing that puts
per-trajectory token values onto training rows: against numbers worked out by hand (the arithmetic is in
the comments), then end to end on the tiny model in both thinking environments."""

import json
import math
import re

import pytest
import torch
from torch.testing import assert_close

from tests.e2e_utils import DELETHINK, ONE_PROCESS, tiny_config, tiny_longcot_with
from verl.config import ConfigError
from verl.core import core_algos
from verl.core.batch import TokenLayout, collate_rows, pad_rows_to_multiple, trajectory_rows
from verl.core.trajectory import Trajectory, Turn
from verl.trainer.config_loader import config_warnings

# ---------------------------------------------------------------------------------------------
# token rewards and returns


def test_outcome_score_lands_on_the_last_masked_token():
    # trajectory 0 has 3 tokens, 1 has 2, 2 has none (all masked out: nothing to place)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    rewards = core_algos.place_on_last_token(torch.tensor([2.0, -1.0, 5.0]), mask)
    assert_close(rewards, torch.tensor([[0.0, 0.0, 2.0, 0.0], [0.0, -1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]))


def test_a_score_on_a_rows_only_token_and_the_shapes_place_on_last_token_takes():
    # row 0's only masked token is its first, row 1's is its second
    mask = torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    rewards = core_algos.place_on_last_token(torch.tensor([7.0, 8.0], dtype=torch.float64), mask)
    assert_close(rewards, torch.tensor([[7.0, 0.0, 0.0], [0.0, 8.0, 0.0]], dtype=torch.float64))
    for values, mask in [(torch.zeros(3), torch.ones(2, 4)), (torch.zeros(2, 1), torch.ones(2, 3)),
                         (torch.zeros(2), torch.ones(2))]:  # fmt: skip
        message = f"expected values [N] and mask [N, L]; got {tuple(values.shape)}, {tuple(mask.shape)}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            core_algos.place_on_last_token(values, mask)


def test_discounted_returns():
    # gamma 0.5, reward 1 on the last of 3 tokens: G2 = 1, G1 = 0 + 0.5 * 1 = 0.5, G0 = 0.5 * 0.5 = 0.25;
    # second row: reward 1 on token 1 of 2, the third column is padding: G = [0.5, 1, 0]
    rewards = torch.tensor([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    assert_close(
        core_algos.discounted_returns(rewards, mask, 0.5), torch.tensor([[0.25, 0.5, 1.0], [0.5, 1.0, 0.0]])
    )
    with pytest.raises(ValueError, match="gamma must be in"):
        core_algos.discounted_returns(rewards, mask, 0.0)


# ---------------------------------------------------------------------------------------------
# the estimators


def test_discounted_returns_of_one_token_rows_and_the_bounds_of_gamma():
    # one token per row: G = r where the token is masked, 0 where it is not; gamma 1 is allowed
    rewards, mask = torch.tensor([[3.0], [2.0]]), torch.tensor([[1.0], [0.0]])
    assert_close(core_algos.discounted_returns(rewards, mask, 1.0), torch.tensor([[3.0], [0.0]]))
    with pytest.raises(ValueError, match=r"^gamma must be in \(0, 1\], got 1.5$"):
        core_algos.discounted_returns(rewards, mask, 1.5)


def test_masked_whiten_of_two_tokens_and_of_equal_tokens():
    # [1, 0]: mean 0.5, deviations +-0.5, unbiased var 0.5 / (2 - 1) -> +-0.5 / sqrt(0.5 + 1e-8); the
    # masked-out 9 is 0
    values, mask = torch.tensor([[1.0, 9.0, 0.0]]), torch.tensor([[1.0, 0.0, 1.0]])
    half = 0.5 / math.sqrt(0.5 + 1e-8)
    assert_close(core_algos.masked_whiten(values, mask), torch.tensor([[half, 0.0, -half]]))
    # equal tokens have variance 0: they whiten to 0 (eps keeps it from 0 / 0)
    equal = core_algos.masked_whiten(torch.tensor([[2.0, 2.0, 2.0]]), torch.ones(1, 3))
    assert torch.equal(equal, torch.zeros(1, 3))


# trajectory A: 3 tokens, score 1; trajectory B: 1 token, score 0
RPP_MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
RPP_REWARDS = torch.tensor([[0.0, 0.0, 1.0], [0.0, 0.0, 0.0]])


def test_reinforce_plus_plus_without_discount_whitens_the_outcome_over_all_tokens():
    # gamma 1: returns A = [1, 1, 1], B = [0]; over the 4 tokens mean 0.75, deviations
    # [0.25, 0.25, 0.25, -0.75], unbiased var (3 * 0.0625 + 0.5625) / 3 = 0.25, std 0.5
    # -> A = [0.5, 0.5, 0.5], B = [-1.5]
    advantages = core_algos.compute_reinforce_plus_plus_advantage(RPP_REWARDS, RPP_MASK, gamma=1.0)
    assert_close(advantages, torch.tensor([[0.5, 0.5, 0.5], [-1.5, 0.0, 0.0]]), atol=1e-6, rtol=1e-6)


def test_reinforce_plus_plus_with_discount():
    # gamma 0.5: returns A = [0.25, 0.5, 1], B = [0]; mean 1.75 / 4 = 0.4375, deviations
    # [-0.1875, 0.0625, 0.5625, -0.4375], squares sum 0.546875, unbiased var 0.546875 / 3
    std = math.sqrt(0.546875 / 3 + 1e-8)
    expected = torch.tensor([[-0.1875, 0.0625, 0.5625], [-0.4375, 0.0, 0.0]]) / std
    advantages = core_algos.compute_reinforce_plus_plus_advantage(RPP_REWARDS, RPP_MASK, gamma=0.5)
    assert_close(advantages, expected)
    tokens = advantages[RPP_MASK.bool()]
    assert abs(float(tokens.mean())) < 1e-6 and float(tokens.std()) == pytest.approx(1.0, abs=1e-6)


def test_reinforce_plus_plus_baseline_centres_on_the_group_then_whitens():
    # trajectory 0 (group g, 2 tokens) earns -0.25 then 1.25: sum 1 (a KL-in-reward penalty counts here);
    # trajectory 1 (group g, 1 token) sums 0; trajectory 2 is alone in group h and sums 1.
    # group g mean 0.5 -> 0.5, -0.5; a group of one has baseline 0 (as in verl) -> 1.
    # tokens 0.5, 0.5, -0.5, 1, 1: mean 0.5, deviations 0, 0, -1, 0.5, 0.5, unbiased var 1.5 / 4
    rewards = torch.tensor([[-0.25, 1.25], [0.0, 0.0], [0.0, 1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [1.0, 1.0]])
    std = math.sqrt(1.5 / 4 + 1e-8)
    expected = torch.tensor([[0.0, 0.0], [-1.0, 0.0], [0.5, 0.5]]) / std
    advantages = core_algos.compute_reinforce_plus_plus_baseline_advantage(rewards, mask, ["g", "g", "h"])
    assert_close(advantages, expected)


def test_reinforce_plus_plus_baseline_takes_only_matching_n_by_l_rewards_and_mask():
    for rewards, mask in [(torch.zeros(3), torch.ones(3)), (torch.zeros(2, 3), torch.ones(2, 2))]:
        message = f"expected [N, L] token_rewards and mask; got {tuple(rewards.shape)}, {tuple(mask.shape)}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            core_algos.compute_reinforce_plus_plus_baseline_advantage(rewards, mask, [0, 0, 0])


def test_remax_subtracts_the_greedy_score_from_the_reward_to_go():
    # trajectory 0: rewards -0.1, -0.2 (KL penalties), 0.7 (score 1 less 0.3 KL); to-go 0.4, 0.5, 0.7;
    # its prompt's greedy rollout scored 0.5 -> -0.1, 0, 0.2. trajectory 1: one token, score 0, greedy 0.5
    # -> -0.5 (its padding stays 0). Not whitened.
    rewards = torch.tensor([[-0.1, -0.2, 0.7], [0.0, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 0.0, 0.0]])
    advantages = core_algos.compute_remax_advantage(rewards, mask, torch.tensor([0.5, 0.5]))
    assert_close(advantages, torch.tensor([[-0.1, 0.0, 0.2], [-0.5, 0.0, 0.0]]))
    with pytest.raises(ValueError, match="baseline_scores"):
        core_algos.compute_token_advantage("remax", rewards, mask, group_ids=[0, 1])


def test_token_advantage_dispatch():
    same = core_algos.compute_token_advantage("reinforce_plus_plus", RPP_REWARDS, RPP_MASK, group_ids=[0, 1])
    assert_close(same, core_algos.compute_reinforce_plus_plus_advantage(RPP_REWARDS, RPP_MASK))
    message = (
        "unknown token-level advantage estimator 'grpo'; "
        "choose one of ['reinforce_plus_plus', 'reinforce_plus_plus_baseline', 'remax']"
    )
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        core_algos.compute_token_advantage("grpo", RPP_REWARDS, RPP_MASK, group_ids=[0, 1])


def test_token_advantage_passes_every_argument_on():
    # the same numbers as calling each estimator directly with gamma 0.5 (not the default 1, which
    # gives other numbers), the groups and the greedy baselines
    rewards, mask = torch.tensor([[0.0, 0.5, 1.0], [0.0, 2.0, 0.0], [1.0, 0.0, 0.0]]), torch.ones(3, 3)
    mask[2, 1:] = 0
    groups, baseline = ["g", "g", "h"], torch.tensor([0.5, -1.0, 0.25])
    cases = {
        "reinforce_plus_plus": core_algos.compute_reinforce_plus_plus_advantage(rewards, mask, 0.5),
        "reinforce_plus_plus_baseline": core_algos.compute_reinforce_plus_plus_baseline_advantage(
            rewards, mask, groups
        ),
        "remax": core_algos.compute_remax_advantage(rewards, mask, baseline),
    }
    for estimator, expected in cases.items():
        got = core_algos.compute_token_advantage(
            estimator, rewards, mask, group_ids=groups, gamma=0.5, baseline_scores=baseline
        )
        assert torch.equal(got, expected), estimator
    assert not torch.equal(
        cases["reinforce_plus_plus"], core_algos.compute_reinforce_plus_plus_advantage(rewards, mask)
    )
    message = "remax needs baseline_scores: the greedy rollout's score of each trajectory's prompt"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        core_algos.compute_token_advantage("remax", rewards, mask, group_ids=groups)
    message = "baseline_scores must have shape (3,) (one per trajectory), got (2,)"
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        core_algos.compute_remax_advantage(rewards, mask, baseline[:2])


# ---------------------------------------------------------------------------------------------
# KL in the reward


def test_kl_penalty_in_the_reward_and_the_batch_kl():
    # coef 0.5. trajectory 0: KL 0.2, 0.4 -> rewards 0 - 0.1, 1 - 0.2; trajectory 1: KL 1.0 on its one
    # token -> 0.5 - 0.5 (the 9.0 is padding); trajectory 2 has no tokens and does not count.
    # batch KL = mean of per-trajectory means (0.2 + 0.4) / 2 = 0.3 and 1.0 -> 0.65
    rewards = torch.tensor([[0.0, 1.0], [0.5, 0.0], [0.0, 0.0]])
    kl = torch.tensor([[0.2, 0.4], [1.0, 9.0], [5.0, 5.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    penalised, current_kl = core_algos.apply_kl_penalty(rewards, kl, mask, kl_coef=0.5)
    assert_close(penalised, torch.tensor([[-0.1, 0.8], [0.0, 0.0], [0.0, 0.0]]))
    assert current_kl == pytest.approx(0.65)


def test_batch_kl_without_any_token_is_0_and_the_shapes_are_checked():
    rewards = torch.tensor([[1.0, 2.0]])
    penalised, current_kl = core_algos.apply_kl_penalty(rewards, torch.ones(1, 2), torch.zeros(1, 2), 0.5)
    assert current_kl == 0.0 and torch.equal(penalised, rewards)
    for r, kl, mask in [(torch.zeros(3), torch.zeros(3), torch.ones(3)),
                        (torch.zeros(2, 3), torch.zeros(2, 2), torch.ones(2, 3)),
                        (torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(1, 3))]:  # fmt: skip
        shapes = ", ".join(str(tuple(t.shape)) for t in (r, kl, mask))
        message = f"expected [N, L] token_rewards, kl and mask; got {shapes}"
        with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
            core_algos.apply_kl_penalty(r, kl, mask, 0.1)


def test_adaptive_kl_controller():
    # above target: 0.15 / 0.1 - 1 = 0.5, clipped to 0.2; 100 trajectories of a 1000 horizon:
    # 0.001 * (1 + 0.2 * 0.1) = 0.00102. below: 0.09 / 0.1 - 1 = -0.1 -> 0.001 * (1 - 0.01) = 0.00099
    assert core_algos.adaptive_kl_coef(0.001, 0.15, 0.1, 100, 1000) == pytest.approx(0.00102)
    assert core_algos.adaptive_kl_coef(0.001, 0.09, 0.1, 100, 1000) == pytest.approx(0.00099)
    adaptive = core_algos.KLController(0.001, "adaptive", target_kl=0.1, horizon=1000)
    adaptive.update(current_kl=0.0, n_steps=100)  # error -1 clipped to -0.2: 0.001 * 0.98
    assert adaptive.value == pytest.approx(0.00098)
    fixed = core_algos.KLController(0.001, "fixed")
    fixed.update(current_kl=10.0, n_steps=100)
    assert fixed.value == 0.001
    with pytest.raises(ValueError, match="unknown KL controller"):
        core_algos.KLController(0.001, "pid")


# ---------------------------------------------------------------------------------------------
# per-trajectory token values <-> training rows


def turn(prompt: list[int], response: list[int]) -> Turn:
    return Turn(prompt, response, [-0.5] * len(response), "length")


def three_chunk_and_one_row() -> list[Trajectory]:
    # trajectory 0: three chunks of 3, 2 and 4 thinking tokens (9 in all), each with its own prompt;
    # trajectory 1: one row of 2 tokens
    chunks = [turn([1, 2], [10, 11, 12]), turn([1, 2, 12], [13, 14]), turn([1, 2, 14], [15, 16, 17, 18])]
    return [Trajectory(chunks), Trajectory([turn([3], [20, 21])])]


def test_token_layout_of_a_three_chunk_trajectory():
    rows = trajectory_rows(three_chunk_and_one_row(), [0.0, 0.0])
    padded = pad_rows_to_multiple(rows, 5)  # one padding row
    layout = TokenLayout.of(rows, num_trajectories=2, num_rows=len(padded), width=4)
    # the trajectory's 9 values 100..108 fill its chunk rows in order: 3, then 2, then 4
    per_trajectory = torch.tensor(
        [[100.0, 101, 102, 103, 104, 105, 106, 107, 108], [200, 201, 0, 0, 0, 0, 0, 0, 0]]
    )
    on_rows = layout.to_rows(per_trajectory)
    expected = torch.tensor([
        [100.0, 101, 102, 0],  # chunk 1
        [103, 104, 0, 0],  # chunk 2
        [105, 106, 107, 108],  # chunk 3
        [200, 201, 0, 0],  # trajectory 1
        [0, 0, 0, 0],  # padding row
    ])  # fmt: skip
    assert_close(on_rows, expected)
    assert_close(layout.to_trajectories(on_rows), per_trajectory)
    assert layout.lengths.tolist() == [9, 2]
    with pytest.raises(ValueError, match="expected shape"):
        layout.to_trajectories(on_rows[:4])


def test_token_layout_carries_log_probs_to_trajectories_in_thinking_order():
    trajectories = three_chunk_and_one_row()
    rows = trajectory_rows(trajectories, [0.0, 0.0])
    batch = collate_rows(rows, pad_token_id=0)
    layout = TokenLayout.of(rows, 2, len(rows), batch["responses"].shape[1])
    # the response ids, gathered per trajectory, are its thinking: every chunk's tokens in order
    thinking = layout.to_trajectories(batch["responses"].float())
    assert thinking[0].long().tolist() == trajectories[0].response_ids
    assert thinking[1, :2].long().tolist() == [20, 21]
    assert layout.to_trajectories(batch["response_mask"]).sum(-1).tolist() == [9.0, 2.0]


def test_outcome_advantages_through_the_layout_equal_todays_rows():
    # grpo / rloo still broadcast one float per trajectory (collate_rows); the same values spread over
    # each trajectory's tokens and put on the rows by the layout give the same advantages, and every
    # trajectory's mean token advantage is its outcome advantage
    trajectories = three_chunk_and_one_row()
    outcome = [1.5, -2.0]
    rows = pad_rows_to_multiple(trajectory_rows(trajectories, outcome), 5)
    batch = collate_rows(rows, pad_token_id=0)
    layout = TokenLayout.of(rows[:4], 2, 5, batch["responses"].shape[1])
    spread = torch.tensor(outcome)[:, None].expand(2, 9)
    assert_close(layout.to_rows(spread) * batch["response_mask"], batch["advantages"])
    per_trajectory = core_algos.masked_mean(
        layout.to_trajectories(batch["advantages"]), layout.to_trajectories(batch["response_mask"]), dim=-1
    )
    assert per_trajectory.tolist() == outcome


# ---------------------------------------------------------------------------------------------
# Dr. GRPO: the trajectory is the sequence


def test_dr_grpo_aggregation_sums_a_delethink_trajectory_over_its_chunk_rows():
    # per-token loss 1 on every response token: chunk rows of trajectory 0 sum 3, 2 and 4, trajectory 1's
    # row sums 2. seq-mean-token-sum-norm with the constant 10 over the 4 rows: (3 + 2 + 4 + 2) / 10 / 4;
    # rows_per_trajectory = 4 / 2 makes it 11 / 20, the mean over trajectories
    # of (token sum / 10): (9 / 10 + 2 / 10) / 2
    batch = collate_rows(trajectory_rows(three_chunk_and_one_row(), [1.0, 1.0]), pad_token_id=0)
    mask = batch["response_mask"]
    loss = core_algos.agg_loss(mask.clone(), mask, "seq-mean-token-sum-norm", norm_length=10)
    assert float(loss) * 4 / 2 == pytest.approx((9 / 10 + 2 / 10) / 2)


# ---------------------------------------------------------------------------------------------
# config


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["algorithm.kl_ctrl.type=pid"],
            r"algorithm.kl_ctrl.type='pid': must be one of \['fixed', 'adaptive'\]",
        ),
        (["algorithm.kl_ctrl.target_kl=0"], r"algorithm.kl_ctrl.target_kl=0.0: must be > 0"),
        (["algorithm.kl_ctrl.horizon=0"], r"algorithm.kl_ctrl.horizon=0: must be > 0"),
        (["algorithm.kl_ctrl.kl_coef=-1"], r"algorithm.kl_ctrl.kl_coef=-1.0: must be >= 0"),
        (["algorithm.gamma=0"], r"algorithm.gamma=0.0: must be in \(0, 1\]"),
        (["algorithm.gamma=1.5"], r"algorithm.gamma=1.5: must be in \(0, 1\]"),
        (["algorithm.kl_penalty=l2"], r"algorithm.kl_penalty='l2': must be one of"),
        (
            ["algorithm.use_kl_in_reward=true"],
            r"algorithm.use_kl_in_reward=True: adv_estimator='grpo' gives one",
        ),
        (
            ["algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.env_manager.enable=true"],
            r"algorithm.adv_estimator='remax': remax generates a greedy baseline",
        ),
        (["actor_rollout_ref.rollout.n=1"], r"actor_rollout_ref.rollout.n=1: must be >= 2 with"),
    ],
)
def test_estimator_config_is_checked(tiny_assets, overrides, message):
    with pytest.raises(ConfigError, match=message):
        tiny_longcot_with(tiny_assets, *overrides)


def test_estimators_without_groups_run_with_one_sample_and_kl_twice_is_warned(tiny_assets):
    for estimator in ("reinforce_plus_plus", "reinforce_plus_plus_baseline", "remax"):
        assert tiny_longcot_with(
            tiny_assets, f"algorithm.adv_estimator={estimator}", "actor_rollout_ref.rollout.n=1"
        )
    both = tiny_longcot_with(
        tiny_assets, "algorithm.adv_estimator=reinforce_plus_plus", "algorithm.use_kl_in_reward=true",
        "actor_rollout_ref.actor.use_kl_loss=true",
    )  # fmt: skip
    assert any("penalised twice" in w for w in config_warnings(both))
    dr_grpo = tiny_longcot_with(
        tiny_assets, "algorithm.norm_adv_by_std_in_grpo=false",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm",
    )  # fmt: skip
    assert config_warnings(dr_grpo) == []  # Dr. GRPO's aggregation is not an environment mix


# ---------------------------------------------------------------------------------------------
# end to end on the tiny model, both environments

LONGCOT = ("data.max_response_length=24",)
ENVIRONMENTS = {"tiny_longcot": LONGCOT, "tiny_delethink": DELETHINK}


def train(name, tiny_assets, run_dir, *overrides):
    from verl.trainer.launch import run
    from verl.utils.fs import read_jsonl

    run(tiny_config(name, tiny_assets, run_dir, *ENVIRONMENTS[name], ONE_PROCESS, *overrides))
    return read_jsonl(run_dir / "metrics.jsonl")


def assert_whitened(m):
    assert abs(m["train/token_advantage_mean"]) < 1e-4
    assert m["train/token_advantage_std"] == pytest.approx(1.0, abs=1e-3)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_reinforce_plus_plus_with_adaptive_kl_in_reward(name, tiny_assets, tmp_path):
    from verl.utils.fs import read_jsonl

    run_dir = tmp_path / name
    kl = (
        "algorithm.adv_estimator=reinforce_plus_plus", "algorithm.gamma=0.9",
        "algorithm.use_kl_in_reward=true", "algorithm.kl_ctrl.type=adaptive", "algorithm.kl_ctrl.kl_coef=0.1",
        "algorithm.kl_ctrl.target_kl=0.01", "algorithm.kl_ctrl.horizon=4", "trainer.save_freq=1",
    )  # fmt: skip
    metrics = train(name, tiny_assets, run_dir, *kl, "trainer.total_training_steps=2")
    for m in metrics:
        assert_whitened(m)
        assert m["actor/grad_norm"] > 0
    first, second = metrics
    # step 1: policy = reference, KL 0, error clipped to -0.2, 4 trajectories of a horizon of 4:
    # 0.1 * (1 - 0.2) = 0.08 for step 2
    assert first["actor/reward_kl_penalty_coeff"] == pytest.approx(0.1)
    assert first["actor/reward_kl_penalty"] == pytest.approx(0.0, abs=1e-5)
    assert second["actor/reward_kl_penalty_coeff"] == pytest.approx(0.08)
    assert second["actor/reward_kl_penalty"] > 0  # step 1 moved the policy away from the reference
    # the checkpoint holds the coefficient after step 2's update
    saved = json.loads((run_dir / "global_step_2" / "trainer_state.json").read_text())["kl_coef"]
    after_second = core_algos.adaptive_kl_coef(0.08, second["actor/reward_kl_penalty"], 0.01, 4, 4)
    assert saved == pytest.approx(after_second)
    if name == "tiny_longcot":  # resume: step 3 starts from the saved coefficient, not kl_ctrl.kl_coef
        train(name, tiny_assets, run_dir, *kl, "trainer.total_training_steps=3")
        third = read_jsonl(run_dir / "metrics.jsonl")[2]
        assert third["step"] == 3 and third["actor/reward_kl_penalty_coeff"] == pytest.approx(saved)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_reinforce_plus_plus_baseline(name, tiny_assets, tmp_path):
    metrics = train(
        name, tiny_assets, tmp_path / name, "algorithm.adv_estimator=reinforce_plus_plus_baseline",
        "trainer.total_training_steps=1",
    )  # fmt: skip
    assert_whitened(metrics[0])
    assert metrics[0]["actor/grad_norm"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_remax_against_a_greedy_baseline(name, tiny_assets, tmp_path):
    from verl.utils.fs import read_jsonl

    run_dir = tmp_path / name
    metrics = train(
        name, tiny_assets, run_dir, "algorithm.adv_estimator=remax", "actor_rollout_ref.rollout.n=1",
        "trainer.total_training_steps=1",
    )  # fmt: skip
    m = metrics[0]
    assert m["actor/grad_norm"] > 0 and m["timing/gen_baseline_s"] > 0
    # one sample per prompt and no KL: every token's advantage is score - the prompt's greedy score, so
    # the scores less the advantages average to the greedy scores' mean
    rollouts = read_jsonl(run_dir / "rollouts" / "step_1.jsonl")
    assert len(rollouts) == 2
    baselines = [r["score"] - r["advantage"] for r in rollouts]
    assert sum(baselines) / 2 == pytest.approx(m["train/baseline_score_mean"], abs=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ENVIRONMENTS))
def test_dr_grpo(name, tiny_assets, tmp_path):
    from verl.utils.fs import read_jsonl

    run_dir = tmp_path / name
    metrics = train(
        name, tiny_assets, run_dir, "algorithm.norm_adv_by_std_in_grpo=false",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-sum-norm", "trainer.total_training_steps=1",
    )  # fmt: skip
    assert metrics[0]["actor/grad_norm"] > 0
    # no std normalisation: with groups of 2, each advantage is half the difference of the pair's scores
    rollouts = read_jsonl(run_dir / "rollouts" / "step_1.jsonl")
    for a, b in zip(rollouts[::2], rollouts[1::2], strict=True):
        assert a["advantage"] == pytest.approx((a["score"] - b["score"]) / 2, abs=1e-6)
        assert b["advantage"] == pytest.approx(-a["advantage"], abs=1e-6)
