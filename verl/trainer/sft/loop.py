"""SFT's optimizer loop: AdamW with a warm-up + cosine schedule, stopped early once a held-out accuracy
check reaches its target (train.stop_at_accuracy). verl/trainer/sft/run.py drives it."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from tqdm import tqdm
from transformers import PreTrainedModel

from verl.config.sft import TrainConfig
from verl.models import lora
from verl.trainer.sft.batches import Batch, backward_mean_loss
from verl.trainer.sft.parallel import SINGLE, Ranks

# the held-out T = 1 accuracy of an early-stopping check, in the step's metrics and in sft_metrics.json:
# LongCoT inference's, Delethink inference's (eval.delethink_chunks), and the lower, which decides
CHECK_METRIC = "check/accuracy_t1"
CHECK_MODES = {"longcot": "check/accuracy_t1_longcot", "delethink": "check/accuracy_t1_delethink"}


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to `min_ratio` at the last step."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(
    model: PreTrainedModel, cfg: TrainConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters (a LoRA model's adapters) and its warm-up + cosine schedule
    over `cfg.steps` steps."""
    optimizer = torch.optim.AdamW(lora.trainable_parameters(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    )
    return optimizer, schedule


def train(
    model: PreTrainedModel,
    next_batch: Callable[[], list[Batch | None]],
    cfg: TrainConfig,
    check: Callable[[], dict[str, float]] | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    schedule: torch.optim.lr_scheduler.LambdaLR | None = None,
    after_step: Callable[[int, dict[str, float]], None] | None = None,
    ranks: Ranks = SINGLE,
) -> list[float]:
    """AdamW on batches (lists of micro-batches) from `next_batch` up to step `cfg.steps`, or until
    `check()[CHECK_METRIC]` (called every `cfg.check_every` steps) reaches `cfg.stop_at_accuracy`. A given
    `optimizer` and `schedule` (make_optimizer) continue from the steps the schedule has taken (a
    resumed run). `after_step(step, metrics)` follows every step (logging, validation, checkpoints).
    Returns the loss of every step taken here."""
    if optimizer is None or schedule is None:
        optimizer, schedule = make_optimizer(model, cfg)
    start = schedule.last_epoch
    model.train()
    losses = []
    progress = tqdm(
        range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc="sft", unit="step",
        disable=not ranks.main,
    )  # fmt: skip
    for step in progress:
        optimizer.zero_grad(set_to_none=True)
        losses.append(backward_mean_loss(model, next_batch(), ranks))
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        lr = schedule.get_last_lr()[0]  # this step's
        optimizer.step()
        schedule.step()
        progress.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{schedule.get_last_lr()[0]:.2e}")
        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        metrics = {"train/loss": losses[-1], "train/lr": lr, "train/grad_norm": float(norm)}
        stop = False
        # before after_step: a checkpoint then holds the RNG state after the check's sampling
        if check is not None and cfg.stop_at_accuracy is not None and step % cfg.check_every == 0:
            model.eval()
            checked = check()
            model.train()
            metrics.update(checked)
            modes = ", ".join(
                f"{mode} {checked[key]:.3f}" for mode, key in CHECK_MODES.items() if key in checked
            )
            progress.write(f"step {step}: held-out accuracy (T=1) {checked[CHECK_METRIC]:.3f} ({modes})")
            stop = metrics[CHECK_METRIC] >= cfg.stop_at_accuracy
        if after_step is not None:
            after_step(step, metrics)
            model.train()
        if stop:
            progress.write(f"reached train.stop_at_accuracy={cfg.stop_at_accuracy}: stopping")
            break
    progress.close()
    model.eval()
    return losses
