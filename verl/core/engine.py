"""The rollout engine interface: token ids in, token ids + log-probs + finish reason out.

Every engine (the HF-transformers one on CPU, SGLang on GPU) implements `RolloutEngine`, so agent
loops and trainers never know which one they talk to.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:  # the config imports SamplingParams, and must not wait for torch's import
    import torch

FinishReason = Literal["stop", "length"]


@dataclass(frozen=True)
class SamplingParams:
    max_new_tokens: int
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = -1  # -1 disables top-k
    seed: int | None = None  # same seed + same prompt + same weights -> same tokens
    # timing runs only: an end-of-sequence token does not end the request, so every request writes
    # exactly max_new_tokens and the cost measured is that of the length, not of where the model stopped
    ignore_eos: bool = False


@dataclass
class GenerateOutput:
    token_ids: list[int]
    # log-prob of each sampled token under softmax(logits / temperature), the same quantity the
    # actor recomputes, so truncated importance sampling compares like with like
    log_probs: list[float]
    finish_reason: FinishReason  # "stop": an end-of-sequence token was sampled (and is included)


class RolloutEngine(ABC):
    # An engine that applies a LoRA policy's adapters itself (SGLang, serving them over its own copy of
    # the base) takes only the adapters in `update_weights`; the others take every weight.
    takes_adapters_only: bool = False

    @abstractmethod
    async def generate(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        """Sample one continuation of `prompt_ids`. Concurrent calls are batched together."""

    @abstractmethod
    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Load new policy weights (HF parameter names) in place; later calls sample from them."""

    # An engine that shares its device with the actor frees its memory while the actor trains. The
    # HF engine lives in host memory next to the actor, so it keeps everything and these do nothing.
    def release_memory(self) -> None:  # noqa: B027 (a no-op by default, not abstract)
        """Free the engine's device memory (weights, KV cache) until `resume_memory`."""

    def resume_memory(self) -> None:  # noqa: B027
        """Take back what `release_memory` freed. Released weights may be lost: `update_weights` first."""

    def shutdown(self) -> None:  # noqa: B027
        """Stop the engine's background processes, if it has any."""
