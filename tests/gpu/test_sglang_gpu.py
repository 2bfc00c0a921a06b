"""The real SGLang engine on a GPU. Skipped without CUDA, without sglang, or without a model:

    pip install -e .[gpu]
    VERL_TEST_MODEL=/path/to/a/small/hf/model pytest -q tests/gpu/test_sglang_gpu.py

Any small causal LM SGLang supports works (e.g. a Qwen2.5-0.5B-Instruct directory). sglang is
imported only inside the fixture, so collecting this file on a CPU machine imports nothing heavy.
"""

import os

import pytest
import torch

from verl.core.engine import SamplingParams

pytestmark = pytest.mark.gpu

PROMPT = "The capital of France is a city whose name is"


@pytest.fixture(scope="module")
def model_dir():
    if not torch.cuda.is_available():
        pytest.skip("needs CUDA")
    pytest.importorskip("sglang", reason="needs sglang: pip install -e .[gpu]")
    path = os.environ.get("VERL_TEST_MODEL")
    if not path:
        pytest.skip("set VERL_TEST_MODEL to a local HF model directory")
    return path


@pytest.fixture(scope="module")
def tokenizer(model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


@pytest.fixture(scope="module")
def hf_model(model_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()


@pytest.fixture(scope="module")
def engine(model_dir, tokenizer, hf_model):
    from verl.single_controller.fsdp_workers import eos_token_ids
    from verl.workers.rollout.sglang_engine import SGLangRolloutEngine

    engine = SGLangRolloutEngine(
        model_dir,
        eos_token_ids(hf_model.generation_config, tokenizer),
        mem_fraction_static=0.3,
        dtype="bfloat16",
        seed=0,
        max_num_seqs=16,
        update_bucket_bytes=64 * 2**20,  # several buckets even for a small model
    )
    yield engine
    engine.shutdown()


def generate(engine, prompt_ids, params):
    return engine.event_loop.run_until_complete(engine.generate(prompt_ids, params))


def test_log_probs_match_a_transformers_forward(engine, tokenizer, hf_model):
    prompt = tokenizer(PROMPT)["input_ids"]
    temperature = 0.7  # not 1: SGLang must report log_softmax(logits / T), not unscaled log-probs
    out = generate(engine, prompt, SamplingParams(max_new_tokens=32, temperature=temperature, seed=1))
    assert 1 <= len(out.token_ids) == len(out.log_probs) <= 32
    if out.finish_reason == "stop":
        assert out.token_ids[-1] in engine.eos_token_ids
    else:
        assert len(out.token_ids) == 32

    ids = torch.tensor([prompt + out.token_ids], device="cuda")
    with torch.no_grad():
        logits = hf_model(ids).logits[0, len(prompt) - 1 : -1].float()
    reference = (logits / temperature).log_softmax(-1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    diff = (torch.tensor(out.log_probs, device="cuda") - reference).abs()
    # a bf16 engine against an fp32 forward: close on average, never far
    assert diff.mean() < 0.05 and diff.max() < 0.5, (diff.mean(), diff.max())


def test_greedy_is_repeatable_and_a_weight_update_changes_it(engine, hf_model, tokenizer):
    prompt = tokenizer(PROMPT)["input_ids"]
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    before = generate(engine, prompt, greedy)
    assert generate(engine, prompt, greedy).token_ids == before.token_ids

    original = {name: p.detach().clone() for name, p in hf_model.named_parameters()}
    scrambled = {name: p + 0.05 * torch.randn_like(p) for name, p in original.items()}
    engine.update_weights(scrambled.items())
    changed = generate(engine, prompt, greedy)
    assert changed.token_ids != before.token_ids or changed.log_probs != pytest.approx(before.log_probs)

    engine.update_weights(original.items())
    restored = generate(engine, prompt, greedy)
    assert restored.token_ids == before.token_ids
    assert restored.log_probs == pytest.approx(before.log_probs, abs=1e-3)


def test_release_frees_memory_and_resume_plus_update_restores_outputs(engine, hf_model, tokenizer):
    prompt = tokenizer(PROMPT)["input_ids"]
    greedy = SamplingParams(max_new_tokens=16, temperature=0.0)
    before = generate(engine, prompt, greedy)

    free_before, _ = torch.cuda.mem_get_info()
    engine.release_memory()
    free_released, _ = torch.cuda.mem_get_info()
    assert free_released > free_before  # the engine's weights and KV cache went back to the device

    # the colocated order: new weights in (their memory comes back first), then the KV cache
    engine.update_weights((name, p.detach()) for name, p in hf_model.named_parameters())
    engine.resume_memory()
    after = generate(engine, prompt, greedy)
    assert after.token_ids == before.token_ids
