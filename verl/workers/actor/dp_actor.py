"""The policy's forward and update: log-probs of sampled tokens, and PPO over mini/micro-batches.

Batches are dicts of tensors laid out by `verl.trainer.ppo.batch.collate_rows`. A mini-batch is one
optimizer step; it is processed in micro-batches whose losses use the mini-batch's row and token
counts as denominators, so gradient accumulation gives exactly the mini-batch gradient.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from verl.trainer.config_schema import ActorConfig
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.batch import select_rows, trim_padding_columns


def response_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits predicting each response token: positions [P-1, P+T-1) of the sequence."""
    t = batch["responses"].shape[1]
    logits = model(
        input_ids=batch["input_ids"],
        attention_mask=batch["attention_mask"],
        position_ids=batch["position_ids"],
        use_cache=False,
    ).logits
    return logits[:, -t - 1 : -1].float()


def micro_batches(batch: dict[str, torch.Tensor], rows_per_micro: int):
    n = batch["responses"].shape[0]
    for start in range(0, n, rows_per_micro):
        yield trim_padding_columns(select_rows(batch, slice(start, start + rows_per_micro)))


class DataParallelPPOActor:
    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer | None,
        config: ActorConfig,
        temperature: float,
        norm_length: int,
        lr_scheduler: torch.optim.lr_scheduler.LRScheduler | None = None,
    ) -> None:
        self.model = model
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.config = config
        # log-probs of the sampling distribution: rollout engines sample from softmax(logits / T)
        self.temperature = temperature if temperature > 0 else 1.0
        self.norm_length = norm_length  # horizon for seq-mean-token-sum-norm

    @torch.no_grad()
    def compute_log_prob(self, batch: dict[str, torch.Tensor], rows_per_micro: int) -> torch.Tensor:
        self.model.eval()
        t = batch["responses"].shape[1]
        out = torch.zeros_like(batch["response_mask"])
        start = 0
        for mb in micro_batches(batch, rows_per_micro):
            lp = core_algos.log_probs_from_logits(
                response_logits(self.model, mb), mb["responses"], self.temperature
            )
            out[start : start + lp.shape[0], : lp.shape[1]] = lp
            start += lp.shape[0]
        return out[:, :t]

    def update_policy(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int, correction_ratio: float = 1.0
    ) -> dict[str, float]:
        """PPO epochs over `num_mini_batches` optimizer steps. `correction_ratio` rescales the
        per-row mean (Delethink's flat batch: rows / trajectories)."""
        cfg = self.config
        n = batch["responses"].shape[0]
        if n % num_mini_batches:
            raise ValueError(f"{n} rows do not split into {num_mini_batches} mini-batches")
        rows_per_mini = n // num_mini_batches
        self.model.train()
        metrics: dict[str, list[float]] = defaultdict(list)
        for _ in range(cfg.ppo_epochs):
            for m in range(num_mini_batches):
                mini = select_rows(batch, slice(m * rows_per_mini, (m + 1) * rows_per_mini))
                denominators = dict(
                    global_num_rows=float(rows_per_mini),
                    global_num_tokens=float(mini["response_mask"].sum().clamp(min=1)),
                    norm_length=float(self.norm_length),
                )
                self.optimizer.zero_grad(set_to_none=True)
                # micro-batch losses add up to the mini-batch loss
                mini_losses: dict[str, float] = defaultdict(float)
                for mb in micro_batches(mini, cfg.ppo_micro_batch_size_per_gpu):
                    for name, value in self._backward_micro_batch(
                        mb, denominators, correction_ratio, metrics
                    ).items():
                        mini_losses[name] += value
                for name, value in mini_losses.items():
                    metrics[name].append(value)
                grad_norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), cfg.grad_clip)
                grad_norm = float(grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm)
                if torch.isfinite(torch.tensor(grad_norm)):
                    self.optimizer.step()
                metrics["actor/grad_norm"].append(grad_norm)
                metrics["actor/lr"].append(self.optimizer.param_groups[0]["lr"])
                if self.lr_scheduler is not None:
                    self.lr_scheduler.step()
        return {k: float(sum(v) / len(v)) for k, v in metrics.items()}

    def _backward_micro_batch(self, mb, denominators, correction_ratio, metrics) -> dict[str, float]:
        """Backward one micro-batch; returns its shares of the mini-batch losses. Per-token statistics
        (clip fractions, KL, entropy) go straight into `metrics`."""
        cfg = self.config
        mask = mb["response_mask"]
        logits = response_logits(self.model, mb)
        log_prob = core_algos.log_probs_from_logits(logits, mb["responses"], self.temperature)
        pl = core_algos.compute_policy_loss(
            mb["old_log_probs"], log_prob, mb["advantages"], mask,
            clip_ratio_low=cfg.clip_ratio_low, clip_ratio_high=cfg.clip_ratio_high,
            clip_ratio_c=cfg.clip_ratio_c, rollout_log_prob=mb["rollout_log_probs"],
            tis_imp_ratio_cap=cfg.tis_imp_ratio_cap,
        )  # fmt: skip

        def agg(loss_mat: torch.Tensor) -> torch.Tensor:
            return (
                core_algos.agg_loss(
                    loss_mat, mask, cfg.loss_agg_mode, trace_lengths=mb["trace_lengths"], **denominators
                )
                * correction_ratio
            )

        pg_loss = agg(pl.loss_mat)
        loss = pg_loss
        losses = {"actor/pg_loss": pg_loss.item()}
        with torch.set_grad_enabled(bool(cfg.entropy_coeff)):
            entropy = core_algos.entropy_from_logits(logits / self.temperature)
        if cfg.entropy_coeff:
            loss = loss - cfg.entropy_coeff * agg(entropy)
        if cfg.use_kl_loss:
            kl_loss = agg(core_algos.kl_penalty(log_prob, mb["ref_log_prob"], cfg.kl_loss_type))
            loss = loss + cfg.kl_loss_coef * kl_loss
            losses["actor/kl_loss"] = kl_loss.item()
        loss.backward()
        for name, value in (
            ("actor/pg_clipfrac", pl.clipfrac),
            ("actor/pg_clipfrac_lower", pl.clipfrac_lower),
            ("actor/ppo_kl", pl.approx_kl),
            ("actor/tis_weight_mean", pl.tis_weight_mean),
            ("actor/entropy", core_algos.masked_mean(entropy.detach(), mask)),
        ):
            metrics[name].append(float(value))
        return losses
