"""Runs that cannot silently lose or corrupt work: resume from a dangling or broken checkpoint pointer,
a directory that holds a run, a changed config, and a kill right after a checkpoint is committed."""

import json
import subprocess
import sys
import textwrap

import pytest

from tests.e2e_utils import ONE_PROCESS, tiny_config
from tests.test_tracking_and_checkpoint import commit
from verl.config import compose_config
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.trainer.resume import config_differences
from verl.utils import checkpoint
from verl.utils.fs import read_jsonl


def test_dangling_pointer_falls_back_to_the_newest_complete_checkpoint(tmp_path):
    commit(tmp_path, 2)
    commit(tmp_path, 4)
    (tmp_path / "global_step_4" / "actor" / "state.pt").unlink()  # a partial copy, a clean-up
    path, notes = checkpoint.find_resume(tmp_path, "auto", None)
    assert path == tmp_path / "global_step_2"
    assert notes == [
        "latest_checkpointed_iteration.txt names a checkpoint that cannot be resumed from "
        "(actor/state.pt missing)",
        "skipped global_step_4: actor/state.pt missing",
        "resuming from global_step_2, the newest complete checkpoint",
    ]
    # the pointer names a step whose directory is gone altogether
    (tmp_path / checkpoint.LATEST_FILE).write_text("9\n")
    path, notes = checkpoint.find_resume(tmp_path, "auto", None)
    assert path == tmp_path / "global_step_2" and "(it does not exist)" in notes[0]
    # a trainer_state.json that does not parse or names another step is not trusted either
    (tmp_path / "global_step_2" / "trainer_state.json").write_text('{"global_step": 7}')
    with pytest.raises(checkpoint.ResumeError, match="holds a run but no complete checkpoint"):
        checkpoint.find_resume(tmp_path, "auto", None)


def test_a_directory_holding_a_run_is_never_started_over_unless_asked(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "metrics.jsonl").write_text('{"step": 1}\n')  # crashed before its first checkpoint
    for mode in ("auto", "disable"):
        with pytest.raises(checkpoint.ResumeError, match="trainer.overwrite=true"):
            checkpoint.find_resume(run_dir, mode, None)
    path, notes = checkpoint.find_resume(run_dir, "disable", None, overwrite=True)
    assert path is None and not run_dir.exists()
    moved = list(tmp_path.glob("run.replaced-*"))
    assert len(moved) == 1 and (moved[0] / "metrics.jsonl").read_text() == '{"step": 1}\n'
    assert notes == [f"moved the previous run aside to {moved[0]}"]
    assert checkpoint.find_resume(tmp_path / "empty", "disable", None) == (None, [])


def test_a_key_the_checkpoint_predates_counts_only_when_it_leaves_its_default():
    saved = {"data": {"seed": 1}}
    defaults = {"data": {"seed": 1, "drop_duplicates": False}}
    at_default = {"data": {"seed": 1, "drop_duplicates": False}}
    assert config_differences(saved, at_default, defaults) == ([], [])
    changed = {"data": {"seed": 1, "drop_duplicates": True}}
    assert config_differences(saved, changed, defaults)[0] == ["data.drop_duplicates: None -> True"]


def test_config_differences_split_into_refused_and_applied():
    saved = {"environment": "longcot", "trainer": {"seed": 1, "total_training_steps": 4},
             "actor_rollout_ref": {"actor": {"optim": {"lr": 1e-3}, "clip_ratio_low": 0.2}}}  # fmt: skip
    current = {"environment": "delethink", "trainer": {"seed": 1, "total_training_steps": 8},
               "actor_rollout_ref": {"actor": {"optim": {"lr": 5e-4}, "clip_ratio_low": 0.2}},
               "val_tasks": {"aime": {"n": 4}}}  # fmt: skip
    refused, applied = config_differences(saved, current)
    assert refused == ["environment: 'longcot' -> 'delethink'"]
    assert applied == [
        "actor_rollout_ref.actor.optim.lr: 0.001 -> 0.0005",
        "trainer.total_training_steps: 4 -> 8",
        "val_tasks.aime.n: None -> 4",
    ]


# kills the run right after step 1's checkpoint is committed, before anything else happens
KILL_AFTER_COMMIT = textwrap.dedent("""
    import os, sys
    from verl.utils import checkpoint
    from verl.config import compose_config
    from verl.trainer.config_loader import load_config
    from verl.trainer.launch import run
    commit = checkpoint.commit_step_dir
    def commit_then_die(root, step, tmp):
        path = commit(root, step, tmp)
        if step == 1:
            os._exit(17)
        return path
    checkpoint.commit_step_dir = commit_then_die
    run(load_config(compose_config("tiny_longcot", sys.argv[1:])))
""")


@pytest.mark.slow
def test_resume_edge_cases_on_a_real_run(tiny_assets, tmp_path):
    run_dir = tmp_path / "run"
    steps = ("data.max_response_length=8", "trainer.save_freq=1", ONE_PROCESS)
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *steps, "trainer.total_training_steps=2"))
    assert json.loads((run_dir / "global_step_2" / "run_config.json").read_text())["trainer"]["seed"] == 1

    # a key that defines the run changed: refused before anything starts, with the difference listed
    with pytest.raises(SystemExit, match=r"resume error: .*\n  trainer.seed: 1 -> 5"):
        run(tiny_config("tiny_longcot", tiny_assets, run_dir, *steps, "trainer.total_training_steps=3",
                        "trainer.seed=5"))  # fmt: skip

    # a broken newest checkpoint and a new learning rate: resumes from step 1, re-runs step 2 with the
    # new lr, and metrics.jsonl holds each step once
    (run_dir / "global_step_2" / "actor" / "state.pt").unlink()
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *steps, "trainer.total_training_steps=3",
                    "actor_rollout_ref.actor.optim.lr=5e-4"))  # fmt: skip
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert metrics[0]["actor/lr"] == 1e-3 and metrics[1]["actor/lr"] == metrics[2]["actor/lr"] == 5e-4

    # killed right after step 1's checkpoint is committed: its metrics line is already durable
    killed = tmp_path / "killed"
    overrides = [
        f"actor_rollout_ref.model.path={tiny_assets / 'model'}",
        f"data.train_files=[{tiny_assets / 'data' / 'train.jsonl'}]",
        f"data.val_files=[{tiny_assets / 'data' / 'val.jsonl'}]",
        f"trainer.default_local_dir={killed}", "trainer.logger=[jsonl]", "trainer.val_before_train=false",
        "data.train_batch_size=2", "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1", *steps, "trainer.total_training_steps=2",
    ]  # fmt: skip
    died = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_COMMIT, *overrides], capture_output=True, text=True
    )
    assert died.returncode == 17, died.stderr[-2000:]
    assert [m["step"] for m in read_jsonl(killed / "metrics.jsonl")] == [1]
    run(load_config(compose_config("tiny_longcot", overrides)))
    assert [m["step"] for m in read_jsonl(killed / "metrics.jsonl")] == [1, 2]
