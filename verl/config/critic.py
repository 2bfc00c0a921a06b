"""`critic.*`: the value model (algorithm.adv_estimator=gae)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.config.actor_rollout_ref import FSDPConfig, OptimConfig
from verl.config.rules import LORA_RULES, broken, one_of, positive
from verl.core import names
from verl.models.lora_keys import ALL_LINEAR


@dataclass
class CriticModelConfig:
    path: str | None = None  # HF model directory or hub id of the value model; null: the actor's model
    enable_gradient_checkpointing: bool = False  # recompute activations in backward to save memory
    lora_rank: int = 0  # LoRA adapters of this rank (and the value head) are all the critic trains; 0: off
    lora_alpha: float = 16.0  # LoRA scale: the adapters' update is multiplied by lora_alpha / lora_rank
    # modules that get adapters: names (q_proj, ...) or all-linear (every linear layer but the value head)
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR])

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            ("path", lambda v: v != "", "must be null (the actor's model) or a path"), *LORA_RULES
        ])  # fmt: skip


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
    # how per-token value losses become one number (names.LOSS_AGG_MODES)
    loss_agg_mode: str = "token-mean"
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            *positive("ppo_micro_batch_size_per_gpu", "forward_micro_batch_size_per_gpu",
                       "ppo_max_token_len_per_gpu", "ppo_epochs", "cliprange_value", "grad_clip"),
            one_of("loss_agg_mode", names.LOSS_AGG_MODES),
        ])  # fmt: skip
