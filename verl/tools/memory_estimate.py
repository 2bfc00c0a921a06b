"""Peak GPU memory per rank of an RL run, from numbers a config gives: pure arithmetic, no torch.

A worker (`verl/single_controller/fsdp_workers.py`) holds an FSDP2 shard of the policy next to a rollout
engine and goes through three phases every step, each with its own peak; the estimate is the largest:

  rollout        the engine generates; the trainer keeps only what survives between steps
  old log-probs  the trainer's no-grad forward over the batch while the engine still holds its
                 memory (the worker releases it only inside its update)
  update         forward, backward and AdamW per micro-batch; with rollout.free_cache_engine the
                 engine has released its weights and KV cache meanwhile

Symbols: Ψ parameters stored (embedding and an untied LM head included; biases and norms, under
0.1%, left out), Ψ_block those of one block, Ψ_out = Ψ - L Ψ_block; W ranks (FSDP shards over all
of them); b bytes per value of fsdp_config.param_dtype (the compute copy, the activations); e bytes
per value of the engine's weights and KV cache (rollout.dtype; unset: b for SGLang, 4 for hf,
`PolicyIterationConfig.engine_dtype`); L blocks, h hidden size, I MLP width,
kv = num_kv_heads x head_dim, V vocabulary; G the declared GPU memory, f the engine's
gpu_memory_utilization. N, P: tokens and response positions of the largest micro-batch
(`largest_micro_batch`).

Terms, in bytes:

  weights shard     4Ψ/W: the float32 master copy (the worker loads the model in float32).
  gradients shard   4Ψ/W. They outlive the update: the actor clears them only when the next
                    mini-batch starts, so rollout and old log-probs hold them too.
  Adam moments      8Ψ/W from the first step on. With optimizer_offload they visit the GPU only
                    for the update. With param_offload (FSDP2's CPUOffloadPolicy) the shard, its
                    gradients and the moments all stay on the CPU, where the optimizer step runs.
  gathered weights  b(Ψ_out + 2Ψ_block): FSDP2 keeps the root group (embeddings, LM head, final
                    norm) gathered from forward to backward, plus the block computing and the one
                    prefetched. The update adds their unsharded gradients, b(Ψ_out + Ψ_block).
  activations       A = (b/2)(20h + 8I + 4kv) per token per block: the tensors autograd keeps for a
                    Qwen2 block, summed over its saved tensors in bfloat16 with sdpa attention on CPU
                    (20h: both RMSNorms' float32 inputs and outputs, q before and after rotation,
                    the attention output; 8I: gate, up, SiLU and their product; 4kv: k and v).
                    Update: with gradient checkpointing N L h b (every block's input) + N A (the
                    block recomputed during backward); without, N L A. Old log-probs: N A (without
                    grad nothing is kept between blocks).
  logits            [P, V] buffers of the actor's log-prob code (dp_actor, packing and
                    log_softmax.log_probs_from_logits / log_probs_and_entropy). The LM head runs on
                    the response positions only and its logits stay in the compute dtype: bPV. The
                    log-probs and the entropy metric are worked out a chunk of C positions at a time,
                    C = LOGITS_CHUNK_BYTES / 4V (one float32 [C, V] buffer of about 256 MiB):
                    K = 4 min(P, C) V. Old log-probs: bPV + K. Update: UPDATE_LOGIT_COPIES x bPV + K
                    in the backward of the log-prob function, the logits it saved and their gradient
                    (written chunk by chunk), and 2K there with an entropy bonus (actor.entropy_coeff
                    != 0: softmax and its log both). Measured as peak resident memory on CPU by
                    benchmarks/logits_memory.py.
  reference model   bΨ in every phase with use_kl_loss (unsharded and frozen, in the compute dtype); none
                    with LoRA (the reference is the actor with its adapters off).
  critic            with algorithm.adv_estimator=gae, the value model's own weights shard, gradients
                    and Adam moments, 16Ψ/W in every phase (8Ψ/W with critic.fsdp_config.
                    optimizer_offload, 0 with its param_offload), Ψ the actor's (the critic is the
                    same transformer with a one-output head); with LoRA (Ψ_c adapter parameters)
                    4(Ψ + Ψ_c)/W + 12Ψ_c/W. Its values' forward runs after the old log-probs, its
                    update before the actor's in the same window (the engine released); each takes
                    less than the actor's pass of that phase (no [P, V] logits, micro-batches
                    assumed no larger), so they add no phase of their own.
  engine            sglang: fG until the update releases it (rollout.free_cache_engine). SGLang
                    sizes its KV pool so that the whole GPU's use after it starts is fG, counting
                    what the trainer held then (its weights shard, which is therefore not added
                    again while the engine holds its memory). hf: eΨ (a full copy, never
                    released), plus during rollout the KV cache the batch needs.
  runtime overhead  RUNTIME_OVERHEAD_GIB per phase. An assumption, not a measurement: the CUDA
                    contexts of the trainer and of SGLang's scheduler process, NCCL buffers,
                    SGLang's CUDA graphs and decode workspace, allocator fragmentation.

The KV cache the batch needs is reported next to the engine's pool, not added: S x C x 2 L kv e for
S concurrent sequences of C tokens. The pool is about fG - eΨ/tp - the trainer's shard; when it
holds fewer sequences than S, SGLang runs fewer at once (slower, not out of memory).

LoRA (model.lora_rank = r > 0, Ψ_a adapter parameters: r(in + out) per adapted linear layer,
`ModelShape.adapter_params`): the shard holds the frozen base and the adapters, 4(Ψ + Ψ_a)/W; gradients
and Adam's moments exist for the adapters only, 4Ψ_a/W and 8Ψ_a/W; the update's unsharded gradients
of the gathered groups are one block's adapters, bΨ_a/L. Activations are counted as without LoRA
(an adapted layer's input is kept for its adapter's gradient, as it was for its weight's). The
engine's copy is the merged model (hf) or the base plus adapters of a few MiB (SGLang); SGLang keeps
its base weights through the update (only the adapters are sent after it): eΨ/tp in the update.

What is not modelled: the final norm's and LM head's inputs (about 10h bytes per token), the
gradients of activations in flight during backward, the engine's weight refresh after the update
(one float32 tensor at a time plus 512 MiB buckets), the float32 model briefly unsharded on the GPU
at start-up, and any variation of A with the attention kernel (flash-attention keeps the same q, k,
v, output and a per-head log-sum-exp).
"""

from __future__ import annotations

from dataclasses import dataclass

from verl.models.lora_keys import ALL_LINEAR, BLOCK_LINEAR_LAYERS
from verl.tools.cost_model import ModelDims

GIB = 2**30
MASTER_BYTES = 4  # the sharded weights, their gradients and Adam's moments are float32
ADAM_MOMENTS = 2  # exp_avg and exp_avg_sq
UPDATE_LOGIT_COPIES = 2  # [P, V] buffers in the compute dtype in the update's backward: logits, gradient
LOGITS_CHUNK_BYTES = 256 * 2**20  # log_softmax.LOGITS_CHUNK_BYTES: one float32 [chunk, V] buffer
RUNTIME_OVERHEAD_GIB = 3.0
PHASES = ("rollout", "old log-probs", "update")
TERMS = (  # in the order the table prints them
    "engine",
    "weights shard",
    "gradients shard",
    "Adam moments",
    "reference model",
    "critic",
    "gathered weights",
    "activations",
    "logits",
    "runtime overhead",
)


# in, out and whether the model has one (not one per block) of the Qwen2 layers LoRA can adapt
LORA_LAYER_SHAPES = {
    "q_proj": ("h", "h", False), "k_proj": ("h", "kv", False), "v_proj": ("h", "kv", False),
    "o_proj": ("h", "h", False), "gate_proj": ("h", "I", False), "up_proj": ("h", "I", False),
    "down_proj": ("I", "h", False), "lm_head": ("h", "V", True), "embed_tokens": ("V", "h", True),
}  # fmt: skip


@dataclass(frozen=True)
class ModelShape:
    """What the estimate needs to know of a model beyond cost_model.ModelDims."""

    dims: ModelDims  # blocks, hidden size, KV heads and head size (its bytes_per_value is not used here)
    intermediate_size: int  # I: the MLP's width
    vocab_size: int  # V: the logits' width
    tied_embeddings: bool  # the LM head reuses the input embedding (one matrix stored, not two)

    @property
    def embedding_params(self) -> int:
        return self.vocab_size * self.dims.hidden_size

    @property
    def num_params(self) -> int:
        """Ψ: matmul_params counts the LM head once; an untied model also stores the input embedding."""
        return self.dims.matmul_params + (0 if self.tied_embeddings else self.embedding_params)

    @property
    def block_params(self) -> int:
        """Ψ_block: matmul_params is L blocks plus the LM head."""
        return (self.dims.matmul_params - self.embedding_params) // self.dims.num_layers

    @property
    def outside_params(self) -> int:
        """Ψ_out: the embeddings and the LM head (FSDP2's root group)."""
        return self.num_params - self.dims.num_layers * self.block_params

    def activation_bytes(self, value_bytes: int) -> float:
        """A: bytes autograd keeps per token for one block (see the module docstring)."""
        kv = self.dims.num_kv_heads * self.dims.head_dim
        return value_bytes / 2 * (20 * self.dims.hidden_size + 8 * self.intermediate_size + 4 * kv)

    def adapter_params(self, rank: int, target_modules: list[str]) -> int:
        """Ψ_a: adapter parameters of rank `rank` on the named linear layers of every block (all-linear:
        the seven of a Qwen2 block), r(in + out) each; 0 at rank 0. A name not in LORA_LAYER_SHAPES
        raises KeyError."""
        if rank == 0:
            return 0
        names = BLOCK_LINEAR_LAYERS if target_modules == [ALL_LINEAR] else target_modules
        h, kv, i = self.dims.hidden_size, self.dims.num_kv_heads * self.dims.head_dim, self.intermediate_size
        sizes = {"h": h, "kv": kv, "I": i, "V": self.vocab_size}
        total = 0
        for name in names:
            fan_in, fan_out, per_model = LORA_LAYER_SHAPES[name]
            total += rank * (sizes[fan_in] + sizes[fan_out]) * (1 if per_model else self.dims.num_layers)
        return total

    def kv_bytes_per_token(self, value_bytes: int) -> int:
        return 2 * self.dims.num_layers * self.dims.num_kv_heads * self.dims.head_dim * value_bytes


@dataclass(frozen=True)
class MicroBatch:
    """The largest forward pass of a phase."""

    tokens: int  # N: tokens the model runs (prompts and responses)
    positions: int  # P: response positions whose logits the actor keeps


def largest_micro_batch(
    use_dynamic_bsz: bool, token_budget: int, rows: int, prompt_length: int, response_length: int
) -> MicroBatch:
    """The largest micro-batch the actor can form from rows of at most prompt_length +
    response_length tokens.

    Token budget (use_dynamic_bsz): a micro-batch holds up to token_budget tokens, and a longer row
    runs alone. Its response positions are taken as its tokens: the prompts this over-counts are
    about what the actor adds back by padding each row's logits to the micro-batch's longest response
    (rows of Delethink chunks), and less than that when short and long responses share a micro-batch.
    Row count: `rows` rows, each padded to the longest prompt and response.
    """
    row = prompt_length + response_length
    if not use_dynamic_bsz:
        return MicroBatch(rows * row, rows * response_length)
    if token_budget >= row:
        return MicroBatch(token_budget, token_budget)
    return MicroBatch(row, min(row, max(response_length, token_budget)))


@dataclass(frozen=True)
class MemorySettings:
    """The config's memory-relevant values, in the estimate's terms."""

    world_size: int  # W: ranks sharding the FSDP state
    param_bytes: int  # b: bytes per value of fsdp_config.param_dtype
    param_offload: bool  # shard, gradients and Adam moments on the CPU (FSDP2 CPUOffloadPolicy)
    optimizer_offload: bool  # Adam moments on the CPU outside the update
    gradient_checkpointing: bool  # keep only each block's input; recompute the rest in backward
    use_kl_loss: bool  # an unsharded reference model in the compute dtype on every rank
    entropy_bonus: bool  # actor.entropy_coeff != 0: the entropy's gradient takes a second chunk buffer
    update: MicroBatch  # the update's largest micro-batch
    log_prob: MicroBatch  # the old (and reference) log-prob pass's largest micro-batch
    engine: str  # sglang | hf
    engine_bytes: int  # e: bytes per value of the engine's weights and KV cache (the config's engine_dtype)
    gpu_memory_utilization: float  # f: SGLang's share of the GPU (weights + KV pool)
    free_cache_engine: bool  # the engine frees its memory during the update
    tensor_parallel_size: int  # GPUs per engine (SGLang splits the weights over them)
    gpu_memory_gib: float  # G: the declared memory of one GPU
    concurrent_sequences: int  # S: sequences one engine decodes at once for a training batch
    sequence_tokens: int  # C: the longest context one sequence reaches (prompt + new tokens)
    critic: bool = False  # algorithm.adv_estimator=gae: a value model with its own FSDP state
    critic_param_offload: bool = False  # critic.fsdp_config.param_offload
    critic_optimizer_offload: bool = False  # critic.fsdp_config.optimizer_offload
    lora_params: int = 0  # Ψ_a: the actor's adapter parameters (0: full fine-tuning)
    critic_lora_params: int = 0  # Ψ_c: the critic's adapter parameters (0: full fine-tuning)


@dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per term for each phase (a term a phase does not have is absent), and the KV view."""

    phases: dict[str, dict[str, float]]  # phase -> term -> bytes
    kv_needed: float  # bytes of KV cache for S sequences of C tokens
    kv_pool: float | None  # bytes SGLang's pool has for them (None: the hf engine, sized on demand)

    def total(self, phase: str) -> float:
        return sum(self.phases[phase].values())

    @property
    def peak_phase(self) -> str:
        return max(PHASES, key=self.total)

    @property
    def peak(self) -> float:
        return self.total(self.peak_phase)


def _chunk_bytes(mb: MicroBatch, vocab_size: int) -> float:
    """K: the log-prob function's float32 buffer for one chunk of positions (all P when fewer)."""
    chunk = max(1, LOGITS_CHUNK_BYTES // (4 * vocab_size))
    return 4 * min(mb.positions, chunk) * vocab_size


def update_logits_bytes(mb: MicroBatch, vocab_size: int, value_bytes: int, entropy_bonus: bool) -> float:
    chunks = (2 if entropy_bonus else 1) * _chunk_bytes(mb, vocab_size)
    return UPDATE_LOGIT_COPIES * value_bytes * mb.positions * vocab_size + chunks


def log_prob_logits_bytes(mb: MicroBatch, vocab_size: int, value_bytes: int) -> float:
    return value_bytes * mb.positions * vocab_size + _chunk_bytes(mb, vocab_size)


def estimate_memory(shape: ModelShape, s: MemorySettings) -> MemoryEstimate:
    """Per-phase terms as the module docstring defines them."""
    psi, w, b = shape.num_params, s.world_size, s.param_bytes
    trained = s.lora_params or psi  # what has gradients and Adam moments
    on_gpu = not s.param_offload
    weights = MASTER_BYTES * (psi + s.lora_params) / w if on_gpu else 0.0
    grads = MASTER_BYTES * trained / w if on_gpu else 0.0
    moments = ADAM_MOMENTS * MASTER_BYTES * trained / w if on_gpu else 0.0
    idle_moments = 0.0 if s.optimizer_offload else moments  # outside the update
    gathered_forward = b * (shape.outside_params + 2 * shape.block_params)
    gathered_grads = s.lora_params / shape.dims.num_layers if s.lora_params else (
        shape.outside_params + shape.block_params
    )  # fmt: skip
    gathered_update = gathered_forward + b * gathered_grads
    a = shape.activation_bytes(b)
    layers, hidden = shape.dims.num_layers, shape.dims.hidden_size
    n_update = s.update.tokens
    if s.gradient_checkpointing:
        update_acts = n_update * layers * hidden * b + n_update * a
    else:
        update_acts = n_update * layers * a
    reference = b * psi if s.use_kl_loss and not s.lora_params else 0.0
    critic = 0.0
    if s.critic and not s.critic_param_offload:
        critic_trained = s.critic_lora_params or psi
        critic_moments = (
            0.0 if s.critic_optimizer_offload else ADAM_MOMENTS * MASTER_BYTES * critic_trained / w
        )
        critic = MASTER_BYTES * (psi + s.critic_lora_params + critic_trained) / w + critic_moments
    overhead = RUNTIME_OVERHEAD_GIB * GIB

    e = s.engine_bytes
    kv_needed = s.concurrent_sequences * s.sequence_tokens * shape.kv_bytes_per_token(e)
    if s.engine == "sglang":
        engine = idle_engine = s.gpu_memory_utilization * s.gpu_memory_gib * GIB
        # LoRA: the adapters alone are pushed after the update, so the engine keeps its base weights
        kept = e * psi / s.tensor_parallel_size if s.lora_params else 0.0
        update_engine = kept if s.free_cache_engine else engine
        kv_pool = max(0.0, engine - e * psi / s.tensor_parallel_size - weights)
        shard_outside_engine = 0.0  # the engine's fG already counts the shard it found at start
        update_shard = weights if s.free_cache_engine else shard_outside_engine
    else:  # the hf engine frees nothing but its cache, which lives only while it generates
        idle_engine = update_engine = e * psi
        engine = idle_engine + kv_needed
        kv_pool = None
        shard_outside_engine = update_shard = weights

    def phase(**terms: float) -> dict[str, float]:
        terms = {name.replace("_", " "): value for name, value in terms.items() if value}
        return {**terms, "runtime overhead": overhead}

    holding = dict(weights_shard=shard_outside_engine, gradients_shard=grads, Adam_moments=idle_moments)
    rollout = phase(engine=engine, **holding, reference_model=reference, critic=critic)
    old_log_probs = phase(
        engine=idle_engine,
        **holding,
        reference_model=reference,
        critic=critic,
        gathered_weights=gathered_forward,
        activations=s.log_prob.tokens * a,
        logits=log_prob_logits_bytes(s.log_prob, shape.vocab_size, b),
    )
    update = phase(
        engine=update_engine,
        weights_shard=update_shard,
        gradients_shard=grads,
        Adam_moments=moments,
        reference_model=reference,
        critic=critic,
        gathered_weights=gathered_update,
        activations=update_acts,
        logits=update_logits_bytes(s.update, shape.vocab_size, b, s.entropy_bonus),
    )
    return MemoryEstimate(
        phases={"rollout": rollout, "old log-probs": old_log_probs, "update": update},
        kv_needed=kv_needed,
        kv_pool=kv_pool,
    )
