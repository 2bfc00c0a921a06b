"""The SGLang engine's request building, response parsing and weight bucketing, and the glue of its
GPU-only paths, on CPU.

The responses below are written by hand in the formats SGLang 0.5 returns from
`Engine.async_generate(input_ids=..., return_logprob=True)`. The glue tests stand a small fake in for
`sglang.Engine` where the real one cannot run here: releasing and resuming memory (torch_memory_saver is
CUDA-only) and serving LoRA adapters (SGLang's LoRA layers pin host memory), and they check the order of
what our adapter asks of SGLang. Everything that runs on CPU is tested through the real engine in
tests/test_sglang_engine.py; tests/gpu/test_sglang_gpu.py runs it on a GPU.
"""

import asyncio
import math
import random
import sys
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from verl.core.engine import SamplingParams
from verl.workers.rollout import sglang_engine
from verl.workers.rollout.sglang_engine import (
    SGLangGenerationError,
    SGLangRolloutEngine,
    bucket_named_tensors,
    build_sampling_params,
    parse_output,
)

EOS = [2, 7]


def sglang_output(token_ids, log_probs, finish, with_text=False, prompt_log_probs=None):
    entries = [(lp, t, f"<{t}>" if with_text else None) for lp, t in zip(log_probs, token_ids, strict=True)]
    meta = {
        "id": "rid-0",
        "finish_reason": finish,
        "prompt_tokens": 3,
        "completion_tokens": len(token_ids),
        "cached_tokens": 0,
        "output_token_logprobs": entries,
    }
    if prompt_log_probs is not None:
        meta["input_token_logprobs"] = prompt_log_probs
    return {"output_ids": list(token_ids), "meta_info": meta}


# request building --------------------------------------------------------------------------------
def test_the_engines_port_is_drawn_apart_from_the_hosts_seeded_random():
    """SGLang draws its scheduler's torch.distributed port from the module-level generator: two hosts
    seeded alike draw the same one (the collision), unless the launch draws from fresh entropy; the host's
    own stream goes on after the launch as if no engine had started."""
    from sglang.srt.utils.network import get_free_port_below_ephemeral

    seeded_ports = []
    for _ in range(2):
        random.seed(0)
        seeded_ports.append(get_free_port_below_ephemeral())
    assert seeded_ports[0] == seeded_ports[1]  # what two hosts seeded alike would bind

    draws = []
    for _ in range(2):
        random.seed(0)
        with sglang_engine._unseeded_module_random():
            draws.append(random.random())
        host_next = random.random()
    random.seed(0)
    assert draws[0] != draws[1] and random.random() not in draws  # fresh entropy each launch
    random.seed(0)
    assert host_next == random.random()  # the host's stream, untouched


def test_sampling_params_pass_through_with_our_eos_and_seed():
    params = SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, top_k=-1, seed=5)
    assert build_sampling_params(params, [7, 2, 7]) == {
        "max_new_tokens": 16,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": -1,  # SGLang reads -1 as the whole vocabulary, like us
        "stop_token_ids": [2, 7],
        "sampling_seed": 5,
    }


def test_ignore_eos_sends_no_stop_tokens():
    request = build_sampling_params(SamplingParams(max_new_tokens=16, ignore_eos=True), [7, 2])
    assert request["ignore_eos"] is True and "stop_token_ids" not in request
    assert "ignore_eos" not in build_sampling_params(SamplingParams(max_new_tokens=16), [7, 2])


def test_greedy_and_unseeded_requests():
    greedy = build_sampling_params(SamplingParams(max_new_tokens=4, temperature=0.0, top_k=3), EOS)
    assert greedy["temperature"] == 0.0 and greedy["top_k"] == 3  # SGLang runs T=0 as top_k=1, T=1
    assert "sampling_seed" not in greedy


def test_large_seeds_fold_into_31_bits():
    seed = 2**62 + 12345
    assert build_sampling_params(SamplingParams(4, seed=seed), EOS)["sampling_seed"] == seed % 2**31
    assert build_sampling_params(SamplingParams(4, seed=2**31), EOS)["sampling_seed"] == 0


# response parsing --------------------------------------------------------------------------------
def entries(output):
    return output["meta_info"]["output_token_logprobs"]


def stop(matched):
    return {"type": "stop", "matched": matched}


def test_stop_keeps_the_eos_token_and_its_log_prob():
    out = sglang_output([5, 9, 7], [-0.5, -1.25, -0.125], {"type": "stop", "matched": 7})
    parsed = parse_output(out, EOS, max_new_tokens=8)
    assert parsed.token_ids == [5, 9, 7]
    assert parsed.log_probs == [-0.5, -1.25, -0.125]
    assert parsed.finish_reason == "stop"


def test_length_with_text_entries_lists_and_prompt_log_probs():
    out = sglang_output(
        [4, 4],
        [-2.0, -0.25],
        {"type": "length", "length": 2},
        with_text=True,
        # the prompt's log-probs, first one None: reported separately and not part of the result
        prompt_log_probs=[(None, 1, None), (-3.0, 3, None), (-0.5, 8, None)],
    )
    # after msgpack, SGLang's tuples can arrive as lists
    out["meta_info"]["output_token_logprobs"] = [list(e) for e in out["meta_info"]["output_token_logprobs"]]
    parsed = parse_output(out, EOS, max_new_tokens=2)
    assert (parsed.token_ids, parsed.log_probs, parsed.finish_reason) == ([4, 4], [-2.0, -0.25], "length")


def test_two_field_entries_and_missing_output_ids():
    out = {
        "meta_info": {
            "finish_reason": {"type": "stop", "matched": np.int64(2)},
            "output_token_logprobs": [(-0.75, 6), (-0.0625, 2)],
        }
    }
    parsed = parse_output(out, EOS, max_new_tokens=4)
    assert (parsed.token_ids, parsed.log_probs, parsed.finish_reason) == ([6, 2], [-0.75, -0.0625], "stop")


def test_abort_raises_with_sglangs_message():
    out = sglang_output([], [], {"type": "abort", "message": "Request was aborted: out of memory"})
    with pytest.raises(
        SGLangGenerationError, match="aborted the request: Request was aborted: out of memory"
    ):
        parse_output(out, EOS, max_new_tokens=4)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda o: o.pop("meta_info"), "no meta_info"),
        (lambda o: o["meta_info"].update(finish_reason=None), "not finished"),
        (lambda o: o["meta_info"].update(finish_reason="stop"), "expected a dict with a 'type'"),
        (lambda o: o["meta_info"].update(finish_reason={"type": "eos"}), "unknown finish_reason type 'eos'"),
        (lambda o: o["meta_info"].pop("output_token_logprobs"), "return_logprob=True"),
        (lambda o: o["meta_info"].update(output_token_logprobs=[(-1.0,), (-1.0,)]), r"\[0\] = \(-1.0,\)"),
        (lambda o: o["meta_info"].update(output_token_logprobs="x"), "is str, expected a list"),
        (lambda o: entries(o).__setitem__(1, (None, 7, None)), r"\[1\] has no log-prob"),
        (lambda o: entries(o).__setitem__(0, (math.nan, 5, None)), "log-prob nan for token 5"),
        (lambda o: o.update(output_ids=[5, 8]), "disagree"),
        (lambda o: o["meta_info"].update(finish_reason=stop("</s>")), "on '</s>'"),
        (lambda o: o["meta_info"].update(finish_reason=stop(9)), "token 9, which is not"),
        (lambda o: o["meta_info"].update(finish_reason=stop(2)), "last returned token is 7"),
    ],
)  # fmt: skip
def test_malformed_outputs_name_what_is_wrong(mutate, message):
    out = sglang_output([5, 7], [-0.5, -0.25], {"type": "stop", "matched": 7})
    mutate(out)
    with pytest.raises(SGLangGenerationError, match=message):
        parse_output(out, EOS, max_new_tokens=4)


def test_token_counts_outside_one_to_max_new_tokens_are_errors():
    too_many = sglang_output([5, 6, 8], [-1.0] * 3, {"type": "length", "length": 3})
    with pytest.raises(SGLangGenerationError, match="returned 3 tokens; max_new_tokens=2"):
        parse_output(too_many, EOS, max_new_tokens=2)
    with pytest.raises(SGLangGenerationError, match="returned 0 tokens"):
        parse_output(sglang_output([], [], {"type": "length", "length": 0}), EOS, max_new_tokens=2)


# weight buckets ----------------------------------------------------------------------------------
def test_buckets_by_bytes_in_order():
    sizes = {"a": 10, "b": 20, "c": 30, "d": 5, "e": 50}  # float32 elements: 40, 80, 120, 20, 200 bytes
    named = [(name, torch.zeros(n)) for name, n in sizes.items()]
    buckets = [[name for name, _ in b] for b in bucket_named_tensors(named, max_bytes=128)]
    # a+b = 120 <= 128; c (120) would overflow; c+d = 140 would too; e (200) is alone even over the cap
    assert buckets == [["a", "b"], ["c"], ["d"], ["e"]]
    assert [[n for n, _ in b] for b in bucket_named_tensors(named, max_bytes=140)] == [
        ["a", "b"],
        ["c", "d"],
        ["e"],
    ]
    half = [("h", torch.zeros(32, dtype=torch.bfloat16)), ("f", torch.zeros(16))]  # 64 + 64 bytes
    assert len(list(bucket_named_tensors(half, max_bytes=128))) == 1
    assert list(bucket_named_tensors([], max_bytes=1)) == []
    with pytest.raises(ValueError, match="max_bytes=0"):
        list(bucket_named_tensors(named, max_bytes=0))


def test_buckets_are_yielded_before_the_input_is_exhausted():
    def tensors():
        yield "a", torch.zeros(8)
        yield "b", torch.zeros(8)
        raise AssertionError("read past what the first bucket needed")

    first = next(bucket_named_tensors(tensors(), max_bytes=32))
    assert [name for name, _ in first] == ["a"]


# the engine glue, with a stand-in for sglang.Engine ------------------------------------------
class FakeSGLang:
    """Records what the adapter asks of sglang.Engine; answers generate with canned outputs."""

    def __init__(self, **server_args):
        self.server_args = server_args
        self.loop = asyncio.new_event_loop()  # sglang.Engine builds its own loop the same way
        self.requests, self.updates, self.memory_calls = [], [], []
        self.adapter_calls, self.lora_paths = [], []
        self.shut_down = False

    async def async_generate(self, input_ids, sampling_params, return_logprob, lora_path=None):
        self.requests.append((input_ids, sampling_params, return_logprob))
        self.lora_paths.append(lora_path)
        await asyncio.sleep(0)
        n = sampling_params["max_new_tokens"]
        return sglang_output([5] * n, [-0.5] * n, {"type": "length", "length": n})

    def begin_weight_update(self):
        self.updates.append("begin")
        return True, "Success"

    def update_weights_from_tensor(self, named_tensors, flush_cache):
        self.updates.append(([name for name, _ in named_tensors], flush_cache))
        return True, "Success"

    def end_weight_update(self):
        self.updates.append("end")
        return True, "Success"

    def load_lora_adapter_from_tensors(self, lora_name, tensors, config_dict):
        self.adapter_calls.append(("load", lora_name, sorted(tensors), config_dict))
        return SimpleNamespace(success=True, error_message="")

    def unload_lora_adapter(self, lora_name):
        self.adapter_calls.append(("unload", lora_name))
        return SimpleNamespace(success=True, error_message="")

    def release_memory_occupation(self, tags):
        self.memory_calls.append(("release", tags))

    def resume_memory_occupation(self, tags):
        self.memory_calls.append(("resume", tags))

    def shutdown(self):
        self.shut_down = True


def launch_fake(**server_args):
    return FakeSGLang(**server_args), []  # the engine, and the processes it started


@pytest.fixture
def fake_engine(monkeypatch, tiny_assets):
    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch_fake)
    engine = SGLangRolloutEngine(str(tiny_assets / "model"), EOS, update_bucket_bytes=64, max_num_seqs=4)
    yield engine
    engine.event_loop.close()


def test_constructor_maps_config_values_to_server_args(monkeypatch, tiny_assets, tmp_path):
    from tests.e2e_utils import tiny_config

    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch_fake)
    config = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path,
        "trainer.device=cuda", "actor_rollout_ref.rollout.name=sglang",
        "actor_rollout_ref.rollout.tensor_model_parallel_size=2",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6", "actor_rollout_ref.rollout.max_num_seqs=64",
        "actor_rollout_ref.actor.fsdp_config.param_dtype=bfloat16", "trainer.seed=11",
    )  # fmt: skip
    engine = SGLangRolloutEngine.from_config(config, EOS)
    assert engine._engine.server_args == {
        "device": "cuda",
        "model_path": str(tiny_assets / "model"),
        "tp_size": 2,
        "mem_fraction_static": 0.6,
        "dtype": "bfloat16",
        "random_seed": 11,
        "max_running_requests": 64,
        "skip_tokenizer_init": True,  # ids in, ids out
        "enable_memory_saver": True,  # rollout.free_cache_engine
        "enable_deterministic_inference": False,
    }
    assert engine.max_positions == 1024 and engine.vocab_size == 263  # from the tiny model's config
    engine.shutdown()
    assert engine._engine is None
    # rollout.dtype, when set, is the engine's dtype whatever the actor computes in
    config.actor_rollout_ref.rollout.dtype = "float32"
    assert SGLangRolloutEngine.from_config(config, EOS)._engine.server_args["dtype"] == "float32"


def test_bad_constructor_values_are_all_reported(tiny_assets, monkeypatch):
    monkeypatch.setenv("SGLANG_RETURN_ORIGINAL_LOGPROB", "True")
    with pytest.raises(ValueError) as error:
        SGLangRolloutEngine(str(tiny_assets / "model"), [], tensor_parallel_size=0, mem_fraction_static=1.5,
                            dtype="fp8", max_num_seqs=0, update_bucket_bytes=0)  # fmt: skip
    parts = ["tensor_parallel_size=0", "mem_fraction_static=1.5", "dtype='fp8'", "max_num_seqs=0",
             "update_bucket_bytes=0", "eos_token_ids is empty", "SGLANG_RETURN_ORIGINAL_LOGPROB"]  # fmt: skip
    for part in parts:
        assert part in str(error.value)


def test_without_sglang_the_error_says_how_to_install_it(tiny_assets, monkeypatch):
    monkeypatch.setitem(sys.modules, "sglang", None)  # what `import sglang` meets where it is not installed
    with pytest.raises(
        ImportError, match=r"pip install -e \.\[gpu\]` on a CUDA machine.*requirements-sglang-cpu"
    ):
        SGLangRolloutEngine(str(tiny_assets / "model"), EOS)


def test_generate_sends_ids_with_log_probs_and_a_seed(fake_engine):
    loop = fake_engine.event_loop
    params = SamplingParams(max_new_tokens=3, temperature=0.5)

    async def two_requests():
        return await asyncio.gather(
            fake_engine.generate([1, 2, 3], params), fake_engine.generate([4], params)
        )

    first, second = loop.run_until_complete(two_requests())
    assert first.token_ids == [5, 5, 5] and first.log_probs == [-0.5] * 3 and first.finish_reason == "length"
    (ids_a, sent_a, logprob_a), (ids_b, sent_b, _) = fake_engine._engine.requests
    assert ids_a == [1, 2, 3] and ids_b == [4] and logprob_a is True
    assert sent_a["stop_token_ids"] == EOS and sent_a["temperature"] == 0.5
    # unseeded requests get distinct seeds from the engine's own generator (reproducible from `seed`)
    assert sent_a["sampling_seed"] != sent_b["sampling_seed"]


def test_update_weights_in_buckets_flushing_the_cache_once(fake_engine):
    named = [(f"w{i}", torch.zeros(8)) for i in range(5)]  # 32 bytes each, buckets of 64 bytes
    fake_engine.update_weights(iter(named))
    assert fake_engine._engine.updates == [
        "begin",
        (["w0", "w1"], False),
        (["w2", "w3"], False),
        (["w4"], True),
        "end",
    ]


def test_a_rejected_weight_update_is_an_error_and_closes_the_session(fake_engine):
    fake = fake_engine._engine
    fake.update_weights_from_tensor = lambda named_tensors, flush_cache: (False, "bad shape")
    with pytest.raises(RuntimeError, match=r"could not update the weights \['w'\]...: bad shape"):
        fake_engine.update_weights([("w", torch.zeros(1))])
    assert fake.updates == ["begin", "end"]
    fake.begin_weight_update = lambda: (False, "a session is open already")
    with pytest.raises(RuntimeError, match="could not open a weight update: a session is open already"):
        fake_engine.update_weights([("w", torch.zeros(1))])


def test_release_then_update_then_resume(fake_engine):
    loop = fake_engine.event_loop
    one_token = SamplingParams(max_new_tokens=1)
    fake_engine.release_memory()
    fake_engine.release_memory()  # already released: nothing more to free
    with pytest.raises(RuntimeError, match="after release_memory"):
        loop.run_until_complete(fake_engine.generate([1], one_token))
    # the colocated order: the update takes the weights back first, the KV cache comes back last
    fake_engine.update_weights([("w", torch.zeros(1))])
    with pytest.raises(RuntimeError, match=r"still released: \['cuda_graph', 'kv_cache'\]"):
        loop.run_until_complete(fake_engine.generate([1], one_token))
    fake_engine.resume_memory()
    fake_engine.resume_memory()  # nothing left to resume
    assert fake_engine._engine.memory_calls == [
        ("release", ["weights", "kv_cache", "cuda_graph"]),
        ("resume", ["weights"]),
        ("resume", ["kv_cache", "cuda_graph"]),
    ]
    assert loop.run_until_complete(fake_engine.generate([1], one_token)).token_ids == [5]


def test_resume_without_a_weight_update_refuses_to_generate(fake_engine):
    fake_engine.release_memory()
    fake_engine.resume_memory()  # the weights' memory is back, but not their values
    with pytest.raises(RuntimeError, match=r"still released: \[\]\); call update_weights"):
        fake_engine.event_loop.run_until_complete(fake_engine.generate([1], SamplingParams(max_new_tokens=1)))
    fake_engine.update_weights([("w", torch.zeros(1))])
    assert fake_engine._engine.memory_calls[-1] == ("resume", ["weights", "kv_cache", "cuda_graph"])
    fake_engine.event_loop.run_until_complete(fake_engine.generate([1], SamplingParams(max_new_tokens=1)))


def test_release_needs_the_memory_saver(monkeypatch, tiny_assets):
    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch_fake)
    engine = SGLangRolloutEngine(str(tiny_assets / "model"), EOS, enable_memory_saver=False)
    with pytest.raises(RuntimeError, match="enable_memory_saver=True"):
        engine.release_memory()
    engine.event_loop.close()


# LoRA -------------------------------------------------------------------------------------------
LORA_KEYS = SimpleNamespace(lora_rank=4, lora_alpha=8.0, target_modules=["all-linear"])


def test_adapter_names_are_the_ones_peft_saves():
    from peft import get_peft_model_state_dict

    from verl.models import lora
    from verl.models.tiny import build_model, build_tokenizer

    model = lora.add_adapters(build_model(build_tokenizer(), seed=0), LORA_KEYS, lora.CAUSAL_LM)
    ours = dict(sglang_engine.peft_adapter_names(lora.weights_for_engine(model, adapters_only=True)))
    saved = get_peft_model_state_dict(model)
    assert ours.keys() == saved.keys() and all(torch.equal(ours[k], saved[k]) for k in saved)
    # all-linear spelled out for SGLang: the layers peft adapted
    adapted = {name.rsplit(".", 1)[-1] for name in model.peft_config["default"].target_modules}
    assert set(sglang_engine.lora_config_dict(LORA_KEYS)["target_modules"]) == adapted


@pytest.fixture
def lora_engine(monkeypatch, tiny_assets):
    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch_fake)
    engine = SGLangRolloutEngine(str(tiny_assets / "model"), EOS, lora=LORA_KEYS)
    yield engine
    engine.event_loop.close()


def test_lora_engine_serves_each_update_as_a_new_adapter_and_keeps_its_base_weights(lora_engine):
    fake, loop = lora_engine._engine, lora_engine.event_loop
    assert lora_engine.takes_adapters_only
    assert {k: fake.server_args[k] for k in ("enable_lora", "max_lora_rank", "lora_target_modules")} == {
        "enable_lora": True, "max_lora_rank": 4,
        "lora_target_modules": ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
    }  # fmt: skip
    one_token = SamplingParams(max_new_tokens=1)
    loop.run_until_complete(lora_engine.generate([1], one_token))  # before any update: the base model
    adapters = [("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight", torch.ones(4, 8))]
    lora_engine.release_memory()
    lora_engine.update_weights(iter(adapters))
    lora_engine.resume_memory()
    loop.run_until_complete(lora_engine.generate([1], one_token))
    lora_engine.update_weights(iter(adapters))
    loop.run_until_complete(lora_engine.generate([1], one_token))
    assert fake.lora_paths == [None, "policy_v1", "policy_v2"]
    config = sglang_engine.lora_config_dict(LORA_KEYS)
    assert fake.adapter_calls == [
        ("load", "policy_v1", ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"], config),
        ("unload", "policy_v1"),
        ("load", "policy_v2", ["base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"], config),
    ]
    assert fake.updates == []  # no full-weight push
    # the base weights are never sent again, so they are never released
    assert fake.memory_calls == [
        ("release", ["kv_cache", "cuda_graph"]),
        ("resume", ["kv_cache", "cuda_graph"]),
    ]


def test_a_failed_adapter_load_is_an_error(lora_engine):
    lora_engine._engine.load_lora_adapter_from_tensors = lambda *args: SimpleNamespace(
        success=False, error_message="rank 4 exceeds max_lora_rank"
    )
    with pytest.raises(RuntimeError, match="could not load the LoRA adapter: rank 4 exceeds max_lora_rank"):
        lora_engine.update_weights([("x.lora_A.default.weight", torch.zeros(1))])


def test_from_config_passes_the_lora_keys(monkeypatch, tiny_assets, tmp_path):
    from tests.e2e_utils import tiny_config

    monkeypatch.setattr(sglang_engine, "_launch_sglang", launch_fake)
    config = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path, "trainer.device=cuda", "actor_rollout_ref.rollout.name=sglang",
        "actor_rollout_ref.model.lora_rank=8", "actor_rollout_ref.model.target_modules=[q_proj,v_proj]",
    )  # fmt: skip
    engine = SGLangRolloutEngine.from_config(config, EOS)
    assert engine._engine.server_args["lora_target_modules"] == ["q_proj", "v_proj"]
    assert engine._engine.server_args["max_lora_rank"] == 8
    engine.event_loop.close()
