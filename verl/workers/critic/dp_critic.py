"""The critic's forward and update: values of the response tokens, and the clipped value loss over
mini/micro-batches.

The same data-parallel contract as the actor (verl/workers/actor/dp_actor.py): every rank holds its rows
of each mini-batch and an FSDP2 shard of the value model, the loss denominators are the mini-batch's over
all ranks, gradients are summed over ranks, and every rank runs the same number of micro-batches (a rank
short of rows runs zero-weight passes).
"""

from __future__ import annotations

from collections import defaultdict

import torch
import torch.distributed as dist

from verl.config import CriticConfig
from verl.core import core_algos
from verl.core.batch import select_rows, trim_padding_columns
from verl.workers.data_parallel import (
    all_reduce,
    mini_batch_denominators,
    mini_batch_rows,
    optimizer_step,
    row_token_counts,
    sum_gradients_over_ranks,
)
from verl.workers.micro_batching import length_sorted_groups, partition_by_token_budget, split_to_count

# per-token statistics reported as token-weighted means over all ranks
TOKEN_STATS = ("critic/vf_clipfrac", "critic/vpred_mean")


def response_values(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """[B, T] float32 values: response token t's value is the critic's output at the position whose next
    token is t (positions [P-1, P+T-1), as the actor's log-probs), the state before t was sampled."""
    t = batch["responses"].shape[1]
    out = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    ).logits
    return out[:, -t - 1 : -1, 0].float()


def plan_micro_batches(
    batch: dict[str, torch.Tensor], rows_per_micro: int, max_token_len: int | None
) -> list[list[int]]:
    """Row groups, one per forward pass, the same count on every rank (empty groups: zero-weight passes);
    by token budget when `max_token_len` is set, else `rows_per_micro` rows of similar length."""
    tokens = row_token_counts(batch)
    if max_token_len is None:
        groups = length_sorted_groups(tokens, rows_per_micro)
    else:
        groups = partition_by_token_budget(tokens, max_token_len)
    count = torch.tensor([len(groups)], device=batch["responses"].device)
    return split_to_count(tokens, groups, int(all_reduce(count, dist.ReduceOp.MAX)))


class DataParallelPPOCritic:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        config: CriticConfig,
        norm_length: int,
        lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.config = config
        self.norm_length = norm_length  # horizon for seq-mean-token-sum-norm
        sum_gradients_over_ranks(model)

    def _token_budget(self) -> int | None:
        return self.config.ppo_max_token_len_per_gpu if self.config.use_dynamic_bsz else None

    @torch.no_grad()
    def compute_values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """Values of the response tokens, [B, T], rows in batch order (0 past a row's response)."""
        n, t = batch["responses"].shape
        if n == 0:
            raise ValueError("compute_values got no rows: every rank needs at least one")
        self.model.eval()
        out = torch.zeros_like(batch["response_mask"])
        for rows in plan_micro_batches(
            batch, self.config.forward_micro_batch_size_per_gpu, self._token_budget()
        ):
            mb = trim_padding_columns(select_rows(batch, torch.tensor(rows or [0], device=out.device)))
            values = response_values(self.model, mb)
            if rows:
                out[torch.tensor(rows, device=out.device), : values.shape[1]] = values
        return out * batch["response_mask"]

    def update_critic(self, batch: dict[str, torch.Tensor], num_mini_batches: int) -> dict[str, float]:
        """`ppo_epochs` passes of `num_mini_batches` optimizer steps on the clipped value loss toward
        batch["returns"], clipped around batch["values"]. Rows split into mini-batches as the actor's
        (`DataParallelPPOActor.update_policy`). The value loss is a loss per token (its rows are
        regression targets, not trajectories to weigh), so Delethink's `rows_per_trajectory` never
        reaches it: a trace-length mode here divides by the rows."""
        cfg = self.config
        if batch["responses"].shape[0] == 0:
            raise ValueError("update_critic got no rows: every rank needs at least one")
        mini_rows = mini_batch_rows(batch, num_mini_batches)
        device = batch["responses"].device
        denominators_of = mini_batch_denominators(batch, mini_rows, self.norm_length)
        dummy_row = select_rows(batch, slice(0, 1))
        self.model.train()
        step_losses: list[float] = []  # this rank's share of each step's value loss
        counters = dict.fromkeys(("tokens", *TOKEN_STATS), 0.0)  # summed over micro-batches, then ranks
        local: dict[str, list[float]] = defaultdict(list)  # identical on every rank
        for _ in range(cfg.ppo_epochs):
            for rows, denominators in zip(mini_rows, denominators_of, strict=True):
                mini = select_rows(batch, rows)
                self.optimizer.zero_grad(set_to_none=True)
                step_loss = 0.0
                for group in plan_micro_batches(mini, cfg.ppo_micro_batch_size_per_gpu, self._token_budget()):
                    weight = 1.0 if group else 0.0
                    mb = select_rows(mini, torch.tensor(group, device=device)) if group else dummy_row
                    step_loss += self._backward_micro_batch(
                        trim_padding_columns(mb), denominators, weight, counters
                    )
                step_losses.append(step_loss)
                local["critic/lr"].append(self.optimizer.param_groups[0]["lr"])
                local["critic/grad_norm"].append(
                    optimizer_step(self.model, self.optimizer, self.lr_scheduler, cfg.grad_clip)
                )
        return self._reduce_metrics(step_losses, counters, local, device)

    def _backward_micro_batch(self, mb, denominators, scale, counters) -> float:
        """Backward one micro-batch's value loss times `scale` (0: a zero-weight pass); returns its
        share of the step's loss and adds token-weighted statistics to `counters`."""
        mask = mb["response_mask"]
        vpreds = response_values(self.model, mb)
        out = core_algos.compute_value_loss(
            vpreds, mb["values"], mb["returns"], mask, self.config.cliprange_value
        )
        loss = core_algos.agg_loss(
            out.loss_mat, mask, self.config.loss_agg_mode, trace_lengths=mb["trace_lengths"], **denominators
        ) * scale  # fmt: skip
        loss.backward()
        if scale == 0:
            return 0.0
        tokens = float(mask.sum())
        counters["tokens"] += tokens
        counters["critic/vf_clipfrac"] += float(out.clipfrac) * tokens
        counters["critic/vpred_mean"] += float(core_algos.masked_mean(vpreds.detach(), mask)) * tokens
        return loss.item()

    @staticmethod
    def _reduce_metrics(step_losses, counters, local, device) -> dict[str, float]:
        """The value loss summed over ranks and averaged over steps; per-token statistics as
        token-weighted means over all ranks."""
        names = list(counters)
        summed = all_reduce(
            torch.tensor(step_losses + [counters[k] for k in names], dtype=torch.float64, device=device)
        ).tolist()
        totals = dict(zip(names, summed[len(step_losses) :], strict=True))
        tokens = max(totals.pop("tokens"), 1.0)
        metrics = {"critic/vf_loss": sum(summed[: len(step_losses)]) / len(step_losses)}
        metrics.update({name: totals[name] / tokens for name in TOKEN_STATS})
        metrics.update({name: sum(v) / len(v) for name, v in local.items()})
        return metrics
