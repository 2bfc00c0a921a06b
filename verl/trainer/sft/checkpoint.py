"""SFT checkpoints in the RL trainer's layout (verl/utils/checkpoint.py), so the same resume rules apply.

  global_step_N/actor/huggingface/  model + tokenizer (`AutoModelForCausalLM.from_pretrained` loads it)
  global_step_N/actor/state.pt      optimizer, LR scheduler, torch / numpy / python RNG
  global_step_N/trainer_state.json  step, every step's loss, and the data source's position
  global_step_N/sft_config.yaml     the run's resolved config
Written to a hidden directory and renamed into place, then `latest_checkpointed_iteration.txt` moves.
A resume must continue the same run: keys that define it must match the saved config.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import numpy as np
import torch
from omegaconf import OmegaConf
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from verl.trainer.resume import config_differences
from verl.trainer.sft.parallel import Ranks, full_state, load_full_state
from verl.utils import checkpoint
from verl.utils.fs import atomic_write_text

CONFIG_FILE = "sft_config.yaml"
# dotted keys (or prefixes ending in ".") a resumed run may change: where it writes, how it is logged and
# validated, and how a step is cut into forwards (memory and speed only, not the step)
MAY_CHANGE = (
    "output_dir", "force", "num_threads", "trainer.", "data.val_files", "train.micro_batches",
    "train.max_tokens_per_micro_batch", "train.use_remove_padding", "train.check_every", "eval.", "fsdp.",
)  # fmt: skip


def check_same_run(path: Path, config: dict[str, Any]) -> list[str]:
    """`changed on resume:` notes for the keys that may change; a ResumeError naming the others."""
    saved = OmegaConf.to_container(OmegaConf.load(path / CONFIG_FILE))
    refused, applied = config_differences(saved, config, may_change=MAY_CHANGE)
    if refused:
        raise checkpoint.ResumeError(
            f"cannot resume {path}: these keys define the run and differ from its saved config:\n  "
            + "\n  ".join(refused)
            + "\nUse the saved values, or start a new run in another trainer.default_local_dir."
        )
    return [f"changed on resume: {line}" for line in applied]


def save_pretrained(
    out: Path, model: PreTrainedModel, weights: dict[str, torch.Tensor], tokenizer: PreTrainedTokenizerBase
) -> None:
    """HF files from full `weights`; a sharded model writes through an unsharded copy of its config."""
    writer = AutoModelForCausalLM.from_config(model.config) if isinstance(model, FSDPModule) else model
    writer.save_pretrained(out, state_dict=weights)
    tokenizer.save_pretrained(out)


def save(
    root: Path,
    step: int,
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
    trainer_state: dict[str, Any],
    config_yaml: str,
    ranks: Ranks,
) -> Path | None:
    """Every rank gathers (a collective); the main rank writes and returns the committed directory."""
    weights, optim_state = full_state(model, optimizer)
    if not ranks.main:
        return None
    tmp = checkpoint.temp_step_dir(root, step)
    save_pretrained(tmp / "actor" / "huggingface", model, weights, tokenizer)
    rng = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    torch.save(
        {"optimizer": optim_state, "lr_scheduler": schedule.state_dict(), "rng": rng},
        tmp / "actor" / "state.pt",
    )
    atomic_write_text(tmp / "trainer_state.json", json.dumps({"global_step": step, **trainer_state}))
    atomic_write_text(tmp / CONFIG_FILE, config_yaml)
    return checkpoint.commit_step_dir(root, step, tmp)


def load(
    path: Path,
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Weights, optimizer, scheduler and RNG from `path` into this rank; returns trainer_state.json."""
    weights = AutoModelForCausalLM.from_pretrained(path / "actor" / "huggingface", dtype=torch.float32)
    state = torch.load(path / "actor" / "state.pt", weights_only=False)
    load_full_state(model, optimizer, weights.state_dict(), state["optimizer"])
    schedule.load_state_dict(state["lr_scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return json.loads((path / "trainer_state.json").read_text())
