"""Runs that last a week: checkpoint retention (which checkpoints go, and that a kill between a commit and
its deletions loses nothing), the disk plan and its refusal at start-up, and a checkpoint write that
fails on a full disk (a real EFBIG: a child process whose file size limit is lowered before the save),
after which a resume ends bit-identical to a run that never failed."""

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.e2e_utils import (
    HANG_S,
    ONE_PROCESS,
    asset_paths,
    tiny_config,
    tiny_longcot_with,
    varies_between_runs,
)
from tests.test_local_launcher import REPO, assert_refused
from tests.test_memory_estimate import SMALL
from tests.test_tracking_and_checkpoint import commit
from verl.config import ConfigError, compose_config
from verl.tools.memory_check import shape_from_hf_config
from verl.trainer.config_loader import load_config
from verl.trainer.disk_check import (
    CheckpointSize,
    ModelFiles,
    checkpoint_size,
    describe_disk,
    free_bytes,
    model_files,
    most_held,
    save_steps,
    value_model_params,
)
from verl.trainer.launch import SignalStop, run
from verl.utils import checkpoint
from verl.utils.fs import read_jsonl

# -- retention: the pure rule and the directories -------------------------------------------------


def test_steps_to_delete_keeps_the_newest_the_nth_and_the_protected():
    steps = range(1, 7)
    assert checkpoint.steps_to_delete(steps, 2, None) == [1, 2, 3, 4]
    assert checkpoint.steps_to_delete(steps, 2, 3) == [1, 2, 4]
    assert checkpoint.steps_to_delete(steps, 2, 3, protected={1}) == [2, 4]
    assert checkpoint.steps_to_delete(steps, None, 3) == []  # null keeps all
    assert checkpoint.steps_to_delete(steps, 6, None) == []
    assert checkpoint.steps_to_delete([], 1, None) == []


def test_prune_deletes_whole_checkpoints_then_critics_and_leaves_the_rest_alone(tmp_path):
    for step in range(1, 6):
        commit(tmp_path, step, ("actor", "critic"))
    broken = commit(tmp_path, 6)
    (broken / "actor" / "state.pt").unlink()  # incomplete: not counted, not deleted
    commit(tmp_path, 7)  # a later step than the one written: the run will overwrite it, retention must not
    (tmp_path / ".global_step_9.deleting").mkdir()  # left by a crash mid-deletion
    notes = checkpoint.prune(tmp_path, 5, [1], keep_actor=2, keep_critic=1, keep_every=3)
    # actor: the newest two (4, 5), the written (5), the protected (1), the multiple of 3 (3) stay;
    # critic: of those, the newest one (5), the protected and the multiple of 3 keep theirs
    assert notes == [
        "deleted global_step_2 (trainer.max_actor_ckpt_to_keep=2)",
        "deleted global_step_4/critic (trainer.max_critic_ckpt_to_keep=1)",
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "global_step_1", "global_step_3", "global_step_4", "global_step_5", "global_step_6", "global_step_7",
        checkpoint.LATEST_FILE,
    ]  # fmt: skip
    assert [s for s in (1, 3, 4, 5) if (tmp_path / f"global_step_{s}" / "critic").is_dir()] == [1, 3, 5]
    # without its critic a checkpoint still holds the actor, but a run with a critic cannot resume from it
    four = str(tmp_path / "global_step_4")
    assert checkpoint.find_resume(tmp_path, "path", four)[0] == Path(four)
    with pytest.raises(
        checkpoint.ResumeError, match=r"\(critic/state.pt, critic/huggingface/config.json missing"
    ):
        checkpoint.find_resume(tmp_path, "path", four, needs_critic=True)


def test_an_incomplete_checkpoint_does_not_take_the_place_of_a_complete_one(tmp_path):
    """Keep the newest two complete checkpoints, with step 4 missing a file (a disk clean-up, a partial
    copy): it cannot be resumed from, so 3 is kept in its place, and 4 is left for its owner to look at."""
    for step in range(1, 6):
        commit(tmp_path, step)
    (tmp_path / "global_step_4" / "actor" / "state.pt").unlink()
    notes = checkpoint.prune(tmp_path, 5, [], keep_actor=2, keep_critic=None, keep_every=None)
    assert notes == [
        "deleted global_step_1 (trainer.max_actor_ckpt_to_keep=2)",
        "deleted global_step_2 (trainer.max_actor_ckpt_to_keep=2)",
    ]
    assert step_names(tmp_path) == ["global_step_3", "global_step_4", "global_step_5"]
    # the two kept are the two a resume can fall back on
    (tmp_path / "global_step_5" / "trainer_state.json").unlink()
    assert checkpoint.find_resume(tmp_path, "auto", None)[0] == tmp_path / "global_step_3"


def test_a_checkpoint_whose_pointer_cannot_be_written_is_not_committed(tmp_path):
    commit(tmp_path, 1)
    (tmp_path / checkpoint.LATEST_FILE).unlink()
    (tmp_path / checkpoint.LATEST_FILE).mkdir()  # the pointer cannot be replaced: a real OSError
    tmp = checkpoint.temp_step_dir(tmp_path, 2)
    with pytest.raises(IsADirectoryError):
        checkpoint.commit_step_dir(tmp_path, 2, tmp)
    # back where it was written, for the failed save to remove; nothing looks committed
    assert tmp.is_dir() and not checkpoint.step_dir(tmp_path, 2).exists()


def test_a_stop_signal_mid_commit_waits_until_the_checkpoint_is_committed(tmp_path, monkeypatch):
    """A stop handler raises wherever the code is; arriving while the pointer is written, it used to roll
    back a complete checkpoint."""
    write_pointer = checkpoint.atomic_write_text

    def signalled_while_writing(path, text):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, in the middle of the commit
        write_pointer(path, text)

    def stop(signum, frame):  # what launch.SignalStop does
        raise KeyboardInterrupt

    monkeypatch.setattr(checkpoint, "atomic_write_text", signalled_while_writing)
    previous = signal.signal(signal.SIGTERM, stop)
    try:
        tmp = checkpoint.temp_step_dir(tmp_path, 1)
        (tmp / "weights").write_text("w")
        with pytest.raises(KeyboardInterrupt):
            checkpoint.commit_step_dir(tmp_path, 1, tmp)
        assert signal.getsignal(signal.SIGTERM) is stop  # the run's handler is back, and it ran
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert (checkpoint.step_dir(tmp_path, 1) / "weights").read_text() == "w" and not tmp.exists()
    assert (tmp_path / checkpoint.LATEST_FILE).read_text() == "1\n"


def test_a_stop_signal_mid_commit_under_the_runs_handler_exits_after_the_commit(
    tmp_path, monkeypatch, capsys
):
    """The same with the handler a run installs (launch.SignalStop): the run exits with 128 + SIGTERM
    once the pointer names the new checkpoint, and says to resume from it."""
    commit(tmp_path, 1)
    write_pointer = checkpoint.atomic_write_text

    def signalled_while_writing(path, text):
        os.kill(os.getpid(), signal.SIGTERM)  # delivered now, between the rename and the pointer
        write_pointer(path, text)

    monkeypatch.setattr(checkpoint, "atomic_write_text", signalled_while_writing)
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped, SignalStop(str(tmp_path)):
        commit(tmp_path, 2)
    assert stopped.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is before  # SignalStop put back what was there
    last = tmp_path / "global_step_2"
    assert capsys.readouterr().err == f"stopped by SIGTERM; rerun the same command to resume from {last}\n"
    assert (tmp_path / checkpoint.LATEST_FILE).read_text() == "2\n"
    assert checkpoint.checkpoint_problem(last) is None and step_names(tmp_path) == [
        "global_step_1",
        last.name,
    ]


def test_retention_keys_are_checked_before_anything_starts(tiny_assets, tmp_path):
    keep_rule = "must be null (keep all) or >= 1: 0 would delete the checkpoint a resumed run starts from"
    cases = {
        "trainer.max_actor_ckpt_to_keep=-1": f"trainer.max_actor_ckpt_to_keep=-1: {keep_rule}",
        "trainer.max_critic_ckpt_to_keep=0": f"trainer.max_critic_ckpt_to_keep=0: {keep_rule}",
        "trainer.keep_ckpt_every_n_steps=0": (
            "trainer.keep_ckpt_every_n_steps=0: must be null (keep none) or >= 1"
        ),
    }
    for override, line in cases.items():
        with pytest.raises(ConfigError) as refused:
            tiny_longcot_with(tiny_assets, override)
        assert str(refused.value) == line
    with pytest.raises(
        ConfigError,
        match=r"^trainer.keep_ckpt_every_n_steps=5: must be a multiple of "
        r"trainer.save_freq=2: checkpoints are written at its multiples only$",
    ):
        tiny_longcot_with(tiny_assets, "trainer.save_freq=2", "trainer.keep_ckpt_every_n_steps=5")
    tiny_longcot_with(tiny_assets, "trainer.save_freq=2", "trainer.keep_ckpt_every_n_steps=10")  # fine
    # the entry point: exit code 2 and one line naming the key, before any model is built
    done = _entry_point(tiny_assets, tmp_path, "trainer.max_actor_ckpt_to_keep=0")
    assert "trainer.max_actor_ckpt_to_keep=0: must be null (keep all) or >= 1" in assert_refused(
        done, "trainer.max_actor_ckpt_to_keep"
    )


# -- the disk plan ----------------------------------------------------------------------------------


def test_a_checkpoint_is_weights_and_adam_moments_in_float32():
    assert model_files(100, 0, 5) == ModelFiles(weights=400, optimizer=800, other=5)  # 4 + 8 bytes each
    # LoRA: the merged weights and the adapters are written, AdamW holds the adapters' moments only
    assert model_files(100, 10, 0) == ModelFiles(weights=440, optimizer=80, other=0)
    # the value model: the LM head (V x h = 32 x 8) goes unless tied to the embedding, a head h + 1 comes
    untied = shape_from_hf_config(SMALL)
    tied = shape_from_hf_config({**SMALL, "tie_word_embeddings": True})
    assert value_model_params(untied) == 1664 - 256 + 9 == value_model_params(tied) == 1408 + 9


def test_save_steps_and_the_most_checkpoints_held_at_once(tiny_assets):
    config = tiny_longcot_with(tiny_assets, "trainer.total_training_steps=7", "trainer.save_freq=3")
    assert save_steps(config) == [3, 6, 7]  # multiples of save_freq, and the last step
    assert save_steps(config, start_step=3) == [6, 7]
    assert save_steps(tiny_longcot_with(tiny_assets, "trainer.total_training_steps=7")) == [7]
    steps = list(range(1, 7))
    size = CheckpointSize(ModelFiles(10, 0, 0), ModelFiles(1, 0, 0))  # 10 bytes of actor, 1 of critic
    assert most_held(steps, size, None, None, None) == (66, 6)
    assert most_held(steps, size, 1, None, None) == (22, 2)  # the kept one and the one being written
    # keep 2, every 3rd for good, critics of the newest 1: while step 6 is written, 3 (kept for good),
    # 4 and 5 are there, with critics 3, 5 and 6's: 4 x 10 + 3
    assert most_held(steps, size, 2, 1, 3) == (43, 4)
    assert most_held(steps, CheckpointSize(ModelFiles(10, 0, 0), None), 2, None, 3) == (40, 4)


def _size_on_disk(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


@pytest.mark.slow
def test_the_estimate_of_a_checkpoint_against_one_written(tiny_assets, tmp_path):
    """What is left out (biases and norms, file headers, a few JSON files) makes the estimate a lower
    bound, by about 1% on the tiny model (far less on a 1.5B one)."""
    config = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path, ONE_PROCESS, "algorithm.adv_estimator=gae",
        "trainer.total_training_steps=1", "data.max_response_length=8",
    )  # fmt: skip
    size, source = checkpoint_size(config)
    assert source == f"read from {tiny_assets / 'model' / 'config.json'}"
    run(config)
    written = tmp_path / "global_step_1"
    for part, estimate in (("actor", size.actor.total), ("critic", size.critic.total)):
        actual = _size_on_disk(written / part)
        assert estimate <= actual <= 1.02 * estimate, (part, estimate, actual)


def huge_model(assets: Path, directory: Path, num_hidden_layers: int, hidden_size: int = 8192) -> Path:
    """A copy of the tiny model whose config.json describes `num_hidden_layers` blocks of width
    `hidden_size`: the disk plan reads the shape from it; nothing loads its weights (the checks come
    before any model)."""
    shutil.copytree(assets / "model", directory)
    values = json.loads((directory / "config.json").read_text())
    values.update(
        num_hidden_layers=num_hidden_layers, layer_types=["full_attention"] * num_hidden_layers,
        hidden_size=hidden_size, intermediate_size=4 * hidden_size, num_attention_heads=64,
        num_key_value_heads=8,
    )  # fmt: skip
    (directory / "config.json").write_text(json.dumps(values))
    return directory


def _entry_point(assets, run_dir, *overrides, model=None):
    """`python -m verl.trainer.main_policy_iteration --config-name=tiny_longcot` on the test assets (or
    another `model`), in one process; Hydra logs to the console only, so nothing is written where it runs."""
    keys = asset_paths(assets)
    if model is not None:
        keys[0] = f"actor_rollout_ref.model.path={model}"
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         "hydra.run.dir=.", "hydra.output_subdir=null", "hydra/job_logging=stdout",
         f"trainer.default_local_dir={run_dir}", *keys,
         ONE_PROCESS, *overrides],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


@pytest.mark.slow
def test_a_run_whose_first_checkpoint_cannot_fit_is_refused_before_any_model(tiny_assets, tmp_path):
    model = huge_model(tiny_assets, tmp_path / "huge", num_hidden_layers=100_000)  # about a petabyte
    run_dir = tmp_path / "run"
    done = _entry_point(tiny_assets, run_dir, model=model)
    line = assert_refused(done, "trainer.default_local_dir")
    free, where = free_bytes(str(run_dir))
    needed = checkpoint_size(tiny_longcot_with(tiny_assets, f"actor_rollout_ref.model.path={model}"))[0].total
    assert line.startswith(f"disk error: trainer.default_local_dir='{run_dir}' has ")
    assert f"bytes free (at {where}) and one checkpoint needs {needed:,}: " in line
    reported_free = int(line.split(" has ")[1].split(" bytes free")[0].replace(",", ""))
    assert abs(reported_free - free) < 2**30  # the disk's free space then and now
    assert "checkpoint size" in done.stdout and "the first checkpoint does NOT fit" in done.stdout
    assert not run_dir.exists()


def test_a_run_whose_retained_checkpoints_may_not_fit_is_warned(tiny_assets, tmp_path):
    """One checkpoint of 0.4 x the free space: one fits, two kept and a third being written do not.
    The blocks are narrow (about 0.2 GB of checkpoint each) so that 0.4 x is hit to within a block
    however little the disk holds: wide ones (11.5 GB each) once rounded a 46 GB disk to 0.49 x."""
    free, _ = free_bytes(str(tmp_path))

    def config(layers: int, *overrides: str):
        model = tmp_path / f"model_{layers}"
        if not model.exists():
            huge_model(tiny_assets, model, layers, hidden_size=1024)
        keys = [*asset_paths(tiny_assets), f"actor_rollout_ref.model.path={model}",
                f"trainer.default_local_dir={tmp_path / 'run'}", *overrides]  # fmt: skip
        return load_config(compose_config("tiny_longcot", keys), check_paths=False)

    one, two = (checkpoint_size(config(n))[0].total for n in (1, 2))
    layers = round((0.4 * free - (2 * one - two)) / (two - one))
    assert 0.39 < checkpoint_size(config(layers))[0].total / free < 0.41
    plan = describe_disk(config(layers, "trainer.total_training_steps=6", "trainer.save_freq=1"))
    assert plan.refusal is None
    assert plan.warning.startswith("the run may hold 6 checkpoints (")
    assert plan.warning.endswith("set trainer.max_actor_ckpt_to_keep to at most 1, or free space there")
    assert "the first checkpoint fits, the retained ones may NOT" in plan.text
    kept = describe_disk(
        config(
            layers,
            "trainer.total_training_steps=6",
            "trainer.save_freq=1",
            "trainer.max_actor_ckpt_to_keep=1",
        )
    )
    assert kept.warning is None and kept.text.endswith(": fits")


# -- retention, a kill, a full disk: on real runs ------------------------------------------------------

LONGCOT = ("data.max_response_length=8", ONE_PROCESS)
RETENTION = ("trainer.save_freq=1", "trainer.max_actor_ckpt_to_keep=2", "trainer.keep_ckpt_every_n_steps=2")

# a tiny run in a child process, after `PATCH` has changed one thing: argv[1] is JSON
# [assets, run_dir, overrides, step, value]
CHILD = """
import json, os, resource, signal, sys
from pathlib import Path
from tests.e2e_utils import tiny_config
from verl.trainer.launch import SignalStop, run
from verl.trainer.ppo.ray_trainer import RayPPOTrainer
from verl.utils import checkpoint
assets, run_dir, overrides, at_step, value = json.loads(sys.argv[1])
{patch}
run(tiny_config("tiny_longcot", Path(assets), Path(run_dir), *overrides))
"""
# dies (exit code 17) after step `at_step`'s checkpoint is committed, before retention deletes anything
KILL_BEFORE_DELETION = CHILD.format(
    patch="""
prune = checkpoint.prune
def prune_or_die(root, written, *args):
    if written == at_step:
        os._exit(17)
    return prune(root, written, *args)
checkpoint.prune = prune_or_die
"""
)
# from step `at_step`'s save on, no file may grow past `value` bytes: the write fails with EFBIG (with
# SIGXFSZ ignored, the write raises instead of the signal killing the process)
SMALL_DISK = CHILD.format(
    patch="""
save = RayPPOTrainer.save_checkpoint
def save_on_a_small_disk(self, step):
    if step == at_step:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (value, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return save(self, step)
RayPPOTrainer.save_checkpoint = save_on_a_small_disk
"""
)


def child(script: str, assets: Path, run_dir: Path, overrides, at_step: int, value: int = 0):
    args = json.dumps([str(assets), str(run_dir), list(overrides), at_step, value])
    return subprocess.run([sys.executable, "-c", script, args], cwd=REPO, capture_output=True, text=True,
                          timeout=HANG_S)  # fmt: skip


def weights(path: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


def assert_same_run(run_dir: Path, reference: Path, step: int) -> None:
    """Bit-identical weights at `step`, and the same metrics up to it (wall-clock times aside)."""
    ours, theirs = (
        weights(run_dir / f"global_step_{step}" / "actor" / "huggingface"),
        weights(reference / f"global_step_{step}" / "actor" / "huggingface"),
    )
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)

    def steady(path):
        return [
            {k: v for k, v in m.items() if not varies_between_runs(k)}
            for m in read_jsonl(path / "metrics.jsonl")
        ]

    assert steady(run_dir) == steady(reference)[:step]


@pytest.fixture(scope="module")
def reference_run(tiny_assets, tmp_path_factory):
    """Six steps that never stop, a checkpoint each, two kept plus every second for good."""
    run_dir = tmp_path_factory.mktemp("reference") / "run"
    run(
        tiny_config(
            "tiny_longcot", tiny_assets, run_dir, *LONGCOT, *RETENTION, "trainer.total_training_steps=6"
        )
    )
    return run_dir


def step_names(run_dir: Path) -> list[str]:
    return sorted(p.name for p in run_dir.iterdir() if p.name.startswith(("global_step_", ".global_step_")))


@pytest.mark.slow
def test_retention_and_a_kill_between_commit_and_deletion_lose_nothing(reference_run, tiny_assets, tmp_path):
    # six saves, keep 2: the newest two (5, 6) and every second step's for good (2, 4)
    assert step_names(reference_run) == ["global_step_2", "global_step_4", "global_step_5", "global_step_6"]
    run_dir = tmp_path / "run"
    overrides = (*LONGCOT, *RETENTION, "trainer.total_training_steps=6")
    died = child(KILL_BEFORE_DELETION, tiny_assets, run_dir, overrides, at_step=5)
    assert died.returncode == 17, died.stderr[-3000:]
    # step 5 committed, step 3 not yet deleted: one checkpoint more than retention keeps, none fewer
    assert step_names(run_dir) == ["global_step_2", "global_step_3", "global_step_4", "global_step_5"]
    assert all(checkpoint.checkpoint_problem(run_dir / name) is None for name in step_names(run_dir))
    assert (run_dir / checkpoint.LATEST_FILE).read_text() == "5\n"
    # the rerun resumes from step 5, deletes the extra one after its save and ends as the reference did
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *overrides))
    assert step_names(run_dir) == step_names(reference_run)
    assert_same_run(run_dir, reference_run, 6)


@pytest.mark.slow
def test_a_full_disk_during_a_save_loses_nothing(reference_run, tiny_assets, tmp_path):
    run_dir = tmp_path / "run"
    overrides = (*LONGCOT, *RETENTION, "trainer.total_training_steps=2")
    failed = child(SMALL_DISK, tiny_assets, run_dir, overrides, at_step=2, value=2**20)  # the weights: 2 MiB
    assert failed.returncode == 1, failed.stderr[-3000:]
    errors = [line for line in failed.stderr.splitlines() if " error: " in line or "Error" in line]
    assert len(errors) == 1 and errors[0].startswith("checkpoint error: writing "), failed.stderr[-3000:]
    assert f"{run_dir / 'global_step_2'} failed (" in errors[0] and "File too large" in errors[0]
    assert "the last committed checkpoint is global_step_1, untouched" in errors[0]
    assert errors[0].endswith(f"rerun the same command to resume from {run_dir / 'global_step_1'}")
    # the half-written directory is gone; the previous checkpoint, the metrics and the rollouts are whole
    assert step_names(run_dir) == ["global_step_1"]
    assert checkpoint.checkpoint_problem(run_dir / "global_step_1") is None
    assert (run_dir / checkpoint.LATEST_FILE).read_text() == "1\n"
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]
    for step in (1, 2):
        assert len(read_jsonl(run_dir / "rollouts" / f"step_{step}.jsonl")) == 4  # 2 prompts x 2 samples
    # once there is room: the rerun resumes from step 1 and ends bit-identical to a run that never failed
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *overrides))
    assert step_names(run_dir) == ["global_step_1", "global_step_2"]
    assert_same_run(run_dir, reference_run, 2)


@pytest.mark.slow
def test_the_checkpoint_a_run_resumed_from_stays_until_a_later_run_no_longer_needs_it(
    tiny_assets, tmp_path, capsys
):
    """Back to an older checkpoint with one kept: the run's saves may delete neither the one just written
    nor the one it resumed from (its fallback until the run is done). The next run resumes from the newest,
    and its first save deletes the older one."""
    run_dir = tmp_path / "run"
    saves = (*LONGCOT, "trainer.save_freq=1")
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *saves, "trainer.total_training_steps=2"))
    assert step_names(run_dir) == ["global_step_1", "global_step_2"]
    capsys.readouterr()
    keep_one = (*saves, "trainer.max_actor_ckpt_to_keep=1")
    older = run_dir / "global_step_1"
    run(
        tiny_config(
            "tiny_longcot", tiny_assets, run_dir, *keep_one, "trainer.total_training_steps=2",
            "trainer.resume_mode=path", f"trainer.resume_from_path={older}",
        )
    )  # fmt: skip
    assert f"resumed from {older} at step 1" in capsys.readouterr().out
    assert step_names(run_dir) == ["global_step_1", "global_step_2"]
    run(tiny_config("tiny_longcot", tiny_assets, run_dir, *keep_one, "trainer.total_training_steps=3"))
    out = capsys.readouterr().out
    assert f"resumed from {run_dir / 'global_step_2'} at step 2" in out
    assert "deleted global_step_1 (trainer.max_actor_ckpt_to_keep=1)" in out
    assert step_names(run_dir) == ["global_step_2", "global_step_3"]
