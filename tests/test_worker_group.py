"""The data-parallel worker group: how work is split over ranks, and that 2 ranks (two Ray actor
processes, FSDP2 over gloo) train like 1 rank, up to float rounding, and can stop and resume."""

import os

import pytest
import torch
from transformers import AutoTokenizer

from tests.e2e_utils import DELETHINK, ONE_PROCESS, tiny_config
from tests.tolerances import assert_forward_close, assert_same_adam_steps, metric_approx
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.single_controller.local_worker_group import LocalWorkerGroup
from verl.single_controller.sharded_group import contiguous_shards, update_shard_indices
from verl.single_controller.worker_group import ActorRolloutWorkerGroup, cpu_threads_per_rank
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow


def test_contiguous_shards_differ_by_at_most_one():
    assert contiguous_shards(7, 3) == [slice(0, 3), slice(3, 5), slice(5, 7)]
    assert contiguous_shards(2, 4) == [slice(0, 1), slice(1, 2), slice(2, 2), slice(2, 2)]


def test_update_shards_give_each_rank_its_block_of_every_mini_batch():
    rank0, rank1 = update_shard_indices(8, 2, 2)
    assert rank0.tolist() == [0, 1, 4, 5] and rank1.tolist() == [2, 3, 6, 7]
    (only,) = update_shard_indices(6, 3, 1)
    assert only.tolist() == list(range(6))
    with pytest.raises(ValueError, match="6 rows do not split into 2 mini-batches x 4 ranks"):
        update_shard_indices(6, 2, 4)


def test_a_cpu_rank_takes_its_share_of_the_cores_capped_by_omp_num_threads(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    assert [cpu_threads_per_rank(n) for n in (1, 2, 3, 32)] == [16, 8, 5, 1]
    monkeypatch.setenv("OMP_NUM_THREADS", "6")
    assert [cpu_threads_per_rank(n) for n in (1, 2, 4)] == [6, 6, 4]


def _one_update(cfg, batch_source=None):
    """Sample (or reuse) a batch, then one PPO update; returns the batch, old log-probs, metrics, weights.
    One rank runs in this process (ONE_PROCESS: what a one-rank Ray run computes, bit for bit)."""
    group = LocalWorkerGroup(cfg) if cfg.trainer.launcher == "local" else ActorRolloutWorkerGroup(cfg)
    try:
        if batch_source is None:
            tok = AutoTokenizer.from_pretrained(cfg.actor_rollout_ref.model.path)
            prompt = tok("<|user|>a3 b5 c2<|assistant|><think>", add_special_tokens=False)["input_ids"]
            items = [PromptItem(prompt, "test", "0")] * 4
            params = [SamplingParams(max_new_tokens=12, seed=i) for i in range(4)]
            trajectories = group.generate(items, params)
            rows = trajectory_rows(trajectories, [1.0, -1.0, 0.5, -0.25])
            rows = rows[: len(rows) // 4 * 4]  # 2 mini-batches x 2 ranks
            batch_source = collate_rows(rows, tok.pad_token_id)
        batch = dict(batch_source)
        batch["old_log_probs"] = group.compute_log_prob(batch)
        metrics = group.update_actor(batch, num_mini_batches=2, rows_per_trajectory=1.5)
        weights = group.full_state_dict()
        for engine_weights in group.engine_state_dicts():  # every rank's engine samples from the new policy
            for name, value in weights.items():
                torch.testing.assert_close(engine_weights[name], value, atol=0, rtol=0, msg=name)
        return batch_source, batch["old_log_probs"], metrics, weights
    finally:
        group.shutdown()


@pytest.mark.compares_runs
def test_two_ranks_update_like_one(tiny_assets, ray_session, tmp_path):
    """Two ranks sum each gradient in another order than one rank: everything agrees up to rounding
    (tests/tolerances.py), the weights as AdamW's steps allow."""
    one = tiny_config("tiny_delethink", tiny_assets, tmp_path / "one", *DELETHINK, ONE_PROCESS)
    two = tiny_config(
        "tiny_delethink", tiny_assets, tmp_path / "two", *DELETHINK, "trainer.n_gpus_per_node=2"
    )
    batch, old_1, metrics_1, weights_1 = _one_update(one)
    assert batch["responses"].shape[0] >= 4
    _, old_2, metrics_2, weights_2 = _one_update(two, batch)
    assert_forward_close(old_2, old_1)
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert metrics_2[key] == metric_approx(metrics_1[key]), key
    assert metrics_1["actor/grad_norm"] > 0
    # one AdamW step per mini-batch
    optim = one.actor_rollout_ref.actor.optim
    assert_same_adam_steps(weights_2, weights_1, lr=optim.lr, steps=2, betas=tuple(optim.betas))


def test_two_rank_run_trains_and_resumes(tiny_assets, ray_session, tmp_path):
    run_dir = tmp_path / "run"
    # token-budget micro-batches balanced across the ranks (a budget of ~2 rows), as a large run would use
    budgets = (
        "actor_rollout_ref.actor.use_dynamic_bsz=true",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=64",
        "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=64",
    )
    common = (*DELETHINK, *budgets, "trainer.n_gpus_per_node=2", "trainer.save_freq=1")
    run(tiny_config("tiny_delethink", tiny_assets, run_dir, *common, "trainer.total_training_steps=2"))
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]
    # a longer run in the same directory continues from the step-2 checkpoint
    run(tiny_config("tiny_delethink", tiny_assets, run_dir, *common, "trainer.total_training_steps=3"))
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert all(m["actor/micro_batches"] > 1 for m in metrics)
    # a gradient exactly when some advantage is not zero (a step where every trace scores 0 has none)
    assert all((m["actor/grad_norm"] > 0) == (m["train/advantage_abs_mean"] > 0) for m in metrics)
    assert metrics[0]["actor/grad_norm"] > 0
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "3"


def test_bf16_mixed_precision_with_gradient_checkpointing_trains(tiny_assets, tmp_path):
    """FSDP2's mixed-precision policy computes in bf16 (on CPU too) while the sharded parameters and
    the optimizer stay fp32; activation recomputation changes memory, not the update."""
    cfg = tiny_config(
        "tiny_delethink", tiny_assets, tmp_path, *DELETHINK, ONE_PROCESS,
        "actor_rollout_ref.actor.fsdp_config.param_dtype=bfloat16",
        "actor_rollout_ref.model.enable_gradient_checkpointing=true",
    )  # fmt: skip
    batch, old, metrics, weights = _one_update(cfg)
    # log-probs computed in bf16 are close to, and visibly not equal to, the fp32 engine's
    mask = batch["response_mask"].bool()
    gap = (old[mask] - batch["rollout_log_probs"][mask]).abs().max()
    assert 1e-3 < gap < 0.1
    assert torch.isfinite(torch.tensor(metrics["actor/pg_loss"])) and metrics["actor/grad_norm"] > 0
    assert all(v.dtype == torch.float32 for v in weights.values())


def test_ray_workers_run_at_the_drivers_priority(ray_session):
    """Ray would start them at nice 15, behind every other busy process (verl/trainer/cluster.py)."""

    @ray_session.remote
    def niceness() -> int:
        return os.nice(0)

    assert ray_session.get(niceness.remote()) == os.nice(0)
