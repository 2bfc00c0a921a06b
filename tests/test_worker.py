"""The colocated worker in-process: sampled tokens are the trained tokens, and after an update the
engine samples from the new weights."""

import asyncio

import pytest
import torch

from tests.e2e_utils import DELETHINK, tiny_config
from tests.tolerances import assert_forward_close
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.single_controller.fsdp_workers import ActorRolloutRefWorker

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def worker(tiny_assets, tmp_path_factory):
    cfg = tiny_config(
        "tiny_delethink",
        tiny_assets,
        tmp_path_factory.mktemp("worker"),
        *DELETHINK,
    )
    w = ActorRolloutRefWorker(cfg)
    w.init_model()
    yield w
    w.shutdown()


def sample(worker, seed=0):
    prompt = worker.tokenizer("<|user|>a3 b5<|assistant|><think>", add_special_tokens=False)["input_ids"]
    params = [SamplingParams(max_new_tokens=12, temperature=1.0, seed=seed + i) for i in range(4)]
    return asyncio.run(worker.generate([PromptItem(prompt, "test", "0")] * 4, params))


@pytest.mark.compares_runs
def test_rollout_log_probs_match_the_actor_and_update_reaches_the_engine(worker):
    trajectories = sample(worker)
    assert max(t.num_turns for t in trajectories) > 1
    rows = trajectory_rows(trajectories, [1.0, -1.0, 0.5, -0.5])
    batch = collate_rows(rows, worker.tokenizer.pad_token_id)
    old = worker.compute_log_prob(batch)
    # the actor recomputes, on the chunk prompts the engine saw, the log-probs the engine reported
    mask = batch["response_mask"].bool()
    assert_forward_close(old[mask], batch["rollout_log_probs"][mask])

    before = worker.engine_state_dict()
    batch["old_log_probs"] = old
    metrics = worker.update_actor(batch, num_mini_batches=1, rows_per_trajectory=len(rows) / 4)
    assert metrics["actor/grad_norm"] > 0
    after = worker.engine_state_dict()
    actor = worker.full_state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    for k, v in actor.items():
        torch.testing.assert_close(after[k], v, atol=0, rtol=0)
    # same seeds, new weights: different log-probs for the first sampled tokens
    again = sample(worker)
    assert any(
        a.turns[0].rollout_log_probs[0] != b.turns[0].rollout_log_probs[0]
        for a, b in zip(trajectories, again, strict=True)
    )
