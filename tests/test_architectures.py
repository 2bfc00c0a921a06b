"""Every path on the decoder architectures this field's models use, beside the Qwen2 the rest of the suite
runs: tiny random Qwen3 and Llama models (the R1 distills are Qwen2 and Llama) through RL (the HF engine,
the FSDP2 actor, LoRA, the critic), SFT and evaluation."""

import json
import shutil
import subprocess
import sys

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from tests.e2e_utils import DELETHINK, ONE_PROCESS, asset_paths, tiny_config
from tests.test_eval import base_overrides, compose, run_eval
from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.config import compose_config
from verl.eval.config import load_eval_config
from verl.models.tiny import save_tiny
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

OTHER_ARCHITECTURES = ("Qwen3", "Llama")
MODEL = "actor_rollout_ref.model"
MODEL_TYPES = {"Qwen3": "qwen3", "Llama": "llama"}


@pytest.fixture(scope="module", params=OTHER_ARCHITECTURES)
def assets(request, tiny_assets, tmp_path_factory):
    """The test assets with a tiny model of another architecture in place of the Qwen2 one."""
    root = tmp_path_factory.mktemp(request.param)
    save_tiny(root / "model", seed=0, architecture=request.param)
    (root / "data").symlink_to(tiny_assets / "data")
    return request.param, root


def test_the_tiny_model_is_of_its_architecture(assets):
    architecture, root = assets
    assert AutoConfig.from_pretrained(root / "model").model_type == MODEL_TYPES[architecture]


@pytest.mark.parametrize(
    "extra", [(), ("actor_rollout_ref.model.lora_rank=4",), ("algorithm.adv_estimator=gae",)], ids=str
)
def test_rl_trains_with_the_engine_agreeing_with_the_actor(assets, extra, tmp_path):
    architecture, root = assets
    run_dir = tmp_path / "run"
    steps = ("trainer.total_training_steps=2", "trainer.save_freq=2", ONE_PROCESS)
    run(tiny_config("tiny_delethink", root, run_dir, *DELETHINK, *steps, *extra))
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]
    for m in metrics:
        assert torch.isfinite(torch.tensor(m["actor/pg_loss"]))
        # the HF engine's log-probs are the actor's to float32 rounding (the engine's mask, this model's way)
        atol = reordered_atol(m["rollout_corr/training_log_ppl"], FORWARD_ULPS)
        assert max(abs(m["rollout_corr/log_ppl_diff_max"]), abs(m["rollout_corr/log_ppl_diff_min"])) <= atol
    if extra == ("algorithm.adv_estimator=gae",):
        assert all(torch.isfinite(torch.tensor(m["critic/vf_loss"])) for m in metrics)
    trained = AutoModelForCausalLM.from_pretrained(run_dir / "global_step_2" / "actor" / "huggingface")
    assert trained.config.model_type == MODEL_TYPES[architecture]
    initial = AutoModelForCausalLM.from_pretrained(root / "model").state_dict()
    assert any(not torch.equal(initial[k], v) for k, v in trained.state_dict().items())


def test_sft_writes_a_trained_checkpoint_of_the_architecture(assets, tmp_path):
    architecture, root = assets
    out = tmp_path / "sft"
    overrides = [f"model.path={root / 'model'}", f"output_dir={out}", "train.steps=2", "train.batch_size=4",
                 "train.warmup_steps=1", "train.stop_at_accuracy=null", "eval.num_problems=2",
                 "eval.max_new_tokens=8"]  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_sft", "--config-name=sft_tiny", *overrides],
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    trained = AutoModelForCausalLM.from_pretrained(out)
    assert trained.config.model_type == MODEL_TYPES[architecture]
    name = "model.layers.0.mlp.up_proj.weight"
    initial = AutoModelForCausalLM.from_pretrained(root / "model").state_dict()[name]
    assert not torch.equal(trained.state_dict()[name], initial)  # it trained


def test_evaluation_runs_both_modes(assets, tmp_path):
    _, root = assets
    for mode in ("longcot", "delethink"):
        run_eval([*base_overrides(root, tmp_path / mode), f"mode={mode}"])
        samples = read_jsonl(tmp_path / mode / "samples.jsonl")
        assert {s["mode"] for s in samples} == {mode} and len({s["problem_index"] for s in samples}) == 3


def with_config(tiny_assets, tmp_path, **changes) -> str:
    """A copy of the tiny model whose config.json has `changes` (None: the key removed)."""
    model = tmp_path / "model"
    shutil.copytree(tiny_assets / "model", model, dirs_exist_ok=True)
    config = {**json.loads((tiny_assets / "model" / "config.json").read_text()), **changes}
    (model / "config.json").write_text(json.dumps({k: v for k, v in config.items() if v is not None}))
    return str(model)


def trainer_config(tiny_assets, model: str):
    return load_config(compose_config("tiny_longcot", [*asset_paths(tiny_assets), f"{MODEL}.path={model}"]))


def eval_config(tiny_assets, model: str):
    return load_eval_config(
        compose([f"model_path={model}", f"data_files=[{tiny_assets / 'data' / 'val.jsonl'}]"])
    )


@pytest.mark.parametrize(
    "changes, named",
    [
        (
            {"layer_types": ["sliding_attention", "full_attention"]},
            "its layers are ['full_attention', 'sliding",
        ),
        ({"sliding_window": 4096, "use_sliding_window": None}, "a sliding window of 4096 tokens"),
    ],
    ids=["gemma2-like layers", "mistral-like window"],
)
def test_a_model_the_engine_cannot_serve_is_refused_before_it_loads(tiny_assets, tmp_path, changes, named):
    """Sliding-window attention: the HF engine builds one full-attention mask, so the run and the evaluation
    refuse such a model from its config.json alone, with one line each."""
    model = with_config(tiny_assets, tmp_path, **changes)
    with pytest.raises(ValueError) as error:
        trainer_config(tiny_assets, model)
    assert f"{MODEL}.path={model!r}: " in str(error.value) and named in str(error.value)
    assert "(rollout.name=hf)" in str(error.value)
    with pytest.raises(ValueError) as error:
        eval_config(tiny_assets, model)
    assert named in str(error.value)


def test_a_window_switched_off_is_served(tiny_assets, tmp_path):
    model = with_config(
        tiny_assets, tmp_path, sliding_window=4096, use_sliding_window=False
    )  # Qwen2's default
    assert trainer_config(tiny_assets, model).actor_rollout_ref.model.path == model
    assert eval_config(tiny_assets, model).model_path == model
