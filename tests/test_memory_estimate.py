"""The peak-memory estimate against hand computations, the refusal message, and the r1d configs'
memory settings read back. Formulas: verl/tools/memory_estimate.py (module docstring)."""

import dataclasses
import json
import runpy
from pathlib import Path

import pytest

from verl.config import compose_config
from verl.core import log_softmax
from verl.tools import memory_estimate
from verl.tools.cost_model import PRESETS
from verl.tools.memory_check import (
    describe_memory,
    lookup_model_shape,
    settings_from_config,
    shape_from_hf_config,
)
from verl.tools.memory_estimate import (
    GIB,
    RUNTIME_OVERHEAD_GIB,
    MemorySettings,
    MicroBatch,
    estimate_memory,
    largest_micro_batch,
    log_prob_logits_bytes,
    update_logits_bytes,
)
from verl.trainer.config_loader import load_config

OVERHEAD = RUNTIME_OVERHEAD_GIB * GIB
# A made-up model small enough to count by hand: 2 blocks, h = 8 (2 heads of 4), 1 KV head (kv = 4),
# I = 16, V = 32, untied.
#   block: 2*8*8 (q, o) + 2*8*4 (k, v) + 3*8*16 (MLP) = 128 + 64 + 384 = 576
#   stored: 2 * 576 + 2 * 32 * 8 (embedding and LM head) = 1152 + 512 = 1664; outside the blocks 512
#   A (bfloat16) = 20*8 + 8*16 + 4*4 = 304 bytes per token per block
SMALL = {
    "hidden_size": 8,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "intermediate_size": 16,
    "vocab_size": 32,
    "tie_word_embeddings": False,
}
SETTINGS = MemorySettings(
    world_size=4,
    param_bytes=2,
    param_offload=False,
    optimizer_offload=False,
    gradient_checkpointing=True,
    use_kl_loss=False,
    entropy_bonus=False,
    update=MicroBatch(tokens=10, positions=6),
    log_prob=MicroBatch(tokens=12, positions=6),
    engine="sglang",
    engine_bytes=2,
    gpu_memory_utilization=0.5,
    free_cache_engine=True,
    tensor_parallel_size=1,
    gpu_memory_gib=16384 / GIB,  # 16384 bytes: the engine's share is 8192
    concurrent_sequences=3,
    sequence_tokens=7,
)


def small_estimate(**changes):
    return estimate_memory(shape_from_hf_config(SMALL), dataclasses.replace(SETTINGS, **changes))


def test_the_small_models_parameter_counts():
    shape = shape_from_hf_config(SMALL)
    assert (shape.num_params, shape.block_params, shape.outside_params) == (1664, 576, 512)
    assert shape.activation_bytes(2) == 304
    assert shape.kv_bytes_per_token(2) == 2 * 2 * 1 * 4 * 2  # K and V, 2 blocks, 1 head of 4, bf16
    assert shape_from_hf_config({**SMALL, "tie_word_embeddings": True}).num_params == 1152 + 256


def test_each_term_against_a_hand_computation():
    est = small_estimate()
    shard = 4 * 1664 / 4  # float32 over 4 ranks: 1664
    gathered = 2 * (512 + 2 * 576)  # bf16 root group and two blocks: 3328
    # rollout: the engine (its share counts the weights shard), gradients and Adam moments
    assert est.phases["rollout"] == {
        "engine": 8192,
        "gradients shard": shard,
        "Adam moments": 2 * shard,
        "runtime overhead": OVERHEAD,
    }
    # old log-probs: + forward weights, one block's activations for 12 tokens, and the logits: the
    # bf16 logits of 6 positions and one float32 chunk (all 6 positions: V = 32 allows 2M per chunk),
    # 2*6 + 4*6 = 36 per vocabulary entry, x 32
    assert est.phases["old log-probs"] == {
        "engine": 8192,
        "gradients shard": shard,
        "Adam moments": 2 * shard,
        "gathered weights": gathered,
        "activations": 12 * 304,
        "logits": 36 * 32,
        "runtime overhead": OVERHEAD,
    }
    # update: engine released; + the gathered blocks' gradients 2 * (512 + 576) = 2176;
    # checkpointed activations 10 tokens * 2 blocks * 8 * 2 bytes + 10 * 304 = 320 + 3040;
    # logits: the saved logits and their gradient, 2 * 2 bytes * 6 positions, and the chunk 4 * 6:
    # 48 * 32 = 1536
    assert est.phases["update"] == {
        "weights shard": shard,
        "gradients shard": shard,
        "Adam moments": 2 * shard,
        "gathered weights": gathered + 2176,
        "activations": 3360,
        "logits": 1536,
        "runtime overhead": OVERHEAD,
    }
    assert est.total("update") == 1664 * 4 + 3328 + 2176 + 3360 + 1536 + OVERHEAD  # 17056 + overhead
    assert est.peak_phase == "old log-probs"  # 8192 + 1664 + 3328 + 3328 + 3648 + 1152 = 21312
    assert est.peak == 21312 + OVERHEAD
    assert est.kv_needed == 3 * 7 * 32  # sequences x tokens x KV bytes per token
    assert est.kv_pool == 8192 - 2 * 1664 - 1664  # the share less the engine's weights and the shard


def test_an_entropy_bonus_adds_a_chunk_buffer_to_the_update():
    # softmax and its log both, in the backward: 2*2*6 + 2 * 4*6 = 72 per vocabulary entry
    est = small_estimate(entropy_bonus=True)
    assert est.phases["update"]["logits"] == 72 * 32
    assert est.phases["old log-probs"]["logits"] == 36 * 32  # no backward there


def test_the_float32_chunk_is_capped_for_a_large_vocabulary():
    # V = 2^17: a chunk is 2^28 / (4 * 2^17) = 512 positions; 5000 positions take 10 chunks
    vocab = 2**17
    mb = MicroBatch(tokens=6000, positions=5000)
    assert log_prob_logits_bytes(mb, vocab, value_bytes=2) == (2 * 5000 + 4 * 512) * vocab
    assert update_logits_bytes(mb, vocab, 2, entropy_bonus=False) == (2 * 2 * 5000 + 4 * 512) * vocab
    assert update_logits_bytes(mb, vocab, 2, entropy_bonus=True) == (2 * 2 * 5000 + 2 * 4 * 512) * vocab


def test_the_chunk_size_is_the_one_the_actor_uses():
    assert memory_estimate.LOGITS_CHUNK_BYTES == log_softmax.LOGITS_CHUNK_BYTES


def test_no_checkpointing_keeps_every_blocks_activations():
    assert small_estimate(gradient_checkpointing=False).phases["update"]["activations"] == 10 * 2 * 304


def test_offload_moves_terms_off_the_gpu():
    est = small_estimate(optimizer_offload=True)
    assert "Adam moments" not in est.phases["rollout"] and "Adam moments" not in est.phases["old log-probs"]
    assert est.phases["update"]["Adam moments"] == 3328  # moved in for the step
    est = small_estimate(param_offload=True)
    for phase in est.phases.values():
        assert not {"weights shard", "gradients shard", "Adam moments"} & set(phase)
    assert est.kv_pool == 8192 - 2 * 1664  # no shard on the GPU when the engine started


def test_an_engine_that_keeps_its_memory_and_the_reference_model():
    est = small_estimate(free_cache_engine=False, use_kl_loss=True)
    assert est.phases["update"]["engine"] == 8192
    assert "weights shard" not in est.phases["update"]  # inside the engine's share
    for phase in est.phases.values():
        assert phase["reference model"] == 2 * 1664  # frozen: in the compute dtype (2 bytes)
    # the hf engine: a float32 copy it never frees, the batch's float32 KV while it generates, and
    # the shard on top
    est = small_estimate(engine="hf", engine_bytes=4)
    assert est.phases["rollout"]["engine"] == 4 * 1664 + 3 * 7 * 64
    assert est.phases["old log-probs"]["engine"] == est.phases["update"]["engine"] == 4 * 1664
    assert est.phases["rollout"]["weights shard"] == 1664 and est.kv_pool is None
    # an hf engine in bfloat16 (rollout.dtype): half the copy and half the KV cache
    est = small_estimate(engine="hf", engine_bytes=2)
    assert est.phases["rollout"]["engine"] == 2 * 1664 + 3 * 7 * 32


def test_the_engines_dtype_is_rollout_dtype_else_the_engines_own():
    def settings(*overrides):
        config = load_config(
            compose_config("r1d-1.5b_deepscaler_delethink_24k", list(overrides)), check_paths=False
        )
        shape, _ = lookup_model_shape(config.actor_rollout_ref.model.path)
        return settings_from_config(config, shape), shape

    sglang, shape = settings()
    assert sglang.engine_bytes == 2  # SGLang in the actor's compute dtype, bfloat16
    wide, _ = settings("actor_rollout_ref.rollout.dtype=float32")
    assert wide.engine_bytes == 4
    # SGLang's share is fixed: its float32 weights leave 2 bytes x Ψ less for the KV pool
    assert (
        estimate_memory(shape, sglang).kv_pool - estimate_memory(shape, wide).kv_pool == 2 * shape.num_params
    )
    hf, _ = settings("actor_rollout_ref.rollout.name=hf")
    assert hf.engine_bytes == 4  # the hf engine's float32 copy


def test_the_critic_adds_its_own_fsdp_state_to_every_phase():
    # gae: weights 4 * 1664 / 4 = 1664, gradients 1664, Adam moments 3328 -> 6656 bytes per rank
    without, est = small_estimate(), small_estimate(critic=True)
    for name, phase in est.phases.items():
        assert phase["critic"] == 6656
        assert sum(phase.values()) == sum(without.phases[name].values()) + 6656
    assert small_estimate(critic=True, critic_optimizer_offload=True).phases["update"]["critic"] == 3328
    assert "critic" not in small_estimate(critic=True, critic_param_offload=True).phases["update"]


def test_lora_keeps_gradients_and_adam_for_the_adapters_only_and_drops_the_reference():
    # rank 2 on every linear layer of SMALL's blocks (h 8, kv 4, I 16): q, o 2*(8+8) = 32 each, k, v
    # 2*(8+4) = 24 each, gate, up, down 2*(8+16) = 48 each: 256 per block, 512 in the 2 blocks
    shape = shape_from_hf_config(SMALL)
    assert shape.adapter_params(2, ["all-linear"]) == 512
    assert shape.adapter_params(2, ["q_proj", "lm_head"]) == 2 * 32 + 2 * (8 + 32)  # one LM head
    assert shape.adapter_params(0, ["not_a_layer"]) == 0
    with pytest.raises(KeyError):
        shape.adapter_params(2, ["not_a_layer"])
    est = small_estimate(lora_params=512, use_kl_loss=True, critic=True, critic_lora_params=512)
    shard = 4 * (1664 + 512) / 4  # the frozen base and the adapters, float32 over 4 ranks: 2176
    adapters = 4 * 512 / 4  # their gradients: 512
    for phase in ("rollout", "old log-probs"):
        assert est.phases[phase]["gradients shard"] == adapters
        assert est.phases[phase]["Adam moments"] == 2 * adapters
        assert "reference model" not in est.phases[phase]  # the actor with its adapters off
        assert est.phases[phase]["critic"] == shard + 3 * adapters
    assert est.phases["update"]["weights shard"] == shard
    # the update's unsharded gradients of the gathered groups: one block's adapters, 2 bytes x 256
    assert est.phases["update"]["gathered weights"] == 2 * (512 + 2 * 576) + 2 * 256
    # SGLang gets only adapters after the update, so it keeps its bfloat16 base weights through it
    assert est.phases["update"]["engine"] == 2 * 1664
    assert "engine" not in small_estimate().phases["update"]


def test_the_estimates_adapter_count_is_peft_s():
    from types import SimpleNamespace

    from verl.models import lora
    from verl.models.tiny import DEFAULT_DIMS, build_model, build_tokenizer

    tokenizer = build_tokenizer()
    config = {**DEFAULT_DIMS, "vocab_size": len(tokenizer), "tie_word_embeddings": True}
    for targets in (["all-linear"], ["k_proj", "down_proj"]):
        keys = SimpleNamespace(lora_rank=4, lora_alpha=8.0, target_modules=targets)
        wrapped = lora.add_adapters(build_model(tokenizer, seed=0), keys, lora.CAUSAL_LM)
        peft_count = sum(p.numel() for p in lora.trainable_parameters(wrapped))
        assert shape_from_hf_config(config).adapter_params(4, targets) == peft_count


def test_dry_run_prints_the_lora_estimate_and_lora_fits_where_full_training_does_not():
    overrides = ("trainer.n_gpus_per_node=1", "trainer.gpu_memory_gib=39.4")  # one A100 40GB
    full, refused = _memory("r1d-1.5b_deepscaler_delethink_24k", *overrides)
    assert refused and "actor_rollout_ref.model.lora_rank=0 (> 0: LoRA" in refused
    text, refused = _memory(
        "r1d-1.5b_deepscaler_delethink_24k", *overrides, "actor_rollout_ref.model.lora_rank=32"
    )
    assert refused is None and "LoRA rank 32: 36.9M parameters trained" in text


@pytest.mark.parametrize(
    "dynamic, budget, rows, expected",
    [
        (False, 0, 3, MicroBatch(3 * 12, 3 * 7)),  # rows padded to prompt 5 + response 7
        (True, 20, 0, MicroBatch(20, 20)),  # the budget holds the longest row: filled to it
        (True, 10, 0, MicroBatch(12, 10)),  # the longest row (12) runs alone
        (True, 4, 0, MicroBatch(12, 7)),
    ],
)
def test_largest_micro_batch(dynamic, budget, rows, expected):
    assert largest_micro_batch(dynamic, budget, rows, prompt_length=5, response_length=7) == expected


def test_known_dims_of_r1_distill_and_qwen():
    r1d, source = lookup_model_shape("deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B")
    assert source == "dims of DeepSeek-R1-Distill-Qwen-1.5B"
    # 28 * (2*1536^2 + 2*1536*256 + 3*1536*8960) + 2 * 151936 * 1536 (untied embedding and LM head)
    assert r1d.num_params == 28 * 46_792_704 + 2 * 233_373_696 == 1_776_943_104
    # cost_model's preset also counts biases and norms: within 0.01%
    assert abs(r1d.dims.matmul_params / PRESETS["r1d-1.5b"].matmul_params - 1) < 1e-4
    qwen, _ = lookup_model_shape("Qwen/Qwen2.5-1.5B-Instruct")
    assert qwen.num_params == 28 * 46_792_704 + 233_373_696  # tied
    base_96k = lookup_model_shape("McGill-NLP/delethink-96k-base-1.5b")
    assert base_96k == (r1d, "dims of DeepSeek-R1-Distill-Qwen-1.5B's, assumed (not read)")


def test_a_local_config_json_is_read_and_unknown_models_are_not_guessed(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({**SMALL, "model_type": "qwen2"}))
    shape, source = lookup_model_shape(str(tmp_path))
    assert shape.num_params == 1664 and source == f"read from {tmp_path / 'config.json'}"
    (tmp_path / "config.json").write_text(json.dumps({**SMALL, "model_type": "gpt2"}))
    assert lookup_model_shape(str(tmp_path))[0] is None
    shape, reason = lookup_model_shape("someone/some-model")
    assert shape is None and "the dims of 'someone/some-model' are unknown" in reason


def _memory(name, *overrides):
    return describe_memory(load_config(compose_config(name, list(overrides)), check_paths=False))


def test_a_config_over_the_declared_memory_is_refused_naming_the_keys():
    text, refusal = _memory("r1d-1.5b_deepscaler_delethink_24k", "trainer.gpu_memory_gib=30")
    assert "DOES NOT FIT" in text
    assert refusal.startswith("estimated peak GPU memory per rank 30.99 GiB (old log-probs) exceeds ")
    assert "phases over it: old log-probs." in refusal
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6 (a smaller engine share)" in refusal
    assert "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384 (fewer tokens)" in refusal
    assert "set trainer.gpu_memory_gib" in refusal
    _, refusal = _memory(
        "r1d-1.5b_deepscaler_delethink_24k",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768",
    )
    assert "phases over it: update." in refusal
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768 (fewer tokens)" in refusal
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=false (true: " in refusal


def test_longcot_24k_fits_an_h100():
    # one 24576-token response alone: its bf16 logits 2 x 24576 x 151936 B = 6.95 GiB, plus one float32
    # chunk of 441 positions (0.25); the update holds their gradient too: 2 x 6.95 + 0.25
    text, refusal = _memory("r1d-1.5b_deepscaler_longcot_24k")
    assert "logits                          -           7.20          14.16" in text
    assert "peak 64.06 GiB (old log-probs) of trainer.gpu_memory_gib=79.6: fits" in text and refusal is None
    # on a smaller GPU: the row runs alone, so a smaller budget would not help; its length would
    _, refusal = _memory("r1d-1.5b_deepscaler_longcot_24k", "trainer.gpu_memory_gib=40")
    assert "data.max_response_length=24576 (one row alone exceeds the budget 16384)" in refusal
    assert "ppo_max_token_len_per_gpu" not in refusal


def test_cpu_runs_and_unknown_models_are_never_refused():
    text, refusal = _memory("tiny_longcot", "trainer.gpu_memory_gib=0.001")
    assert (text, refusal) == ("peak GPU memory: not estimated (trainer.device=cpu)", None)
    text, refusal = _memory("r1d-1.5b_deepscaler_delethink_24k", "actor_rollout_ref.model.path=org/other")
    assert text.startswith("peak GPU memory: not estimated: the dims of 'org/other' are unknown")
    assert refusal is None


R1D = ["longcot_8k", "longcot_24k", "delethink_24k"]


@pytest.mark.parametrize(
    "name",
    [f"r1d-1.5b_deepscaler_{n}" for n in R1D] + ["r1d-1.5b_openmath_delethink_96k"],
)
def test_the_r1d_configs_compose_with_the_memory_settings(name):
    c = load_config(compose_config(name), check_paths=False)
    arr = c.actor_rollout_ref
    fsdp = arr.actor.fsdp_config
    assert arr.model.enable_gradient_checkpointing and arr.model.use_remove_padding
    assert arr.actor.use_dynamic_bsz
    assert arr.actor.ppo_max_token_len_per_gpu == 16384
    assert arr.rollout.log_prob_max_token_len_per_gpu == arr.ref.log_prob_max_token_len_per_gpu == 16384
    assert (fsdp.param_dtype, fsdp.reduce_dtype, fsdp.param_offload, fsdp.optimizer_offload) == (
        "bfloat16",
        "float32",
        False,
        False,
    )
    assert arr.rollout.gpu_memory_utilization == 0.6
    assert c.trainer.gpu_memory_gib == 79.6


def test_the_logits_memory_benchmark_quick_mode_runs(capsys):
    benchmark = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "logits_memory.py"))
    results = benchmark["main"](["--quick"])
    assert [(r["phase"], r["layout"]) for r in results] == [("old log-probs", "padded"), ("update", "padded")]
    assert all(r["float32"] > 0 and r["actor"] > 0 for r in results)
    update = results[1]
    assert (
        update["actor"] < update["float32"] / 2
    )  # the float32 path's 6 copies of the logits, the actor's none
    assert "actor/float32" in capsys.readouterr().out
