"""The YAML configs: every one resolves (CLI and compose API), holds the intended numbers, and agrees with
the dataclass schema; the `eval` resolver does arithmetic and nothing else."""

from __future__ import annotations

import dataclasses
import json
import re
import subprocess
import sys
import typing

import pytest
from omegaconf import OmegaConf
from omegaconf.errors import InterpolationResolutionError

from tests.e2e_utils import HANG_S
from verl.config import (
    CONFIG_DIR,
    ENVIRONMENT_DIR,
    ENVIRONMENT_KEYS,
    ActorRolloutRefConfig,
    AlgorithmConfig,
    CustomRewardFunctionConfig,
    DataConfig,
    ModelConfig,
    PolicyIterationConfig,
    RewardModelConfig,
    TrainerConfig,
    compose_config,
)
from verl.config.rules import environment_names
from verl.trainer.base_yaml import BASE_YAML, base_yaml, field_help
from verl.trainer.config_loader import load_config
from verl.utils.config_resolvers import eval_arithmetic, register_resolvers

REQUIRED = [  # the ??? keys of policy_iteration.yaml
    "data.train_files=train.jsonl",
    "data.val_files=val.jsonl",
    "actor_rollout_ref.model.path=org/model",
]

# Resolved values each config must hold (hand-derived from the design; arithmetic in comments).
EXPECTED = {
    "policy_iteration": {
        "data.max_response_length": 256,
        "trainer.default_local_dir": "outputs/run",  # outputs/${trainer.experiment_name}
    },
    "tiny_longcot": {
        "data.max_prompt_length": 96,
        "data.max_response_length": 128,
        "data.train_batch_size": 16,
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "single_turn",
        "trainer.default_local_dir": "outputs/tiny_longcot",
    },
    "tiny_delethink": {
        "algorithm.delethink.chunk_size": 32,  # C
        "data.max_response_length": 32,  # = C, by interpolation
        "algorithm.delethink.intermediate_max_new_tokens": None,  # derived: C - keep_head - keep_tail
        "algorithm.delethink.max_chunks": 7,
        # inherited from tiny_longcot
        "data.train_batch_size": 16,
        "actor_rollout_ref.actor.ppo_mini_batch_size": 8,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": 32,
        "actor_rollout_ref.rollout.n": 8,
        "trainer.group": "tiny_markovian",
        "trainer.default_local_dir": "outputs/tiny_delethink",
    },
    "smollm2_gsm8k_longcot": {
        "data.max_response_length": 256,  # B
        "actor_rollout_ref.model.lora_rank": 16,
        "actor_rollout_ref.rollout.name": "hf",
        "reward_model.thinking_tags": False,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "single_turn",
        "trainer.default_local_dir": "outputs/smollm2_gsm8k_longcot",
    },
    "smollm2_gsm8k_delethink": {
        "data.max_response_length": 128,  # C
        "algorithm.delethink.keep_head": 32,  # m = 64
        "algorithm.delethink.max_chunks": 3,  # 128 + 2 x 64 = 256 = LongCoT's B
        "data.max_prompt_length": 320,
        "actor_rollout_ref.model.lora_rank": 16,  # inherited from smollm2_gsm8k_longcot
        "trainer.group": "smollm2_gsm8k",
        "trainer.default_local_dir": "outputs/smollm2_gsm8k_delethink",
    },
    "testbed_longcot": {
        "data.max_response_length": 512,  # B
        "data.max_prompt_length": 160,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "single_turn",
        "actor_rollout_ref.rollout.val_kwargs.do_sample": True,
        "trainer.group": "markovian_testbed",
        "trainer.default_local_dir": "outputs/testbed_longcot",
        "actor_rollout_ref.model.share_prompt_prefix": False,
    },
    "testbed_delethink": {
        "algorithm.delethink.chunk_size": 128,  # C = B / 4
        "data.max_response_length": 128,
        "algorithm.delethink.keep_head": 9,  # m = 9 + 55 = C / 2
        "algorithm.delethink.keep_tail": 55,
        "algorithm.delethink.max_chunks": 7,
        "actor_rollout_ref.rollout.agent.default_agent_loop": "delethink",
        "reward_model.reward_manager": "delethink",
        "trainer.name": "delethink",
        "trainer.group": "markovian_testbed",
        "actor_rollout_ref.model.share_prompt_prefix": True,  # LongCoT's long rows stay padded
    },
    # the paper's runs: values from the paper and its reference configs (docs/PAPER_CONFIGS.md)
    "r1d-1.5b_deepscaler": {
        "actor_rollout_ref.model.path": "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B",
        "data.train_batch_size": 128,
        "actor_rollout_ref.rollout.n": 8,
        "actor_rollout_ref.actor.clip_ratio_high": 0.26,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "actor_rollout_ref.rollout.val_kwargs.n": 32,
        "trainer.test_freq": 50,
        "trainer.save_freq": 25,
    },
    "r1d-1.5b_deepscaler_longcot_8k": {
        "data.max_response_length": 8192,
        "data.max_prompt_length": 2048,
        "actor_rollout_ref.actor.clip_ratio_high": 0.28,  # the reference's 8K run keeps its base's value
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "actor_rollout_ref.rollout.val_kwargs.n": 32,
        "trainer.test_freq": 50,
        "trainer.save_freq": 25,
    },
    "r1d-1.5b_deepscaler_longcot_24k": {
        "data.max_response_length": 24576,
        "data.max_prompt_length": 2048,
        "actor_rollout_ref.actor.clip_ratio_high": 0.26,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "actor_rollout_ref.rollout.val_kwargs.n": 32,
        "trainer.test_freq": 50,
        "trainer.save_freq": 25,
    },
    "r1d-1.5b_deepscaler_delethink_24k": {
        "actor_rollout_ref.actor.clip_ratio_high": 0.26,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "actor_rollout_ref.rollout.val_kwargs.n": 32,
        "trainer.test_freq": 50,
        "trainer.save_freq": 10,  # the reference checkpoints Delethink more often
        "algorithm.delethink.chunk_size": 8192,
        "data.max_response_length": 8192,
        "algorithm.delethink.keep_tail": 3996,  # 8192 // 2 - 100
        "algorithm.delethink.intermediate_max_new_tokens": None,  # derived: 8192 - 4096
        "data.max_prompt_length": 6545,  # 2048 + 4 * 100 + 8192 // 2 + 1
        "algorithm.delethink.max_chunks": 5,
    },
    "r1d-1.5b_openmath_delethink_96k": {
        "actor_rollout_ref.model.path": "McGill-NLP/delethink-96k-base-1.5b",  # not R1-Distill
        "actor_rollout_ref.actor.clip_ratio_high": 0.26,
        "actor_rollout_ref.actor.optim.weight_decay": 0.0,
        "trainer.save_freq": 10,
        "algorithm.delethink.max_chunks": 23,
        "algorithm.delethink.keep_tail": 3996,
        "data.max_prompt_length": 6545,
    },
}

# Thinking budgets: LongCoT B, or Delethink C + (I-1)(C-m).
BUDGETS = {
    "tiny_longcot": 128,
    "tiny_delethink": 128,  # 32 + 6 * 16
    "testbed_longcot": 512,
    "testbed_delethink": 512,  # 128 + 6 * 64
    "r1d-1.5b_deepscaler_longcot_8k": 8192,
    "r1d-1.5b_deepscaler_longcot_24k": 24576,
    "r1d-1.5b_deepscaler_delethink_24k": 24576,  # 8192 + 4 * 4096
    "r1d-1.5b_openmath_delethink_96k": 98304,  # 8192 + 22 * 4096
}


def _overrides(name: str) -> list[str]:
    return REQUIRED if name == "policy_iteration" else []


def test_every_yaml_in_the_config_dir_is_covered():
    other_entry_points = {"sft", "sft_tiny", "sft_testbed", "eval"}  # main_sft's and main_eval's configs
    names = {p.stem for p in CONFIG_DIR.glob("*.yaml")} - other_entry_points
    assert names == set(EXPECTED)


@pytest.mark.parametrize("name", list(EXPECTED))
def test_cli_prints_the_resolved_config(name, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_policy_iteration",
            f"--config-name={name}",
            *_overrides(name),
            "--cfg",
            "job",
            "--resolve",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert result.returncode == 0, result.stderr
    printed = OmegaConf.create(result.stdout)
    for key, value in EXPECTED[name].items():
        assert OmegaConf.select(printed, key) == value, key
    assert "${" not in result.stdout  # --resolve left no interpolation behind
    assert list(tmp_path.iterdir()) == []  # printing the config starts no run and writes nothing


def _get(config: object, key: str) -> object:
    for part in key.split("."):
        config = getattr(config, part)
    return config


@pytest.mark.parametrize("name", list(EXPECTED))
def test_every_config_passes_validation(name):
    config = load_config(compose_config(name, _overrides(name)), check_paths=False)
    for key, value in EXPECTED[name].items():
        assert _get(config, key) == value, key


@pytest.mark.parametrize("name, budget", BUDGETS.items())
def test_thinking_budget(name, budget):
    assert load_config(compose_config(name), check_paths=False).thinking_budget == budget


def test_tiny_delethink_changes_only_the_thinking_environment():
    longcot = _flatten(load_config(compose_config("tiny_longcot"), check_paths=False).to_dict())
    delethink = _flatten(load_config(compose_config("tiny_delethink"), check_paths=False).to_dict())
    changed = {key for key in longcot if longcot[key] != delethink[key]}
    assert changed == {
        "environment",
        "data.max_response_length",
        "actor_rollout_ref.actor.fixed_num_optim_steps",
        "actor_rollout_ref.rollout.agent.default_agent_loop",
        "algorithm.delethink.chunk_size",
        "algorithm.delethink.keep_head",
        "algorithm.delethink.keep_tail",
        "algorithm.delethink.max_chunks",
        "reward_model.reward_manager",
        "trainer.name",
        "trainer.experiment_name",
        "trainer.default_local_dir",
    }


def _flatten(tree: dict, prefix: str = "") -> dict[str, object]:
    flat: dict[str, object] = {}
    for key, value in tree.items():
        if isinstance(value, dict) and value:  # an empty section ({}) is a key of its own
            flat.update(_flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def test_paper_delethink_reuses_the_longcot_training_setup():
    longcot = load_config(compose_config("r1d-1.5b_deepscaler_longcot_24k"), check_paths=False)
    delethink = load_config(compose_config("r1d-1.5b_deepscaler_delethink_24k"), check_paths=False)
    assert delethink.actor_rollout_ref.actor == longcot.actor_rollout_ref.actor
    assert delethink.data.train_batch_size == longcot.data.train_batch_size == 128
    assert delethink.thinking_budget == longcot.thinking_budget == 24576
    assert (delethink.trainer.name, longcot.trainer.name) == ("delethink", "ppo")


REFERENCE_PROMPT = "{problem}\n\nPlease reason step by step, and put your final answer within \\boxed{{}}."
# (training tasks, validation tasks) of the paper's runs, as the reference's configs choose them
PAPER_TASKS = {
    "r1d-1.5b_deepscaler_longcot_8k": (["deepscaler"], ["aime24", "aime25", "deepscaler_val"]),
    "r1d-1.5b_deepscaler_longcot_24k": (["deepscaler"], ["aime24", "aime25", "deepscaler_val"]),
    "r1d-1.5b_deepscaler_delethink_24k": (["deepscaler"], ["aime24", "aime25", "deepscaler_val"]),
    "r1d-1.5b_openmath_delethink_96k": (["openmath"], ["aime24", "aime25", "openmath_val"]),
}


@pytest.mark.parametrize("name, tasks", PAPER_TASKS.items())
def test_paper_runs_use_the_reference_tasks_prompt_and_validation(name, tasks):
    config = load_config(compose_config(name), check_paths=False)
    assert (list(config.train_tasks), list(config.val_tasks)) == tasks
    every_task = [*config.train_tasks.values(), *config.val_tasks.values()]
    assert {task.prompt_template for task in every_task} == {REFERENCE_PROMPT}
    assert {task.system_prompt for task in every_task} == {None}
    assert {task.n for task in config.val_tasks.values()} == {32}
    slice_ = config.val_tasks[tasks[1][2]]  # the 30-problem slice of the training distribution
    assert (slice_.max_samples, slice_.shuffle_seed) == (30, 42)


def _dataclass_keys(cls: type, prefix: str = "") -> set[str]:
    hints = typing.get_type_hints(cls)
    keys: set[str] = set()
    for f in dataclasses.fields(cls):
        if dataclasses.is_dataclass(hints[f.name]):
            keys |= _dataclass_keys(hints[f.name], f"{prefix}{f.name}.")
        else:
            keys.add(f"{prefix}{f.name}")
    return keys


def _yaml_keys(path) -> set[str]:
    return set(_flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=False)))


def test_base_yaml_and_its_environment_have_exactly_the_dataclass_keys():
    tree = OmegaConf.to_container(OmegaConf.load(CONFIG_DIR / "policy_iteration.yaml"), resolve=False)
    assert tree.pop("hydra") == {"run": {"dir": "${trainer.default_local_dir}"}, "job": {"chdir": False}}
    defaults = [{"train_tasks": None}, {"val_tasks": None}, "_self_", {"environment": "longcot"}]
    assert tree.pop("defaults") == defaults
    base, environment = set(_flatten(tree)), _yaml_keys(ENVIRONMENT_DIR / "longcot.yaml")
    assert base | environment == _dataclass_keys(PolicyIterationConfig)
    # the base leaves the switch's keys to the environment, so no value of it is silently overridden
    assert base & environment == set()
    assert environment == {"environment", *ENVIRONMENT_KEYS}


def test_the_environments_set_the_same_switch_keys():
    assert environment_names() == ["delethink", "longcot"]
    # delethink also links data.max_response_length to its chunk size C
    assert _yaml_keys(ENVIRONMENT_DIR / "delethink.yaml") == {
        "environment",
        "data.max_response_length",
        *ENVIRONMENT_KEYS,
    }


def test_base_yaml_defaults_equal_the_dataclass_defaults():
    loaded = load_config(compose_config("policy_iteration", REQUIRED), check_paths=False)
    defaults = PolicyIterationConfig(
        data=DataConfig(train_files=["train.jsonl"], val_files=["val.jsonl"]),
        actor_rollout_ref=ActorRolloutRefConfig(model=ModelConfig(path="org/model")),
        algorithm=AlgorithmConfig(),
        reward_model=RewardModelConfig(),
        custom_reward_function=CustomRewardFunctionConfig(),
        trainer=TrainerConfig(),
    )
    assert loaded == defaults


def test_base_yaml_is_generated_from_the_dataclasses():
    # one source for every default and comment: the dataclasses (verl/trainer/base_yaml.py)
    assert BASE_YAML.read_text() == base_yaml(), "run `python -m verl.trainer.base_yaml` to regenerate it"


def test_a_field_help_comment_may_stand_above_the_field():
    helps = field_help(DataConfig)
    assert helps["train_batch_size"] == "prompts per training step"  # after the field
    assert helps["max_response_length"].startswith("tokens; LongCoT: the thinking budget B")  # above it


def test_every_key_of_the_base_yaml_is_commented():
    uncommented = [
        line
        for line in (CONFIG_DIR / "policy_iteration.yaml").read_text().splitlines()
        if re.match(r"^\s*\w+:\s*\S", line) and "#" not in line
    ]
    assert uncommented == []


def test_to_dict_is_plain_and_json_serialisable():
    config = load_config(compose_config("tiny_delethink"), check_paths=False)
    tree = config.to_dict()
    assert tree["algorithm"]["delethink"]["keep_tail"] == 12
    assert tree["actor_rollout_ref"]["actor"]["optim"]["lr"] == 1e-4
    assert json.loads(json.dumps(tree))["trainer"]["logger"] == ["console", "jsonl", "wandb"]


# --- the eval resolver ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, value",
    [
        ("2048 + 4*100 + int(8192)//2 + 1", 6545),
        ("7 / 2", 3.5),
        ("7 // 2", 3),
        ("-7 % 3", 2),  # Python's modulo takes the sign of the divisor
        ("(1 + 2) * 3", 9),
        ("-(4) + +2", -2),
        ("int(7.9)", 7),
        ("min(3, 1, 2)", 1),
        ("max(2, 2.5)", 2.5),
        ("  10 - 2 - 3  ", 5),  # left-associative; surrounding spaces allowed
    ],
)
def test_eval_does_arithmetic(expression, value):
    result = eval_arithmetic(expression)
    assert result == value and type(result) is type(value)


@pytest.mark.parametrize(
    "expression",
    [
        "__import__('os')",
        "__import__('os').system('true')",
        "open('x')",
        "(1).__class__",
        "[1, 2]",
        "'a' * 3",
        "2 ** 10",
        "True + 1",
        "x + 1",
        "lambda: 1",
        "min()",
        "int(x=1)",
        "1 / 0",
        "1 +",
        "",
    ],
)
def test_eval_rejects_anything_but_arithmetic(expression):
    with pytest.raises(ValueError) as error:
        eval_arithmetic(expression)
    assert repr(expression) in str(error.value)


def test_eval_runs_no_code(tmp_path):
    marker = tmp_path / "marker"
    with pytest.raises(ValueError):
        eval_arithmetic(f"__import__('pathlib').Path({str(marker)!r}).touch()")
    assert not marker.exists()


def test_eval_resolver_in_an_interpolation():
    register_resolvers()
    register_resolvers()  # idempotent
    cfg = OmegaConf.create({"c": 8192, "head": 100, "tail": "${eval:'int(${c})//2 - int(${head})'}"})
    assert cfg.tail == 3996
    bad = OmegaConf.create({"c": 8192, "tail": "${eval:'__import__(\"os\")'}"})
    with pytest.raises(InterpolationResolutionError, match="__import__"):
        _ = bad.tail


def test_checking_a_config_imports_no_torch():
    """The trainer's, the evaluator's and SFT's entry points import their config checks without torch
    (verl/core/names.py and verl/data/generated_tasks.py hold the names and sizes they check against),
    so a typo or a bad value is answered in about a second, not after torch's import."""
    entry_points = "verl.trainer.main_policy_iteration, verl.trainer.main_eval, verl.trainer.main_sft"
    probe = f"import sys, {entry_points}; print(*sys.modules)"
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=HANG_S)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = set(result.stdout.split())
    assert {"verl.config", "verl.eval.config", "verl.config.sft", "verl.data.generated_tasks"} <= loaded
    assert not {"torch", "transformers"} & loaded
