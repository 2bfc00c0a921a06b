"""RayPPOTrainer: the single-controller training loop on the Ray driver.

One step: prompts -> rollout.n trajectories each (agent loop in the worker) -> reward on the full
trace -> outcome advantages per group -> training rows -> old (and ref) log-probs -> PPO update ->
new weights in the engine -> metrics, rollout dumps, checkpoint, validation.

The outcome estimators (grpo, rloo) give one advantage per trajectory, from the scores of all the
step's trajectories, before any row exists. The token-level ones (reinforce_plus_plus[_baseline],
remax, gae) give every response token its own advantage; they run after the old (and reference)
log-probs, which the KL-in-reward penalty needs, on the trajectories that train, and `TokenLayout`
carries their [trajectory, token] values onto the rows (a Delethink trajectory's tokens span its chunk
rows). gae also needs the critic's values: computed per row, each chunk in its own context, then laid
out per trajectory, so the last token of chunk k bootstraps from the first value of chunk k+1. The
critic is updated toward the GAE returns before the actor (only the critic for trainer.critic_warmup
steps).

This class trains one row per trajectory (LongCoT). `RayDelethinkTrainer` overrides
`training_rows` to train one row per chunk.
"""

from __future__ import annotations

import json
import shutil
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from tqdm import tqdm

from verl.agent_loop import agent_loop_class
from verl.config import PolicyIterationConfig
from verl.core import core_algos, names, rollout_correction
from verl.core.batch import (
    TokenLayout,
    TrainRow,
    collate_rows,
    pad_rows_to_multiple,
    rows_per_trajectory,
    trajectory_rows,
)
from verl.core.metric_utils import problem_metrics
from verl.core.trajectory import PromptItem, Trajectory
from verl.envs.report import CompletionsLog, completion_records, env_metrics
from verl.single_controller.sharded_group import ShardedWorkerGroup
from verl.trainer.ppo import dynamic_sampling
from verl.trainer.ppo.rollout_records import carry_sizes, chunk_records, trajectory_record
from verl.trainer.ppo.rollout_source import make_rollout_source
from verl.trainer.resume import save_config
from verl.utils import checkpoint
from verl.utils.cleanup import closed_after
from verl.utils.fs import atomic_write_jsonl, atomic_write_text
from verl.utils.reward_score.boxed import extract_final_answer
from verl.utils.seeding import derive_seed
from verl.utils.tracking import Tracking

# remax's greedy rollouts draw nothing, but a seed of their own keeps them off the engine's seed generator,
# which seedless requests draw from
REMAX_SEED_STREAM = 104729


def _stats(prefix: str, values: Sequence[float]) -> dict[str, float]:
    arr = np.asarray(values, dtype=np.float64)
    return {
        f"{prefix}_mean": float(arr.mean()),
        f"{prefix}_max": float(arr.max()),
        f"{prefix}_min": float(arr.min()),
    }


def trajectory_metrics(prefix: str, trajectories: Sequence[Trajectory]) -> dict[str, float]:
    """Thinking length, chunk count, EOS rate and decode cost; the same names for every environment.

    `context_token_steps` sums, over every sampled token, the context it attended to: the quantity
    that grows quadratically with thinking length in LongCoT and linearly in Delethink.
    """
    cost = [
        sum(len(t.prompt_ids) * len(t.response_ids) + len(t.response_ids) * (len(t.response_ids) + 1) // 2
            for t in traj.turns)
        for traj in trajectories
    ]  # fmt: skip
    return {
        **_stats(f"{prefix}/thinking_tokens", [t.thinking_tokens for t in trajectories]),
        **_stats(f"{prefix}/num_turns", [t.num_turns for t in trajectories]),
        f"{prefix}/has_eos_rate": float(np.mean([t.has_eos for t in trajectories])),
        f"{prefix}/context_token_steps": float(np.sum(cost)),
    }


@dataclass(frozen=True)
class TokenAdvantageInputs:
    """What a token-level estimator needs of each trained trajectory, beyond its log-probs."""

    scores: list[float]  # the outcome score, the reward of the trajectory's last token
    group_ids: list[int]  # its prompt's group (reinforce_plus_plus_baseline)
    baseline_scores: list[float] | None  # remax: the score of its prompt's greedy rollout


def token_advantage_metrics(advantages: torch.Tensor, mask: torch.Tensor) -> dict[str, float]:
    """Mean and std over the trained response tokens (a whitening estimator gives 0 and 1)."""
    values = advantages[mask.bool()]
    return {
        "train/token_advantage_mean": float(values.mean()) if values.numel() else 0.0,
        "train/token_advantage_std": float(values.std()) if values.numel() > 1 else 0.0,
    }


def _pick(values: Sequence[Any] | None, index: Sequence[int]) -> list[Any] | None:
    return None if values is None else [values[i] for i in index]


class RayPPOTrainer:
    def __init__(
        self,
        config: PolicyIterationConfig,
        tokenizer,
        train_items: list[PromptItem],
        val_items: list[PromptItem],
        reward_manager,
        workers: ShardedWorkerGroup,
    ) -> None:
        self.config = config
        self.tokenizer = tokenizer
        # the agent loop decides what scores its trajectories (the gym loop adds its envs' rewards)
        self.reward_manager = agent_loop_class(config).scorer(reward_manager)
        self.workers = workers
        self.rollout = make_rollout_source(config, workers, train_items, val_items)
        self.run_dir = Path(config.trainer.default_local_dir)
        self.cumulative: dict[str, float] = defaultdict(float)
        self.completions: CompletionsLog | None = None  # env episodes' completions.jsonl, opened by fit()
        self.val_generations: list[dict[str, Any]] = []  # the latest validation's, for the tracker
        self.resumed_from: Path | None = None  # the checkpoint fit() started from
        kl = config.algorithm.kl_ctrl
        self.kl_ctrl = core_algos.KLController(kl.kl_coef, kl.type, kl.target_kl, kl.horizon)

    # -- the loop ---------------------------------------------------------------------------------
    def fit(self, resume_from: Path | None = None) -> dict[str, float]:
        """Train from step 0, or from the checkpoint `resume_from` (chosen by resume.prepare_resume)."""
        cfg = self.config.trainer
        start_step = self.load_checkpoint(resume_from) if resume_from else 0
        self.resumed_from = resume_from  # retention never deletes it
        tracker = Tracking(
            cfg.logger, self.run_dir, cfg.project_name, cfg.experiment_name, cfg.group,
            self.config.to_dict(), resume_step=start_step if resume_from else None,
        )  # fmt: skip
        self.completions = CompletionsLog(self.run_dir, start_step if resume_from else None)
        last: dict[str, float] = {}
        # after an error it stays the one reported, whatever the closers do
        with closed_after(tracker.finish, self.rollout.shutdown):
            if cfg.val_before_train and start_step == 0:
                last = self.validate(step=0)
                tracker.log(last, step=0)
                tracker.log_generations(self.val_generations, step=0)
            bar = tqdm(
                total=cfg.total_training_steps, initial=start_step, desc=cfg.experiment_name, unit="step"
            )
            for step in range(start_step + 1, cfg.total_training_steps + 1):
                metrics = self.train_step(step)
                is_last = step == cfg.total_training_steps
                validated = cfg.test_freq > 0 and (step % cfg.test_freq == 0 or is_last)
                if validated:
                    metrics.update(self.validate(step))
                # metrics first: a crash after them but before the checkpoint re-runs the step and
                # the resume drops its line; a crash after the checkpoint finds the line written
                tracker.log(metrics, step=step)
                if validated:
                    tracker.log_generations(self.val_generations, step=step)
                if is_last or (cfg.save_freq > 0 and step % cfg.save_freq == 0):
                    self.save_checkpoint(step)
                last = metrics
                bar.update(1)
            bar.close()
        return last

    def train_step(self, step: int) -> dict[str, float]:
        t_start = time.perf_counter()
        cfg = self.config
        timing: dict[str, float] = {}
        items, trajectories, results, sampling_metrics = self.collect_train_batch(step, timing)
        n = cfg.actor_rollout_ref.rollout.n
        estimator = cfg.algorithm.adv_estimator
        group_ids = [j // n for j in range(len(items))]  # groups are adjacent
        scores = torch.tensor([r.score for r in results], dtype=torch.float32)
        trained = list(range(len(trajectories)))
        if cfg.algorithm.filter_overlong_trajectories:
            trained = dynamic_sampling.finished_trajectories([t.has_eos for t in trajectories])
        update_metrics: dict[str, float] = {"train/trained_trajectories": float(len(trained))}
        baseline_scores = None
        if estimator == "remax":
            baseline_scores, baseline_metrics = self.greedy_baseline(step, items, timing)
            update_metrics.update(baseline_metrics)
        if estimator in names.OUTCOME_ESTIMATORS:
            advantages = core_algos.compute_outcome_advantage(
                scores, group_ids, estimator, cfg.algorithm.norm_adv_by_std_in_grpo
            ).tolist()
            trained_inputs: list[float] | TokenAdvantageInputs = _pick(advantages, trained)
        else:
            advantages = [0.0] * len(trajectories)  # logged for the untrained; the trained get theirs below
            trained_inputs = TokenAdvantageInputs(
                _pick(scores.tolist(), trained), _pick(group_ids, trained), _pick(baseline_scores, trained)
            )
        if trained:  # else nothing finished: the step only logs
            metrics, trained_advantages = self.update(
                [trajectories[i] for i in trained], trained_inputs, timing,
                update_actor=step > cfg.trainer.critic_warmup,
            )  # fmt: skip
            update_metrics.update(metrics)
            if estimator not in names.OUTCOME_ESTIMATORS:
                for i, advantage in zip(trained, trained_advantages, strict=True):
                    advantages[i] = advantage

        if cfg.trainer.log_rollouts:
            self.dump_rollouts(step, items, trajectories, results, advantages)
        self.completions.append(
            completion_records(step, items, trajectories, [r.score for r in results], advantages)
        )
        timing["timing/step_s"] = time.perf_counter() - t_start

        traj_metrics = trajectory_metrics("train", trajectories)
        self.cumulative["perf/cum_context_token_steps"] += traj_metrics["train/context_token_steps"]
        self.cumulative["perf/cum_thinking_tokens"] += float(sum(t.thinking_tokens for t in trajectories))
        self.cumulative["perf/cum_time_s"] += timing["timing/step_s"]
        return {
            "train/score_mean": float(scores.mean()),
            "train/advantage_abs_mean": float(np.abs(advantages).mean()),
            **sampling_metrics,
            **traj_metrics,
            **env_metrics("env", trajectories),
            **update_metrics,
            **timing,
            **self.cumulative,
        }

    def update(
        self,
        trajectories: list[Trajectory],
        advantages: list[float] | TokenAdvantageInputs,
        timing: dict[str, float],
        update_actor: bool = True,
    ) -> tuple[dict[str, float], list[float]]:
        """Old (and reference) log-probs and the critic's values, then the critic's and the actor's
        updates, on the trajectories chosen for training. `advantages` is one per trajectory (outcome
        estimators), or what a token-level estimator needs. Returns the metrics and each trajectory's
        mean token advantage."""
        cfg = self.config
        token_level = isinstance(advantages, TokenAdvantageInputs)
        outcome = [0.0] * len(trajectories) if token_level else advantages
        batch, rows_per_trajectory, batch_metrics, layout = self.build_training_batch(trajectories, outcome)
        bypass = cfg.algorithm.rollout_correction.bypass_mode
        t = time.perf_counter()
        # bypass: the engine's log-probs are the old ones, and PPO's ratio is pi / pi_rollout
        batch["old_log_probs"] = (
            batch["rollout_log_probs"] if bypass else self.workers.compute_log_prob(batch)
        )
        if cfg.actor_rollout_ref.actor.use_kl_loss or cfg.algorithm.use_kl_in_reward:
            batch["ref_log_prob"] = self.workers.compute_ref_log_prob(batch)
        timing["timing/old_log_prob_s"] = time.perf_counter() - t
        if cfg.uses_critic:
            t = time.perf_counter()
            batch["values"] = self.workers.compute_values(batch)
            timing["timing/values_s"] = time.perf_counter() - t
        correction_metrics = {} if bypass else self.correct_rollouts(batch, layout)
        advantage_metrics: dict[str, float] = {}
        if token_level:
            targets, advantage_metrics = self.token_advantages(batch, layout, advantages)
            batch.update(targets)
        mask = batch["response_mask"]
        per_trajectory = core_algos.masked_mean(
            layout.to_trajectories(batch["advantages"]), layout.to_trajectories(mask), dim=-1
        )
        t = time.perf_counter()
        update_metrics = self.workers.update(
            batch, cfg.num_mini_batches, rows_per_trajectory, actor=update_actor, critic=cfg.uses_critic
        )
        # the whole update (the critic's included) and, within it, the critic's
        timing["timing/update_s"] = time.perf_counter() - t
        if "timing/update_critic_s" in update_metrics:
            timing["timing/update_critic_s"] = update_metrics.pop("timing/update_critic_s")
        metrics = {
            "train/batch_rows": float(batch["responses"].shape[0]),
            **correction_metrics,
            **token_advantage_metrics(batch["advantages"], mask),
            **advantage_metrics,
            **batch_metrics,
            **update_metrics,
        }
        return metrics, per_trajectory.tolist()

    def correct_rollouts(self, batch: dict[str, torch.Tensor], layout: TokenLayout) -> dict[str, float]:
        """algorithm.rollout_correction on the trajectories (a Delethink trajectory's chunk rows laid end to
        end): the weights go onto the rows, rejected trajectories leave the response mask (and with it the
        advantages, every loss and its statistics, as in verl); returns the mismatch metrics."""
        alg = self.config.algorithm.rollout_correction
        old, rollout, mask = (
            layout.to_trajectories(batch[key])
            for key in ("old_log_probs", "rollout_log_probs", "response_mask")
        )
        correction = rollout_correction.correct(
            old, rollout, mask, rollout_is=alg.rollout_is, rollout_is_threshold=alg.rollout_is_threshold,
            rollout_rs=alg.rollout_rs, rollout_rs_threshold=alg.rollout_rs_threshold,
            rollout_rs_threshold_lower=alg.rollout_rs_threshold_lower,
            rollout_token_veto_threshold=alg.rollout_token_veto_threshold,
        )  # fmt: skip
        weights, batch["response_mask"] = rollout_correction.on_rows(
            correction, batch["trajectory_index"], batch["response_mask"]
        )
        batch["advantages"] = batch["advantages"] * batch["response_mask"]
        if weights is not None:
            batch["rollout_correction_weights"] = weights
        return {**rollout_correction.probability_difference_metrics(old, rollout, mask), **correction.metrics}

    def token_advantages(
        self, batch: dict[str, torch.Tensor], layout: TokenLayout, inputs: TokenAdvantageInputs
    ) -> tuple[dict[str, torch.Tensor], dict[str, float]]:
        """{"advantages": [rows, T]} of the token-level estimator, computed per trajectory over its tokens
        (the score on the last one, less the KL penalty on each when algorithm.use_kl_in_reward), then
        put onto the rows; gae adds the critic's targets, {"returns": [rows, T]}. With the KL in the
        reward the controller's coefficient is updated here, once per step."""
        alg = self.config.algorithm
        mask = layout.to_trajectories(batch["response_mask"])
        rewards = core_algos.place_on_last_token(torch.tensor(inputs.scores, dtype=torch.float32), mask)
        metrics: dict[str, float] = {}
        if alg.use_kl_in_reward:
            kl = core_algos.kl_penalty(
                layout.to_trajectories(batch["old_log_probs"]), layout.to_trajectories(batch["ref_log_prob"]),
                alg.kl_penalty,
            )  # fmt: skip
            rewards, current_kl = core_algos.apply_kl_penalty(rewards, kl, mask, self.kl_ctrl.value)
            metrics = {
                "actor/reward_kl_penalty": current_kl,
                "actor/reward_kl_penalty_coeff": self.kl_ctrl.value,
            }
            self.kl_ctrl.update(current_kl, n_steps=len(inputs.scores))

        def on_rows(values: torch.Tensor) -> torch.Tensor:
            return layout.to_rows(values) * batch["response_mask"]

        if alg.adv_estimator == "gae":
            values = layout.to_trajectories(batch["values"])
            advantages, returns = core_algos.compute_gae_advantage_return(
                rewards, values, mask, alg.gamma, alg.lam
            )
            metrics["critic/returns_mean"] = float(core_algos.masked_mean(returns, mask))
            metrics["critic/values_mean"] = float(core_algos.masked_mean(values, mask))
            return {"advantages": on_rows(advantages), "returns": on_rows(returns)}, metrics
        baselines = inputs.baseline_scores
        advantages = core_algos.compute_token_advantage(
            alg.adv_estimator, rewards, mask, group_ids=inputs.group_ids, gamma=alg.gamma,
            baseline_scores=None if baselines is None else torch.tensor(baselines, dtype=torch.float32),
        )  # fmt: skip
        return {"advantages": on_rows(advantages)}, metrics

    def greedy_baseline(
        self, step: int, items: list[PromptItem], timing: dict[str, float]
    ) -> tuple[list[float], dict[str, float]]:
        """remax: one greedy (temperature 0) trajectory per prompt, scored and never trained on; each of
        the prompt's samples gets its score as baseline. The step's groups are adjacent, n each."""
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.n
        prompts = items[::n]
        sampling = [
            replace(
                cfg.train_sampling,
                temperature=0.0,
                seed=derive_seed(cfg.trainer.seed, step, REMAX_SEED_STREAM, j),
            )
            for j in range(len(prompts))
        ]
        t = time.perf_counter()
        greedy = self.workers.generate(prompts, sampling)
        greedy_scores = [r.score for r in self.score(prompts, greedy)]
        timing["timing/gen_baseline_s"] = time.perf_counter() - t
        metrics = {"train/baseline_score_mean": float(np.mean(greedy_scores))}
        return [score for score in greedy_scores for _ in range(n)], metrics

    def collect_train_batch(
        self, step: int, timing: dict[str, float]
    ) -> tuple[list[PromptItem], list[Trajectory], list, dict[str, float]]:
        """Generate and score a batch. With algorithm.filter_groups.enable, keep only the groups whose
        scores differ and generate more batches (attempt 1, 2, ...) until train_batch_size groups are
        kept or max_num_gen_batches batches were generated; the step then trains on what it kept."""
        cfg = self.config
        n = cfg.actor_rollout_ref.rollout.n
        wanted = cfg.trajectories_per_step
        filter_groups = cfg.algorithm.filter_groups
        timing["timing/gen_s"] = timing["timing/reward_s"] = 0.0
        items, trajectories, results = [], [], []
        all_scores: list[float] = []  # every generated sample's score, for the zero-std ratio
        attempts = 0
        while True:
            t = time.perf_counter()
            new_items, new_trajectories = self.generate_train_batch(step, attempts)
            timing["timing/gen_s"] += time.perf_counter() - t
            t = time.perf_counter()
            new_results = self.score(new_items, new_trajectories)
            timing["timing/reward_s"] += time.perf_counter() - t
            attempts += 1
            new_scores = [r.score for r in new_results]
            all_scores += new_scores
            kept = range(len(new_items))
            if filter_groups.enable:
                kept = dynamic_sampling.group_members(dynamic_sampling.informative_groups(new_scores, n), n)
            items += [new_items[i] for i in kept]
            trajectories += [new_trajectories[i] for i in kept]
            results += [new_results[i] for i in kept]
            if (
                not filter_groups.enable
                or len(items) >= wanted
                or attempts == filter_groups.max_num_gen_batches
            ):
                break
        if not items:
            raise RuntimeError(
                f"step {step}: in all {attempts} generated batches every group's samples scored the same "
                f"(algorithm.filter_groups.max_num_gen_batches={filter_groups.max_num_gen_batches}), so "
                "there is nothing to learn from. Raise the cap or set algorithm.filter_groups.enable=false."
            )
        metrics = {
            "train/zero_std_ratio": core_algos.zero_std_ratio(
                torch.tensor(all_scores), [j // n for j in range(len(all_scores))]
            )
        }
        if filter_groups.enable:
            metrics["train/gen_batches"] = float(attempts)
            metrics["train/kept_groups"] = float(min(len(items), wanted) // n)
        return items[:wanted], trajectories[:wanted], results[:wanted], metrics

    def generate_train_batch(self, step: int, attempt: int = 0) -> tuple[list[PromptItem], list[Trajectory]]:
        """train_batch_size prompts x rollout.n trajectories, each GRPO group adjacent; `attempt` >= 1 is a
        dynamic-sampling refill (verl/trainer/ppo/rollout_source.py)."""
        return self.rollout.train_batch(step, attempt)

    # -- pieces a subclass may change ---------------------------------------------------------
    def build_training_batch(
        self, trajectories: list[Trajectory], advantages: list[float]
    ) -> tuple[dict[str, torch.Tensor], float, dict[str, float], TokenLayout]:
        """Training rows, padded with untrainable rows to a multiple of mini-batches x ranks. Returns
        (batch, rows_per_trajectory of the padded rows, extra metrics, where each trajectory's tokens sit
        in the rows)."""
        rows = self.training_rows(trajectories, advantages)
        padded = pad_rows_to_multiple(rows, self.config.num_mini_batches * self.config.trainer.world_size)
        weight = rows_per_trajectory(len(padded), len(trajectories))
        metrics = self.batch_metrics(trajectories, len(rows), len(padded), weight)
        batch = collate_rows(padded, self.tokenizer.pad_token_id)
        layout = TokenLayout.of(rows, len(trajectories), len(padded), batch["responses"].shape[1])
        return batch, weight, metrics, layout

    def training_rows(self, trajectories: list[Trajectory], advantages: list[float]) -> list[TrainRow]:
        """LongCoT (and gym with train_on=last): one row per trajectory, its one trainable turn."""
        trainable = [sum(turn.trainable for turn in t.turns) for t in trajectories]
        multi = [i for i, k in enumerate(trainable) if k != 1]
        if multi:
            raise ValueError(
                f"trajectory {multi[0]} has {trainable[multi[0]]} trainable turns; the PPO trainer trains "
                "one row per trajectory. Use trainer.name=delethink for chunked trajectories (and for gym "
                "with train_on=all)."
            )
        return trajectory_rows(trajectories, advantages)

    def batch_metrics(
        self, trajectories: list[Trajectory], num_rows: int, num_padded: int, rows_per_trajectory: float
    ) -> dict[str, float]:
        return {"train/padding_rows": float(num_padded - num_rows)} if num_padded > num_rows else {}

    # -- reward, validation -------------------------------------------------------------------
    def score(self, items: list[PromptItem], trajectories: list[Trajectory]):
        return self.reward_manager(
            trajectories, [it.data_source for it in items], [it.ground_truth for it in items],
            [it.extra_info for it in items],
        )  # fmt: skip

    def generate_validation(self) -> tuple[list[PromptItem], list[Trajectory]]:
        """Every validation prompt once with its samples (val_n or val_kwargs.n) adjacent; the seeds are
        the same at every validation, so validations differ only by the policy."""
        return self.rollout.validation()

    def validate(self, step: int) -> dict[str, float]:
        val_n = self.config.actor_rollout_ref.rollout.val_kwargs.n
        items_all, trajectories = self.generate_validation()
        results = self.score(items_all, trajectories)
        self.val_generations = self.generation_rows(step, items_all, trajectories, results)
        # per problem (its samples are adjacent), then averaged per data source
        per_source: dict[str, list[dict[str, float]]] = defaultdict(list)
        lengths: dict[str, list[int]] = defaultdict(list)
        end = 0
        while end < len(items_all):
            item = items_all[end]
            n = item.val_n or val_n
            start, end = end, end + n
            answers = [extract_final_answer(r.solution_str) for r in results[start:end]]
            scores = [r.score for r in results[start:end]]
            ks = [2**i for i in range(n.bit_length())]  # 1, 2, 4, ... up to n
            per_source[item.data_source].append(problem_metrics(answers, scores, ks))
            lengths[item.data_source] += [t.thinking_tokens for t in trajectories[start:end]]
        metrics = {
            f"val/{src}/{name}": float(np.mean([m[name] for m in problems]))
            for src, problems in per_source.items()
            for name in problems[0]
        }
        for src, values in lengths.items():
            metrics[f"val/{src}/thinking_tokens_mean"] = float(np.mean(values))
            metrics[f"val/{src}/thinking_tokens_max"] = float(np.max(values))
        metrics["val/score_mean"] = float(np.mean([r.score for r in results]))
        metrics["val/num_samples"] = float(len(results))
        metrics.update(trajectory_metrics("val", trajectories))
        metrics.update(env_metrics("val/env", trajectories))
        return metrics

    def generation_rows(self, step, items, trajectories, results) -> list[dict[str, Any]]:
        """The first trainer.log_val_generations validation trajectories, each with its chunks; the
        validation order and seeds are fixed, so every validation logs the same prompts and samples."""
        decode, carry = self.tokenizer.decode, carry_sizes(self.config)
        n = self.config.trainer.log_val_generations
        kept = zip(items[:n], trajectories[:n], results[:n], strict=True)
        return [
            {
                **trajectory_record(step, i, item, traj, result.solution_str, result.score, decode, carry),
                "chunks": chunk_records(step, i, traj, decode),
            }
            for i, (item, traj, result) in enumerate(kept)
        ]

    # -- outputs ------------------------------------------------------------------------------
    def dump_rollouts(self, step, items, trajectories, results, advantages) -> None:
        out = self.run_dir / "rollouts"
        decode, carry = self.tokenizer.decode, carry_sizes(self.config)
        flat, chunks = [], []
        for i, (item, traj, result, adv) in enumerate(
            zip(items, trajectories, results, advantages, strict=True)
        ):
            record = trajectory_record(step, i, item, traj, result.solution_str, result.score, decode, carry)
            flat.append({**record, "advantage": adv})
            chunks += chunk_records(step, i, traj, decode)
        atomic_write_jsonl(out / f"step_{step}.jsonl", flat)
        atomic_write_jsonl(out / f"step_{step}_chunks.jsonl", chunks)

    def save_checkpoint(self, step: int) -> Path:
        """Write step's checkpoint into a temp directory, commit it, then apply the retention (the
        checkpoint resumed from is never deleted). A save that fails (disk full, a file size limit, an
        I/O error) removes its temp directory and raises checkpoint.CheckpointWriteError."""
        tmp = None
        try:
            tmp = checkpoint.temp_step_dir(self.run_dir, step)
            self.write_checkpoint(step, tmp)
            path = checkpoint.commit_step_dir(self.run_dir, step, tmp)
        except BaseException as error:  # a stop signal mid-write too: nothing half-written stays behind
            if tmp is not None:
                shutil.rmtree(tmp, ignore_errors=True)
            if not isinstance(error, Exception):
                raise
            latest = self.run_dir / checkpoint.LATEST_FILE
            last = f"global_step_{latest.read_text().strip()}" if latest.is_file() else "none yet"
            raise checkpoint.CheckpointWriteError(
                f"writing {checkpoint.step_dir(self.run_dir, step)} failed "
                f"({checkpoint.error_summary(error)}); removed the half-written copy; the last committed "
                f"checkpoint is {last}, untouched"
            ) from error
        tr = self.config.trainer
        source = self.resumed_from
        # the checkpoint resumed from, when it is one of this directory's
        in_run_dir = source is not None and source.parent.resolve() == self.run_dir.resolve()
        protected = [checkpoint.step_of(source)] if in_run_dir else []
        for note in checkpoint.prune(
            self.run_dir, step, protected,
            tr.max_actor_ckpt_to_keep, tr.max_critic_ckpt_to_keep, tr.keep_ckpt_every_n_steps,
        ):  # fmt: skip
            tqdm.write(note)
        return path

    def write_checkpoint(self, step: int, directory: Path) -> None:
        """Everything a resume needs, into `directory`."""
        self.workers.save_checkpoint(str(directory / "actor"))
        if self.config.uses_critic:
            self.workers.save_critic_checkpoint(str(directory / "critic"))
        state: dict[str, Any] = {
            "global_step": step,
            "cumulative": dict(self.cumulative),
            "kl_coef": self.kl_ctrl.value,  # the adaptive controller's coefficient moves from step to step
        }
        atomic_write_text(directory / "trainer_state.json", json.dumps(state, indent=2))
        save_config(directory, self.config)

    def load_checkpoint(self, path: Path) -> int:
        """Weights, optimizer and RNG from `path` (its config was compared by resume.prepare_resume)."""
        state = json.loads((path / "trainer_state.json").read_text())
        self.workers.load_checkpoint(str(path / "actor"))
        if self.config.uses_critic:
            self.workers.load_critic_checkpoint(str(path / "critic"))
        self.cumulative.update(state["cumulative"])
        # checkpoints written before the KL controller existed resume at algorithm.kl_ctrl.kl_coef
        self.kl_ctrl.value = state.get("kl_coef", self.kl_ctrl.value)
        tqdm.write(f"resumed from {path} at step {state['global_step']}")
        return int(state["global_step"])
