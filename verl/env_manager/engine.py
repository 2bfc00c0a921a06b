"""Engine access for rollout workers: the policy's engine lives in another Ray actor.

Any actor with `async def generate_one(prompt_ids, sampling_params) -> GenerateOutput` serves: the
trainer's ActorRolloutRefWorker, or `HFEngineServer` below (a model directory behind an HF engine,
for running the environment manager without a trainer, and for tests). Concurrent `generate_one`
calls run on the actor's event loop and batch together in its engine.
"""

from __future__ import annotations

from collections.abc import Iterable

import torch

from verl.core.engine import GenerateOutput, RolloutEngine, SamplingParams


class RemoteEngine(RolloutEngine):
    """A RolloutEngine whose `generate` runs in a remote actor's engine."""

    def __init__(self, handle) -> None:
        self.handle = handle

    async def generate(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        return await self.handle.generate_one.remote(list(prompt_ids), sampling_params)

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        raise RuntimeError(
            "RemoteEngine cannot load weights: the actor that owns the engine syncs them itself "
            "(ActorRolloutRefWorker.sync_engine_weights after each update)"
        )


class HFEngineServer:
    """A Ray actor serving one HFRolloutEngine over a model directory."""

    def __init__(self, model_path: str, max_num_seqs: int = 256, seed: int = 0) -> None:
        from transformers import AutoTokenizer

        from verl.single_controller.fsdp_workers import eos_token_ids, load_causal_lm
        from verl.workers.rollout.hf_engine import HFRolloutEngine

        tokenizer = AutoTokenizer.from_pretrained(model_path)
        model = load_causal_lm(model_path).eval()
        self.engine = HFRolloutEngine(
            model,
            eos_token_ids(model.generation_config, tokenizer),
            tokenizer.pad_token_id,
            max_num_seqs=max_num_seqs,
            seed=seed,
        )

    async def generate_one(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        return await self.engine.generate(prompt_ids, sampling_params)

    def max_rows_per_forward(self) -> int:
        """The largest batch the engine ran: above 1 means concurrent callers were batched."""
        return self.engine.max_rows_per_forward
