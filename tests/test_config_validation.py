"""Start-up validation: every rule rejects a bad value with a message naming the key and the value, and
the CLI turns that into one readable error and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tests.e2e_utils import HANG_S
from verl.config import ConfigError, compose_config
from verl.trainer.config_loader import config_warnings, load_config

ACTOR = "actor_rollout_ref.actor"
MODEL = "actor_rollout_ref.model"
ROLLOUT = "actor_rollout_ref.rollout"
DELETHINK = "algorithm.delethink"


def _error(name: str, overrides: list[str], check_paths: bool = False) -> str:
    with pytest.raises(ConfigError) as error:
        load_config(compose_config(name, overrides), check_paths=check_paths)
    return str(error.value)


# (config, override, text the message must contain: the key path and the value)
BAD_VALUES = [
    (
        "tiny_delethink",
        [
            "actor_rollout_ref.model.share_prompt_prefix=true",
            "actor_rollout_ref.model.use_remove_padding=true",
        ],
        "actor_rollout_ref.model.share_prompt_prefix=True: cannot be combined with use_remove_padding=true",
    ),
    (
        "tiny_longcot",
        [
            "actor_rollout_ref.model.share_prompt_prefix=true",
            "actor_rollout_ref.model.attn_implementation=flash_attention_2",
        ],
        "model.share_prompt_prefix=True: needs attn_implementation='sdpa' (got 'flash_attention_2')",
    ),
    ("tiny_longcot", "data.max_prompt_length=0", "data.max_prompt_length=0: must be > 0"),
    ("tiny_longcot", "data.max_response_length=-5", "data.max_response_length=-5: must be > 0"),
    ("tiny_longcot", "data.train_batch_size=0", "data.train_batch_size=0: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.ppo_mini_batch_size=0", f"{ACTOR}.ppo_mini_batch_size=0: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.ppo_micro_batch_size_per_gpu=0", f"{ACTOR}.ppo_micro_batch_size_per_gpu=0"),
    ("tiny_longcot", f"{ACTOR}.ppo_epochs=0", f"{ACTOR}.ppo_epochs=0: must be > 0"),
    ("tiny_longcot", f"{ROLLOUT}.n=0", f"{ROLLOUT}.n=0: must be > 0"),
    ("tiny_longcot", f"{ROLLOUT}.max_num_seqs=0", f"{ROLLOUT}.max_num_seqs=0: must be > 0"),
    (
        "tiny_longcot",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=0",
        "log_prob_micro_batch_size_per_gpu=0",
    ),
    ("tiny_longcot", "trainer.total_training_steps=0", "trainer.total_training_steps=0: must be > 0"),
    ("tiny_longcot", "trainer.nnodes=0", "trainer.nnodes=0: must be > 0"),
    ("tiny_longcot", "trainer.n_gpus_per_node=-1", "trainer.n_gpus_per_node=-1: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.optim.lr=0", f"{ACTOR}.optim.lr=0.0: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.optim.lr=-1e-5", f"{ACTOR}.optim.lr=-1e-05: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.optim.lr=nan", f"{ACTOR}.optim.lr=nan: must be a finite number"),
    ("tiny_longcot", f"{ACTOR}.optim.weight_decay=-0.1", f"{ACTOR}.optim.weight_decay=-0.1: must be >= 0"),
    ("tiny_longcot", f"{ACTOR}.optim.lr_warmup_steps=-1", f"{ACTOR}.optim.lr_warmup_steps=-1: must be >= 0"),
    ("tiny_longcot", f"{ACTOR}.optim.betas=[0.9,1.0]", f"{ACTOR}.optim.betas=(0.9, 1.0): each beta"),
    ("tiny_longcot", f"{ACTOR}.kl_loss_coef=-1", f"{ACTOR}.kl_loss_coef=-1.0: must be >= 0"),
    ("tiny_longcot", f"{ACTOR}.grad_clip=0", f"{ACTOR}.grad_clip=0.0: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.clip_ratio_low=0", f"{ACTOR}.clip_ratio_low=0.0: must be in (0, 1)"),
    ("tiny_longcot", f"{ACTOR}.clip_ratio_low=1", f"{ACTOR}.clip_ratio_low=1.0: must be in (0, 1)"),
    ("tiny_longcot", f"{ACTOR}.clip_ratio_high=0", f"{ACTOR}.clip_ratio_high=0.0: must be > 0"),
    ("tiny_longcot", f"{ACTOR}.clip_ratio_c=1", f"{ACTOR}.clip_ratio_c=1.0: must be > 1"),
    (
        "tiny_longcot",
        f"{ACTOR}.fixed_num_optim_steps=0",
        f"{ACTOR}.fixed_num_optim_steps=0: must be null or >= 1",
    ),
    ("tiny_longcot", f"{ROLLOUT}.temperature=-0.1", f"{ROLLOUT}.temperature=-0.1: must be >= 0"),
    ("tiny_longcot", f"{ROLLOUT}.top_p=0", f"{ROLLOUT}.top_p=0.0: must be in (0, 1]"),
    ("tiny_longcot", f"{ROLLOUT}.top_p=1.5", f"{ROLLOUT}.top_p=1.5: must be in (0, 1]"),
    ("tiny_longcot", f"{ROLLOUT}.top_k=0", f"{ROLLOUT}.top_k=0: must be -1 (off) or > 0"),
    ("tiny_longcot", f"{ROLLOUT}.val_kwargs.temperature=-1", f"{ROLLOUT}.val_kwargs.temperature=-1.0"),
    ("tiny_longcot", f"{ROLLOUT}.val_kwargs.top_p=2", f"{ROLLOUT}.val_kwargs.top_p=2.0: must be in (0, 1]"),
    ("tiny_longcot", f"{ROLLOUT}.val_kwargs.top_k=-2", f"{ROLLOUT}.val_kwargs.top_k=-2"),
    ("tiny_longcot", f"{ROLLOUT}.val_kwargs.n=0", f"{ROLLOUT}.val_kwargs.n=0: must be >= 1"),
    ("tiny_longcot", "data.val_batch_size=0", "data.val_batch_size=0: must be -1"),
    ("tiny_longcot", "trainer.test_freq=0", "trainer.test_freq=0: must be -1"),
    ("tiny_longcot", "trainer.save_freq=-2", "trainer.save_freq=-2: must be -1"),
    ("tiny_longcot", "data.train_files=[]", "data.train_files=[]: must list at least one file"),
    ("tiny_longcot", "trainer.experiment_name=''", "trainer.experiment_name='': must not be empty"),
    # 8 prompts cannot be cut into mini-batches of 3
    (
        "tiny_longcot",
        f"{ACTOR}.ppo_mini_batch_size=3",
        f"data.train_batch_size=16: must be divisible by {ACTOR}.ppo_mini_batch_size=3",
    ),
    # registries: the message lists what is allowed
    (
        "tiny_longcot",
        "algorithm.adv_estimator=gea",
        "algorithm.adv_estimator='gea': must be one of ['grpo', 'rloo', 'reinforce_plus_plus', "
        "'reinforce_plus_plus_baseline', 'remax', 'gae']",
    ),
    (
        "tiny_longcot",
        f"{ACTOR}.loss_agg_mode=bogus",
        f"{ACTOR}.loss_agg_mode='bogus': must be one of ['token-mean'",
    ),
    ("tiny_longcot", f"{ACTOR}.kl_loss_type=k9", f"{ACTOR}.kl_loss_type='k9': must be one of ['kl', 'abs'"),
    (
        "tiny_longcot",
        f"{DELETHINK}.trimmer=bogus",
        f"{DELETHINK}.trimmer='bogus': must be one of ['progressive'",
    ),
    # the pre-unification key names are unknown, with a hint at the new one
    (
        "tiny_longcot",
        f"+{DELETHINK}.trimmer_name=progressive",
        f"{DELETHINK}.trimmer_name: unknown key; did you mean {DELETHINK}.trimmer?",
    ),
    (
        "tiny_longcot",
        "reward_model.reward_manager=prime",
        "reward_model.reward_manager='prime': must be one of [",
    ),
    (
        "tiny_longcot",
        f"{ROLLOUT}.agent.default_agent_loop=tool",
        f"{ROLLOUT}.agent.default_agent_loop='tool': must be one of [",
    ),
    ("tiny_longcot", f"{ROLLOUT}.name=vllm", f"{ROLLOUT}.name='vllm': must be one of ['hf', 'sglang']"),
    ("tiny_longcot", f"{ROLLOUT}.mode=sync", f"{ROLLOUT}.mode='sync': must be one of ['async']"),
    ("tiny_longcot", f"{ACTOR}.strategy=fsdp", f"{ACTOR}.strategy='fsdp': must be one of ['fsdp2']"),
    ("tiny_longcot", "trainer.name=grpo", "trainer.name='grpo': must be one of ['ppo', 'delethink']"),
    (
        "tiny_longcot",
        "trainer.resume_mode=latest",
        "trainer.resume_mode='latest': must be one of ['auto', 'disable', 'path']",
    ),
    ("tiny_longcot", "trainer.device=tpu", "trainer.device='tpu': must be one of ['cpu', 'cuda']"),
    (
        "tiny_longcot",
        "trainer.logger=[console,tensorboard]",
        "trainer.logger=['console', 'tensorboard']: every entry",
    ),
    # a group of one response has zero advantage
    ("tiny_longcot", f"{ROLLOUT}.n=1", f"{ROLLOUT}.n=1: must be >= 2 with algorithm.adv_estimator='grpo'"),
    (
        "tiny_longcot",
        ["algorithm.adv_estimator=rloo", f"{ROLLOUT}.n=1"],
        f"{ROLLOUT}.n=1: must be >= 2 with algorithm.adv_estimator='rloo'",
    ),
    (
        "tiny_longcot",
        "trainer.resume_mode=path",
        "trainer.resume_from_path=None: must be set when trainer.resume_mode='path'",
    ),
    (
        "tiny_longcot",
        f"{ROLLOUT}.name=sglang",
        f"{ROLLOUT}.free_cache_engine=True: releases SGLang's memory through torch_memory_saver, which needs",
    ),
    (
        "tiny_longcot",
        [
            f"{ROLLOUT}.name=sglang",
            f"{ROLLOUT}.free_cache_engine=false",
            "actor_rollout_ref.model.lora_rank=4",
        ],
        f"{MODEL}.lora_rank=4: SGLang's LoRA layers need a GPU (they pin host memory)",
    ),
    (
        "tiny_longcot",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=0",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=0: must be >= 1",
    ),
    # the PPO trainer trains one row per trajectory
    (
        "tiny_delethink",
        "trainer.name=ppo",
        f"{ROLLOUT}.agent.default_agent_loop='delethink': trainer.name=ppo",
    ),
    # the naive reward manager would score only the last chunk: refused, not warned about
    (
        "tiny_delethink",
        "reward_model.reward_manager=naive",
        "reward_model.reward_manager='naive': scores only the last chunk of a Delethink trajectory",
    ),
    (
        "tiny_longcot",
        f"{ROLLOUT}.agent.default_agent_loop=delethink",
        "reward_model.reward_manager='naive': scores only the last chunk",
    ),
    # C is set in algorithm.delethink alone; data.max_response_length follows it or is refused
    (
        "tiny_delethink",
        "data.max_response_length=64",
        f"data.max_response_length=64: must equal {DELETHINK}.chunk_size=32",
    ),
    (
        "policy_iteration",
        [
            "environment=delethink",
            "actor_rollout_ref.model.path=m/m",
            "data.train_files=t",
            "data.val_files=v",
            "data.max_response_length=64",
        ],
        f"data.max_response_length=64: must equal {DELETHINK}.chunk_size=8192",
    ),
    # I is algorithm.delethink.max_chunks; the gym loop's turn limit is not a second place to set it
    (
        "tiny_delethink",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=7",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=7: is the gym loop's turn limit and the delethink loop "
        f"does not read it; set I with {DELETHINK}.max_chunks",
    ),
    (
        "tiny_longcot",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=2",
        f"{ROLLOUT}.multi_turn.max_assistant_turns=2: trainer.name=ppo trains one row per trajectory; "
        "use trainer.name=delethink",
    ),
    # Delethink: C = 32, keep_head = 4, keep_tail = 12
    ("tiny_delethink", f"{DELETHINK}.keep_head=-1", f"{DELETHINK}.keep_head=-1: must be >= 0"),
    ("tiny_delethink", f"{DELETHINK}.max_chunks=0", f"{DELETHINK}.max_chunks=0: must be >= 1"),
    ("tiny_delethink", f"{DELETHINK}.chunk_size=0", f"{DELETHINK}.chunk_size=0: must be >= 1"),
    ("tiny_delethink", f"{DELETHINK}.keep_tail=0", f"{DELETHINK}.keep_tail=0: must be >= 1"),
    ("tiny_delethink", f"{DELETHINK}.keep_tail=-3", f"{DELETHINK}.keep_tail=-3: must be >= 1"),
    # 4 + 28 = 32 = C leaves no room to think
    (
        "tiny_delethink",
        f"{DELETHINK}.keep_tail=28",
        f"{DELETHINK}.keep_tail=28: keep_head + keep_tail = 4 + 28 must be < chunk_size=32",
    ),
    (
        "tiny_delethink",
        f"{DELETHINK}.intermediate_max_new_tokens=0",
        f"{DELETHINK}.intermediate_max_new_tokens=0: must be null (C - keep_head - keep_tail) or in [1,",
    ),
    (
        "tiny_delethink",
        f"{DELETHINK}.intermediate_max_new_tokens=33",
        f"{DELETHINK}.intermediate_max_new_tokens=33: must be null (C - keep_head - keep_tail) or in "
        "[1, chunk_size=32]",
    ),
    # a chunk prompt holds the question and the carry-over of 4 + 12 = 16 tokens
    (
        "tiny_delethink",
        "data.max_prompt_length=16",
        "data.max_prompt_length=16: must be > algorithm.delethink.keep_head + keep_tail = 16",
    ),
    # the question needs room: say so
    ("tiny_delethink", "data.max_prompt_length=10", "so the question needs room"),
]


@pytest.mark.parametrize("name, overrides, expected", BAD_VALUES, ids=[str(case[1]) for case in BAD_VALUES])
def test_bad_value_is_rejected_naming_key_and_value(name, overrides, expected):
    overrides = overrides if isinstance(overrides, list) else [overrides]
    assert expected in _error(name, overrides)


# Values on the allowed side of each boundary above.
GOOD_VALUES = [
    (
        "tiny_longcot",
        [f"{ROLLOUT}.temperature=0", f"{ROLLOUT}.top_p=1.0", f"{ROLLOUT}.top_k=1", "data.val_batch_size=-1"],
    ),
    (
        "tiny_longcot",
        [f"{ACTOR}.optim.weight_decay=0", f"{ACTOR}.clip_ratio_low=0.99", f"{ACTOR}.clip_ratio_c=1.01"],
    ),
    (
        "tiny_longcot",
        [f"{ACTOR}.ppo_mini_batch_size=8", f"{ACTOR}.fixed_num_optim_steps=1", "trainer.test_freq=1"],
    ),
    ("tiny_longcot", ["trainer.resume_mode=path", "trainer.resume_from_path=outputs/x"]),
    ("tiny_longcot", [f"{ROLLOUT}.name=sglang", "trainer.device=cuda"]),
    ("tiny_longcot", [f"{ROLLOUT}.name=sglang", f"{ROLLOUT}.free_cache_engine=false"]),
    ("tiny_delethink", [f"{DELETHINK}.keep_head=0", f"{DELETHINK}.keep_tail=1"]),
    ("tiny_delethink", [f"{DELETHINK}.keep_tail=27"]),  # 4 + 27 = 31 < 32; intermediate = 32 - 31 = 1
    ("tiny_delethink", [f"{DELETHINK}.intermediate_max_new_tokens=32", "data.max_prompt_length=17"]),
    ("tiny_delethink", [f"{DELETHINK}.max_chunks=1"]),
    ("tiny_delethink", [f"{DELETHINK}.chunk_size=64"]),  # data.max_response_length follows C
    # deliberate mixes run (with a warning: tests/test_environment.py)
    ("tiny_delethink", [f"{ACTOR}.loss_agg_mode=token-mean"]),
    ("tiny_longcot", ["reward_model.reward_manager=delethink"]),
    ("tiny_longcot", ["trainer.name=delethink", f"{ROLLOUT}.multi_turn.max_assistant_turns=3"]),
]


@pytest.mark.parametrize("name, overrides", GOOD_VALUES)
def test_value_on_the_allowed_side_of_a_boundary_is_accepted(name, overrides):
    load_config(compose_config(name, overrides), check_paths=False)


def test_all_problems_are_reported_at_once():
    message = _error(
        "tiny_delethink", [f"{DELETHINK}.keep_tail=0", f"{ROLLOUT}.n=1", f"{ACTOR}.loss_agg_mode=x"]
    )
    assert message.startswith("3 problems:")
    for key in (f"{DELETHINK}.keep_tail=0", f"{ROLLOUT}.n=1", f"{ACTOR}.loss_agg_mode='x'"):
        assert key in message


# --- types --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, expected",
    [
        ("data.max_prompt_length=1.5", "data.max_prompt_length=1.5: must be an integer"),
        ("data.max_prompt_length=abc", "data.max_prompt_length='abc': must be an integer"),
        ("data.max_prompt_length=true", "data.max_prompt_length=True: must be an integer"),
        ("data.shuffle=1", "data.shuffle=1: must be true or false"),
        ("data.shuffle=yes", "data.shuffle='yes': must be true or false"),
        (f"{ACTOR}.optim.lr=fast", f"{ACTOR}.optim.lr='fast': must be a finite number"),
        (f"{ACTOR}.optim.lr=inf", f"{ACTOR}.optim.lr=inf: must be a finite number"),
        (f"{ACTOR}.fixed_num_optim_steps=2.5", f"{ACTOR}.fixed_num_optim_steps=2.5: must be an integer"),
        ("trainer.experiment_name=7", "trainer.experiment_name=7: must be a string"),
        ("data.train_files=[a.jsonl,3]", "data.train_files[1]=3: must be a string"),
        ("trainer.logger=3", "trainer.logger=3: must be a list"),
        (f"{ACTOR}.optim.betas=[0.9]", f"{ACTOR}.optim.betas=[0.9]: must be a list of 2 values"),
        (f"{ACTOR}.optim.betas=[0.9,x]", f"{ACTOR}.optim.betas[1]='x': must be a finite number"),
        ("+data.foo=1", "data.foo: unknown key"),
        (
            "+data.max_prompt_lenght=3",
            "data.max_prompt_lenght: unknown key; did you mean data.max_prompt_length?",
        ),
        ("+optimizer.lr=3", "optimizer: unknown key"),
        ("data.max_response_length=${eval:'1 +'}", "data.max_response_length: cannot resolve the value"),
    ],
)
def test_wrong_type_is_rejected_naming_key_and_value(override, expected):
    assert expected in _error("tiny_longcot", [override])


def test_loose_but_unambiguous_types_are_converted():
    config = load_config(
        compose_config(
            "tiny_longcot",
            [
                f"{ACTOR}.optim.lr=1",  # an int where a float is expected
                "data.train_files=one.jsonl",  # a single file without brackets
                "trainer.logger=wandb",
                f"{ACTOR}.fixed_num_optim_steps=null",
            ],
        ),
        check_paths=False,
    )
    lr = config.actor_rollout_ref.actor.optim.lr
    assert lr == 1.0 and type(lr) is float
    assert config.data.train_files == ["one.jsonl"]
    assert config.trainer.logger == ["wandb"]
    assert config.actor_rollout_ref.actor.fixed_num_optim_steps is None
    assert config.actor_rollout_ref.actor.optim.betas == (0.9, 0.999)


def test_required_keys_without_values_are_named():
    message = _error("policy_iteration", [])
    assert "actor_rollout_ref.model.path: required" in message


def test_data_needs_files_or_tasks():
    message = _error("policy_iteration", ["actor_rollout_ref.model.path=org/model"])
    for split in ("train", "val"):
        rule = f"must list at least one file, or name tasks in {split}_tasks"
        assert f"data.{split}_files=[]: {rule}" in message


def _tree(name: str) -> dict:
    return OmegaConf.to_container(compose_config(name), resolve=True)


def test_absent_required_key_and_scalar_section_are_named():
    tree = _tree("tiny_longcot")
    del tree["actor_rollout_ref"]["model"]["path"]
    tree["algorithm"]["delethink"] = 5
    with pytest.raises(ConfigError) as error:
        load_config(OmegaConf.create(tree), check_paths=False)
    assert "actor_rollout_ref.model.path: required key is missing" in str(error.value)
    assert "algorithm.delethink=5: must be a section" in str(error.value)


# --- paths --------------------------------------------------------------------------------------------


@pytest.fixture
def tiny_files(tmp_path, monkeypatch):
    """A model directory and data files where tiny_longcot expects them, in a fresh working directory."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outputs/tiny/sft").mkdir(parents=True)
    (tmp_path / "outputs/tiny/sft/config.json").write_text(json.dumps({"model_type": "qwen2"}))
    for name in ("model.safetensors", "tokenizer.json", "chat_template.jinja"):  # checked by name only
        (tmp_path / "outputs/tiny/sft" / name).write_text("")
    (tmp_path / "outputs/tiny/data").mkdir()
    for split in ("train", "val"):
        (tmp_path / f"outputs/tiny/data/{split}.jsonl").write_text('{"prompt": "1+1"}\n')
    return tmp_path


def test_existing_paths_pass(tiny_files):
    load_config(compose_config("tiny_longcot"), check_paths=True)


def test_missing_tiny_files_point_at_the_command_that_makes_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    message = _error("tiny_longcot", [], check_paths=True)
    for key in (
        "actor_rollout_ref.model.path='outputs/tiny/sft'",
        "data.train_files[0]='outputs/tiny/data/train.jsonl'",
        "data.val_files[0]='outputs/tiny/data/val.jsonl'",
    ):
        assert key in message
    assert message.count("bash examples/prepare_tiny.sh") == 3


def test_model_directory_without_config_json_is_rejected(tiny_files):
    (tiny_files / "outputs/tiny/sft/config.json").unlink()
    message = _error("tiny_longcot", [], check_paths=True)
    assert (
        "actor_rollout_ref.model.path='outputs/tiny/sft': is neither a model directory with config.json"
        in message
    )


@pytest.mark.parametrize("path", ["deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B", "org/name"])
def test_hub_id_is_accepted_as_model_path(tiny_files, path):
    load_config(compose_config("tiny_longcot", [f"actor_rollout_ref.model.path={path}"]), check_paths=True)


@pytest.mark.parametrize("path", ["./org/name", "a/b/c", "model", "~/org", "/org/name", "outputs/tiny"])
def test_non_hub_missing_model_path_is_rejected(tiny_files, path):
    message = _error("tiny_longcot", [f"actor_rollout_ref.model.path='{path}'"], check_paths=True)
    assert f"actor_rollout_ref.model.path={path!r}" in message


def test_local_directory_shadows_a_hub_id(tiny_files):
    (tiny_files / "org/name").mkdir(parents=True)  # exists locally, has no config.json
    message = _error("tiny_longcot", ["actor_rollout_ref.model.path=org/name"], check_paths=True)
    assert "actor_rollout_ref.model.path='org/name'" in message


def test_other_missing_files_are_named_without_the_tiny_hint(tiny_files):
    message = _error(
        "tiny_longcot",
        [
            "data.val_files=[outputs/tiny/data/val.jsonl,elsewhere/val2.jsonl]",
            "custom_reward_function.path=my_reward.py",
            "trainer.resume_mode=path",
            "trainer.resume_from_path=checkpoints/step_5",
        ],
        check_paths=True,
    )
    assert message.startswith("3 problems:")
    assert "data.val_files[1]='elsewhere/val2.jsonl': no such file\n" in message
    assert "custom_reward_function.path='my_reward.py': no such file\n" in message
    assert "trainer.resume_from_path='checkpoints/step_5': no such checkpoint" in message
    assert "prepare_tiny" not in message


# --- the command line ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "override, expected",
    [
        (f"{DELETHINK}.keep_tail=0", f"{DELETHINK}.keep_tail=0: must be >= 1"),
        (f"{ROLLOUT}.n=1", f"{ROLLOUT}.n=1: must be >= 2"),
        (f"{ACTOR}.loss_agg_mode=bogus", f"{ACTOR}.loss_agg_mode='bogus': must be one of"),
    ],
)
def test_cli_reports_a_config_error_without_a_traceback(override, expected, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "verl.trainer.main_policy_iteration",
            "--config-name=tiny_delethink",
            override,
            f"hydra.run.dir={tmp_path / 'run'}",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )
    assert result.returncode == 2
    assert result.stderr.startswith("config error: ")
    assert expected in result.stderr
    assert "Traceback" not in result.stderr + result.stdout


def test_attention_kernel_is_checked_and_packing_on_sdpa_is_warned():

    packed = load_config(
        compose_config("tiny_longcot", ["actor_rollout_ref.model.use_remove_padding=true"]), check_paths=False
    )
    assert any("dense block-diagonal mask" in w for w in config_warnings(packed))
    assert not any(
        "block-diagonal" in w
        for w in config_warnings(load_config(compose_config("tiny_longcot"), check_paths=False))
    )
    with pytest.raises(
        ConfigError, match="attn_implementation='flash_attention_2': flash-attention runs on GPU only"
    ):
        load_config(
            compose_config("tiny_longcot", ["actor_rollout_ref.model.attn_implementation=flash_attention_2"]),
            check_paths=False,
        )
    with pytest.raises(ConfigError, match="attn_implementation='flash': must be one of"):
        load_config(
            compose_config("tiny_longcot", ["actor_rollout_ref.model.attn_implementation=flash"]),
            check_paths=False,
        )
    r1d = load_config(compose_config("r1d-1.5b_deepscaler_longcot_8k"), check_paths=False)
    assert r1d.actor_rollout_ref.model.attn_implementation == "flash_attention_2"
    assert not any("block-diagonal" in w for w in config_warnings(r1d))
