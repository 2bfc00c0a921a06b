"""`actor_rollout_ref.*`: the policy's model, its training (`actor`), its rollout and the reference."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.config.rules import (
    ACTOR_STRATEGIES,
    ATTN_IMPLEMENTATIONS,
    DTYPES,
    GYM_TRAIN_ON,
    LORA_RULES,
    ROLLOUT_MODES,
    ROLLOUT_NAMES,
    SAMPLING_RULES,
    broken,
    non_negative,
    not_empty,
    one_of,
    positive,
)
from verl.core import names
from verl.models.lora_keys import ALL_LINEAR


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
    lora_rank: int = 0  # LoRA adapters of this rank are all the actor trains (peft); 0: full fine-tuning
    lora_alpha: float = 16.0  # LoRA scale: the adapters' update is multiplied by lora_alpha / lora_rank
    # modules that get adapters: names (q_proj, ...) or all-linear (every linear layer but the LM head)
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR])

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            *not_empty("path"),
            *LORA_RULES,
            one_of("attn_implementation", ATTN_IMPLEMENTATIONS),
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
        return broken(self, key, [one_of("param_dtype", DTYPES), one_of("reduce_dtype", DTYPES)])


@dataclass
class OptimConfig:
    lr: float = 1e-6  # AdamW learning rate
    weight_decay: float = 0.01  # AdamW weight decay
    betas: tuple[float, float] = (0.9, 0.999)  # AdamW betas
    lr_warmup_steps: int = 0  # optimizer steps of linear warm-up

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            *positive("lr"),
            *non_negative("weight_decay", "lr_warmup_steps"),
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
    # set by the environment; how per-token losses become one number (names.LOSS_AGG_MODES;
    # seq-mean-token-sum-norm, Dr. GRPO's: a trajectory's token sum over the thinking budget)
    loss_agg_mode: str = "seq-mean-token-norm-trace-length"
    # null: each mini-batch's loss is the exact mean its loss_agg_mode names (Delethink: over its
    # trajectories); D: that mean x the mini-batch's rows / D, the reference implementation's scale, which
    # divides by its configured mini-batch (ppo_mini_batch_size x rollout.n rows; docs/PAPER_CONFIGS.md)
    loss_divisor_rows: int | None = None
    entropy_coeff: float = 0.0  # weight of the entropy bonus
    use_kl_loss: bool = False  # add a KL penalty to a frozen reference model
    kl_loss_coef: float = 0.001  # weight of that KL penalty
    kl_loss_type: str = "low_var_kl"  # KL estimator (names.KL_PENALTY_TYPES)
    grad_clip: float = 1.0  # max global gradient norm
    use_dynamic_bsz: bool = False  # micro-batches by token budget (ppo_max_token_len_per_gpu) instead of rows
    ppo_max_token_len_per_gpu: int = 16384  # tokens (prompt + response) per micro-batch with use_dynamic_bsz
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            one_of("strategy", ACTOR_STRATEGIES),
            *positive("ppo_mini_batch_size", "ppo_micro_batch_size_per_gpu", "ppo_epochs", "clip_ratio_high",
                       "grad_clip", "ppo_max_token_len_per_gpu"),
            ("fixed_num_optim_steps", lambda v: v is None or v >= 1, "must be null or >= 1"),
            ("loss_divisor_rows", lambda v: v is None or v >= 1,
             "must be null (the exact mean) or the rows to divide each mini-batch's loss by (>= 1)"),
            ("clip_ratio_low", lambda v: 0 < v < 1, "must be in (0, 1): the lower clip bound is 1 - it"),
            ("clip_ratio_c", lambda v: v > 1, "must be > 1 (the dual-clip bound is above the clip)"),
            one_of("loss_agg_mode", names.LOSS_AGG_MODES),
            *non_negative("kl_loss_coef"),
            one_of("kl_loss_type", names.KL_PENALTY_TYPES),
        ])  # fmt: skip


@dataclass
class SamplingConfig:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0  # nucleus sampling mass
    top_k: int = -1  # -1: no top-k
    n: int = 1  # samples per validation prompt
    do_sample: bool = True  # false: greedy (temperature ignored)

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [*SAMPLING_RULES, ("n", lambda v: v >= 1, "must be >= 1")])


@dataclass
class MultiTurnConfig:
    # gym: the most model turns (Delethink's I is algorithm.delethink.max_chunks)
    max_assistant_turns: int = 1

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [("max_assistant_turns", lambda v: v >= 1, "must be >= 1")])


@dataclass
class AgentConfig:
    # set by the environment; single_turn (LongCoT) | delethink | gym (verl/envs)
    default_agent_loop: str = "single_turn"


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
        # the env and context-manager names are the registries' (verl/trainer/config_loader.py)
        return broken(self, key, [
            one_of("train_on", GYM_TRAIN_ON),
            *positive("step_timeout_s"),
            ("max_prompt_tokens", lambda v: v is None or v > 0, "must be null (no cap) or > 0"),
        ])  # fmt: skip


@dataclass
class EnvManagerConfig:
    """Rollouts through environment-manager workers (verl/env_manager) instead of the agent-loop batch."""

    enable: bool = False  # true: rollout workers run episodes with scheduler-given seeds and a GlobalDataset
    num_workers: int = 1  # rollout worker actors; env managers are dealt to them round-robin
    num_groups: int = -1  # training groups of rollout.n env managers; -1: data.train_batch_size
    num_val_groups: int = -1  # validation groups of val_kwargs.n env managers; -1: num_groups

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            ("num_workers", lambda v: v >= 1, "must be >= 1"),
            ("num_groups", lambda v: v == -1 or v >= 1, "must be -1 (data.train_batch_size) or >= 1"),
            ("num_val_groups", lambda v: v == -1 or v >= 1, "must be -1 (num_groups) or >= 1"),
        ])  # fmt: skip


@dataclass
class RolloutConfig:
    name: str = "hf"  # generation engine: hf (the CPU default: faster there) | sglang (GPU; runs on CPU too)
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
    # the engine's weights and KV cache: float32 | bfloat16 | float16; null: hf float32, sglang the actor's
    # fsdp_config.param_dtype (train/rollout_* metrics show what a lower precision costs)
    dtype: str | None = None
    # the gym agent loop (verl/envs); a row's env_config/ctx_config wins
    gym: GymConfig = field(default_factory=GymConfig)
    # rollouts by environment-manager workers (docs/ENV_MANAGER.md)
    env_manager: EnvManagerConfig = field(default_factory=EnvManagerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)  # sampling for validation

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            one_of("name", ROLLOUT_NAMES),
            one_of("mode", ROLLOUT_MODES),
            *SAMPLING_RULES,
            *positive("n", "max_num_seqs", "log_prob_max_token_len_per_gpu", "tensor_model_parallel_size"),
            ("gpu_memory_utilization", lambda v: 0 < v <= 1, "must be in (0, 1]"),
            ("dtype", lambda v: v is None or v in DTYPES, f"must be null or one of {list(DTYPES)}"),
        ])  # fmt: skip


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = 8  # rows per reference-model forward (only with use_kl_loss)
    log_prob_max_token_len_per_gpu: int = 16384  # tokens per reference micro-batch with actor.use_dynamic_bsz

    def problems(self, key: str) -> list[str]:
        return broken(
            self, key, positive("log_prob_micro_batch_size_per_gpu", "log_prob_max_token_len_per_gpu")
        )


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)
