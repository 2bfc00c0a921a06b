"""The policy's forward and update: log-probs of sampled tokens, and PPO over mini/micro-batches.

Batches are dicts of tensors laid out by `verl.core.batch.collate_rows`. A mini-batch is one
optimizer step; it is processed in micro-batches whose losses use the mini-batch's row and token
counts as denominators, so gradient accumulation gives exactly the mini-batch gradient.

Data parallel: with torch.distributed initialised every rank holds its own rows of each mini-batch
(see `update_policy`) and an FSDP2 shard of the model. The denominators are summed over ranks, each
rank's loss is its share of the global mini-batch loss, and FSDP sums the gradients, so N ranks take
the same step as one process with all the rows. FSDP2 all-gathers parameters in every forward, so
every rank runs the same number of micro-batches: the count is agreed on (max over ranks), a rank's
rows are split into exactly that many, and a rank with fewer rows than that runs zero-weight passes
(its first row forward and backward with the loss times 0: the collectives match, the gradient and the
metrics are unchanged).
"""

from __future__ import annotations

import warnings
from collections import defaultdict

import torch
import torch.distributed as dist

from verl.config import ActorConfig
from verl.core import core_algos, log_softmax
from verl.core.batch import select_rows, trim_padding_columns
from verl.workers.actor.packing import packed_response_logits
from verl.workers.actor.shared_prefix import (
    SHARED_PREFIX_ATTENTION,
    plan_shared_prefixes,
    prompt_ids,
    shared_prefix_response_logits,
)
from verl.workers.data_parallel import (
    all_reduce,
    mini_batch_denominators,
    mini_batch_rows,
    optimizer_step,
    row_token_counts,
    sum_gradients_over_ranks,
)
from verl.workers.micro_batching import (
    length_sorted_groups,
    partition_by_token_budget,
    prompt_sorted_groups,
    split_to_count,
)

# per-token statistics reported as token-weighted means over all ranks
TOKEN_STATS = (
    "actor/pg_clipfrac",
    "actor/pg_clipfrac_lower",
    "actor/ppo_kl",
    "actor/tis_weight_mean",
    "actor/entropy",
)


def response_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits predicting each response token: positions [P-1, P+T-1) of the sequence, [B, T, V] in the
    model's dtype. The LM head runs on those positions only (`logits_to_keep`): the prompts' logits
    are never made, and the result is contiguous, so the log-prob code takes it without a copy."""
    t = batch["responses"].shape[1]
    length = batch["input_ids"].shape[1]
    return model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
        logits_to_keep=torch.arange(length - t - 1, length - 1, device=batch["input_ids"].device),
    ).logits


class DataParallelPPOActor:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        config: ActorConfig,
        temperature: float,
        norm_length: int,
        lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
        use_remove_padding: bool = False,
        share_prompt_prefix: bool = False,
    ) -> None:
        if use_remove_padding and share_prompt_prefix:
            raise ValueError("use_remove_padding and share_prompt_prefix are two forward layouts; choose one")
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.config = config
        # log-probs of the sampling distribution: rollout engines sample from softmax(logits / T)
        self.temperature = temperature if temperature > 0 else 1.0
        self.norm_length = norm_length  # horizon for seq-mean-token-sum-norm
        self.use_remove_padding = use_remove_padding
        self.share_prompt_prefix = share_prompt_prefix
        if share_prompt_prefix:  # sdpa, plus the packed shared-prefix layout when a forward carries it
            model.set_attn_implementation(SHARED_PREFIX_ATTENTION)
        self._warned_overlong = False
        sum_gradients_over_ranks(model)

    def _logits(self, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, int]:
        """Logits predicting the response tokens, and how many real tokens went through the model."""
        tokens = int(batch["attention_mask"].sum())
        if self.use_remove_padding:
            return packed_response_logits(self.model, batch), tokens
        if self.share_prompt_prefix:
            plan = plan_shared_prefixes(prompt_ids(batch))
            return shared_prefix_response_logits(self.model, batch, plan), plan.tokens_computed(tokens)
        return response_logits(self.model, batch), tokens

    def _plan_micro_batches(
        self, batch: dict[str, torch.Tensor], rows_per_micro: int, max_token_len: int | None, budget_key: str
    ) -> list[list[int]]:
        """Row groups of `batch`, one per forward pass, the same count on every rank (empty groups are
        zero-weight passes). With use_dynamic_bsz a group's real tokens stay within `max_token_len`
        (`budget_key` names the config key in errors); otherwise a group holds at most `rows_per_micro`
        rows of similar length (each micro-batch pads to its own longest row). With share_prompt_prefix
        the rows are taken in order of their prompts instead, so that shared prefixes meet."""
        tokens = row_token_counts(batch)
        prompts = prompt_ids(batch) if self.share_prompt_prefix else None
        if self.config.use_dynamic_bsz:
            if max_token_len is None:
                raise ValueError(f"actor.use_dynamic_bsz needs a token budget: set {budget_key}")
            overlong = [i for i, c in enumerate(tokens) if c > max_token_len]
            if overlong and not self._warned_overlong:
                self._warned_overlong = True
                warnings.warn(
                    f"{len(overlong)} rows are longer than {budget_key}={max_token_len} tokens (longest "
                    f"{max(tokens)}); each runs as a micro-batch of its own (metric actor/rows_over_budget)",
                    stacklevel=3,
                )
            if prompts is None:
                groups = partition_by_token_budget(tokens, max_token_len)
            else:
                groups = prompt_sorted_groups(prompts, tokens, max_tokens=max_token_len)
        elif prompts is None:
            groups = length_sorted_groups(tokens, rows_per_micro)
        else:
            groups = prompt_sorted_groups(prompts, tokens, max_rows=rows_per_micro)
        count = torch.tensor([len(groups)], device=batch["responses"].device)
        count = int(all_reduce(count, dist.ReduceOp.MAX))
        return split_to_count(tokens, groups, count)

    @torch.no_grad()
    def compute_log_prob(
        self, batch: dict[str, torch.Tensor], rows_per_micro: int, max_token_len: int | None = None
    ) -> torch.Tensor:
        """Log-probs of the response tokens under the current policy, [B, T], rows in batch order.

        `max_token_len` is the micro-batch token budget used with actor.use_dynamic_bsz
        (rollout.log_prob_max_token_len_per_gpu for old log-probs, ref.log_prob_max_token_len_per_gpu
        for the reference)."""
        n, t = batch["responses"].shape
        if n == 0:
            raise ValueError("compute_log_prob got no rows: every rank needs at least one")
        self.model.eval()
        out = torch.zeros_like(batch["response_mask"])
        for rows in self._plan_micro_batches(
            batch, rows_per_micro, max_token_len, "log_prob_max_token_len_per_gpu"
        ):
            # an empty group keeps this rank in step with the others' forwards; its result is unused
            mb = trim_padding_columns(select_rows(batch, torch.tensor(rows or [0], device=out.device)))
            lp = log_softmax.log_probs_from_logits(self._logits(mb)[0], mb["responses"], self.temperature)
            if rows:
                out[torch.tensor(rows, device=out.device), : lp.shape[1]] = lp
        return out[:, :t]

    def update_policy(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int, rows_per_trajectory: float = 1.0
    ) -> dict[str, float]:
        """PPO epochs over `num_mini_batches` optimizer steps. `rows_per_trajectory` is the step's rows
        per trajectory (`verl.core.batch.rows_per_trajectory`): the trajectory-mean loss mode
        (`names.TRAJECTORY_MEAN_MODE`) divides by each mini-batch's rows over it, so Delethink's
        flat batch of chunk rows trains on the mean over trajectories; every other mode ignores it.

        `batch` holds this rank's rows. Without `batch["mini_batch_index"]` (long, one per row) the
        rows split into `num_mini_batches` equal contiguous blocks, block m being the rank's share of
        mini-batch m; with it, row i belongs to mini-batch mini_batch_index[i], and ranks may hold
        different numbers of rows (token-balanced sharding, `micro_batching.balanced_update_shards`).
        """
        cfg = self.config
        if batch["responses"].shape[0] == 0:
            raise ValueError("update_policy got no rows: every rank needs at least one")
        mini_rows = mini_batch_rows(batch, num_mini_batches)
        device = batch["responses"].device
        denominators_of = mini_batch_denominators(
            batch, mini_rows, self.norm_length, rows_per_trajectory, cfg.loss_divisor_rows
        )
        dummy_row = select_rows(batch, slice(0, 1))  # input of zero-weight passes
        self.model.train()
        step_losses: list[dict[str, float]] = []  # this rank's share of each step's loss terms
        # summed over micro-batches, then over ranks; the same keys on every rank for the all-reduce
        counters = dict.fromkeys(
            (
                "tokens",
                *TOKEN_STATS,
                "actor/forward_tokens",
                "actor/zero_weight_micro_batches",
                "actor/rows_over_budget",
            ),
            0.0,
        )
        if cfg.use_dynamic_bsz:
            tokens = row_token_counts(batch)
            counters["actor/rows_over_budget"] = sum(c > cfg.ppo_max_token_len_per_gpu for c in tokens)
        local: dict[str, list[float]] = defaultdict(list)  # identical on every rank
        for _ in range(cfg.ppo_epochs):
            for rows, denominators in zip(mini_rows, denominators_of, strict=True):
                mini = select_rows(batch, rows)
                groups = self._plan_micro_batches(
                    mini, cfg.ppo_micro_batch_size_per_gpu, cfg.ppo_max_token_len_per_gpu,
                    "actor.ppo_max_token_len_per_gpu",
                )  # fmt: skip
                local["actor/micro_batches"].append(len(groups))
                self.optimizer.zero_grad(set_to_none=True)
                losses: dict[str, float] = defaultdict(float)
                for group in groups:
                    weight = 1.0 if group else 0.0
                    mb = select_rows(mini, torch.tensor(group, device=device)) if group else dummy_row
                    counters["actor/zero_weight_micro_batches"] += 1 - weight
                    self._backward_micro_batch(
                        trim_padding_columns(mb), denominators, weight, losses, counters
                    )
                step_losses.append(losses)
                local["actor/lr"].append(self.optimizer.param_groups[0]["lr"])
                local["actor/grad_norm"].append(
                    optimizer_step(self.model, self.optimizer, self.lr_scheduler, cfg.grad_clip)
                )
        return self._reduce_metrics(step_losses, counters, local, device)

    def _backward_micro_batch(self, mb, denominators, scale, losses, counters) -> None:
        """Backward one micro-batch with its loss times `scale` (0 for a zero-weight pass). Adds its
        shares of the step's loss terms to `losses` and token-weighted statistics to `counters`."""
        cfg = self.config
        mask = mb["response_mask"]
        logits, forward_tokens = self._logits(mb)
        # one pass for both; the entropy's gradient is used only with an entropy bonus
        log_prob, entropy = log_softmax.log_probs_and_entropy(logits, mb["responses"], self.temperature)
        pl = core_algos.compute_policy_loss(
            mb["old_log_probs"], log_prob, mb["advantages"], mask,
            clip_ratio_low=cfg.clip_ratio_low, clip_ratio_high=cfg.clip_ratio_high,
            clip_ratio_c=cfg.clip_ratio_c, rollout_log_prob=mb["rollout_log_probs"],
            tis_imp_ratio_cap=cfg.tis_imp_ratio_cap, row_weights=mb.get("rollout_correction_weights"),
        )  # fmt: skip

        def agg(loss_mat: torch.Tensor) -> torch.Tensor:
            return (
                core_algos.agg_loss(
                    loss_mat, mask, cfg.loss_agg_mode, trace_lengths=mb["trace_lengths"], **denominators
                )
                * scale
            )

        pg_loss = agg(pl.loss_mat)
        loss = pg_loss
        losses["actor/pg_loss"] += pg_loss.item()
        if cfg.entropy_coeff:
            loss = loss - cfg.entropy_coeff * agg(entropy)
        if cfg.use_kl_loss:
            kl_loss = agg(core_algos.kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type))
            loss = loss + cfg.kl_loss_coef * kl_loss
            losses["actor/kl_loss"] += kl_loss.item()
        loss.backward()
        if scale == 0:
            return
        tokens = float(mask.sum())
        counters["tokens"] += tokens
        counters["actor/forward_tokens"] += forward_tokens
        entropy_mean = core_algos.masked_mean(entropy.detach(), mask)
        stats = (pl.clipfrac, pl.clipfrac_lower, pl.approx_kl, pl.tis_weight_mean, entropy_mean)
        for name, value in zip(TOKEN_STATS, stats, strict=True):
            counters[name] += float(value) * tokens

    def _reduce_metrics(self, step_losses, counters, local, device) -> dict[str, float]:
        """Loss terms summed over ranks (each rank holds its share) and averaged over steps; per-token
        statistics as token-weighted means over all ranks; counts summed over ranks."""
        loss_names = ["actor/pg_loss"] + (["actor/kl_loss"] if self.config.use_kl_loss else [])
        counter_names = list(counters)
        flat = [losses[name] for losses in step_losses for name in loss_names]
        flat += [counters[name] for name in counter_names]
        summed = all_reduce(torch.tensor(flat, dtype=torch.float64, device=device)).tolist()
        per_step = torch.tensor(summed[: len(flat) - len(counter_names)]).view(len(step_losses), -1)
        metrics = dict(zip(loss_names, per_step.mean(0).tolist(), strict=True))
        totals = dict(zip(counter_names, summed[len(flat) - len(counter_names) :], strict=True))
        tokens = max(totals.pop("tokens"), 1.0)
        metrics.update({name: totals.pop(name) / tokens for name in TOKEN_STATS})
        metrics.update(totals)
        metrics.update({name: sum(v) / len(v) for name, v in local.items()})
        return metrics
