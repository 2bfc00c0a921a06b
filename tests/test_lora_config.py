"""LoRA keys are checked at start-up with the rest: a bad value, a target module the model does not have
(read from its config.json, no weights) and a setting LoRA cannot combine with each give one line naming
the key, before Ray starts; the CLI exits with code 2."""

import subprocess
import sys

import pytest

from tests.e2e_utils import HANG_S, asset_paths, tiny_longcot_with
from verl.config import ConfigError

MODEL = "actor_rollout_ref.model"


@pytest.mark.parametrize(
    "overrides, message",
    [
        ([f"{MODEL}.lora_rank=-1"], f"{MODEL}.lora_rank=-1: must be >= 0"),
        ([f"{MODEL}.lora_rank=4", f"{MODEL}.lora_alpha=0"], f"{MODEL}.lora_alpha=0.0: must be > 0"),
        ([f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[]"], f"{MODEL}.target_modules=[]: must name"),
        (
            [f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[all-linear,q_proj]"],
            f"{MODEL}.target_modules=['all-linear', 'q_proj']: all-linear already names every linear layer",
        ),
        (
            [f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[q_proj,qproj]"],
            f"{MODEL}.target_modules=['q_proj', 'qproj']: 'qproj' is not a module of this model (its linear "
            "layers: down_proj, gate_proj, k_proj, lm_head, o_proj, q_proj, up_proj, v_proj)",
        ),
        (
            [f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[norm]"],
            f"{MODEL}.target_modules=['norm']: 'norm' is a Qwen2RMSNorm (model.norm), which LoRA cannot "
            "adapt",
        ),
        (
            [f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[embed_tokens]"],
            "'embed_tokens' is one of the model's tied input/output embeddings (tie_word_embeddings)",
        ),
        (
            ["critic.model.lora_rank=4"],
            "critic.model.lora_rank=4: gives the critic adapters, but only algorithm.adv_estimator=gae has a "
            "critic (it is 'grpo')",
        ),
        (
            ["algorithm.adv_estimator=gae", "critic.model.lora_rank=2",
             "critic.model.target_modules=[v_proj,foo]"],
            "critic.model.target_modules=['v_proj', 'foo']: 'foo' is not a module of this model",
        ),
        (
            ["trainer.device=cuda", "actor_rollout_ref.rollout.name=sglang", f"{MODEL}.lora_rank=4",
             f"{MODEL}.target_modules=[q_proj,lm_head.x]"],
            f"{MODEL}.target_modules=['q_proj', 'lm_head.x']: SGLang applies LoRA to all-linear or to",
        ),
    ],
)  # fmt: skip
def test_bad_lora_settings_are_refused_naming_the_key(tiny_assets, overrides, message):
    with pytest.raises(ConfigError) as error:
        tiny_longcot_with(tiny_assets, *overrides)
    assert message in str(error.value)


def test_good_lora_settings_pass(tiny_assets):
    config = tiny_longcot_with(tiny_assets, f"{MODEL}.lora_rank=8", f"{MODEL}.target_modules=[q_proj,v_proj]")
    assert config.actor_rollout_ref.model.target_modules == ["q_proj", "v_proj"]
    assert tiny_longcot_with(tiny_assets, f"{MODEL}.lora_rank=8").actor_rollout_ref.model.target_modules == [
        "all-linear"
    ]


def test_cli_exits_2_on_a_missing_target_module_before_ray(tiny_assets, tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         *asset_paths(tiny_assets), f"{MODEL}.lora_rank=4", f"{MODEL}.target_modules=[qproj]",
         f"hydra.run.dir={tmp_path / 'run'}"],
        cwd=tmp_path, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr[-2000:]
    assert result.stderr.startswith("config error: ")
    assert f"{MODEL}.target_modules=['qproj']: 'qproj' is not a module of this model" in result.stderr
    assert "Traceback" not in result.stderr and "ray" not in result.stdout.lower()
