"""Where checkpoints live and which one to resume from.

Layout under trainer.default_local_dir:
  global_step_N/actor/huggingface/   HF model + tokenizer (loadable with from_pretrained)
  global_step_N/actor/state.pt       optimizer, LR scheduler, RNG
  global_step_N/trainer_state.json   step and data position
  latest_checkpointed_iteration.txt  N of the newest complete checkpoint
A checkpoint is written to a hidden temp directory and renamed into place, and the "latest" file is
updated only afterwards, so a crash mid-save never leaves a checkpoint that looks complete.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from verl.utils.fs import atomic_write_text

LATEST_FILE = "latest_checkpointed_iteration.txt"
STEP_DIR = re.compile(r"global_step_(\d+)$")


def step_dir(root: str | Path, step: int) -> Path:
    return Path(root) / f"global_step_{step}"


def temp_step_dir(root: str | Path, step: int) -> Path:
    tmp = Path(root) / f".global_step_{step}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def commit_step_dir(root: str | Path, step: int, tmp: Path) -> Path:
    final = step_dir(root, step)
    if final.exists():
        shutil.rmtree(final)
    tmp.rename(final)
    atomic_write_text(Path(root) / LATEST_FILE, f"{step}\n")
    return final


def latest_checkpoint(root: str | Path) -> Path | None:
    latest = Path(root) / LATEST_FILE
    if not latest.is_file():
        return None
    path = step_dir(root, int(latest.read_text().strip()))
    return path if path.is_dir() else None


def resolve_resume(root: str | Path, resume_mode: str, resume_from_path: str | None) -> Path | None:
    """The checkpoint directory to resume from, or None to start fresh."""
    if resume_mode == "disable":
        return None
    if resume_mode == "auto":
        return latest_checkpoint(root)
    if resume_mode == "path":
        path = Path(resume_from_path or "")
        if not STEP_DIR.search(path.name) or not path.is_dir():
            raise ValueError(
                f"trainer.resume_from_path={resume_from_path!r} is not an existing global_step_N directory"
            )
        return path
    raise ValueError(f"trainer.resume_mode={resume_mode!r}: expected auto, disable or path")


def step_of(path: Path) -> int:
    match = STEP_DIR.search(path.name)
    if not match:
        raise ValueError(f"{path} is not a global_step_N directory")
    return int(match.group(1))
