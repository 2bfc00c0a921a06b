"""Deciding, before Ray starts, where a run begins: from which checkpoint, and with which config.

A resumed run must be the same run. Keys that define it (environment, model, data, budgets, batch
layout, seeds, the algorithm) must match the checkpoint's saved config, or the resume is refused
with the list of differences; keys that only steer it from here on (learning rate, total steps,
logging, validation and save frequencies, micro-batch sizes, which only change memory) may change,
and each change is printed.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from verl.config import CONFIG_DIR, PolicyIterationConfig
from verl.utils import checkpoint

CONFIG_FILE = "run_config.json"  # not config.json: that name marks an HF model directory

# dotted keys (or prefixes ending in ".") a resumed run may change
MAY_CHANGE = (
    "trainer.total_training_steps",
    "trainer.test_freq",
    "trainer.save_freq",
    "trainer.val_before_train",
    "trainer.logger",
    "trainer.log_rollouts",
    "trainer.log_val_generations",
    "trainer.project_name",
    "trainer.experiment_name",
    "trainer.group",
    "trainer.default_local_dir",
    "trainer.resume_mode",
    "trainer.resume_from_path",
    "trainer.overwrite",
    "trainer.max_actor_ckpt_to_keep",
    "trainer.max_critic_ckpt_to_keep",
    "trainer.keep_ckpt_every_n_steps",
    "trainer.launcher",  # one rank in-process or as a Ray actor: the same run (tests/test_local_launcher.py)
    "actor_rollout_ref.actor.optim.",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu",
    "actor_rollout_ref.actor.use_dynamic_bsz",
    "actor_rollout_ref.actor.ppo_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu",
    "actor_rollout_ref.rollout.gpu_memory_utilization",
    "actor_rollout_ref.rollout.val_kwargs.",
    "actor_rollout_ref.ref.log_prob_",
    "critic.optim.",
    "critic.ppo_micro_batch_size_per_gpu",
    "critic.forward_micro_batch_size_per_gpu",
    "critic.use_dynamic_bsz",
    "critic.ppo_max_token_len_per_gpu",
    "data.val_files",
    "data.val_batch_size",
    "val_tasks",
)


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flatten(value, f"{prefix}{key}."))
        return out
    return {prefix[:-1]: tree}


def _may_change(key: str, may_change: tuple[str, ...]) -> bool:
    return any(
        key.startswith(k) if k.endswith(".") else key == k or key.startswith(f"{k}.") for k in may_change
    )


def config_differences(
    saved: dict[str, Any],
    current: dict[str, Any],
    defaults: dict[str, Any] | None = None,
    may_change: tuple[str, ...] = MAY_CHANGE,
) -> tuple[list[str], list[str]]:
    """(refused, applied): `key: saved -> current` lines for keys that differ, split by `may_change`
    (the RL trainer's MAY_CHANGE unless given).
    A key present on one side only counts as a difference (None on the other), except a key the
    checkpoint predates: absent from `saved` and at its value in `defaults`, it changes nothing."""
    old, new, base = _flatten(saved), _flatten(current), _flatten(defaults or {})
    refused, applied = [], []
    for key in sorted(old.keys() | new.keys()):
        before, after = old.get(key), new.get(key)
        if key not in old and key in base and after == base[key]:
            continue
        if before != after:
            (applied if _may_change(key, may_change) else refused).append(f"{key}: {before!r} -> {after!r}")
    return refused, applied


def save_config(directory: Path, config: PolicyIterationConfig) -> None:
    (directory / CONFIG_FILE).write_text(json.dumps(config.to_dict(), indent=2, default=str))


def prepare_resume(config: PolicyIterationConfig) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from (None: start fresh) and the lines to print about it. Raises
    checkpoint.ResumeError when the directory or the config change cannot be resumed as asked."""
    tr = config.trainer
    path, notes = checkpoint.find_resume(
        tr.default_local_dir, tr.resume_mode, tr.resume_from_path, tr.overwrite, config.uses_critic
    )
    if path is None or not (path / CONFIG_FILE).is_file():
        return path, notes
    saved = json.loads((path / CONFIG_FILE).read_text())
    current = json.loads(json.dumps(config.to_dict(), default=str))
    defaults = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "policy_iteration.yaml"))
    refused, applied = config_differences(saved, current, defaults)
    if refused:
        raise checkpoint.ResumeError(
            f"cannot resume {path}: these keys define the run and differ from its saved config:\n  "
            + "\n  ".join(refused)
            + "\nUse the saved values, or start a new run in another trainer.default_local_dir."
        )
    return path, notes + [f"changed on resume: {line}" for line in applied]
