"""End to end on the tiny model with real Ray, transformers and FSDP2: both thinking environments
train, checkpoint, resume, and Delethink with one chunk is LongCoT."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.e2e_utils import DELETHINK, HANG_S, ONE_PROCESS, tiny_config
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

# LongCoT budget 24, the same as DELETHINK's total
LONGCOT = ("data.max_response_length=24",)
MODES = {"tiny_longcot": LONGCOT, "tiny_delethink": DELETHINK}


def weights(path):
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.mark.parametrize("name", ["tiny_longcot", "tiny_delethink"])
def test_train_checkpoint_and_resume(name, tiny_assets, ray_session, tmp_path):
    run_dir = tmp_path / name
    cfg = tiny_config(
        name, tiny_assets, run_dir, *MODES[name], "trainer.total_training_steps=2", "trainer.save_freq=1"
    )
    run(cfg)
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert torch.isfinite(torch.tensor(m["actor/pg_loss"]))
        # a gradient exactly when some advantage is not zero (a step where every trace scores 0 has none)
        assert (m["actor/grad_norm"] > 0) == (m["train/advantage_abs_mean"] > 0)
    assert metrics[0]["actor/grad_norm"] > 0
    if name == "tiny_delethink":
        assert (
            metrics[0]["delethink/num_turns_max"] > 1
        )  # an untrained model rarely stops: it uses its chunks
        assert metrics[0]["delethink/rows_per_trajectory"] >= 1.0

    # weights changed, and the checkpoint is a loadable HF model
    before, after = (
        weights(tiny_assets / "model"),
        weights(run_dir / "global_step_2" / "actor" / "huggingface"),
    )
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert (run_dir / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    assert (run_dir / "rollouts" / "step_2.jsonl").exists() and (
        run_dir / "rollouts" / "step_2_chunks.jsonl"
    ).exists()

    # resume: continues at step 3 with the data (and samples) an uninterrupted run would have seen
    run(
        tiny_config(
            name, tiny_assets, run_dir, *MODES[name], "trainer.total_training_steps=3", "trainer.save_freq=1"
        )
    )
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2, 3]
    straight = tmp_path / f"{name}_straight"
    run(
        tiny_config(
            name,
            tiny_assets,
            straight,
            *MODES[name],
            "trainer.total_training_steps=3",
            "trainer.save_freq=-1",
        )
    )
    resumed_rollouts = read_jsonl(run_dir / "rollouts" / "step_3.jsonl")
    straight_rollouts = read_jsonl(straight / "rollouts" / "step_3.jsonl")
    assert [r["prompt"] for r in resumed_rollouts] == [r["prompt"] for r in straight_rollouts]
    assert [r["response"] for r in resumed_rollouts] == [r["response"] for r in straight_rollouts]


@pytest.mark.compares_runs
def test_delethink_with_one_chunk_is_longcot(tiny_assets, tmp_path):
    common = (
        ONE_PROCESS,
        "trainer.total_training_steps=1",
        "actor_rollout_ref.actor.loss_agg_mode=seq-mean-token-norm-trace-length",
    )
    longcot_dir = tmp_path / "longcot"
    run(tiny_config("tiny_longcot", tiny_assets, longcot_dir, *common, "data.max_response_length=16"))
    run(
        tiny_config(
            "tiny_delethink",
            tiny_assets,
            tmp_path / "delethink",
            *common,
            "algorithm.delethink.chunk_size=16",  # = LongCoT's B; data.max_response_length follows it
            "algorithm.delethink.max_chunks=1",
            "algorithm.delethink.keep_head=2",
            "algorithm.delethink.keep_tail=4",
            "actor_rollout_ref.actor.fixed_num_optim_steps=null",
        )
    )
    a = read_jsonl(tmp_path / "longcot" / "rollouts" / "step_1.jsonl")
    b = read_jsonl(tmp_path / "delethink" / "rollouts" / "step_1.jsonl")
    assert [r["response"] for r in a] == [r["response"] for r in b]
    wa = weights(tmp_path / "longcot" / "global_step_1" / "actor" / "huggingface")
    wb = weights(tmp_path / "delethink" / "global_step_1" / "actor" / "huggingface")
    before = weights(tiny_assets / "model")
    assert any(not torch.equal(before[k], wa[k]) for k in before)
    # the same rows through the same update (one chunk: each per-trajectory sum has one term): bit for bit
    for k in wa:
        assert torch.equal(wa[k], wb[k]), k
    # both environments log under the same names (Delethink adds its own delethink/* on top)
    keys_a = set(read_jsonl(tmp_path / "longcot" / "metrics.jsonl")[0])
    keys_b = set(read_jsonl(tmp_path / "delethink" / "metrics.jsonl")[0])
    assert keys_a <= keys_b and all(k.startswith("delethink/") for k in keys_b - keys_a)


def test_template_script_runs_with_overrides_and_validates(tiny_assets, tmp_path):
    """The user-facing path: a shell script, Hydra overrides, validation at start-up, one step."""
    repo = Path(__file__).resolve().parents[1]
    overrides = [
        f"actor_rollout_ref.model.path={tiny_assets / 'model'}",
        f"data.train_files={tiny_assets / 'data' / 'train.jsonl'}",
        f"data.val_files={tiny_assets / 'data' / 'val.jsonl'}",
        f"trainer.default_local_dir={tmp_path / 'run'}",
        "trainer.logger=[console,jsonl,wandb]",
        "actor_rollout_ref.rollout.val_kwargs.n=2",
        "actor_rollout_ref.rollout.val_kwargs.do_sample=true",
        "trainer.total_training_steps=1",
        "trainer.test_freq=1",
        "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        *DELETHINK,
    ]
    env = {**os.environ, "PYTHON": sys.executable, "WANDB_MODE": "offline"}
    script = str(repo / "examples" / "delethink_template.sh")
    done = subprocess.run(
        ["bash", script, *overrides], env=env, capture_output=True, text=True, timeout=HANG_S
    )
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [0, 1]  # validation before training, then one step
    assert "val/score_mean" in metrics[0] and "val/score_mean" in metrics[1]
    src = "val/synthetic/running_sum"
    assert {f"{src}/mean@2", f"{src}/maj@2", f"{src}/pass@1", f"{src}/pass@2"} <= set(metrics[0])
    assert list((tmp_path / "run" / "wandb").glob("offline-run-*"))
    assert "step 1:" in done.stdout + done.stderr

    # starting over in the same directory is refused unless asked; asked, the old run is moved aside
    refused = subprocess.run(["bash", script, *overrides, "trainer.resume_mode=disable"], env=env,
                             capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert refused.returncode != 0 and "trainer.overwrite=true" in refused.stderr
    fresh = ["trainer.resume_mode=disable", "trainer.overwrite=true", ONE_PROCESS]  # Ray ran above
    again = subprocess.run(["bash", script, *overrides, *fresh], env=env, capture_output=True, text=True,
                           timeout=HANG_S)  # fmt: skip
    assert again.returncode == 0, again.stderr[-3000:]
    assert [m["step"] for m in read_jsonl(tmp_path / "run" / "metrics.jsonl")] == [0, 1]
    (moved,) = tmp_path.glob("run.replaced-*")
    assert [m["step"] for m in read_jsonl(moved / "metrics.jsonl")] == [0, 1]

    bad = subprocess.run(
        ["bash", script, *overrides, "algorithm.delethink.keep_tail=0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert bad.returncode != 0 and "algorithm.delethink.keep_tail" in bad.stderr
    assert "Traceback" not in bad.stderr
