"""What the actor's and the critic's updates share to run data parallel: a rank's rows of each mini-batch,
the mini-batch's loss denominators over all ranks, gradients summed (not averaged) over ranks, and the
optimizer step. With torch.distributed not initialised every collective is the identity, so one process
runs the same code (verl/workers/actor/dp_actor.py's module docstring has the contract).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch.distributed.fsdp import FSDPModule


def row_token_counts(batch: dict[str, torch.Tensor]) -> list[int]:
    """Real tokens (prompt + response, no padding) of each row: what a micro-batch's budget counts."""
    return batch["attention_mask"].sum(-1).tolist()


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def all_reduce(values: torch.Tensor, op=dist.ReduceOp.SUM) -> torch.Tensor:
    """In-place all-reduce over the default group; the identity in a single process."""
    if world_size() > 1:
        dist.all_reduce(values, op=op)
    return values


def sum_gradients_over_ranks(model: torch.nn.Module) -> None:
    """Each rank's loss is already its share of the global mini-batch loss (global denominators), so the
    gradients must be SUMMED over ranks, while FSDP2 averages them by default. The divide factor is set
    to 1 rather than the loss multiplied by the world size: the loss and its metrics stay the true
    values, and the gradient does not depend on how FSDP counts its data-parallel size. Factor 1 alone
    asks for NCCL's PREMUL_SUM, which gloo rejects; forcing sum reductions makes it a plain SUM on both
    gloo and NCCL."""
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)


def mini_batch_rows(batch: dict[str, torch.Tensor], num_mini_batches: int) -> list[torch.Tensor]:
    """This rank's rows of each mini-batch: by `batch["mini_batch_index"]` when the rows carry one
    (token-balanced sharding), else `num_mini_batches` equal contiguous blocks."""
    n = batch["responses"].shape[0]
    if "mini_batch_index" in batch:
        index = batch["mini_batch_index"]
        bad = ((index < 0) | (index >= num_mini_batches)).nonzero().flatten().tolist()
        if bad:
            raise ValueError(f"mini_batch_index of rows {bad} is outside [0, {num_mini_batches})")
        return [(index == m).nonzero().flatten() for m in range(num_mini_batches)]
    if n % num_mini_batches:
        raise ValueError(f"{n} rows do not split into {num_mini_batches} mini-batches")
    return list(torch.arange(n, device=batch["responses"].device).chunk(num_mini_batches))


def mini_batch_denominators(
    batch: dict[str, torch.Tensor],
    mini_rows: list[torch.Tensor],
    norm_length: int,
    rows_per_trajectory: float = 1.0,
    loss_divisor_rows: int | None = None,
) -> list[dict[str, float]]:
    """Each mini-batch's loss denominators over all ranks (its rows and response tokens, in one
    all-reduce), the norm length and its share of the step's trajectories (its rows over the step's
    `rows_per_trajectory`), as `core_algos.agg_loss` takes them. With `loss_divisor_rows` D every count
    is scaled by D / its rows, so the loss is the exact mean x rows / D: the reference implementation
    divides each mini-batch by the rows its config names, not the rows it holds."""
    totals = all_reduce(
        torch.tensor(
            [[len(rows), float(batch["response_mask"][rows].sum())] for rows in mini_rows],
            dtype=torch.float64, device=batch["responses"].device,
        )
    ).tolist()  # fmt: skip
    denominators = []
    for rows, tokens in totals:
        rows = max(rows, 1.0)
        scale = 1.0 if loss_divisor_rows is None else loss_divisor_rows / rows
        denominators.append(
            dict(
                global_num_rows=rows * scale,
                global_num_tokens=max(tokens, 1.0) * scale,
                global_num_trajectories=rows * scale / rows_per_trajectory,
                norm_length=float(norm_length),
            )
        )
    return denominators


def optimizer_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None,
    grad_clip: float,
) -> float:
    """Clip the gradient norm, step unless it is not finite (a bad batch must not wreck the weights),
    advance the schedule; returns the norm before clipping."""
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
    if torch.isfinite(torch.tensor(grad_norm)):
        optimizer.step()
    if lr_scheduler is not None:
        lr_scheduler.step()
    return grad_norm
