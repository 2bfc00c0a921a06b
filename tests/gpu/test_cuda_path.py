"""The CUDA path without SGLang: the HF engine on the GPU, and a local run on one GPU. Skipped without
CUDA (never run where this was written: no GPU was lent):

    pytest -q tests/gpu/test_cuda_path.py
"""

import math

import pytest
import torch

from tests.e2e_utils import DELETHINK, tiny_config
from tests.test_hf_engine import PAD, full_forward_log_probs, make_model, make_prompt, run
from verl.core.engine import SamplingParams
from verl.trainer.launch import run as run_training
from verl.utils.fs import read_jsonl
from verl.workers.rollout.hf_engine import HFRolloutEngine

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA"),
]


def test_engine_on_cuda_reports_the_log_probs_of_a_full_forward():
    model, reference = make_model().cuda(), make_model()  # the same seed: the same weights, on CPU
    params = [
        SamplingParams(max_new_tokens=16, temperature=0.0),
        SamplingParams(max_new_tokens=16, temperature=1.0, seed=1),
        SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, seed=2),
    ]
    # the second prompt starts with the first: it is served partly from the prefix store
    prompts = [make_prompt(9), make_prompt(9) + make_prompt(4, offset=5), make_prompt(7, offset=1)]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(engine, list(zip(prompts, params, strict=True)))
    for prompt, p, out in zip(prompts, params, outputs, strict=True):
        assert len(out.token_ids) == 16
        expected, _ = full_forward_log_probs(reference, prompt, out.token_ids, p.temperature)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)


@pytest.mark.parametrize("name", ["tiny_longcot", "tiny_delethink"])
def test_local_run_on_one_gpu_logs_peak_memory_per_phase(name, tiny_assets, tmp_path):
    lengths = DELETHINK if name == "tiny_delethink" else ("data.max_response_length=24",)
    cfg = tiny_config(
        name, tiny_assets, tmp_path, *lengths, "trainer.total_training_steps=2", "trainer.device=cuda",
        "trainer.launcher=local", "actor_rollout_ref.actor.fsdp_config.param_dtype=bfloat16",
    )  # fmt: skip
    run_training(cfg)
    metrics = read_jsonl(tmp_path / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert math.isfinite(m["actor/pg_loss"])
        for phase in ("generation", "log_prob", "update"):
            assert m[f"perf/max_memory_allocated_gib/{phase}"] > 0
        assert m["perf/max_memory_reserved_gib"] >= m["perf/max_memory_allocated_gib"] > 0
