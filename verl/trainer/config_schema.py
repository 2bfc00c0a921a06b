"""Typed view of the Hydra config: one dataclass per section.

Every key the code reads is a field here. `load_config(cfg)` turns the composed OmegaConf tree into
`PolicyIterationConfig` and checks types and rules, raising `ConfigError` with a message that names
the key, its value and the rule, before Ray or any model starts. It reports every problem it finds at
once, so a run with three typos needs one retry, not three. What is valid but probably not meant (a
key that mixes the two thinking environments) `config_warnings` lists, for the entry point to print.

Each section's rules sit beside its fields (its `problems(key)` method); the rules between sections are
`_cross_section_errors`, which leaves what the agent loop and the rollout source need of the rest to
their own `config_problems`. Numbers derived from several keys (world size, mini-batches, the question
budget, the train/val sampling parameters) are properties, so each is computed in one place.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib.util
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.models.model_dir import model_path_problem
from verl.utils.config_resolvers import register_resolvers

if TYPE_CHECKING:
    from verl.agent_loop.base import AgentLoop
    from verl.agent_loop.delethink_params import DelethinkParams
    from verl.workers.rollout.base import SamplingParams

CONFIG_DIR = Path(__file__).resolve().parent / "config"
ENVIRONMENT_DIR = CONFIG_DIR / "environment"  # the thinking environments, one switch each: environment=NAME
# The keys an environment file sets together. Overriding one runs (a deliberate mix) but is warned about.
ENVIRONMENT_KEYS = (
    "actor_rollout_ref.rollout.agent.default_agent_loop",
    "trainer.name",
    "reward_model.reward_manager",
    "actor_rollout_ref.actor.loss_agg_mode",
)
TINY_DIR = Path("outputs/tiny")  # where examples/prepare_tiny.sh writes the tiny model and data
MAKE_TINY = "`bash examples/prepare_tiny.sh` (or `make tiny`)"

ROLLOUT_NAMES = ("hf", "sglang")
ROLLOUT_MODES = ("async",)
ACTOR_STRATEGIES = ("fsdp2",)
TRAINER_NAMES = ("ppo", "delethink")
LOGGERS = ("console", "jsonl", "wandb")
RESUME_MODES = ("auto", "disable", "path")
DEVICES = ("cpu", "cuda")
LAUNCHERS = ("ray", "local")
ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2")  # transformers' names
DTYPES = ("float32", "bfloat16", "float16")
GYM_TRAIN_ON = ("last", "all")
TASK_BAD_ROWS = ("filter", "error")


class ConfigError(ValueError):
    """A config value breaks a rule. The message names the key, the value and the rule."""


# ---------------------------------------------------------------------------------------------------
# Each section's own rules: a dataclass's `problems(key)` checks its fields, `key` its full key name.

# (field, whether its value is allowed, the rule a message states)
Rule = tuple[str, Callable[[Any], bool], str]


def _broken(section: Any, key: str, rules: Sequence[Rule]) -> list[str]:
    """One `key.field=value: rule` line for every rule the section's value breaks."""
    lines = []
    for name, ok, rule in rules:
        value = getattr(section, name)
        if not ok(value):
            lines.append(f"{_join(key, name)}={value!r}: {rule}")
    return lines


def _positive(*names: str) -> list[Rule]:
    return [(name, lambda v: v > 0, "must be > 0") for name in names]


def _non_negative(*names: str) -> list[Rule]:
    return [(name, lambda v: v >= 0, "must be >= 0") for name in names]


def _not_empty(*names: str) -> list[Rule]:
    return [(name, lambda v: v != "", "must not be empty") for name in names]


def _one_of(name: str, allowed: Sequence[str]) -> Rule:
    return (name, lambda v: v in allowed, f"must be one of {list(allowed)}")


def _off_or_positive(value: int) -> bool:
    return value == -1 or value > 0


_SAMPLING_RULES: list[Rule] = [  # rollout and rollout.val_kwargs sample alike
    ("temperature", lambda v: v >= 0, "must be >= 0 (0 means greedy)"),
    ("top_p", lambda v: 0 < v <= 1, "must be in (0, 1]"),
    ("top_k", lambda v: v == -1 or v > 0, "must be -1 (off) or > 0"),
]


@dataclass
class DataConfig:
    # prompt-row files (jsonl/json/parquet); or name train_tasks
    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)  # prompt-row files; or name val_tasks
    prompt_key: str = "prompt"  # field of a row that holds the prompt
    max_prompt_length: int = 512  # tokens; Delethink: a chunk's prompt (question + carry-over) must fit
    # tokens; LongCoT: the thinking budget B; Delethink: = algorithm.delethink.chunk_size
    max_response_length: int = 256
    train_batch_size: int = 8  # prompts per training step
    # prompts per validation batch (-1: all at once); with env_manager: validate the first N only
    val_batch_size: int = -1
    shuffle: bool = True  # shuffle training prompts every epoch
    seed: int = 1  # seed of the training-prompt order
    # drop prompts longer than max_prompt_length; false: error naming the row
    filter_overlong_prompts: bool = True
    # true: drop repeats of an earlier prompt (same prompt and answer); repeats are logged anyway
    drop_duplicates: bool = False

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            *_positive("max_prompt_length", "max_response_length", "train_batch_size"),
            ("val_batch_size", _off_or_positive, "must be -1 (off / all at once) or > 0"),
            *_not_empty("prompt_key"),
        ])  # fmt: skip


@dataclass
class ModelConfig:
    path: str  # HF model directory (with config.json) or hub id org/name
    enable_gradient_checkpointing: bool = False  # recompute activations in backward to save memory
    use_remove_padding: bool = False  # pack rows into one sequence (varlen attention; flash-attn on GPU)
    # actor and reference: pack each micro-batch with the prompt prefixes its rows share (a group's
    # samples, a Delethink trajectory's chunks) computed once; same log-probs and gradients, sdpa only
    # (verl/workers/actor/shared_prefix.py)
    share_prompt_prefix: bool = False
    # actor and reference attention: sdpa | flash_attention_2 (GPU, the flash-attn package: packed rows run
    # its variable-length kernels; sdpa gives a packed micro-batch one dense block-diagonal mask)
    attn_implementation: str = "sdpa"

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            *_not_empty("path"),
            _one_of("attn_implementation", ATTN_IMPLEMENTATIONS),
            ("share_prompt_prefix", lambda v: not (v and self.use_remove_padding),
             "cannot be combined with use_remove_padding=true: they are two layouts of the forward pass"),
            ("share_prompt_prefix", lambda v: not (v and self.attn_implementation != "sdpa"),
             f"needs attn_implementation='sdpa' (got {self.attn_implementation!r}): the shared-prefix "
             "attention runs sdpa over each row's view of the packed micro-batch"),
        ])  # fmt: skip


@dataclass
class FSDPConfig:
    param_offload: bool = False  # keep sharded parameters on CPU between uses (GPU only)
    optimizer_offload: bool = False  # keep optimizer state on CPU between steps (GPU only)
    param_dtype: str = "float32"  # mixed precision: compute dtype (bfloat16 on GPU)
    reduce_dtype: str = "float32"  # mixed precision: gradient reduction dtype

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [_one_of("param_dtype", DTYPES), _one_of("reduce_dtype", DTYPES)])


@dataclass
class OptimConfig:
    lr: float = 1e-6  # AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    lr_warmup_steps: int = 0  # optimizer steps of linear warm-up

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            *_positive("lr"),
            *_non_negative("weight_decay", "lr_warmup_steps"),
            ("betas", lambda v: all(0 <= b < 1 for b in v), "each beta must be in [0, 1)"),
        ])  # fmt: skip


@dataclass
class ActorConfig:
    strategy: str = "fsdp2"  # data-parallel strategy (FSDP2 works on CPU and GPU)
    ppo_mini_batch_size: int = 8  # prompts per optimizer step; rows = ppo_mini_batch_size * rollout.n
    ppo_micro_batch_size_per_gpu: int = 8  # rows per forward/backward (gradient accumulation unit)
    ppo_epochs: int = 1  # passes over each step's batch
    # set: split every batch into exactly this many mini-batches (rows vary in Delethink)
    fixed_num_optim_steps: int | None = None
    clip_ratio_low: float = 0.2  # PPO clip: ratio >= 1 - clip_ratio_low
    clip_ratio_high: float = 0.2  # PPO clip: ratio <= 1 + clip_ratio_high
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages (> 1)
    tis_imp_ratio_cap: float = -1.0  # truncated importance sampling cap on trainer/engine ratio; <= 0: off
    # set by the environment; how per-token losses become one number (core_algos.LOSS_AGG_MODES;
    # seq-mean-token-sum-norm, Dr. GRPO's: a trajectory's token sum over the thinking budget)
    loss_agg_mode: str = "seq-mean-token-norm-trace-length"
    entropy_coeff: float = 0.0  # weight of the entropy bonus
    use_kl_loss: bool = False  # add a KL penalty to a frozen reference model
    kl_loss_coef: float = 0.001  # weight of that KL penalty
    kl_loss_type: str = "low_var_kl"  # KL estimator (core_algos.KL_PENALTY_TYPES)
    grad_clip: float = 1.0  # max global gradient norm
    use_dynamic_bsz: bool = False  # micro-batches by token budget (ppo_max_token_len_per_gpu) instead of rows
    ppo_max_token_len_per_gpu: int = 16384  # tokens (prompt + response) per micro-batch with use_dynamic_bsz
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)

    def problems(self, key: str) -> list[str]:
        from verl.trainer.ppo import core_algos

        return _broken(self, key, [
            _one_of("strategy", ACTOR_STRATEGIES),
            *_positive("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ppo_epochs", "clip_ratio_high",
                       "grad_clip", "ppo_max_token_len_per_gpu"),
            ("fixed_num_optim_steps", lambda v: v is None or v >= 1, "must be null or >= 1"),
            ("clip_ratio_low", lambda v: 0 < v < 1, "must be in (0, 1): the lower clip bound is 1 - it"),
            ("clip_ratio_c", lambda v: v > 1, "must be > 1 (the dual-clip bound is above the clip)"),
            _one_of("loss_agg_mode", core_algos.LOSS_AGG_MODES),
            *_non_negative("kl_loss_coef"),
            _one_of("kl_loss_type", core_algos.KL_PENALTY_TYPES),
        ])  # fmt: skip


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int = -1  # -1: no top-k
    n: int = 1  # samples per validation prompt
    do_sample: bool = True  # false: greedy (temperature ignored)

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [*_SAMPLING_RULES, ("n", lambda v: v >= 1, "must be >= 1")])


@dataclass
class MultiTurnConfig:
    # gym: the most model turns (Delethink's I is algorithm.delethink.max_chunks)
    max_assistant_turns: int = 1

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [("max_assistant_turns", lambda v: v >= 1, "must be >= 1")])


@dataclass
class AgentConfig:
    # set by the environment; single_turn (LongCoT) | delethink | gym (verl/envs)
    default_agent_loop: str = "single_turn"

    def problems(self, key: str) -> list[str]:
        from verl.agent_loop import AGENT_LOOPS

        return _broken(self, key, [_one_of("default_agent_loop", list(AGENT_LOOPS))])


@dataclass
class GymConfig:
    """Defaults for the `gym` agent loop; a dataset row's env_config / ctx_config column wins."""

    env_config: dict[str, Any] | None = None  # {name: <registered Env>, ...init keys}
    ctx_config: dict[str, Any] | None = None  # {name: <registered ContextManager>, ...init keys}
    train_on: str = "last"  # last: only the final assistant turn trains | all: every assistant turn
    step_timeout_s: float = 30.0  # a reset/step slower than this ends the episode with a recorded error
    # an episode whose next prompt would be longer ends there (truncated); null: no cap
    max_prompt_tokens: int | None = None

    def problems(self, key: str) -> list[str]:
        from verl.envs import CONTEXT_MANAGERS, ENVS
        from verl.envs.base import config_problem

        problems = _broken(self, key, [
            _one_of("train_on", GYM_TRAIN_ON),
            *_positive("step_timeout_s"),
            ("max_prompt_tokens", lambda v: v is None or v > 0, "must be null (no cap) or > 0"),
        ])  # fmt: skip
        for name, registry, kind in (
            ("env_config", ENVS, "env"),
            ("ctx_config", CONTEXT_MANAGERS, "context manager"),
        ):
            value = getattr(self, name)
            problem = None if value is None else config_problem(value, registry, kind)
            if problem:
                problems.append(f"{key}.{name}={value!r}: {problem} (plugins come from external_plugins)")
        return problems


@dataclass
class EnvManagerConfig:
    """Rollouts through environment-manager workers (verl/env_manager) instead of the agent-loop batch."""

    enable: bool = False  # true: rollout workers run episodes with scheduler-given seeds and a GlobalDataset
    num_workers: int = 1  # rollout worker actors; env managers are dealt to them round-robin
    num_groups: int = -1  # training groups of rollout.n env managers; -1: data.train_batch_size
    num_val_groups: int = -1  # validation groups of val_kwargs.n env managers; -1: num_groups

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            ("num_workers", lambda v: v >= 1, "must be >= 1"),
            ("num_groups", lambda v: v == -1 or v >= 1, "must be -1 (data.train_batch_size) or >= 1"),
            ("num_val_groups", lambda v: v == -1 or v >= 1, "must be -1 (num_groups) or >= 1"),
        ])  # fmt: skip


@dataclass
class RolloutConfig:
    name: str = "hf"  # generation engine: hf (CPU) | sglang (GPU)
    mode: str = "async"  # agent loops call the engine concurrently
    temperature: float = 1.0  # training samples; 0 means greedy
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int = -1  # -1: no top-k
    n: int = 8  # trajectories per prompt (the GRPO group size)
    max_num_seqs: int = 256  # sequences the engine decodes at once
    # tokens per old-log-prob micro-batch with actor.use_dynamic_bsz
    log_prob_max_token_len_per_gpu: int = 16384
    tensor_model_parallel_size: int = 1  # SGLang: GPUs per engine
    gpu_memory_utilization: float = 0.5  # SGLang: fraction of GPU memory for weights + KV cache
    free_cache_engine: bool = True  # SGLang: release engine memory while the colocated actor trains
    # the gym agent loop (verl/envs); a row's env_config/ctx_config wins
    gym: GymConfig = field(default_factory=GymConfig)
    # rollouts by environment-manager workers (docs/ENV_MANAGER.md)
    env_manager: EnvManagerConfig = field(default_factory=EnvManagerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)  # sampling for validation

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            _one_of("name", ROLLOUT_NAMES),
            _one_of("mode", ROLLOUT_MODES),
            *_SAMPLING_RULES,
            *_positive("n", "max_num_seqs", "log_prob_max_token_len_per_gpu", "tensor_model_parallel_size"),
            ("gpu_memory_utilization", lambda v: 0 < v <= 1, "must be in (0, 1]"),
        ])  # fmt: skip


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = 8  # rows per reference-model forward (only with use_kl_loss)
    log_prob_max_token_len_per_gpu: int = 16384  # tokens per reference micro-batch with actor.use_dynamic_bsz

    def problems(self, key: str) -> list[str]:
        return _broken(
            self, key, _positive("log_prob_micro_batch_size_per_gpu", "log_prob_max_token_len_per_gpu")
        )


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


@dataclass
class CriticModelConfig:
    path: str | None = None  # HF model directory or hub id of the value model; null: the actor's model
    enable_gradient_checkpointing: bool = False  # recompute activations in backward to save memory

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [("path", lambda v: v != "", "must be null (the actor's model) or a path")])


@dataclass
class CriticConfig:
    """The value model of algorithm.adv_estimator=gae (built only then): the base model with a one-output
    token-classification head, trained in the actor's worker group on the actor's mini-batches."""

    model: CriticModelConfig = field(default_factory=CriticModelConfig)  # the network under the value head
    # AdamW of the critic; a fresh value head learns faster than the policy moves (verl runs use ~1e-5)
    optim: OptimConfig = field(default_factory=OptimConfig)
    ppo_micro_batch_size_per_gpu: int = 8  # rows per forward/backward of the critic update
    forward_micro_batch_size_per_gpu: int = 8  # rows per forward when computing the values
    use_dynamic_bsz: bool = False  # micro-batches by token budget (ppo_max_token_len_per_gpu) instead of rows
    ppo_max_token_len_per_gpu: int = 32768  # tokens (prompt + response) per micro-batch with use_dynamic_bsz
    ppo_epochs: int = 1  # passes over each step's batch
    # a prediction moves at most this far from the values the advantages used: the clipped value loss
    cliprange_value: float = 0.5
    grad_clip: float = 1.0  # max global gradient norm
    # how per-token value losses become one number (core_algos.LOSS_AGG_MODES)
    loss_agg_mode: str = "token-mean"
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)

    def problems(self, key: str) -> list[str]:
        from verl.trainer.ppo import core_algos

        return _broken(self, key, [
            *_positive("ppo_micro_batch_size_per_gpu", "forward_micro_batch_size_per_gpu",
                       "ppo_max_token_len_per_gpu", "ppo_epochs", "cliprange_value", "grad_clip"),
            _one_of("loss_agg_mode", core_algos.LOSS_AGG_MODES),
        ])  # fmt: skip


@dataclass
class DelethinkConfig:
    """algorithm.delethink: the fields of agent_loop.delethink_params.DelethinkParams, which checks them."""

    chunk_size: int = 8192  # tokens: C, the first chunk's budget and the most any chunk holds
    keep_head: int = 100  # tokens: the first keep_head thinking tokens carried into every chunk
    keep_tail: int = 3996  # tokens: the last keep_tail thinking tokens carried over (>= 1)
    # tokens each chunk after the first may generate; null: C - keep_head - keep_tail
    intermediate_max_new_tokens: int | None = None
    max_chunks: int = 5  # I, the most chunks per trajectory; thinking budget C + (I-1)(C-m)
    trimmer: str = "progressive"  # how the carry-over is cut (agent_loop.trimmers.TRIMMERS)

    def problems(self, key: str) -> list[str]:
        from verl.agent_loop.delethink_params import delethink_param_problems

        # checked whatever the loop, like every other key; the delethink loop's rules on other sections
        # are DelethinkAgentLoop.config_problems
        return [f"{key}.{problem}" for problem in delethink_param_problems(**dataclasses.asdict(self))]


@dataclass
class FilterGroupsConfig:
    """algorithm.filter_groups: dynamic sampling (drop groups whose samples all scored the same)."""

    enable: bool = False  # keep only groups whose scores differ; refill with new prompts up to the batch
    max_num_gen_batches: int = 10  # the most batches one step generates; then it trains on what it has

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [("max_num_gen_batches", lambda v: v >= 1, "must be >= 1")])


@dataclass
class KLControlConfig:
    """algorithm.kl_ctrl: the coefficient of the KL penalty in the reward (algorithm.use_kl_in_reward)."""

    type: str = "fixed"  # fixed: kl_coef throughout | adaptive: PPO's proportional controller to target_kl
    kl_coef: float = 0.001  # the coefficient (adaptive: its start; checkpoints keep the current value)
    target_kl: float = 0.1  # adaptive: the mean per-token KL the coefficient steers toward
    horizon: int = 10000  # adaptive: trajectories over which the coefficient changes by the (<= 20%) error

    def problems(self, key: str) -> list[str]:
        from verl.trainer.ppo import core_algos

        return _broken(self, key, [
            _one_of("type", core_algos.KL_CTRL_TYPES),
            *_non_negative("kl_coef"),
            *_positive("target_kl", "horizon"),
        ])  # fmt: skip


@dataclass
class AlgorithmConfig:
    # grpo | rloo | reinforce_plus_plus | reinforce_plus_plus_baseline | remax | gae (with the critic:
    # critic.*) (core_algos.ADV_ESTIMATORS)
    adv_estimator: str = "grpo"
    # divide GRPO advantages by the group's reward std; false (with the actor's loss_agg_mode
    # seq-mean-token-sum-norm): Dr. GRPO
    norm_adv_by_std_in_grpo: bool = True
    gamma: float = 1.0  # reinforce_plus_plus and gae: discount of later token rewards, in (0, 1]
    lam: float = 1.0  # gae: lambda, the bias-variance trade-off of the advantage, in [0, 1]
    # subtract kl_ctrl.kl_coef x KL(policy || reference) from every token's reward (not grpo/rloo)
    use_kl_in_reward: bool = False
    kl_penalty: str = "kl"  # KL estimator of use_kl_in_reward (core_algos.KL_PENALTY_TYPES)
    kl_ctrl: KLControlConfig = field(default_factory=KLControlConfig)  # the KL-in-reward coefficient
    # dynamic sampling (trainer/ppo/dynamic_sampling.py)
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    # train only on trajectories that ended with EOS (advantages use all)
    filter_overlong_trajectories: bool = False
    # read with agent loop delethink (agent_loop/delethink_params.py checks it)
    delethink: DelethinkConfig = field(default_factory=DelethinkConfig)

    def problems(self, key: str) -> list[str]:
        from verl.trainer.ppo import core_algos

        return _broken(self, key, [
            _one_of("adv_estimator", core_algos.ADV_ESTIMATORS),
            ("gamma", lambda v: 0 < v <= 1, "must be in (0, 1]"),
            ("lam", lambda v: 0 <= v <= 1, "must be in [0, 1]"),
            _one_of("kl_penalty", core_algos.KL_PENALTY_TYPES),
            ("use_kl_in_reward", lambda v: not v or self.adv_estimator not in core_algos.OUTCOME_ESTIMATORS,
             f"adv_estimator={self.adv_estimator!r} gives one advantage per trajectory from the scores; "
             "penalise the KL as a loss (actor_rollout_ref.actor.use_kl_loss) or pick a token-level "
             "estimator"),
        ])  # fmt: skip


@dataclass
class RewardModelConfig:
    # set by the environment; naive scores the last turn | delethink all chunks joined
    reward_manager: str = "naive"
    # math-verify processes scoring at once, per driver / rollout worker; null: CPUs + 4 (max 32)
    scoring_processes: int | None = None

    def problems(self, key: str) -> list[str]:
        from verl.workers.reward_manager import REWARD_MANAGERS

        return _broken(self, key, [
            _one_of("reward_manager", list(REWARD_MANAGERS)),
            ("scoring_processes", lambda v: v is None or v >= 1,
             "must be null (one per CPU plus 4, at most 32) or >= 1"),
        ])  # fmt: skip


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None  # a .py file defining `name`; null: built-in dispatch by data_source
    # function in that file: (data_source, solution_str, ground_truth, extra_info)
    name: str = "compute_score"

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, _not_empty("name"))


@dataclass
class TrainerConfig:
    name: str = "ppo"  # set by the environment; ppo (one row per trajectory) | delethink (one row per chunk)
    project_name: str = "delethink"  # wandb project
    experiment_name: str = "run"  # run name; also names the output directory
    group: str = "default"  # wandb group: the LongCoT and Delethink runs of one study share it
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])  # any of console | jsonl | wandb
    total_training_steps: int = 10  # training steps (one batch of train_batch_size prompts each)
    val_before_train: bool = True  # validate once before the first step
    test_freq: int = -1  # validate every N steps (and after the last); -1: never during training
    save_freq: int = -1  # checkpoint every N steps (and after the last); -1: only after the last
    resume_mode: str = "auto"  # auto: latest checkpoint in default_local_dir | disable | path
    resume_from_path: str | None = None  # checkpoint directory for resume_mode=path
    overwrite: bool = False  # resume_mode=disable in a directory holding a run: move that run aside first
    default_local_dir: str = "outputs/run"  # checkpoints, metrics, rollouts, Hydra output
    log_rollouts: bool = True  # JSONL rollout dumps under default_local_dir/rollouts/
    # first N validation trajectories per validation: wandb Table + val_generations.jsonl
    log_val_generations: int = 0
    nnodes: int = 1  # machines
    n_gpus_per_node: int = 1  # devices (workers) per machine
    device: str = "cpu"  # cpu | cuda
    # ray: one Ray actor per rank | local: this process on one device, no Ray (one GPU, pdb, profiling)
    launcher: str = "ray"
    # GiB of one GPU; a cuda run whose estimated peak (DRY_RUN=1 prints it) exceeds it is refused
    gpu_memory_gib: float = 80.0
    seed: int = 1  # seed of sampling and initialisation
    critic_warmup: int = 0  # gae: the first N steps update only the critic (the actor waits for its values)

    @property
    def world_size(self) -> int:
        """Ranks (one worker each): nnodes x n_gpus_per_node."""
        return self.nnodes * self.n_gpus_per_node

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            _one_of("name", TRAINER_NAMES),
            *_positive("total_training_steps", "nnodes", "n_gpus_per_node"),
            *_non_negative("critic_warmup"),
            ("test_freq", _off_or_positive, "must be -1 (off / all at once) or > 0"),
            ("save_freq", _off_or_positive, "must be -1 (off / all at once) or > 0"),
            ("log_val_generations", lambda v: v >= 0, "must be >= 0 (0: log none)"),
            ("gpu_memory_gib", lambda v: v > 0, "must be > 0 (GiB of one GPU)"),
            ("logger", lambda v: set(v) <= set(LOGGERS), f"every entry must be one of {list(LOGGERS)}"),
            _one_of("resume_mode", RESUME_MODES),
            ("resume_from_path", lambda v: self.resume_mode != "path" or bool(v),
             "must be set when trainer.resume_mode='path'"),
            _one_of("device", DEVICES),
            _one_of("launcher", LAUNCHERS),
            ("launcher", lambda v: v != "local" or self.world_size == 1,
             f"runs one rank in this process, but trainer.nnodes x trainer.n_gpus_per_node = "
             f"{self.nnodes} x {self.n_gpus_per_node}; set both to 1 or use trainer.launcher=ray"),
            *_not_empty("project_name", "experiment_name", "default_local_dir"),
        ])  # fmt: skip


@dataclass
class TaskConfig:
    """A problem set in its original columns (problem / answer), turned into prompts by a template."""

    path: str  # .jsonl, .json or .parquet
    data_source: str  # names the task in metrics and picks the scorer
    problem_key: str = "problem"
    answer_key: str = "answer"
    answer_marker: str | None = None  # GSM8K "####": the answer column is a solution, the answer follows this
    prompt_template: str = "{problem}"  # str.format with the row's columns
    system_prompt: str | None = None
    max_samples: int = -1  # -1: every row
    shuffle_seed: int | None = None  # set: shuffle rows with this seed before max_samples
    n: int | None = None  # validation samples per problem; None: rollout.val_kwargs.n
    bad_rows: str = "filter"  # filter: drop bad rows and log the count | error: fail naming the row
    how_to_get: str | None = None  # for a file not stored here: how to obtain it, said when it is missing

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [
            ("max_samples", _off_or_positive, "must be -1 (every row) or > 0"),
            ("n", lambda v: v is None or v >= 1, "must be null or >= 1"),
            _one_of("bad_rows", TASK_BAD_ROWS),
            *_not_empty("path", "data_source", "problem_key", "answer_key", "prompt_template"),
        ])  # fmt: skip


@dataclass
class PolicyIterationConfig:
    data: DataConfig
    actor_rollout_ref: ActorRolloutRefConfig
    algorithm: AlgorithmConfig
    reward_model: RewardModelConfig
    custom_reward_function: CustomRewardFunctionConfig
    trainer: TrainerConfig
    critic: CriticConfig = field(default_factory=CriticConfig)  # value model (algorithm.adv_estimator=gae)
    environment: str = "longcot"  # set by the environment file (config/environment/): its own name
    # problem sets by name (config group train_tasks/); used with or instead of data.train_files
    train_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    # problem sets by name (config group val_tasks/)
    val_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    # modules or .py files imported at start-up (driver and workers) to register classes
    external_plugins: list[str] = field(default_factory=list)

    def problems(self, key: str) -> list[str]:
        return _broken(self, key, [_one_of("environment", environment_names())])

    @property
    def agent_loop_class(self) -> type[AgentLoop]:
        """The loop `rollout.agent.default_agent_loop` names; its class methods are how it plugs in."""
        from verl.agent_loop import AGENT_LOOPS

        return AGENT_LOOPS[self.actor_rollout_ref.rollout.agent.default_agent_loop]

    @property
    def is_delethink(self) -> bool:
        """Whether trajectories are generated in Delethink's chunked environment."""
        return self.actor_rollout_ref.rollout.agent.default_agent_loop == "delethink"

    @functools.cached_property
    def delethink_params(self) -> DelethinkParams:
        """algorithm.delethink as the one Delethink parameter object (load_config has checked it)."""
        from verl.agent_loop.delethink_params import DelethinkParams

        return DelethinkParams(**dataclasses.asdict(self.algorithm.delethink))

    @property
    def uses_critic(self) -> bool:
        """Whether the run trains a value model: only algorithm.adv_estimator=gae needs one."""
        return self.algorithm.adv_estimator == "gae"

    @property
    def critic_model_path(self) -> str:
        """critic.model.path, or the actor's model when it is null."""
        return self.critic.model.path or self.actor_rollout_ref.model.path

    @property
    def trajectories_per_step(self) -> int:
        """Trajectories one training step generates: train_batch_size prompts x rollout.n samples."""
        return self.data.train_batch_size * self.actor_rollout_ref.rollout.n

    @property
    def num_mini_batches(self) -> int:
        """Optimizer steps per training batch: fixed_num_optim_steps, else train_batch_size over
        ppo_mini_batch_size (both count prompts)."""
        actor = self.actor_rollout_ref.actor
        return actor.fixed_num_optim_steps or self.data.train_batch_size // actor.ppo_mini_batch_size

    @property
    def max_question_tokens(self) -> int:
        """The longest prompt a row may have: data.max_prompt_length, less the carry-over a Delethink
        chunk's prompt also holds."""
        carry = self.delethink_params.carry if self.is_delethink else 0
        return self.data.max_prompt_length - carry

    @property
    def train_sampling(self) -> SamplingParams:
        """Sampling of training trajectories (no seed: each trajectory gets its own)."""
        from verl.workers.rollout.base import SamplingParams

        r = self.actor_rollout_ref.rollout
        return SamplingParams(self.data.max_response_length, r.temperature, r.top_p, r.top_k)

    @property
    def val_sampling(self) -> SamplingParams:
        """Sampling of validation trajectories: val_kwargs, greedy unless do_sample (no seed)."""
        from verl.workers.rollout.base import SamplingParams

        v = self.actor_rollout_ref.rollout.val_kwargs
        temperature = v.temperature if v.do_sample else 0.0
        return SamplingParams(self.data.max_response_length, temperature, v.top_p, v.top_k)

    @property
    def thinking_budget(self) -> int:
        """Most thinking tokens one trajectory can hold: LongCoT's B, or Delethink's C + (I-1)(C-m)."""
        if not self.is_delethink:
            return self.data.max_response_length
        return self.delethink_params.thinking_budget

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every value, for logging the run's config."""
        return dataclasses.asdict(self)


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config that `main_policy_iteration --config-name=NAME OVERRIDES...` gets, composed in-process."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


def load_config(cfg: DictConfig, check_paths: bool = True) -> PolicyIterationConfig:
    """Resolve `cfg`, convert it into dataclasses with type checks, then check the rules (and paths)."""
    register_resolvers()
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        tree = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        reason = str(e.msg).splitlines()[0]  # the rest repeats the key and OmegaConf's node type
        raise ConfigError(f"{e.full_key}: cannot resolve the value: {reason}") from None
    if missing:
        raise _error([f"{key}: required, has no default (??? in the YAML); set {key}=..." for key in missing])

    errors: list[str] = []
    config = _build(PolicyIterationConfig, tree, "", errors)
    if errors:
        raise _error(errors)
    errors = _rule_errors(config) + (_path_errors(config) if check_paths else [])
    if errors:
        raise _error(errors)
    return config


def to_dataclass(cls: type, tree: dict[str, Any], path: str = "") -> Any:
    """Type-check a plain dict into dataclass `cls` (for configs other than the training one)."""
    errors: list[str] = []
    out = _build(cls, tree, path, errors)
    if errors:
        raise _error(errors)
    return out


def _error(errors: list[str]) -> ConfigError:
    if len(errors) == 1:
        return ConfigError(errors[0])
    return ConfigError(f"{len(errors)} problems:\n" + "\n".join(f"  - {e}" for e in errors))


# ---------------------------------------------------------------------------------------------------
# Type checking: OmegaConf tree -> dataclasses

_INVALID = object()  # stands in for a value that failed its check; the error is already recorded
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _build(cls: type, node: Any, path: str, errors: list[str]) -> Any:
    if not isinstance(node, dict):
        errors.append(f"{path}={node!r}: must be a section of keys")
        return _INVALID
    num_errors = len(errors)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in node:
        if name not in fields:
            close = difflib.get_close_matches(str(name), fields, n=1)
            hint = f"did you mean {_join(path, close[0])}?" if close else f"known keys: {list(fields)}"
            errors.append(f"{_join(path, str(name))}: unknown key; {hint}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in node:
            kwargs[name] = _convert(hints[name], node[name], _join(path, name), errors)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{_join(path, name)}: required key is missing")
    return cls(**kwargs) if len(errors) == num_errors else _INVALID


def _convert(tp: Any, value: Any, key: str, errors: list[str]) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (tp,) = (a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, errors)
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{key}={value!r}: must be a section of keys")
            return _INVALID
        return {str(k): _convert(args[1], v, _join(key, str(k)), errors) for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):  # a single file or logger needs no brackets on the command line
            value = [value]
        if not isinstance(value, list):
            errors.append(f"{key}={value!r}: must be a list")
            return _INVALID
        return [_convert(args[0], v, f"{key}[{i}]", errors) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            errors.append(f"{key}={value!r}: must be a list of {len(args)} values")
            return _INVALID
        items = enumerate(zip(args, value, strict=True))
        return tuple(_convert(a, v, f"{key}[{i}]", errors) for i, (a, v) in items)
    if tp not in _TYPE_NAMES:
        raise TypeError(f"{key}: config_schema has no type check for annotation {tp!r}")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is float and is_number and math.isfinite(value):
        return float(value)
    if (tp is int and is_number and isinstance(value, int)) or (tp in (bool, str) and isinstance(value, tp)):
        return value
    errors.append(f"{key}={value!r}: must be {_TYPE_NAMES[tp]}")
    return _INVALID


# ---------------------------------------------------------------------------------------------------
# Rules between values


def _field(node: Any, name: str) -> Any:
    return node[name] if isinstance(node, dict) else getattr(node, name)


def _value(c: PolicyIterationConfig, key: str) -> Any:
    return functools.reduce(_field, key.split("."), c)


def environment_names() -> list[str]:
    return sorted(path.stem for path in ENVIRONMENT_DIR.glob("*.yaml"))


def _rule_errors(c: PolicyIterationConfig) -> list[str]:
    """Every section's own rules, then the rules between sections."""
    from verl.envs.plugins import import_plugin

    errors: list[str] = []
    # plugins first: the names they register must validate below
    for i, entry in enumerate(c.external_plugins):
        try:
            import_plugin(entry)
        except ValueError as e:
            errors.append(f"external_plugins[{i}]: {e}")
    return errors + _section_problems(c, "") + _cross_section_errors(c)


def _section_problems(section: Any, key: str) -> list[str]:
    """`section.problems(key)`, then the same for every section below it (tasks included)."""
    # a section without rules of its own (ActorRolloutRefConfig) has no `problems`
    errors = section.problems(key) if hasattr(section, "problems") else []
    for f in dataclasses.fields(section):
        value, field_key = getattr(section, f.name), _join(key, f.name)
        if dataclasses.is_dataclass(value):
            errors += _section_problems(value, field_key)
        elif isinstance(value, dict):  # train_tasks / val_tasks: a section per name
            for name, child in value.items():
                if dataclasses.is_dataclass(child):
                    errors += _section_problems(child, _join(field_key, name))
    return errors


def _cross_section_errors(c: PolicyIterationConfig) -> list[str]:
    """Rules that tie one section to another. The agent loop's and the rollout source's needs are
    their own `config_problems` (verl/agent_loop/, verl/trainer/ppo/rollout_source.py)."""
    from verl.agent_loop import AGENT_LOOPS
    from verl.trainer.ppo.rollout_source import rollout_source_class

    arr, tr = c.actor_rollout_ref, c.trainer
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    errors = []

    def check(ok: bool, key: str, rule: str) -> None:
        if not ok:
            errors.append(f"{key}={_value(c, key)!r}: {rule}")

    for split in ("train", "val"):
        has_tasks = len(getattr(c, f"{split}_tasks")) > 0
        check(
            len(getattr(c.data, f"{split}_files")) > 0 or has_tasks,
            f"data.{split}_files",
            f"must list at least one file, or name tasks in {split}_tasks",
        )
    mini_batch = arr.actor.ppo_mini_batch_size
    check(
        mini_batch <= 0 or c.data.train_batch_size % mini_batch == 0,
        "data.train_batch_size",
        f"must be divisible by {actor}.ppo_mini_batch_size={mini_batch} (both count prompts)",
    )
    estimator = c.algorithm.adv_estimator
    check(
        estimator not in ("grpo", "rloo") or arr.rollout.n >= 2,
        f"{rollout}.n",
        f"must be >= 2 with algorithm.adv_estimator={estimator!r}: a group of one has zero advantage",
    )
    check(
        estimator != "remax" or not arr.rollout.env_manager.enable,
        "algorithm.adv_estimator",
        f"remax generates a greedy baseline per prompt through the worker group; it does not run with "
        f"{rollout}.env_manager.enable=true",
    )
    check(
        arr.rollout.name != "sglang" or tr.device == "cuda",
        f"{rollout}.name",
        f"sglang runs on GPU only, but trainer.device={tr.device!r}; use {rollout}.name=hf on CPU",
    )
    check(
        arr.model.attn_implementation != "flash_attention_2" or tr.device == "cuda",
        "actor_rollout_ref.model.attn_implementation",
        f"flash-attention runs on GPU only, but trainer.device={tr.device!r}; use sdpa on CPU",
    )
    for section in (f"{actor}.fsdp_config", "critic.fsdp_config"):
        for key in ("param_offload", "optimizer_offload"):
            check(
                not _value(c, f"{section}.{key}") or tr.device == "cuda",
                f"{section}.{key}",
                "offloading moves GPU memory to the CPU; with trainer.device=cpu there is nothing to offload",
            )
    check(
        tr.critic_warmup == 0 or estimator == "gae",
        "trainer.critic_warmup",
        f"warms up the critic, which only algorithm.adv_estimator=gae has (it is {estimator!r}); set it to 0",
    )
    # the delethink trainer's rows vary in number (and so do dynamic-batch rows): only ppo splits evenly
    mini_rows, world_size = mini_batch * arr.rollout.n, tr.world_size
    check(
        tr.name != "ppo" or arr.actor.use_dynamic_bsz or world_size <= 0 or mini_rows % world_size == 0,
        f"{actor}.ppo_mini_batch_size",
        f"times {rollout}.n = {mini_rows} rows per mini-batch must split evenly over "
        f"trainer.nnodes x trainer.n_gpus_per_node = {world_size} ranks",
    )
    if arr.rollout.agent.default_agent_loop in AGENT_LOOPS:
        errors += c.agent_loop_class.config_problems(c)
    return errors + rollout_source_class(c).config_problems(c)


def config_warnings(c: PolicyIterationConfig) -> list[str]:
    """What a valid config does that is probably not meant, one line each: an ENVIRONMENT_KEYS value
    other than what the chosen environment sets (a mix runs as asked, but says so), the KL penalised
    both in the reward and in the loss, and an explicit Delethink intermediate budget other than C - m
    (it changes the total thinking budget)."""
    preset = OmegaConf.load(ENVIRONMENT_DIR / f"{c.environment}.yaml")
    warnings = []
    for key in ENVIRONMENT_KEYS:
        value, preset_value = _value(c, key), OmegaConf.select(preset, key)
        if (
            key == "actor_rollout_ref.rollout.agent.default_agent_loop"
            and c.agent_loop_class.fits_any_environment
        ):
            continue  # e.g. the gym loop runs on top of either environment (docs/ENVIRONMENTS.md): no mix
        if key == "actor_rollout_ref.actor.loss_agg_mode" and value == "seq-mean-token-sum-norm":
            continue  # Dr. GRPO: a trajectory's token sum over a constant in either environment, no mix
        if value != preset_value:
            warnings.append(
                f"{key}={value!r} mixes thinking environments: environment={c.environment} sets "
                f"{preset_value!r} (running the mix as asked)"
            )
    model = c.actor_rollout_ref.model
    if model.use_remove_padding and model.attn_implementation == "sdpa":
        warnings.append(
            "actor_rollout_ref.model.use_remove_padding=True with attn_implementation='sdpa': a packed "
            "micro-batch attends through one dense block-diagonal mask, so attention costs the square of "
            "its tokens (5-7x slower than padded rows on CPU, benchmarks/README.md); flash_attention_2 "
            "runs packed rows without it (running as asked)"
        )
    if c.algorithm.use_kl_in_reward and c.actor_rollout_ref.actor.use_kl_loss:
        warnings.append(
            "algorithm.use_kl_in_reward=True and actor_rollout_ref.actor.use_kl_loss=True: the KL to the "
            "reference policy is penalised twice, in the reward and in the loss (running both as asked)"
        )
    if c.is_delethink:
        p = c.delethink_params
        if p.intermediate_budget != p.derived_intermediate:
            warnings.append(
                f"algorithm.delethink.intermediate_max_new_tokens={p.intermediate_budget} is not "
                f"C - keep_head - keep_tail = {p.derived_intermediate}: total thinking budget "
                f"C + (I-1)*{p.intermediate_budget} = {p.chunk_size} + {p.max_chunks - 1}*"
                f"{p.intermediate_budget} = {p.thinking_budget} tokens"
            )
    return warnings


# ---------------------------------------------------------------------------------------------------
# Paths (relative to the working directory; Hydra does not chdir, see hydra.job.chdir)


def _path_errors(c: PolicyIterationConfig) -> list[str]:
    errors: list[str] = []

    def missing(key: str, path: str, problem: str) -> None:
        hint = ""
        if Path(path).resolve().is_relative_to(TINY_DIR.resolve()):
            hint = f"; make the tiny model and data first: {MAKE_TINY}"
        errors.append(f"{key}={path!r}: {problem}{hint}")

    model_path = c.actor_rollout_ref.model.path
    model_problem = model_path_problem(model_path)
    if model_problem:
        missing("actor_rollout_ref.model.path", model_path, model_problem)
    critic_path = c.critic.model.path
    critic_problem = critic_path and c.algorithm.adv_estimator == "gae" and model_path_problem(critic_path)
    if critic_problem:
        missing("critic.model.path", critic_path, critic_problem)
    for key in ("train_files", "val_files"):
        for i, path in enumerate(getattr(c.data, key)):
            if not Path(path).is_file():
                problem = "a directory, not a data file" if Path(path).is_dir() else "no such file"
                missing(f"data.{key}[{i}]", path, problem)
    for split in ("train", "val"):
        for name, task in getattr(c, f"{split}_tasks").items():
            if not Path(task.path).is_file():
                how = f"; {task.how_to_get}" if task.how_to_get else ""
                missing(f"{split}_tasks.{name}.path", task.path, f"no such file{how}")
    attention = c.actor_rollout_ref.model.attn_implementation
    if attention == "flash_attention_2" and importlib.util.find_spec("flash_attn") is None:
        missing(
            "actor_rollout_ref.model.attn_implementation", attention,
            "the flash_attn package is not installed (pip install -e '.[gpu]', see setup.py)",
        )  # fmt: skip
    reward_path = c.custom_reward_function.path
    if reward_path is not None and not Path(reward_path).is_file():
        missing("custom_reward_function.path", reward_path, "no such file")
    resume_path = c.trainer.resume_from_path
    if c.trainer.resume_mode == "path" and resume_path and not Path(resume_path).exists():
        missing("trainer.resume_from_path", resume_path, "no such checkpoint")
    return errors
