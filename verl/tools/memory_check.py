"""The memory estimate of a validated config: the table `DRY_RUN=1` prints after the plan, and the
refusal of a CUDA run whose estimate exceeds `trainer.gpu_memory_gib`, naming the keys to change.

The formulas live in `verl/tools/memory_estimate.py`. Here: the model's shape (its config.json when
the path is a local directory, else the known dims of a few hub ids, else no estimate: a guess would
make the check pass or fail for no reason), the config's values in the estimate's terms, and text.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from verl.config import PolicyIterationConfig
from verl.tools.cost_model import qwen2_dims
from verl.tools.memory_estimate import (
    GIB,
    PHASES,
    RUNTIME_OVERHEAD_GIB,
    TERMS,
    MemoryEstimate,
    MemorySettings,
    ModelShape,
    estimate_memory,
    largest_micro_batch,
)

DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}
# Model types whose blocks are what qwen2_dims counts: attention with grouped KV heads and a gated MLP.
SUPPORTED_MODEL_TYPES = ("qwen2", "llama", "mistral")
_QWEN25_1_5B = {
    "hidden_size": 1536,
    "num_hidden_layers": 28,
    "num_attention_heads": 12,
    "num_key_value_heads": 2,
    "intermediate_size": 8960,
    "vocab_size": 151936,
}
# Hub ids a dry run cannot read (no download): values of their config.json. key: the id, lower case.
KNOWN_MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "deepseek-ai/deepseek-r1-distill-qwen-1.5b": (
        "DeepSeek-R1-Distill-Qwen-1.5B",
        {**_QWEN25_1_5B, "tie_word_embeddings": False},
    ),
    "qwen/qwen2.5-1.5b": ("Qwen2.5-1.5B", {**_QWEN25_1_5B, "tie_word_embeddings": True}),
    "qwen/qwen2.5-1.5b-instruct": ("Qwen2.5-1.5B-Instruct", {**_QWEN25_1_5B, "tie_word_embeddings": True}),
    # assumed, not read: the authors' sibling checkpoints (e.g. McGill-NLP/longcot-8k-1.5b) say on their
    # model cards that they start from R1-Distill-Qwen-1.5B
    "mcgill-nlp/delethink-96k-base-1.5b": (
        "DeepSeek-R1-Distill-Qwen-1.5B's, assumed (not read)",
        {**_QWEN25_1_5B, "tie_word_embeddings": False},
    ),
}


def shape_from_hf_config(values: Mapping[str, Any]) -> ModelShape:
    """A ModelShape from config.json values. A missing tie_word_embeddings counts as untied, Qwen2's
    default (and the larger of the two parameter counts)."""
    return ModelShape(
        dims=qwen2_dims(SimpleNamespace(**values), bytes_per_value=2),
        intermediate_size=values["intermediate_size"],
        vocab_size=values["vocab_size"],
        tied_embeddings=bool(values.get("tie_word_embeddings", False)),
    )


def lookup_model_shape(path: str) -> tuple[ModelShape | None, str]:
    """(shape, where it came from), or (None, why there is none)."""
    config_file = Path(path) / "config.json"
    if config_file.is_file():
        values = json.loads(config_file.read_text())
        model_type = values.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            return (
                None,
                f"model_type {model_type!r} in {config_file} is not one of {list(SUPPORTED_MODEL_TYPES)}",
            )
        needed = ("num_hidden_layers", "num_key_value_heads", "intermediate_size", "vocab_size")
        missing = [k for k in ("hidden_size", "num_attention_heads", *needed) if k not in values]
        if missing:
            return None, f"{config_file} lacks {missing}"
        head_dim = values.get("head_dim")
        if head_dim is not None and head_dim != values["hidden_size"] // values["num_attention_heads"]:
            return None, f"{config_file}: head_dim {head_dim} is not hidden_size / num_attention_heads"
        return shape_from_hf_config(values), f"read from {config_file}"
    known = KNOWN_MODELS.get(path.lower())
    if known is None:
        return None, (
            f"the dims of {path!r} are unknown (not a local model directory with config.json, and not "
            f"one of the known hub ids {sorted(KNOWN_MODELS)})"
        )
    label, values = known
    return shape_from_hf_config(values), f"dims of {label}"


def settings_from_config(config: PolicyIterationConfig, shape: ModelShape) -> MemorySettings:
    """Raises KeyError for a LoRA target module the estimate has no size for."""
    arr, tr, data, critic_model = config.actor_rollout_ref, config.trainer, config.data, config.critic.model
    actor, rollout = arr.actor, arr.rollout
    prompt, response = data.max_prompt_length, data.max_response_length  # Delethink: a row is one chunk

    def largest(budget: int, rows: int):
        return largest_micro_batch(actor.use_dynamic_bsz, budget, rows, prompt, response)

    log_prob = largest(rollout.log_prob_max_token_len_per_gpu, actor.ppo_micro_batch_size_per_gpu)
    if actor.use_kl_loss:
        ref = largest(arr.ref.log_prob_max_token_len_per_gpu, arr.ref.log_prob_micro_batch_size_per_gpu)
        log_prob = max(log_prob, ref, key=lambda mb: mb.tokens)
    engines = max(1, tr.world_size // rollout.tensor_model_parallel_size)
    return MemorySettings(
        world_size=tr.world_size,
        param_bytes=DTYPE_BYTES[actor.fsdp_config.param_dtype],
        param_offload=actor.fsdp_config.param_offload,
        optimizer_offload=actor.fsdp_config.optimizer_offload,
        gradient_checkpointing=arr.model.enable_gradient_checkpointing,
        use_kl_loss=actor.use_kl_loss,
        entropy_bonus=bool(actor.entropy_coeff),
        update=largest(actor.ppo_max_token_len_per_gpu, actor.ppo_micro_batch_size_per_gpu),
        log_prob=log_prob,
        engine=rollout.name,
        engine_bytes=DTYPE_BYTES[config.engine_dtype],
        gpu_memory_utilization=rollout.gpu_memory_utilization,
        free_cache_engine=rollout.free_cache_engine,
        tensor_parallel_size=rollout.tensor_model_parallel_size,
        gpu_memory_gib=tr.gpu_memory_gib,
        # every trajectory of a training batch at once, one chunk at a time in Delethink
        concurrent_sequences=min(rollout.max_num_seqs, math.ceil(config.trajectories_per_step / engines)),
        sequence_tokens=prompt + response,
        critic=config.uses_critic,
        critic_param_offload=config.critic.fsdp_config.param_offload,
        critic_optimizer_offload=config.critic.fsdp_config.optimizer_offload,
        lora_params=shape.adapter_params(arr.model.lora_rank, arr.model.target_modules),
        critic_lora_params=shape.adapter_params(critic_model.lora_rank, critic_model.target_modules),
    )


def _gib(value: float) -> str:
    return f"{value / GIB:.2f}"


def format_estimate(estimate: MemoryEstimate, settings: MemorySettings, source: str) -> str:
    present = {term for phase in PHASES for term in estimate.phases[phase]}
    terms = [term for term in TERMS if term in present]
    width = max(len(t) for t in terms) + 2
    lines = [
        f"peak GPU memory per rank, estimated in GiB (model: {source}; formulas: "
        "verl/tools/memory_estimate.py)",
        f"{'':<{width}}" + "".join(f"{phase:>15}" for phase in PHASES),
    ]
    for term in terms:
        cells = [estimate.phases[p].get(term) for p in PHASES]
        lines.append(f"{term:<{width}}" + "".join(f"{'-' if c is None else _gib(c):>15}" for c in cells))
    lines.append(f"{'total':<{width}}" + "".join(f"{_gib(estimate.total(p)):>15}" for p in PHASES))
    peak = estimate.peak
    fits = "fits" if peak <= settings.gpu_memory_gib * GIB else "DOES NOT FIT"
    declared = f"trainer.gpu_memory_gib={settings.gpu_memory_gib:g}"
    lines.append(f"peak {_gib(peak)} GiB ({estimate.peak_phase}) of {declared}: {fits}")
    for name, mb in (("update", settings.update), ("old log-probs", settings.log_prob)):
        lines.append(f"largest {name} micro-batch: {mb.tokens} tokens, {mb.positions} response positions")
    need = (
        f"{settings.concurrent_sequences} sequences x {settings.sequence_tokens} tokens need "
        f"{_gib(estimate.kv_needed)} GiB"
    )
    if estimate.kv_pool is None:
        lines.append(f"KV cache: {need} (the hf engine allocates it as it goes; counted above)")
    else:
        share = min(1.0, estimate.kv_pool / estimate.kv_needed) if estimate.kv_needed else 1.0
        wait = "" if share >= 1 else " (the rest wait: slower, not out of memory)"
        lines.append(
            f"KV cache: {need}; the engine's pool has about {_gib(estimate.kv_pool)} GiB, room for "
            f"{share:.0%} of them at full length at once{wait}"
        )
    lines.append(
        f"assumed: {RUNTIME_OVERHEAD_GIB:g} GiB runtime overhead per phase (not measured); response "
        "positions = micro-batch tokens (rows of similar length)"
    )
    return "\n".join(lines)


def _keys_for_term(term: str, phase: str, config: PolicyIterationConfig) -> list[str]:
    """Keys that shrink one term of one phase, with their values now (empty: none worth naming)."""
    arr = config.actor_rollout_ref
    actor, rollout, fsdp = arr.actor, arr.rollout, arr.actor.fsdp_config
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    keys: list[str] = []
    if term in ("logits", "activations"):
        update = phase == "update"
        budget = actor.ppo_max_token_len_per_gpu if update else rollout.log_prob_max_token_len_per_gpu
        row = config.data.max_prompt_length + config.data.max_response_length
        if not actor.use_dynamic_bsz:
            keys.append(f"{a}.ppo_micro_batch_size_per_gpu={actor.ppo_micro_batch_size_per_gpu} (fewer rows)")
        elif row <= budget:
            budget_key = f"{a}.ppo_max_token_len_per_gpu" if update else f"{r}.log_prob_max_token_len_per_gpu"
            keys.append(f"{budget_key}={budget} (fewer tokens)")
        else:  # the longest row runs alone: a smaller budget does not shrink that micro-batch
            length = "algorithm.delethink.chunk_size" if config.is_delethink else "data.max_response_length"
            keys.append(
                f"{length}={config.data.max_response_length} (one row alone exceeds the budget {budget})"
            )
    if term == "activations" and not arr.model.enable_gradient_checkpointing:
        keys.append(
            "actor_rollout_ref.model.enable_gradient_checkpointing=false (true: one input kept per block)"
        )
    if term in ("activations", "gathered weights") and fsdp.param_dtype == "float32":
        keys.append(f"{a}.fsdp_config.param_dtype=float32 (bfloat16 halves them)")
    if term == "engine":
        if phase == "update":
            keys.append(f"{r}.free_cache_engine=false (true: the engine frees its memory for the update)")
        elif rollout.name == "sglang":
            keys.append(
                f"{r}.gpu_memory_utilization={rollout.gpu_memory_utilization:g} (a smaller engine share)"
            )
    if term == "Adam moments" and phase != "update" and not fsdp.optimizer_offload:
        keys.append(f"{a}.fsdp_config.optimizer_offload=false (true: on the CPU between updates)")
    if term in ("Adam moments", "gradients shard", "weights shard"):
        keys.append(f"trainer.n_gpus_per_node={config.trainer.n_gpus_per_node} (more ranks, smaller shards)")
    if term in ("Adam moments", "gradients shard", "reference model") and not arr.model.lora_rank:
        keys.append(
            "actor_rollout_ref.model.lora_rank=0 (> 0: LoRA, gradients and Adam for the adapters only, "
            "no separate reference model)"
        )
    if term == "reference model":
        keys.append(f"{a}.use_kl_loss=true (false: no reference model)")
    return keys


def memory_refusal(
    estimate: MemoryEstimate, settings: MemorySettings, config: PolicyIterationConfig
) -> str | None:
    """None when the peak fits the declared memory, else a message naming the keys to change."""
    declared = settings.gpu_memory_gib * GIB
    if estimate.peak <= declared:
        return None
    over = [p for p in PHASES if estimate.total(p) > declared]
    lines = [
        f"estimated peak GPU memory per rank {_gib(estimate.peak)} GiB ({estimate.peak_phase}) exceeds "
        f"trainer.gpu_memory_gib={settings.gpu_memory_gib:g}; phases over it: {', '.join(over)}."
    ]
    for phase in over:
        terms = sorted(estimate.phases[phase].items(), key=lambda kv: -kv[1])[:3]
        largest = ", ".join(f"{name} {_gib(value)}" for name, value in terms)
        lines.append(f"{phase} (largest terms, GiB: {largest}); change one of:")
        # only terms that could make a dent in the excess; the others' keys would be noise
        excess = estimate.total(phase) - declared
        by_size = sorted(estimate.phases[phase].items(), key=lambda kv: -kv[1])
        worth = [term for term, value in by_size if value >= 0.1 * excess]
        keys = dict.fromkeys(key for term in worth for key in _keys_for_term(term, phase, config))
        lines += [f"  {key}" for key in keys]
    lines.append("If the GPUs have more memory than declared, set trainer.gpu_memory_gib to it.")
    return "\n".join(lines)


def describe_memory(config: PolicyIterationConfig) -> tuple[str, str | None]:
    """(text to print, refusal or None). Only CUDA runs are estimated and can be refused."""
    if config.trainer.device != "cuda":
        return f"peak GPU memory: not estimated (trainer.device={config.trainer.device})", None
    shape, source = lookup_model_shape(config.actor_rollout_ref.model.path)
    if shape is None:
        return f"peak GPU memory: not estimated: {source}", None
    try:
        settings = settings_from_config(config, shape)
    except KeyError as unknown:
        return f"peak GPU memory: not estimated: no size for the LoRA target module {unknown}", None
    estimate = estimate_memory(shape, settings)
    label = f"{shape.num_params / 1e9:.2f}B parameters, {source}"
    if settings.lora_params:
        rank = config.actor_rollout_ref.model.lora_rank
        label += f"; LoRA rank {rank}: {settings.lora_params / 1e6:.1f}M parameters trained"
    return format_estimate(estimate, settings, label), memory_refusal(estimate, settings, config)
