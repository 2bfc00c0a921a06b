"""The colocated actor + rollout (+ reference) worker: one process that trains and samples.

It holds the FSDP2-sharded policy with its optimizer, a rollout engine with its own copy of the
weights (refreshed in place after every update), the agent loop that drives the engine, and an
optional frozen reference policy for a KL loss. The Ray driver calls its methods with plain data.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import socket
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import fully_shard
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel

from verl.agent_loop.base import Trajectory
from verl.agent_loop.manager import build_agent_loop, run_agent_loops
from verl.trainer.config_schema import PolicyIterationConfig
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.base import SamplingParams

FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def load_causal_lm(path: str) -> PreTrainedModel:
    return AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, attn_implementation="sdpa")


def shard_model(model: PreTrainedModel, mesh) -> PreTrainedModel:
    """FSDP2: each transformer block is its own shard group, the root holds embeddings and head."""
    block_types = tuple(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in block_types:
            fully_shard(module, mesh=mesh)
    fully_shard(model, mesh=mesh)
    return model


def eos_token_ids(model: PreTrainedModel, tokenizer) -> list[int]:
    ids = model.generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


class ActorRolloutRefWorker:
    def __init__(
        self,
        config: PolicyIterationConfig,
        rank: int = 0,
        world_size: int = 1,
        master_port: int | None = None,
    ) -> None:
        from verl.workers.rollout.hf_engine import HFRolloutEngine

        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))))
        self.config = config
        ref_cfg = config.actor_rollout_ref
        if not dist.is_initialized():
            dist.init_process_group(
                "gloo", rank=rank, world_size=world_size,
                init_method=f"tcp://127.0.0.1:{master_port or free_port()}",
            )  # fmt: skip
        mesh = dist.device_mesh.init_device_mesh("cpu", (world_size,))

        self.tokenizer = AutoTokenizer.from_pretrained(ref_cfg.model.path)
        model = load_causal_lm(ref_cfg.model.path)
        if ref_cfg.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable()
        engine_model = load_causal_lm(ref_cfg.model.path).eval()
        self.model = shard_model(model, mesh)

        optim = ref_cfg.actor.optim
        self.optimizer = torch.optim.AdamW(
            self.model.parameters(), lr=optim.lr, betas=tuple(optim.betas), weight_decay=optim.weight_decay
        )
        warmup = optim.lr_warmup_steps
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
        )
        self.actor = DataParallelPPOActor(
            self.model, self.optimizer, ref_cfg.actor, ref_cfg.rollout.temperature,
            norm_length=config.data.max_response_length, lr_scheduler=self.lr_scheduler,
        )  # fmt: skip
        self.ref = None
        if ref_cfg.actor.use_kl_loss:
            ref_model = load_causal_lm(ref_cfg.model.path).eval().requires_grad_(False)
            self.ref = DataParallelPPOActor(
                ref_model, None, ref_cfg.actor, ref_cfg.rollout.temperature, config.data.max_response_length
            )
        self.engine = HFRolloutEngine(
            engine_model, eos_token_ids(engine_model, self.tokenizer), self.tokenizer.pad_token_id,
            max_num_seqs=ref_cfg.rollout.max_num_seqs,
        )  # fmt: skip
        self.agent_loop = build_agent_loop(config, self.engine)
        # one event loop for the worker's lifetime: the engine's batching task lives on it
        self.event_loop = asyncio.new_event_loop()

    # rollout ---------------------------------------------------------------------------------
    def generate(self, prompts: list[list[int]], sampling_params: list[SamplingParams]) -> list[Trajectory]:
        return self.event_loop.run_until_complete(run_agent_loops(self.agent_loop, prompts, sampling_params))

    def sync_engine_weights(self) -> None:
        self.engine.update_weights(get_model_state_dict(self.model, options=FULL_STATE).items())

    # training --------------------------------------------------------------------------------
    def compute_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        return self.actor.compute_log_prob(
            batch, self.config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
        )

    def compute_ref_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.ref is None:
            raise RuntimeError("no reference policy: actor_rollout_ref.actor.use_kl_loss is false")
        return self.ref.compute_log_prob(
            batch, self.config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu
        )

    def update_actor(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int, correction_ratio: float = 1.0
    ) -> dict[str, float]:
        metrics = self.actor.update_policy(batch, num_mini_batches, correction_ratio)
        self.sync_engine_weights()
        return metrics

    # checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self, directory: str) -> None:
        """HF-format model + tokenizer under huggingface/, optimizer/scheduler/RNG under state.pt."""
        out = Path(directory)
        model_sd = get_model_state_dict(self.model, options=FULL_STATE)
        optim_sd = get_optimizer_state_dict(self.model, self.optimizer, options=FULL_STATE)
        if dist.get_rank() == 0:
            self.engine.model.save_pretrained(out / "huggingface", state_dict=model_sd)
            self.tokenizer.save_pretrained(out / "huggingface")
            torch.save(
                {
                    "optimizer": optim_sd,
                    "lr_scheduler": self.lr_scheduler.state_dict(),
                    "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(),
                            "python": random.getstate()},
                },
                out / "state.pt",
            )  # fmt: skip
            (out / "worker.json").write_text(json.dumps({"world_size": dist.get_world_size()}))

    def load_checkpoint(self, directory: str) -> None:
        src = Path(directory)
        weights = load_causal_lm(str(src / "huggingface")).state_dict()
        set_model_state_dict(self.model, weights, options=StateDictOptions(full_state_dict=True))
        state = torch.load(src / "state.pt", weights_only=False)
        set_optimizer_state_dict(
            self.model, self.optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
        )
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        self.sync_engine_weights()

    # inspection (tests, debugging) -----------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return get_model_state_dict(self.model, options=FULL_STATE)

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.engine.model.state_dict().items()}

    def shutdown(self) -> None:
        self.event_loop.close()
        if dist.is_initialized():
            dist.destroy_process_group()
