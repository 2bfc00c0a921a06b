"""Where checkpoints live and which one to resume from.

Layout under trainer.default_local_dir:
  global_step_N/actor/huggingface/   HF model + tokenizer (loadable with from_pretrained)
  global_step_N/actor/state.pt       optimizer, LR scheduler, RNG
  global_step_N/trainer_state.json   step and data position
  global_step_N/run_config.json      the run's resolved config, compared with the config of a resume
  latest_checkpointed_iteration.txt  N of the newest complete checkpoint
  global_step_N/critic/               the same for the value model (algorithm.adv_estimator=gae)
A checkpoint is written to a hidden temp directory and renamed into place, and the "latest" file is
updated only afterwards, so a crash mid-save never leaves a checkpoint that looks complete. Resuming
still checks the checkpoint the pointer names (files can go missing later: a disk clean-up, a
partial copy) and falls back to the newest complete one, saying so.

Retention (`prune`, after each save is committed): the newest trainer.max_actor_ckpt_to_keep complete
checkpoints are kept, those of steps that are multiples of trainer.keep_ckpt_every_n_steps too, and
the one just written and the one the run resumed from are never deleted; the rest go whole. Of the
kept ones, those outside the newest trainer.max_critic_ckpt_to_keep lose their critic/. A deletion
renames the directory to a hidden `.NAME.deleting` first, so a crash mid-deletion leaves nothing that
looks like a checkpoint; a crash between a commit and its deletions leaves extra checkpoints, never
fewer, and the next save deletes them. Checkpoints of later steps than the one just written (a run
resumed from an older checkpoint) are left alone: the run overwrites them as it gets there.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import threading
import time
from collections.abc import Collection, Iterator
from contextlib import contextmanager
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


@contextmanager
def signals_held(signals: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)) -> Iterator[None]:
    """Within the block, a stop signal waits: it is delivered to the handler in place before once the
    block ends. A stop handler raises wherever the code is (`launch.SignalStop`); between a checkpoint's
    rename and its pointer that would roll back a complete checkpoint. Python runs signal handlers only
    in the main thread, so elsewhere there is nothing to hold."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    caught: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, frame: caught.append(signum)) for sig in signals}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, signal.SIG_DFL if handler is None else handler)
        for signum in dict.fromkeys(caught):  # each signal once, in the order they came
            signal.raise_signal(signum)


def commit_step_dir(root: str | Path, step: int, tmp: Path) -> Path:
    """Rename `tmp` into place and point the latest file at it. When the latest file cannot be written
    (a full disk), the directory goes back to `tmp`: a checkpoint counts as committed only once the
    pointer names it. A stop signal waits until the commit is done, so it never undoes one."""
    final = step_dir(root, step)
    with signals_held():
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        try:
            atomic_write_text(Path(root) / LATEST_FILE, f"{step}\n")
        except BaseException:
            final.rename(tmp)
            raise
    return final


# what a checkpoint needs to be resumed from (run_config.json is optional: checkpoints from before it existed)
REQUIRED_FILES = ("trainer_state.json", "actor/state.pt", "actor/huggingface/config.json")
CRITIC_FILES = ("critic/state.pt", "critic/huggingface/config.json")  # and these when the run has a critic


class ResumeError(ValueError):
    """A run directory that cannot be resumed or started as asked; the message says what to do."""


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written (a full disk, a file size limit, an I/O error); its half-written
    directory is gone and the checkpoints committed before it are untouched. The message says which."""


def error_summary(error: BaseException) -> str:
    """`Type: message` on one line; an error passed on from a Ray worker carries its remote traceback in
    its text, whose last line is that."""
    lines = [line for line in str(error).strip().splitlines() if line.strip()]
    if len(lines) > 1:
        return lines[-1].strip()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def checkpoint_problem(path: Path, needs_critic: bool = False) -> str | None:
    """Why `path` cannot be resumed from (by a run with a critic when `needs_critic`), or None when it
    looks complete."""
    if not path.is_dir():
        return "it does not exist"
    required = REQUIRED_FILES + (CRITIC_FILES if needs_critic else ())
    missing = [name for name in required if not (path / name).is_file()]
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
    root: str | Path,
    resume_mode: str,
    resume_from_path: str | None,
    overwrite: bool = False,
    needs_critic: bool = False,
) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from (None: start fresh) and notes to print about the choice; a run with
    a critic (`needs_critic`) needs the critic's files too.

    auto: the checkpoint the latest pointer names if it is complete, else the newest complete one;
    a directory that holds a run but no complete checkpoint is refused rather than started over.
    disable: start fresh; a directory that holds a run is refused unless `overwrite`, which moves it
    aside. path: that checkpoint, which must be complete.
    """
    root = Path(root)
    if resume_mode == "path":
        path = Path(resume_from_path or "")
        problem = "not a global_step_N directory"
        if STEP_DIR.search(path.name):
            problem = checkpoint_problem(path, needs_critic)
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
        problem = checkpoint_problem(named, needs_critic) if named else f"it holds {text!r}, not a step"
        if problem is None:
            return named, []
        notes.append(f"{LATEST_FILE} names a checkpoint that cannot be resumed from ({problem})")
    for candidate in step_dirs(root):
        problem = checkpoint_problem(candidate, needs_critic)
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


def steps_to_delete(
    steps: Collection[int], keep_last: int | None, keep_every: int | None, protected: Collection[int] = ()
) -> list[int]:
    """Of checkpoint `steps`, those retention deletes: not among the `keep_last` largest (None: all are
    kept), not a multiple of `keep_every` (None: none is), not `protected`. Ascending."""
    if keep_last is None:
        return []
    kept = set(sorted(steps, reverse=True)[:keep_last]) | set(protected)
    return sorted(s for s in steps if s not in kept and not (keep_every and s % keep_every == 0))


def _delete(path: Path) -> None:
    """Rename `path` to a hidden `.NAME.deleting` beside it, then remove it."""
    doomed = path.with_name(f".{path.name}.deleting")
    path.rename(doomed)
    shutil.rmtree(doomed)


def prune(
    root: str | Path,
    written: int,
    protected: Collection[int],
    keep_actor: int | None,
    keep_critic: int | None,
    keep_every: int | None,
) -> list[str]:
    """Apply retention (module docstring) to the complete checkpoints of steps <= `written`, the step
    just committed; `protected` steps (the resume point) are never touched. Returns one line per deletion."""
    root = Path(root)
    for leftover in [*root.glob(".global_step_*.deleting"), *root.glob("global_step_*/.critic.deleting")]:
        shutil.rmtree(leftover)  # a crash mid-deletion
    complete = {
        step_of(p): p for p in step_dirs(root) if step_of(p) <= written and checkpoint_problem(p) is None
    }
    keep = {written, *protected}
    notes = []
    for step in steps_to_delete(complete, keep_actor, keep_every, keep):
        _delete(complete.pop(step))
        notes.append(f"deleted global_step_{step} (trainer.max_actor_ckpt_to_keep={keep_actor})")
    for step in steps_to_delete(complete, keep_critic, keep_every, keep):
        critic = complete[step] / "critic"
        if critic.is_dir():
            _delete(critic)
            notes.append(f"deleted global_step_{step}/critic (trainer.max_critic_ckpt_to_keep={keep_critic})")
    return notes
