"""SFT checkpoints in the RL trainer's layout (verl/utils/checkpoint.py), so the same resume rules apply.

  global_step_N/actor/huggingface/  model + tokenizer (`AutoModelForCausalLM.from_pretrained` loads it;
                                    with LoRA the merged model)
  global_step_N/actor/lora_adapter/ with LoRA: the adapters in peft's format (`PeftModel.from_pretrained`)
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
from typing import Any, Protocol

import numpy as np
import torch
from omegaconf import OmegaConf
from torch.distributed.fsdp import FSDPModule
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerBase

from verl.models import lora
from verl.models.lora_keys import LoRAKeys
from verl.trainer.resume import config_differences
from verl.trainer.sft.parallel import Ranks, full_state, load_optimizer_state
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


class ModelKeys(LoRAKeys, Protocol):
    """SFT's `model` section: the path it starts from and its LoRA keys."""

    path: str


def save_pretrained(
    out: Path,
    adapter_dir: Path,
    model: PreTrainedModel,
    model_cfg: ModelKeys,
    weights: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
) -> None:
    """HF files from full `weights` (a LoRA model merged, its adapters in `adapter_dir`); a sharded or
    wrapped model writes through an unsharded model of its config."""

    def writer() -> PreTrainedModel:
        plain = not isinstance(model, FSDPModule) and not model_cfg.lora_rank
        return model if plain else AutoModelForCausalLM.from_config(model.config)

    lora.save_model(out, adapter_dir, model, weights, model_cfg, lora.CAUSAL_LM, writer)
    tokenizer.save_pretrained(out)


def save(
    root: Path,
    step: int,
    model: PreTrainedModel,
    model_cfg: ModelKeys,
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
    save_pretrained(
        tmp / "actor" / "huggingface", tmp / "actor" / lora.ADAPTER_DIR, model, model_cfg, weights, tokenizer
    )
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
    model_cfg: ModelKeys,
    optimizer: torch.optim.Optimizer,
    schedule: torch.optim.lr_scheduler.LRScheduler,
) -> dict[str, Any]:
    """Weights, optimizer, scheduler and RNG from `path` into this rank; returns trainer_state.json."""

    def load_model(model_path: str) -> PreTrainedModel:
        return AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)

    actor = path / "actor"
    lora.load_model(
        model, actor / "huggingface", actor / lora.ADAPTER_DIR, model_cfg, model_cfg.path, load_model
    )
    state = torch.load(actor / "state.pt", weights_only=False)
    load_optimizer_state(model, optimizer, state["optimizer"])
    schedule.load_state_dict(state["lr_scheduler"])
    torch.set_rng_state(state["rng"]["torch"])
    np.random.set_state(state["rng"]["numpy"])
    random.setstate(state["rng"]["python"])
    return json.loads((path / "trainer_state.json").read_text())
