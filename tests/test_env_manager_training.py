"""A training run whose rollouts come from environment-manager workers (verl/env_manager) instead of
the agent-loop batch: same trainer, same metrics, validation walks the validation set once."""

import pytest

from tests.e2e_utils import tiny_config
from verl.data.rl_dataset import read_rows
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow


def test_env_manager_run_trains_and_validates_every_row_once(tiny_assets, ray_session, tmp_path):
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        "tiny_longcot", tiny_assets, run_dir,
        "data.max_response_length=16",
        "actor_rollout_ref.rollout.env_manager.enable=true",
        "actor_rollout_ref.rollout.env_manager.num_workers=2",
        "actor_rollout_ref.rollout.env_manager.num_groups=1",
        "trainer.val_before_train=true",
        "trainer.total_training_steps=1",
    )  # fmt: skip
    run(cfg)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]
    assert metrics[1]["actor/grad_norm"] > 0
    # greedy validation over every row of val.jsonl, one sample each
    val_rows = read_rows(str(tiny_assets / "data" / "val.jsonl"))
    assert metrics[0]["val/num_samples"] == len(val_rows) == 8
    dumped = read_jsonl(run_dir / "rollouts" / "step_1.jsonl")
    assert len(dumped) == 2 * 2  # train_batch_size x rollout.n
    assert dumped[0]["prompt"] == dumped[1]["prompt"]  # a GRPO group shares its data item
