"""metrics.jsonl and wandb offline logging; checkpoint directories, the latest pointer and resume."""

import json
import math

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
