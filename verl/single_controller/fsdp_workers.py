"""The colocated actor + rollout (+ reference) worker: one process per device that trains and samples.

It holds one FSDP2 shard of the policy with its optimizer, a rollout engine with a full copy of the
weights (refreshed in place after every update), the agent loop that drives the engine, and an
optional frozen reference policy for a KL loss. `verl.single_controller.worker_group` runs N of them as Ray
actors; the driver calls them with plain data. Construction is cheap; `init_model` joins the process
group and loads the models, so the group can learn rank 0's address first.

Rollout methods are `async`: Ray then runs the worker as an async actor, so concurrent callers
(the driver's batch, or environment rollout workers calling `generate_one`) share the engine's
batches. The training methods are plain functions that run to completion on the same thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForTokenClassification,
    AutoTokenizer,
    GenerationConfig,
    PreTrainedModel,
)

from verl.agent_loop.manager import build_agent_loop, run_agent_loops
from verl.config import FSDPConfig, OptimConfig, PolicyIterationConfig
from verl.core.engine import GenerateOutput, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory
from verl.envs.base import close_open_envs
from verl.envs.plugins import import_plugins
from verl.models import lora
from verl.utils.peak_memory import DevicePhasePeaks
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.critic.dp_critic import DataParallelPPOCritic

FULL_STATE = StateDictOptions(full_state_dict=True, cpu_offload=True)


def free_port() -> int:
    """A port free on every interface: the rendezvous store listens on all of them, so that ranks on
    other nodes reach it."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def load_causal_lm(path: str, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """float32 weights (FSDP's mixed precision casts for compute). The rollout engine's copy stays on
    sdpa, which takes the engine's prepared masks; the actor and reference take the config's kernel."""
    return AutoModelForCausalLM.from_pretrained(
        path, dtype=torch.float32, attn_implementation=attn_implementation
    )


def load_value_model(path: str, attn_implementation: str = "sdpa") -> PreTrainedModel:
    """The critic: the base model with a one-output token-classification head (Qwen2ForTokenClassification
    for Qwen2), float32. A head missing from `path` starts fresh (transformers' init); its dropout is off,
    since value targets are regression targets."""
    config = AutoConfig.from_pretrained(path, num_labels=1)
    config.classifier_dropout = 0.0  # not every model's config has the key; the head reads it if set
    return AutoModelForTokenClassification.from_pretrained(
        path, config=config, dtype=torch.float32, attn_implementation=attn_implementation
    )


def shard_model(model: PreTrainedModel, mesh, fsdp: FSDPConfig | None = None) -> PreTrainedModel:
    """FSDP2: each transformer block is its own shard group, the root holds embeddings and head."""
    fsdp = fsdp or FSDPConfig()
    kwargs = {
        "mesh": mesh,
        "mp_policy": MixedPrecisionPolicy(
            param_dtype=getattr(torch, fsdp.param_dtype), reduce_dtype=getattr(torch, fsdp.reduce_dtype)
        ),
    }
    if fsdp.param_offload:
        kwargs["offload_policy"] = CPUOffloadPolicy()
    block_types = tuple(getattr(model, "_no_split_modules", None) or [])
    for module in model.modules():
        if type(module).__name__ in block_types:
            fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    return model


class EngineThread:
    """Hosts an engine that must own its event loop (SGLang: its sync calls run that loop themselves,
    which cannot happen inside Ray's running loop) on one dedicated thread with a loop of its own."""

    def __init__(self, build: Callable[[], Any]) -> None:
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="engine")

        def start() -> Any:
            asyncio.set_event_loop(asyncio.new_event_loop())
            return build()

        self.engine = self._executor.submit(start).result()

    async def run(self, make_coroutine: Callable[[], Any]) -> Any:
        """Await, from any loop, a coroutine run to completion on the engine's loop."""
        job = self._executor.submit(lambda: self.engine.event_loop.run_until_complete(make_coroutine()))
        return await asyncio.wrap_future(job)

    def call(self, fn: Callable[[], Any]) -> Any:
        return self._executor.submit(fn).result()


def move_optimizer_state(optimizer: torch.optim.Optimizer, device: torch.device | str) -> None:
    """Optimizer offload: AdamW's moments live on CPU between updates and visit the GPU for a step."""
    # A non-blocking copy to the CPU may not have landed when the CPU reads it (a checkpoint right
    # after the update); towards the GPU, later kernels on the stream wait for it.
    non_blocking = torch.device(device).type == "cuda"
    for state in optimizer.state.values():
        for key, value in state.items():
            if isinstance(value, torch.Tensor):
                state[key] = value.to(device, non_blocking=non_blocking)


@contextlib.contextmanager
def optimizer_on_device(
    optimizer: torch.optim.Optimizer, device: torch.device, fsdp: FSDPConfig
) -> Iterator[None]:
    """With fsdp.optimizer_offload, the optimizer's state visits `device` for an update only."""
    if fsdp.optimizer_offload:
        move_optimizer_state(optimizer, device)
    yield
    if fsdp.optimizer_offload:
        move_optimizer_state(optimizer, "cpu")


def make_optimizer(
    model: torch.nn.Module, optim: OptimConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters (a LoRA model's adapters) and its linear warm-up over
    optim.lr_warmup_steps optimizer steps."""
    optimizer = torch.optim.AdamW(
        lora.trainable_parameters(model),
        lr=optim.lr,
        betas=tuple(optim.betas),
        weight_decay=optim.weight_decay,
    )
    warmup = optim.lr_warmup_steps
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / warmup) if warmup > 0 else 1.0
    )
    return optimizer, scheduler


def apply_optim_config(
    optimizer: torch.optim.Optimizer, lr_scheduler: torch.optim.lr_scheduler.LambdaLR, optim: OptimConfig
) -> None:
    """A loaded optimizer state carries the saved lr, betas and weight decay; a resumed run may change
    them (resume.MAY_CHANGE), so this run's values replace them, at the scheduler's step."""
    scale = lr_scheduler.lr_lambdas[0](lr_scheduler.last_epoch)
    lr_scheduler.base_lrs = [optim.lr for _ in optimizer.param_groups]
    for group in optimizer.param_groups:
        group.update(initial_lr=optim.lr, lr=optim.lr * scale, betas=tuple(optim.betas),
                     weight_decay=optim.weight_decay)  # fmt: skip
    lr_scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]


def eos_token_ids(generation_config: GenerationConfig, tokenizer) -> list[int]:
    """Every id that ends a response: the model's generation config's, and the tokenizer's EOS."""
    ids = generation_config.eos_token_id
    ids = [ids] if isinstance(ids, int) else list(ids or [])
    if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in ids:
        ids.append(tokenizer.eos_token_id)
    return ids


class ActorRolloutRefWorker:
    def __init__(self, config: PolicyIterationConfig, rank: int = 0, world_size: int = 1) -> None:
        import_plugins(config.external_plugins)  # user envs etc. register in this process too
        self.config = config
        self.rank, self.world_size = rank, world_size
        self.on_gpu = config.trainer.device == "cuda"
        # Ray gives each GPU rank exactly one visible device
        self.device = torch.device("cuda", 0) if self.on_gpu else torch.device("cpu")
        self.memory_peaks = DevicePhasePeaks(self.device)  # reported with the update's metrics
        torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", os.cpu_count() or 1))))

    def node_id(self) -> str:
        """The Ray node this rank runs on (the group's rank -> node table)."""
        import ray

        return ray.get_runtime_context().get_node_id()

    def rendezvous_address(self) -> tuple[str, int]:
        """Where the other ranks find this one (rank 0) to form the process group."""
        import ray

        return ray.util.get_node_ip_address(), free_port()

    def init_model(self, master_addr: str = "127.0.0.1", master_port: int | None = None) -> None:
        from verl.workers.rollout.hf_engine import HFRolloutEngine

        config = self.config
        ref_cfg = config.actor_rollout_ref
        if self.on_gpu:
            torch.cuda.set_device(self.device)  # NCCL and the device mesh take the current device
        if not dist.is_initialized():
            dist.init_process_group(
                "nccl" if self.on_gpu else "gloo", rank=self.rank, world_size=self.world_size,
                init_method=f"tcp://{master_addr}:{master_port or free_port()}",
            )  # fmt: skip
        mesh = dist.device_mesh.init_device_mesh(self.device.type, (self.world_size,))

        self.tokenizer = AutoTokenizer.from_pretrained(ref_cfg.model.path)
        model = load_causal_lm(ref_cfg.model.path, ref_cfg.model.attn_implementation).to(self.device)
        if ref_cfg.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if ref_cfg.model.lora_rank:
            model = lora.add_adapters(model, ref_cfg.model, lora.CAUSAL_LM, seed=config.trainer.seed)
        self.model = shard_model(model, mesh, ref_cfg.actor.fsdp_config)

        self.optimizer, self.lr_scheduler = make_optimizer(self.model, ref_cfg.actor.optim)
        self.actor = DataParallelPPOActor(
            self.model, self.optimizer, ref_cfg.actor, ref_cfg.rollout.temperature,
            norm_length=config.thinking_budget, lr_scheduler=self.lr_scheduler,
            use_remove_padding=ref_cfg.model.use_remove_padding,
            share_prompt_prefix=ref_cfg.model.share_prompt_prefix,
        )  # fmt: skip
        self.ref = None
        if ref_cfg.actor.use_kl_loss or config.algorithm.use_kl_in_reward:
            if ref_cfg.model.lora_rank:  # the actor itself, its adapters off for reference log-probs
                ref_model = self.model
            else:
                ref_model = load_causal_lm(ref_cfg.model.path, ref_cfg.model.attn_implementation)
                # frozen, so no float32 master copy: it computes in the actor's dtype (flash-attention
                # takes no float32), and its log-probs compare with the actor's at the same precision
                compute_dtype = getattr(torch, ref_cfg.actor.fsdp_config.param_dtype)
                ref_model = ref_model.to(self.device, compute_dtype).eval().requires_grad_(False)
            self.ref = DataParallelPPOActor(
                ref_model, None, ref_cfg.actor, ref_cfg.rollout.temperature, config.thinking_budget,
                use_remove_padding=ref_cfg.model.use_remove_padding,
                share_prompt_prefix=ref_cfg.model.share_prompt_prefix,
            )  # fmt: skip
        self.critic = self._build_critic(mesh) if config.uses_critic else None
        eos_ids = eos_token_ids(model.generation_config, self.tokenizer)
        self.engine_thread: EngineThread | None = None
        if ref_cfg.rollout.name == "sglang":
            from verl.workers.rollout.sglang_engine import SGLangRolloutEngine

            self.engine_thread = EngineThread(lambda: SGLangRolloutEngine.from_config(config, eos_ids))
            self.engine = self.engine_thread.engine
        else:
            engine_model = load_causal_lm(ref_cfg.model.path)
            if ref_cfg.model.lora_rank:
                engine_model = lora.engine_model(engine_model, ref_cfg.model)
            engine_model = engine_model.to(self.device, getattr(torch, config.engine_dtype)).eval()
            self.engine = HFRolloutEngine(
                engine_model, eos_ids, self.tokenizer.pad_token_id, max_num_seqs=ref_cfg.rollout.max_num_seqs
            )
        self.agent_loop = build_agent_loop(config, self.engine, self.tokenizer)

    def _build_critic(self, mesh) -> DataParallelPPOCritic:
        """The value model, sharded like the actor, with its own AdamW and scheduler."""
        config = self.config
        # every rank draws the same fresh head (FSDP2 shards each rank's own copy), whatever the RNG's state
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(config.trainer.seed)
            model = load_value_model(
                config.critic_model_path, config.actor_rollout_ref.model.attn_implementation
            ).to(self.device)
        if config.critic.model.enable_gradient_checkpointing:
            model.gradient_checkpointing_enable()
        if config.critic.model.lora_rank:
            model = lora.add_adapters(model, config.critic.model, lora.TOKEN_CLS, seed=config.trainer.seed)
        model = shard_model(model, mesh, config.critic.fsdp_config)
        optimizer, lr_scheduler = make_optimizer(model, config.critic.optim)
        return DataParallelPPOCritic(model, optimizer, config.critic, config.thinking_budget, lr_scheduler)

    # rollout ---------------------------------------------------------------------------------
    async def generate(
        self, items: list[PromptItem], sampling_params: list[SamplingParams]
    ) -> list[Trajectory]:
        with self.memory_peaks.phase("generation"):
            if self.engine_thread is not None:
                return await self.engine_thread.run(
                    lambda: run_agent_loops(self.agent_loop, items, sampling_params)
                )
            return await run_agent_loops(self.agent_loop, items, sampling_params)

    async def generate_one(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        """One engine request, batched with whatever else is in flight (for environment rollout workers).
        On an engine thread (SGLang) concurrent calls run one after another."""
        if self.engine_thread is not None:
            return await self.engine_thread.run(lambda: self.engine.generate(prompt_ids, sampling_params))
        return await self.engine.generate(prompt_ids, sampling_params)

    def _engine_call(self, fn: Callable[[], Any]) -> Any:
        return self.engine_thread.call(fn) if self.engine_thread is not None else fn()

    def sync_engine_weights(self) -> None:
        """Every rank's engine gets the full weights, gathered one parameter at a time (a collective:
        all ranks walk the parameters in the same order), so peak memory is one full tensor."""
        named = lora.weights_for_engine(self.model, adapters_only=self.engine.takes_adapters_only)
        self._engine_call(lambda: self.engine.update_weights(named))

    # training --------------------------------------------------------------------------------
    def _to_device(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v.to(self.device) for k, v in batch.items()}

    def compute_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.memory_peaks.phase("log_prob"):
            return self.actor.compute_log_prob(
                self._to_device(batch),
                self.config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu,
                max_token_len=self.config.actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu,
            ).cpu()

    def compute_ref_log_prob(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        if self.ref is None:
            raise RuntimeError(
                "no reference policy: actor_rollout_ref.actor.use_kl_loss and "
                "algorithm.use_kl_in_reward are both false"
            )
        with self.memory_peaks.phase("ref_log_prob"), lora.reference_policy(self.ref.model):
            return self.ref.compute_log_prob(
                self._to_device(batch),
                self.config.actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu,
                max_token_len=self.config.actor_rollout_ref.ref.log_prob_max_token_len_per_gpu,
            ).cpu()

    def update_actor(
        self, batch: dict[str, torch.Tensor], num_mini_batches: int, rows_per_trajectory: float = 1.0
    ) -> dict[str, float]:
        return self.update(batch, num_mini_batches, rows_per_trajectory, actor=True, critic=False)

    def update(
        self,
        batch: dict[str, torch.Tensor],
        num_mini_batches: int,
        rows_per_trajectory: float = 1.0,
        *,
        actor: bool,
        critic: bool,
    ) -> dict[str, float]:
        """One step's updates: the critic's (gae), then the actor's, in one window in which a colocated
        engine has given its memory to training (rollout.free_cache_engine); the engine then takes the
        actor's weights. `rows_per_trajectory` (the step's rows per trajectory) is the actor's alone. The
        critic's share of the time comes back as timing/update_critic_s, and on CUDA this rank's peak
        memory per phase since the last update as perf/max_memory_*."""
        with self.memory_peaks.phase("update"):
            metrics = self._update(batch, num_mini_batches, rows_per_trajectory, actor=actor, critic=critic)
        return {**metrics, **self.memory_peaks.report()}

    def _update(
        self,
        batch: dict[str, torch.Tensor],
        num_mini_batches: int,
        rows_per_trajectory: float,
        *,
        actor: bool,
        critic: bool,
    ) -> dict[str, float]:
        ref_cfg = self.config.actor_rollout_ref
        release = ref_cfg.rollout.free_cache_engine
        if release:
            self._engine_call(self.engine.release_memory)
        batch = self._to_device(batch)
        metrics: dict[str, float] = {}
        if critic:
            t = time.perf_counter()
            dp_critic = self._require_critic()
            with optimizer_on_device(dp_critic.optimizer, self.device, self.config.critic.fsdp_config):
                metrics.update(dp_critic.update_critic(batch, num_mini_batches))
            metrics["timing/update_critic_s"] = time.perf_counter() - t
        if actor:
            with optimizer_on_device(self.optimizer, self.device, ref_cfg.actor.fsdp_config):
                metrics.update(self.actor.update_policy(batch, num_mini_batches, rows_per_trajectory))
        if actor or release:  # new weights, or released ones to restore
            self.sync_engine_weights()
        if release:
            self._engine_call(self.engine.resume_memory)
        return metrics

    def _require_critic(self) -> DataParallelPPOCritic:
        if self.critic is None:
            raise RuntimeError("no critic: it is built only with algorithm.adv_estimator=gae")
        return self.critic

    def compute_values(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        with self.memory_peaks.phase("values"):
            return self._require_critic().compute_values(self._to_device(batch)).cpu()

    # checkpoints -----------------------------------------------------------------------------
    def save_checkpoint(self, directory: str) -> None:
        """HF-format model + tokenizer under huggingface/, optimizer/scheduler/RNG under state.pt.
        Every rank gathers (a collective); rank 0 writes."""
        model_sd = get_model_state_dict(self.model, options=FULL_STATE)
        optim_sd = get_optimizer_state_dict(self.model, self.optimizer, options=FULL_STATE)
        try:
            if self.rank == 0:
                self._write_actor(Path(directory), model_sd, optim_sd)
        finally:
            # nobody moves on (e.g. commits the directory) before rank 0 has written it; a write that
            # fails on rank 0 raises there after this, so the other ranks are not left waiting for it
            dist.barrier()

    def _write_actor(self, out: Path, model_sd: dict[str, Any], optim_sd: dict[str, Any]) -> None:
        model_cfg = self.config.actor_rollout_ref.model
        # an unsharded model object writes the HF files; the HF engine of a full fine-tuning run holds one
        # already (in float32, so that the files say the dtype of the weights they hold)
        engine_model = getattr(self.engine, "model", None)
        if model_cfg.lora_rank or getattr(engine_model, "dtype", None) != torch.float32:
            engine_model = None
        lora.save_model(
            out / "huggingface", out / lora.ADAPTER_DIR, self.model, model_sd, model_cfg, lora.CAUSAL_LM,
            lambda: engine_model or load_causal_lm(model_cfg.path),
        )  # fmt: skip
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
        (out / "worker.json").write_text(json.dumps({"world_size": self.world_size}))

    def load_checkpoint(self, directory: str) -> None:
        """Full state dicts, so a checkpoint loads into any number of ranks."""
        src = Path(directory)
        model_cfg = self.config.actor_rollout_ref.model
        lora.load_model(
            self.model, src / "huggingface", src / lora.ADAPTER_DIR, model_cfg, model_cfg.path, load_causal_lm
        )
        state = torch.load(src / "state.pt", weights_only=False)
        set_optimizer_state_dict(
            self.model, self.optimizer, state["optimizer"], options=StateDictOptions(full_state_dict=True)
        )
        self.lr_scheduler.load_state_dict(state["lr_scheduler"])
        apply_optim_config(self.optimizer, self.lr_scheduler, self.config.actor_rollout_ref.actor.optim)
        torch.set_rng_state(state["rng"]["torch"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        self.sync_engine_weights()

    def save_critic_checkpoint(self, directory: str) -> None:
        """The critic as the actor's checkpoint: HF-format value model (with its head) under huggingface/,
        optimizer and scheduler under state.pt. Every rank gathers (a collective); rank 0 writes."""
        critic, out = self._require_critic(), Path(directory)
        model_sd = get_model_state_dict(critic.model, options=FULL_STATE)
        optim_sd = get_optimizer_state_dict(critic.model, critic.optimizer, options=FULL_STATE)
        try:
            if self.rank == 0:
                # an unsharded model object writes the HF files
                lora.save_model(
                    out / "huggingface", out / lora.ADAPTER_DIR, critic.model, model_sd,
                    self.config.critic.model, lora.TOKEN_CLS,
                    lambda: load_value_model(self.config.critic_model_path),
                )  # fmt: skip
                scheduler = critic.lr_scheduler.state_dict()
                torch.save({"optimizer": optim_sd, "lr_scheduler": scheduler}, out / "state.pt")
        finally:
            dist.barrier()  # as in save_checkpoint

    def load_critic_checkpoint(self, directory: str) -> None:
        critic, src = self._require_critic(), Path(directory)
        full = StateDictOptions(full_state_dict=True)
        lora.load_model(
            critic.model, src / "huggingface", src / lora.ADAPTER_DIR, self.config.critic.model,
            self.config.critic_model_path, load_value_model,
        )  # fmt: skip
        state = torch.load(src / "state.pt", weights_only=False)
        set_optimizer_state_dict(critic.model, critic.optimizer, state["optimizer"], options=full)
        critic.lr_scheduler.load_state_dict(state["lr_scheduler"])
        apply_optim_config(critic.optimizer, critic.lr_scheduler, self.config.critic.optim)

    # inspection (tests, debugging) -----------------------------------------------------------
    def full_state_dict(self) -> dict[str, torch.Tensor]:
        return get_model_state_dict(self.model, options=FULL_STATE)

    def engine_state_dict(self) -> dict[str, torch.Tensor]:
        if self.engine_thread is not None:
            raise RuntimeError(
                "the SGLang engine's weights live in its own processes; compare outputs instead"
            )
        return {k: v.detach().cpu().clone() for k, v in self.engine.model.state_dict().items()}

    def shutdown(self) -> None:
        self._engine_call(self.engine.shutdown)
        close_open_envs()  # episodes that never finished (a crash mid-rollout) leave envs open
        if dist.is_initialized():
            dist.destroy_process_group()
