"""The disk a run's checkpoints take: the lines `DRY_RUN=1` prints (and a run prints at start-up), the
refusal of a run whose first checkpoint cannot fit in the free space of trainer.default_local_dir, and
the warning for one whose retained checkpoints may not.

One checkpoint, in bytes (the worker saves float32; Ψ parameters as in verl/tools/memory_estimate.py,
Ψ_a LoRA adapter parameters, Ψ_t the trained ones: Ψ_a with LoRA, else Ψ):
  actor/huggingface/   4Ψ: the HF weights (a LoRA run's merged), plus the model directory's other files
                       (tokenizer, configs: what save_pretrained writes again) when it is a local one
  actor/lora_adapter/  4Ψ_a
  actor/state.pt       8Ψ_t: AdamW's two moments of the trained parameters
  critic/              algorithm.adv_estimator=gae: the same for the value model, whose Ψ is the model's
                       without its LM head plus the one-output head (h + 1), and no tokenizer
Biases and norms (under 0.1% of a 1.5B model, in Ψ's definition), the JSON files a checkpoint adds (a
few KiB) and the scheduler's and RNG's state are not counted.

How many checkpoints a run holds at once follows from trainer.save_freq, total_training_steps and the
retention keys (verl/utils/checkpoint.py): the steps that save are played through the same
`steps_to_delete` the run applies after each save, counting the one being written. Checkpoints already
in the directory are not counted: the free space excludes them, and retention only deletes them.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from verl.config import PolicyIterationConfig
from verl.models.model_dir import WEIGHT_FILES
from verl.tools.memory_check import lookup_model_shape
from verl.tools.memory_estimate import MASTER_BYTES, ModelShape
from verl.utils.checkpoint import steps_to_delete

ADAM_MOMENT_BYTES = 2 * MASTER_BYTES  # exp_avg and exp_avg_sq, float32


@dataclass(frozen=True)
class ModelFiles:
    """Bytes one model's part of a checkpoint takes."""

    weights: int  # huggingface/ weights, and the LoRA adapters
    optimizer: int  # state.pt: AdamW's moments
    other: int  # tokenizer and configs

    @property
    def total(self) -> int:
        return self.weights + self.optimizer + self.other


def model_files(num_params: int, adapter_params: int, other: int) -> ModelFiles:
    trained = adapter_params or num_params
    return ModelFiles(MASTER_BYTES * (num_params + adapter_params), ADAM_MOMENT_BYTES * trained, other)


def value_model_params(shape: ModelShape) -> int:
    """Ψ of the critic built on `shape`'s model: its LM head goes (a tied one stays as the embedding),
    a one-output head with its bias comes."""
    head = 0 if shape.tied_embeddings else shape.embedding_params
    return shape.num_params - head + shape.dims.hidden_size + 1


def other_files_bytes(model_path: str) -> int:
    """The sizes of a local model directory's files other than weights (0 for a hub id)."""
    path = Path(model_path)
    if not path.is_dir():
        return 0
    weights = set(WEIGHT_FILES)
    return sum(
        f.stat().st_size
        for f in path.iterdir()
        if f.is_file() and f.name not in weights and f.suffix not in (".safetensors", ".bin")
    )


@dataclass(frozen=True)
class CheckpointSize:
    actor: ModelFiles
    critic: ModelFiles | None  # None: the run has no critic

    @property
    def total(self) -> int:
        return self.actor.total + (self.critic.total if self.critic else 0)


def checkpoint_size(config: PolicyIterationConfig) -> tuple[CheckpointSize | None, str]:
    """(size, where the model shapes come from), or (None, why there is no estimate)."""
    model = config.actor_rollout_ref.model
    shape, source = lookup_model_shape(model.path)
    if shape is None:
        return None, source
    try:
        actor = model_files(
            shape.num_params, shape.adapter_params(model.lora_rank, model.target_modules),
            other_files_bytes(model.path),
        )  # fmt: skip
        critic = None
        if config.uses_critic:
            critic_shape, critic_source = lookup_model_shape(config.critic_model_path)
            if critic_shape is None:
                return None, f"the critic's {critic_source}"
            keys = config.critic.model
            adapters = critic_shape.adapter_params(keys.lora_rank, keys.target_modules)
            critic = model_files(value_model_params(critic_shape), adapters, 0)
    except KeyError as unknown:
        return None, f"no size for the LoRA target module {unknown}"
    return CheckpointSize(actor, critic), source


def save_steps(config: PolicyIterationConfig, start_step: int = 0) -> list[int]:
    """The steps after `start_step` that write a checkpoint: multiples of save_freq, and the last."""
    tr = config.trainer
    last = tr.total_training_steps
    return [
        s
        for s in range(start_step + 1, last + 1)
        if s == last or (tr.save_freq > 0 and s % tr.save_freq == 0)
    ]


def most_held(
    steps: list[int],
    size: CheckpointSize,
    keep_actor: int | None,
    keep_critic: int | None,
    keep_every: int | None,
) -> tuple[int, int]:
    """(bytes, checkpoints) of the most of this run's checkpoints on disk at once: each save writes one
    while the ones kept after the save before it are there, and the retention runs after it."""
    critic_bytes = size.critic.total if size.critic else 0
    held: set[int] = set()
    with_critic: set[int] = set()
    peak = (0, 0)
    for step in steps:
        held.add(step)
        with_critic.add(step)
        on_disk = len(held) * size.actor.total + len(with_critic) * critic_bytes
        peak = max(peak, (on_disk, len(held)))
        held -= set(steps_to_delete(held, keep_actor, keep_every, {step}))
        with_critic &= held
        with_critic -= set(steps_to_delete(with_critic, keep_critic, keep_every, {step}))
    return peak


def free_bytes(directory: str) -> tuple[int, Path]:
    """Free bytes on the disk of `directory`, or of its nearest existing parent when it does not exist yet."""
    path = Path(directory).absolute()
    while not path.exists():
        path = path.parent
    return shutil.disk_usage(path).free, path


def size_text(num_bytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(num_bytes) < 1024:
            return f"{num_bytes:.0f} {unit}" if unit == "B" else f"{num_bytes:.2f} {unit}"
        num_bytes /= 1024
    return f"{num_bytes:.2f} TiB"


@dataclass(frozen=True)
class DiskPlan:
    text: str  # lines to print
    refusal: str | None  # why the run must not start
    warning: str | None  # why it may fill the disk


def describe_disk(config: PolicyIterationConfig, start_step: int = 0) -> DiskPlan:
    """The checkpoints' disk plan of a run starting after `start_step`."""
    tr = config.trainer
    size, source = checkpoint_size(config)
    if size is None:
        return DiskPlan(f"checkpoint size: not estimated: {source}", None, None)
    a = size.actor
    parts = f"weights {size_text(a.weights)}, AdamW moments {size_text(a.optimizer)}"
    if a.other:
        parts += f", tokenizer and configs {size_text(a.other)}"
    if size.critic:
        parts += f"; critic {size_text(size.critic.total)}"
    lines = [f"checkpoint size   {size_text(size.total)} each ({parts}; model: {source})"]
    steps = save_steps(config, start_step)
    retention = (tr.max_actor_ckpt_to_keep, tr.max_critic_ckpt_to_keep, tr.keep_ckpt_every_n_steps)
    peak_bytes, peak_count = most_held(steps, size, *retention)
    keys = (
        f"trainer.save_freq={tr.save_freq}, trainer.max_actor_ckpt_to_keep={tr.max_actor_ckpt_to_keep}, "
        f"trainer.keep_ckpt_every_n_steps={tr.keep_ckpt_every_n_steps}"
    )
    lines.append(
        f"checkpoints       {len(steps)} save(s) after step {start_step}; at most {peak_count} on disk at "
        f"once, {size_text(peak_bytes)} ({keys})"
    )
    free, where = free_bytes(tr.default_local_dir)
    refusal = warning = None
    if size.total > free:
        verdict = "the first checkpoint does NOT fit"
        refusal = (
            f"trainer.default_local_dir={tr.default_local_dir!r} has {free:,} bytes free (at {where}) and "
            f"one checkpoint needs {size.total:,}: free space there or set trainer.default_local_dir to a "
            "larger disk (actor_rollout_ref.model.lora_rank > 0 also shrinks the optimizer state)"
        )
    elif peak_bytes > free:
        verdict = "the first checkpoint fits, the retained ones may NOT"
        warning = (
            f"the run may hold {peak_count} checkpoints ({peak_bytes:,} bytes) at once in "
            f"trainer.default_local_dir={tr.default_local_dir!r}, which has {free:,} bytes free; "
            f"{_keep_that_fits(steps, size, free, tr.max_critic_ckpt_to_keep, tr.keep_ckpt_every_n_steps)}"
        )
    else:
        verdict = "fits"
    lines.append(f"disk              {size_text(free)} free at {where}: {verdict}")
    return DiskPlan("\n".join(lines), refusal, warning)


def _keep_that_fits(
    steps: list[int], size: CheckpointSize, free: int, keep_critic: int | None, keep_every: int | None
) -> str:
    """The advice of the warning: the largest trainer.max_actor_ckpt_to_keep whose checkpoints fit."""
    fitting = [
        k for k in range(1, len(steps) + 1) if most_held(steps, size, k, keep_critic, keep_every)[0] <= free
    ]
    if not fitting:
        kept_for_good = " and those trainer.keep_ckpt_every_n_steps keeps" if keep_every else ""
        return (
            f"not even trainer.max_actor_ckpt_to_keep=1 fits (one kept while the next is written"
            f"{kept_for_good}): free space there"
        )
    return f"set trainer.max_actor_ckpt_to_keep to at most {max(fitting)}, or free space there"
