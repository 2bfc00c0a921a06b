"""The peak-memory estimate against hand computations, the refusal message, and the r1d configs'
memory settings read back. Formulas: verl/trainer/memory_estimate.py (module docstring)."""

import dataclasses
import json

import pytest

from verl.tools.cost_model import PRESETS
from verl.trainer.config_schema import compose_config, load_config
from verl.trainer.memory_check import describe_memory, lookup_model_shape, shape_from_hf_config
from verl.trainer.memory_estimate import (
    GIB,
    RUNTIME_OVERHEAD_GIB,
    MemorySettings,
    MicroBatch,
    estimate_memory,
    largest_micro_batch,
)

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
    use_remove_padding=True,
    use_kl_loss=False,
    update=MicroBatch(tokens=10, positions=6, longest_response=4),
    log_prob=MicroBatch(tokens=12, positions=6, longest_response=6),
    engine="sglang",
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
    # old log-probs: + forward weights, one block's activations for 12 tokens, and the logits:
    # max(2*12 + 2*6 + 4*6, 4*6 + 2*4*6) = max(60, 72) = 72 per vocabulary entry, x 32
    assert est.phases["old log-probs"] == {
        "engine": 8192,
        "gradients shard": shard,
        "Adam moments": 2 * shard,
        "gathered weights": gathered,
        "activations": 12 * 304,
        "logits": 72 * 32,
        "runtime overhead": OVERHEAD,
    }
    # update: engine released; + the gathered blocks' gradients 2 * (512 + 576) = 2176;
    # checkpointed activations 10 tokens * 2 blocks * 8 * 2 bytes + 10 * 304 = 320 + 3040;
    # logits 6 copies * 4 bytes * 6 positions * 32 = 4608
    assert est.phases["update"] == {
        "weights shard": shard,
        "gradients shard": shard,
        "Adam moments": 2 * shard,
        "gathered weights": gathered + 2176,
        "activations": 3360,
        "logits": 4608,
        "runtime overhead": OVERHEAD,
    }
    assert est.total("update") == 1664 * 4 + 3328 + 2176 + 3360 + 4608 + OVERHEAD  # 20128 + overhead
    assert est.peak_phase == "old log-probs"  # 8192 + 1664 + 3328 + 3328 + 3648 + 2304 = 22464
    assert est.peak == 22464 + OVERHEAD
    assert est.kv_needed == 3 * 7 * 32  # sequences x tokens x KV bytes per token
    assert est.kv_pool == 8192 - 2 * 1664 - 1664  # the share less the engine's weights and the shard


def test_the_log_prob_logits_take_the_forward_when_rows_are_short():
    # longest response 2: per-row buffers 4*6 + 2*4*2 = 40 < forward 2*12 + 2*6 + 4*6 = 60
    est = small_estimate(log_prob=MicroBatch(tokens=12, positions=6, longest_response=2))
    assert est.phases["old log-probs"]["logits"] == 60 * 32
    # without packing the positions are a view of the model's logits: 2*12 + 4*6 = 48
    est = small_estimate(log_prob=MicroBatch(12, 6, 2), use_remove_padding=False)
    assert est.phases["old log-probs"]["logits"] == 48 * 32


def test_the_update_logits_take_the_forward_when_prompts_dominate():
    # 100 tokens, 2 response positions: forward 2*100 + 2*2 + 4*2 = 212 > 6 copies 6*4*2 = 48
    est = small_estimate(update=MicroBatch(tokens=100, positions=2, longest_response=2))
    assert est.phases["update"]["logits"] == 212 * 32


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
        assert phase["reference model"] == 4 * 1664
    # the hf engine: a float32 copy it never frees, the batch's float32 KV while it generates, and
    # the shard on top
    est = small_estimate(engine="hf")
    assert est.phases["rollout"]["engine"] == 4 * 1664 + 3 * 7 * 64
    assert est.phases["old log-probs"]["engine"] == est.phases["update"]["engine"] == 4 * 1664
    assert est.phases["rollout"]["weights shard"] == 1664 and est.kv_pool is None


@pytest.mark.parametrize(
    "dynamic, budget, rows, expected",
    [
        (False, 0, 3, MicroBatch(3 * 12, 3 * 7, 7)),  # rows padded to prompt 5 + response 7
        (True, 20, 0, MicroBatch(20, 20, 7)),  # the budget holds the longest row: filled to it
        (True, 10, 0, MicroBatch(12, 10, 7)),  # the longest row (12) runs alone
        (True, 4, 0, MicroBatch(12, 7, 7)),
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
    text, refusal = _memory("r1d-1.5b_deepscaler_delethink_24k", "trainer.gpu_memory_gib=60")
    assert "DOES NOT FIT" in text
    assert refusal.startswith("estimated peak GPU memory per rank 66.84 GiB (update) exceeds ")
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6 (a smaller engine share)" in refusal
    assert "actor_rollout_ref.rollout.log_prob_max_token_len_per_gpu=16384 (fewer tokens)" in refusal
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=16384 (fewer tokens)" in refusal  # update
    assert "set trainer.gpu_memory_gib" in refusal
    _, refusal = _memory(
        "r1d-1.5b_deepscaler_delethink_24k",
        "actor_rollout_ref.model.enable_gradient_checkpointing=false",
        "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768",
    )
    assert "phases over it: update." in refusal
    assert "actor_rollout_ref.actor.ppo_max_token_len_per_gpu=32768 (fewer tokens)" in refusal
    assert "actor_rollout_ref.model.enable_gradient_checkpointing=false (true: " in refusal


def test_longcot_24k_does_not_fit_an_h100_whatever_the_budget():
    # one 24576-token response alone: 6 float32 copies of its logits are 83.46 GiB
    text, refusal = _memory("r1d-1.5b_deepscaler_longcot_24k")
    assert "logits                          -          41.73          83.46" in text
    assert "data.max_response_length=24576 (one row alone exceeds the budget 16384)" in refusal
    assert "ppo_max_token_len_per_gpu" not in refusal  # a smaller budget would not help
    assert _memory("r1d-1.5b_deepscaler_longcot_24k", "trainer.gpu_memory_gib=139")[1] is None  # an H200


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
