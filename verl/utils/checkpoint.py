"""Where checkpoints live and which one to resume from.

Layout under trainer.default_local_dir:
  global_step_N/actor/huggingface/   HF model + tokenizer (loadable with from_pretrained)
  global_step_N/actor/state.pt       optimizer, LR scheduler, RNG
  global_step_N/trainer_state.json   step and data position
  global_step_N/run_config.json      the run's resolved config, compared with the config of a resume
  latest_checkpointed_iteration.txt  N of the newest complete checkpoint
A checkpoint is written to a hidden temp directory and renamed into place, and the "latest" file is
updated only afterwards, so a crash mid-save never leaves a checkpoint that looks complete. Resuming
still checks the checkpoint the pointer names (files can go missing later: a disk clean-up, a
partial copy) and falls back to the newest complete one, saying so.
"""

from __future__ import annotations

import json
import re
import shutil
import time
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


# what a checkpoint needs to be resumed from (run_config.json is optional: checkpoints from before it existed)
REQUIRED_FILES = ("trainer_state.json", "actor/state.pt", "actor/huggingface/config.json")


class ResumeError(ValueError):
    """A run directory that cannot be resumed or started as asked; the message says what to do."""


def checkpoint_problem(path: Path) -> str | None:
    """Why `path` cannot be resumed from, or None when it looks complete."""
    if not path.is_dir():
        return "it does not exist"
    missing = [name for name in REQUIRED_FILES if not (path / name).is_file()]
    if missing:
        return f"{', '.join(missing)} missing"
    try:
        step = json.loads((path / "trainer_state.json").read_text())["global_step"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"trainer_state.json is unreadable ({e.__class__.__name__})"
    if step != step_of(path):
        return f"trainer_state.json says step {step}"
    return None


def step_dirs(root: str | Path) -> list[Path]:
    """Every global_step_N directory under root, newest first."""
    found = [p for p in Path(root).glob("global_step_*") if STEP_DIR.search(p.name)]
    return sorted(found, key=step_of, reverse=True)


def holds_run(root: str | Path) -> bool:
    """Whether root already holds (part of) a run: a new run there would mix with it."""
    root = Path(root)
    metrics = root / "metrics.jsonl"
    return (
        (metrics.is_file() and metrics.stat().st_size > 0)
        or (root / LATEST_FILE).exists()
        or bool(step_dirs(root))
        or (root / "rollouts").is_dir()
    )


def move_aside(root: str | Path) -> Path:
    """Rename a run directory to `<name>.replaced-<time>` so a fresh run starts empty."""
    root = Path(root)
    target = root.with_name(f"{root.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}")
    root.rename(target)
    return target


def find_resume(
    root: str | Path, resume_mode: str, resume_from_path: str | None, overwrite: bool = False
) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from (None: start fresh) and notes to print about the choice.

    auto: the checkpoint the latest pointer names if it is complete, else the newest complete one;
    a directory that holds a run but no complete checkpoint is refused rather than started over.
    disable: start fresh; a directory that holds a run is refused unless `overwrite`, which moves it
    aside. path: that checkpoint, which must be complete.
    """
    root = Path(root)
    if resume_mode == "path":
        path = Path(resume_from_path or "")
        problem = checkpoint_problem(path) if STEP_DIR.search(path.name) else "not a global_step_N directory"
        if problem:
            raise ResumeError(
                f"trainer.resume_from_path={resume_from_path!r}: cannot resume from it ({problem})"
            )
        return path, []
    if resume_mode == "disable":
        if not holds_run(root):
            return None, []
        if not overwrite:
            raise ResumeError(
                f"trainer.default_local_dir={str(root)!r} already holds a run, and trainer.resume_mode="
                "disable would mix a new run into it. Set trainer.overwrite=true to move the old run "
                "aside, or choose another trainer.default_local_dir."
            )
        return None, [f"moved the previous run aside to {move_aside(root)}"]
    if resume_mode != "auto":
        raise ResumeError(f"trainer.resume_mode={resume_mode!r}: expected auto, disable or path")

    notes = []
    latest = root / LATEST_FILE
    if latest.is_file():
        text = latest.read_text().strip()
        named = step_dir(root, int(text)) if text.isdigit() else None
        problem = checkpoint_problem(named) if named else f"it holds {text!r}, not a step"
        if problem is None:
            return named, []
        notes.append(f"{LATEST_FILE} names a checkpoint that cannot be resumed from ({problem})")
    for candidate in step_dirs(root):
        problem = checkpoint_problem(candidate)
        if problem is None:
            return candidate, notes + [f"resuming from {candidate.name}, the newest complete checkpoint"]
        notes.append(f"skipped {candidate.name}: {problem}")
    if holds_run(root):
        raise ResumeError(
            f"trainer.default_local_dir={str(root)!r} holds a run but no complete checkpoint"
            + (f" ({'; '.join(notes)})" if notes else "")
            + ". Starting over would overwrite its metrics and rollouts: set trainer.resume_mode=disable "
            "trainer.overwrite=true to move it aside and start fresh, or choose another directory."
        )
    return None, notes


def step_of(path: Path) -> int:
    match = STEP_DIR.search(path.name)
    if not match:
        raise ValueError(f"{path} is not a global_step_N directory")
    return int(match.group(1))
