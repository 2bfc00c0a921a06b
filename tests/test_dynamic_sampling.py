"""Dynamic sampling and the no-EOS filter: the pure selection functions, the two metrics, and a real
run on the tiny model where half the prompts can teach nothing."""

from pathlib import Path

import pytest
import torch

from tests.e2e_utils import ONE_PROCESS, tiny_config
from verl.config import ConfigError, compose_config
from verl.core import core_algos
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.trainer.ppo.dynamic_sampling import finished_trajectories, group_members, informative_groups
from verl.utils.fs import read_jsonl


def test_informative_groups_are_those_whose_scores_differ():
    scores = [1.0, 1.0, 0.0, 1.0, 0.0, 0.0, 0.5, 0.25]
    assert informative_groups(scores, 2) == [1, 3]
    assert informative_groups(scores, 4) == [0, 1]
    assert informative_groups([0.3], 1) == []  # a group of one never has spread
    assert group_members([1, 3], 2) == [2, 3, 6, 7]
    with pytest.raises(ValueError, match="do not split into groups of 3"):
        informative_groups(scores, 3)


def test_finished_trajectories_are_those_with_eos():
    assert finished_trajectories([True, False, False, True]) == [0, 3]
    assert finished_trajectories([False, False]) == []


def test_zero_std_ratio_counts_groups_with_equal_scores():
    # groups: (1, 1) equal, (0, 1) differ, (0, 0) equal -> 2 of 3
    scores = torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0, 0.0])
    assert core_algos.zero_std_ratio(scores, [0, 0, 1, 1, 2, 2]) == pytest.approx(2 / 3)
    assert core_algos.zero_std_ratio(torch.tensor([0.2, 0.7]), ["a", "a"]) == 0.0


def test_filter_groups_config_is_checked(tiny_assets, tmp_path):
    with pytest.raises(ConfigError, match=r"algorithm.filter_groups.max_num_gen_batches=0: must be >= 1"):
        tiny_config("tiny_longcot", tiny_assets, tmp_path, "algorithm.filter_groups.max_num_gen_batches=0")
    overrides = [
        f"actor_rollout_ref.model.path={tiny_assets / 'model'}",
        f"data.train_files=[{tiny_assets / 'data' / 'train.jsonl'}]",
        f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
        "algorithm.filter_groups.enable=true",
        "actor_rollout_ref.rollout.env_manager.enable=true",
    ]
    with pytest.raises(ConfigError, match=r"algorithm.filter_groups.enable=True: is not supported with"):
        load_config(compose_config("tiny_longcot", overrides))


@pytest.mark.slow
def test_dynamic_sampling_and_no_eos_filter_in_a_run(tiny_assets, tmp_path):
    reward = Path(__file__).parent / "assets" / "parity_reward.py"
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        "tiny_longcot", tiny_assets, run_dir,
        "data.max_response_length=16", "trainer.total_training_steps=2",
        f"custom_reward_function.path={reward}",
        "algorithm.filter_groups.enable=true", "algorithm.filter_groups.max_num_gen_batches=3",
        "algorithm.filter_overlong_trajectories=true", ONE_PROCESS,
    )  # fmt: skip
    run(cfg)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    train = [r for r in read_jsonl(tiny_assets / "data" / "train.jsonl")]
    even = sum(int(r["reward_model"]["ground_truth"]) % 2 == 0 for r in train) / len(train)
    assert 0.2 < even < 0.8  # the data has both kinds of prompt, so the filter has work to do
    for m in metrics:
        rollouts = read_jsonl(run_dir / "rollouts" / f"step_{m['step']}.jsonl")
        # only groups with spread were kept: odd ground truths, and never more than the batch
        assert rollouts and all(int(r["ground_truth"]) % 2 == 1 for r in rollouts)
        assert len(rollouts) == 2 * m["train/kept_groups"] <= 4
        assert 1 <= m["train/gen_batches"] <= 3
        assert m["train/gen_batches"] == 3 or m["train/kept_groups"] == 2  # stopped full or at the cap
        assert 0 <= m["train/zero_std_ratio"] < 1
        # the no-EOS filter: exactly the finished trajectories are trained; none finished -> no update
        finished = sum(r["has_eos"] for r in rollouts)
        assert m["train/trained_trajectories"] == finished
        assert ("actor/pg_loss" in m) == (finished > 0)
        if finished:
            assert m["train/rollout_prob_diff_max"] < 1e-3  # the trainer recomputes what the engine sampled
