"""metrics.jsonl and wandb offline logging; checkpoint directories, the latest pointer and resume."""

import json
import math
import os
import re
import signal
import threading
from pathlib import Path

import pytest

from verl.utils import checkpoint
from verl.utils.fs import read_jsonl
from verl.utils.tracking import Tracking


def test_metrics_jsonl_one_line_per_step_and_nan_kept_parseable(tmp_path):
    t = Tracking(["jsonl"], tmp_path, "p", "e", "g", config={})
    t.log({"train/score_mean": 0.5, "actor/pg_loss": math.nan}, step=1)
    t.log({"train/score_mean": 0.75}, step=2)
    t.finish()
    assert read_jsonl(tmp_path / "metrics.jsonl") == [
        {"step": 1, "train/score_mean": 0.5, "actor/pg_loss": None},
        {"step": 2, "train/score_mean": 0.75},
    ]


def test_resume_drops_steps_after_the_checkpoint_and_appends(tmp_path):
    t = Tracking(["jsonl"], tmp_path, "p", "e", "g", config={})
    for step in (1, 2, 3):
        t.log({"x": float(step)}, step=step)
    resumed = Tracking(["jsonl"], tmp_path, "p", "e", "g", config={}, resume_step=2)
    resumed.log({"x": 30.0}, step=3)
    assert [(r["step"], r["x"]) for r in read_jsonl(tmp_path / "metrics.jsonl")] == [
        (1, 1.0),
        (2, 2.0),
        (3, 30.0),
    ]
    # a fresh (not resumed) run in the same directory starts a new history
    Tracking(["jsonl"], tmp_path, "p", "e", "g", config={})
    assert read_jsonl(tmp_path / "metrics.jsonl") == []


def test_wandb_offline_run_with_group(tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.delenv("WANDB_MODE", raising=False)
    t = Tracking(["wandb"], tmp_path, "proj", "tiny_delethink", "tiny_markovian", config={"a": 1})
    assert t.wandb_run.group == "tiny_markovian" and t.wandb_run.name == "tiny_delethink"
    assert t.wandb_run.settings.mode == "offline"
    t.log({"train/score_mean": 0.5}, step=1)
    t.finish()
    runs = list((tmp_path / "wandb").glob("offline-run-*/run-*.wandb"))
    assert len(runs) == 1 and runs[0].stat().st_size > 0


def commit(root, step, parts=("actor",)):
    """A checkpoint with every file resuming needs (contents do not matter here), of the actor and, when
    `parts` names it, the critic."""
    tmp = checkpoint.temp_step_dir(root, step)
    (tmp / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    for part in parts:
        (tmp / part / "huggingface").mkdir(parents=True)
        (tmp / part / "state.pt").write_bytes(b"x")
        (tmp / part / "huggingface" / "config.json").write_text("{}")
    return checkpoint.commit_step_dir(root, step, tmp)


def test_latest_pointer_follows_completed_checkpoints_only(tmp_path):
    assert checkpoint.find_resume(tmp_path, "auto", None) == (None, [])
    commit(tmp_path, 2)
    commit(tmp_path, 4)
    # a save that crashed before its rename leaves only a hidden temp directory behind
    checkpoint.temp_step_dir(tmp_path, 6)
    assert checkpoint.find_resume(tmp_path, "auto", None) == (tmp_path / "global_step_4", [])
    assert (
        checkpoint.find_resume(tmp_path, "path", str(tmp_path / "global_step_2"))[0]
        == tmp_path / "global_step_2"
    )
    with pytest.raises(checkpoint.ResumeError, match="trainer.resume_from_path=.*does not exist"):
        checkpoint.find_resume(tmp_path, "path", str(tmp_path / "global_step_6"))
    assert checkpoint.step_of(tmp_path / "global_step_4") == 4
    # re-saving a step replaces it whole
    again = commit(tmp_path, 4)
    assert json.loads((again / "trainer_state.json").read_text()) == {"global_step": 4}


def test_a_temp_directory_left_by_a_crashed_save_is_emptied_for_the_next(tmp_path):
    stale = checkpoint.temp_step_dir(tmp_path, 3)
    (stale / "half_written").write_text("x")
    again = checkpoint.temp_step_dir(tmp_path, 3)
    assert again == tmp_path / ".global_step_3.tmp" and list(again.iterdir()) == []
    # a run's first save makes its directory
    assert checkpoint.temp_step_dir(tmp_path / "new_run", 1).is_dir()


def test_a_commit_outside_the_main_thread_leaves_signals_alone(tmp_path):
    """Python runs signal handlers, and lets them be set, in the main thread only."""
    errors = []

    def save():
        try:
            commit(tmp_path, 1)
        except Exception as e:  # the thread's error is the test's result
            errors.append(e)

    thread = threading.Thread(target=save)
    thread.start()
    thread.join()
    assert errors == [] and (tmp_path / checkpoint.LATEST_FILE).read_text() == "1\n"


def test_signals_held_delivers_each_signal_once_in_the_order_they_came():
    seen = []
    held = (signal.SIGTERM, signal.SIGINT)
    previous = {sig: signal.signal(sig, lambda signum, frame: seen.append(signum)) for sig in held}
    try:
        with checkpoint.signals_held():
            for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGINT):
                os.kill(os.getpid(), sig)
            assert seen == []  # held
        assert seen == [signal.SIGINT, signal.SIGTERM]
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def test_error_summary_is_one_line():
    assert checkpoint.error_summary(OSError(28, "No space left on device")) == (
        "OSError: [Errno 28] No space left on device"
    )
    assert checkpoint.error_summary(ValueError()) == "ValueError"
    # a Ray worker's error carries its remote traceback: the last line says what it was
    remote = "ray.exceptions.RayTaskError: save_checkpoint\n  File x, line 1\n\nOSError: disk full\n"
    assert checkpoint.error_summary(RuntimeError(remote)) == "OSError: disk full"


def test_what_a_checkpoint_lacks_is_named(tmp_path):
    path = commit(tmp_path, 2)
    assert checkpoint.checkpoint_problem(path) is None
    assert checkpoint.checkpoint_problem(path, needs_critic=True) == (
        "critic/state.pt, critic/huggingface/config.json missing"
    )
    (path / "trainer_state.json").write_text("{")
    assert checkpoint.checkpoint_problem(path) == "trainer_state.json is unreadable (JSONDecodeError)"
    (path / "trainer_state.json").write_text("{}")
    assert checkpoint.checkpoint_problem(path) == "trainer_state.json is unreadable (KeyError)"
    (path / "trainer_state.json").write_text('{"global_step": 3}')
    assert checkpoint.checkpoint_problem(path) == "trainer_state.json says step 3"
    assert checkpoint.checkpoint_problem(tmp_path / "global_step_5") == "it does not exist"


def test_what_holds_a_run(tmp_path):
    assert not checkpoint.holds_run(tmp_path)
    (tmp_path / "metrics.jsonl").write_text("")  # opened, nothing written
    assert not checkpoint.holds_run(tmp_path)
    (tmp_path / "rollouts").mkdir()
    assert checkpoint.holds_run(tmp_path)
    other = tmp_path / "other"
    (other / "global_step_1").mkdir(parents=True)
    assert checkpoint.holds_run(other)
    (tmp_path / "pointer_only").mkdir()
    (tmp_path / "pointer_only" / checkpoint.LATEST_FILE).write_text("1\n")
    assert checkpoint.holds_run(tmp_path / "pointer_only")


def test_find_resume_names_what_it_cannot_use(tmp_path):
    with pytest.raises(checkpoint.ResumeError) as refused:
        checkpoint.find_resume(tmp_path, "path", str(tmp_path / "step_2"))
    assert str(refused.value) == (
        f"trainer.resume_from_path='{tmp_path / 'step_2'}': cannot resume from it (not a global_step_N "
        "directory)"
    )
    with pytest.raises(checkpoint.ResumeError) as refused:
        checkpoint.find_resume(tmp_path, "latest", None)
    assert str(refused.value) == "trainer.resume_mode='latest': expected auto, disable or path"
    commit(tmp_path, 2)
    (tmp_path / checkpoint.LATEST_FILE).write_text("two\n")
    assert checkpoint.find_resume(tmp_path, "auto", None) == (
        tmp_path / "global_step_2",
        [
            f"{checkpoint.LATEST_FILE} names a checkpoint that cannot be resumed from (it holds 'two', not a "
            "step)",
            "resuming from global_step_2, the newest complete checkpoint",
        ],
    )
    with pytest.raises(checkpoint.ResumeError) as refused:
        checkpoint.find_resume(tmp_path, "disable", None)
    assert str(refused.value) == (
        f"trainer.default_local_dir='{tmp_path}' already holds a run, and trainer.resume_mode=disable "
        "would mix a new run into it. Set trainer.overwrite=true to move the old run aside, or choose "
        "another trainer.default_local_dir."
    )
    (tmp_path / "global_step_2" / "actor" / "state.pt").unlink()
    with pytest.raises(checkpoint.ResumeError) as refused:
        checkpoint.find_resume(tmp_path, "auto", None)
    assert str(refused.value) == (
        f"trainer.default_local_dir='{tmp_path}' holds a run but no complete checkpoint ("
        f"{checkpoint.LATEST_FILE} names a checkpoint that cannot be resumed from (it holds 'two', not a "
        "step); skipped global_step_2: actor/state.pt missing). Starting over would overwrite its metrics "
        "and rollouts: set trainer.resume_mode=disable trainer.overwrite=true to move it aside and start "
        "fresh, or choose another directory."
    )
    with pytest.raises(ValueError, match=r"^step_2 is not a global_step_N directory$"):
        checkpoint.step_of(Path("step_2"))


def test_a_run_moved_aside_is_named_by_the_time(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    moved = checkpoint.move_aside(run_dir)
    assert not run_dir.exists() and moved.parent == tmp_path
    assert re.fullmatch(r"run\.replaced-\d{8}-\d{6}", moved.name)


def test_prune_clears_what_a_crash_mid_deletion_left(tmp_path):
    commit(tmp_path, 1, ("actor", "critic"))
    leftover = tmp_path / "global_step_1" / ".critic.deleting"
    leftover.mkdir()
    assert checkpoint.prune(tmp_path, 1, [], keep_actor=1, keep_critic=1, keep_every=None) == []
    assert not leftover.exists() and (tmp_path / "global_step_1" / "critic").is_dir()


def test_newest_first_counts_steps_as_numbers(tmp_path):
    for step in (9, 10, 2):
        commit(tmp_path, step)
    assert [checkpoint.step_of(p) for p in checkpoint.step_dirs(tmp_path)] == [10, 9, 2]


def test_a_run_with_a_critic_resumes_only_from_a_checkpoint_that_has_one(tmp_path):
    commit(tmp_path, 2, ("actor", "critic"))
    commit(tmp_path, 4)  # the pointer names it; it has no critic
    path, notes = checkpoint.find_resume(tmp_path, "auto", None, needs_critic=True)
    missing = "critic/state.pt, critic/huggingface/config.json missing"
    assert path == tmp_path / "global_step_2"
    assert notes == [
        f"{checkpoint.LATEST_FILE} names a checkpoint that cannot be resumed from ({missing})",
        f"skipped global_step_4: {missing}",
        "resuming from global_step_2, the newest complete checkpoint",
    ]


def test_a_run_without_any_checkpoint_is_refused_without_notes(tmp_path):
    (tmp_path / "metrics.jsonl").write_text("{")  # a crash while the first line was written: a run
    with pytest.raises(checkpoint.ResumeError) as refused:
        checkpoint.find_resume(tmp_path, "auto", None)
    assert str(refused.value).startswith(
        f"trainer.default_local_dir='{tmp_path}' holds a run but no complete checkpoint. Starting over"
    )


def test_error_summary_keeps_the_message_whole():
    # two lines: the last says what it was; one line keeps its last character, whatever it is
    assert checkpoint.error_summary(RuntimeError("remote traceback\nOSError: disk X")) == "OSError: disk X"
    assert checkpoint.error_summary(OSError("cannot write X")) == "OSError: cannot write X"
