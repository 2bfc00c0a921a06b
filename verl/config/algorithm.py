"""`algorithm.*`: advantages, the KL penalty, dynamic sampling and Delethink's parameters."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from verl.config.rules import broken, non_negative, one_of, positive
from verl.core import names
from verl.core.delethink import delethink_param_problems


@dataclass
class DelethinkConfig:
    """algorithm.delethink: the fields of core.delethink.DelethinkParams, which checks them."""

    chunk_size: int = 8192  # tokens: C, the first chunk's budget and the most any chunk holds
    keep_head: int = 100  # tokens: the first keep_head thinking tokens carried into every chunk
    keep_tail: int = 3996  # tokens: the last keep_tail thinking tokens carried over (>= 1)
    # tokens each chunk after the first may generate; null: C - keep_head - keep_tail
    intermediate_max_new_tokens: int | None = None
    max_chunks: int = 5  # I, the most chunks per trajectory; thinking budget C + (I-1)(C-m)
    trimmer: str = "progressive"  # how the carry-over is cut (core.trimmers.TRIMMERS)

    def problems(self, key: str) -> list[str]:
        # checked whatever the loop, like every other key; the delethink loop's rules on other sections
        # are DelethinkAgentLoop.config_problems
        return [f"{key}.{problem}" for problem in delethink_param_problems(**dataclasses.asdict(self))]


@dataclass
class FilterGroupsConfig:
    """algorithm.filter_groups: dynamic sampling (drop groups whose samples all scored the same)."""

    enable: bool = False  # keep only groups whose scores differ; refill with new prompts up to the batch
    max_num_gen_batches: int = 10  # the most batches one step generates; then it trains on what it has

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [("max_num_gen_batches", lambda v: v >= 1, "must be >= 1")])


@dataclass
class KLControlConfig:
    """algorithm.kl_ctrl: the coefficient of the KL penalty in the reward (algorithm.use_kl_in_reward)."""

    type: str = "fixed"  # fixed: kl_coef throughout | adaptive: PPO's proportional controller to target_kl
    kl_coef: float = 0.001  # the coefficient (adaptive: its start; checkpoints keep the current value)
    target_kl: float = 0.1  # adaptive: the mean per-token KL the coefficient steers toward
    horizon: int = 10000  # adaptive: trajectories over which the coefficient changes by the (<= 20%) error

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            one_of("type", names.KL_CTRL_TYPES),
            *non_negative("kl_coef"),
            *positive("target_kl", "horizon"),
        ])  # fmt: skip


@dataclass
class RolloutCorrectionConfig:
    """algorithm.rollout_correction: corrections for the engine sampling from slightly other numbers than
    the trainer computes, by verl's names and meanings (core/rollout_correction.py). A trajectory's ratio
    is pi_old / pi_rollout over all its trained tokens (Delethink: over every chunk), and a correction
    weights or rejects the whole trajectory. The token-level weight, TIS, is
    actor_rollout_ref.actor.tis_imp_ratio_cap."""

    # sequence: weight each trajectory's loss by its ratio (the product of its tokens'), capped at
    # rollout_is_threshold; null: off
    rollout_is: str | None = None
    rollout_is_threshold: float = 2.0  # the cap of the sequence weight (>= 1)
    # sequence | geometric: a trajectory whose ratio (sequence: the product; geometric: the geometric mean
    # of its tokens' ratios) is outside [rollout_rs_threshold_lower, rollout_rs_threshold] is rejected: its
    # tokens leave the response mask before advantages and every loss; null: off
    rollout_rs: str | None = None
    # the upper bound of the trajectory's ratio (> 1); set with rollout_rs
    rollout_rs_threshold: float | None = None
    # the lower bound of the trajectory's ratio, in (0, 1); null: 1 / rollout_rs_threshold
    rollout_rs_threshold_lower: float | None = None
    # veto: a trajectory with a token whose ratio is below this, in (0, 1), is rejected; null: off
    rollout_token_veto_threshold: float | None = None
    # true: no old-log-prob pass; the engine's log-probs are the old ones, so PPO's ratio is
    # pi / pi_rollout (verl's bypass mode, its ppo_clip loss); the corrections and rollout_corr/ metrics,
    # which compare the two, are then off
    bypass_mode: bool = False

    def problems(self, key: str) -> list[str]:
        in_unit = "must be null (off) or in (0, 1)"
        rejecting = self.rollout_rs in names.RS_LEVELS[1:]
        bypassed = (
            "must be null with bypass_mode=true: the old log-probs are the engine's, so its ratios are 1"
        )
        return broken(self, key, [
            ("rollout_is", lambda v: v in names.IS_LEVELS,
             f"must be one of {list(names.IS_LEVELS)} (the token-level weight is "
             "actor_rollout_ref.actor.tis_imp_ratio_cap)"),
            ("rollout_is_threshold", lambda v: v >= 1,
             "must be >= 1: a cap below 1 would shrink the weight of trajectories the engine and trainer "
             "agree on"),
            ("rollout_rs", lambda v: v in names.RS_LEVELS,
             f"must be one of {list(names.RS_LEVELS)}"),
            ("rollout_rs_threshold", lambda v: v is None or v > 1,
             "must be null or > 1 (the upper bound of a trajectory's ratio)"),
            ("rollout_rs_threshold", lambda v: v is not None or not rejecting,
             f"must be set (> 1) with rollout_rs={self.rollout_rs!r}"),
            ("rollout_rs_threshold_lower", lambda v: v is None or 0 < v < 1, in_unit),
            ("rollout_token_veto_threshold", lambda v: v is None or 0 < v < 1, in_unit),
            *[(name, lambda v: v is None or not self.bypass_mode, bypassed)
              for name in ("rollout_is", "rollout_rs", "rollout_token_veto_threshold")],
        ])  # fmt: skip


@dataclass
class AlgorithmConfig:
    # grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax | gae (with the critic:
    # critic.*) (names.ADV_ESTIMATORS)
    adv_estimator: str = "grpo"
    # divide GRPO advantages by the group's reward std; false (with the actor's loss_agg_mode
    # seq-mean-token-sum-norm): Dr. GRPO
    norm_adv_by_std_in_grpo: bool = True
    gamma: float = 1.0  # reinforce_plus_plus and gae: discount of later token rewards, in (0, 1]
    lam: float = 1.0  # gae: lambda, the bias-variance trade-off of the advantage, in [0, 1]
    # subtract kl_ctrl.kl_coef x KL(policy || reference) from every token's reward (not grpo/rloo)
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"  # KL estimator of use_kl_in_reward (names.KL_PENALTY_TYPES)
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)  # the KL-in-reward coefficient
    # dynamic sampling (trainer/ppo/dynamic_sampling.py)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    # train only on trajectories that ended with EOS (advantages use all)
    filter_overlong_trajectories: bool = False
    # read with agent loop delethink (core/delethink.py checks it)
    delethink: DelethinkConfig = field(default_factory=DelethinkConfig)
    # trajectory-level importance weights and rejection against the rollout engine's log-probs
    rollout_correction: RolloutCorrectionConfig = field(default_factory=RolloutCorrectionConfig)

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            one_of("adv_estimator", names.ADV_ESTIMATORS),
            ("gamma", lambda v: 0 < v <= 1, "must be in (0, 1]"),
            ("lam", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
            one_of("kl_penalty", names.KL_PENALTY_TYPES),
            ("use_kl_in_reward", lambda v: not v or self.adv_estimator not in names.OUTCOME_ESTIMATORS,
             f"adv_estimator={self.adv_estimator!r} gives one advantage per trajectory from the scores; "
             "penalise the KL as a loss (actor_rollout_ref.actor.use_kl_loss) or pick a token-level "
             "estimator"),
        ])  # fmt: skip
