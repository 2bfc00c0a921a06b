"""The LoRA keys of a model section, without peft or torch: what the config checks and `lora` reads."""

from __future__ import annotations

from typing import Protocol

ALL_LINEAR = "all-linear"  # peft's name for every linear layer except the output head
# what all-linear adapts in a Qwen2 (or Llama, Mistral) block: attention and the gated MLP
BLOCK_LINEAR_LAYERS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


class LoRAKeys(Protocol):
    """actor_rollout_ref.model, critic.model and SFT's model all carry these three keys."""

    lora_rank: int  # 0: LoRA off
    lora_alpha: float
    target_modules: list[str]
