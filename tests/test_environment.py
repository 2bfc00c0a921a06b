"""The thinking-environment switch (config group environment/): it sets the agent loop, the row layout,
the reward manager and the loss aggregation together; a deliberate mix runs with a warning naming the
key, a mix that cannot be meant is refused, and Delethink's intermediate budget is derived unless set."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from tests.e2e_utils import HANG_S
from verl.config import ConfigError, compose_config
from verl.trainer.config_loader import config_warnings, load_config

REPO = Path(__file__).resolve().parents[1]
LOOP = "actor_rollout_ref.rollout.agent.default_agent_loop"
LOSS = "actor_rollout_ref.actor.loss_agg_mode"
REWARD = "reward_model.reward_manager"
INTERMEDIATE = "algorithm.delethink.intermediate_max_new_tokens"
REQUIRED = ["data.train_files=t", "data.val_files=v", "actor_rollout_ref.model.path=org/model"]

SWITCHED = {  # what each environment sets, by hand
    "longcot": {
        LOOP: "single_turn",
        "trainer.name": "ppo",
        "reward_model.reward_manager": "naive",
        LOSS: "seq-mean-token-norm-trace-length",
    },
    "delethink": {
        LOOP: "delethink",
        "trainer.name": "delethink",
        "reward_model.reward_manager": "delethink",
        LOSS: "seq-mean-token-norm-trace-length",
    },
}


def _read_back(cfg) -> dict[str, object]:
    return {key: OmegaConf.select(cfg, key) for key in SWITCHED["longcot"]}


@pytest.mark.parametrize("name, environment", [("tiny_longcot", "longcot"), ("tiny_delethink", "delethink")])
def test_the_tiny_configs_compose_through_the_switch(name, environment):
    cfg = compose_config(name)  # Hydra's compose API, as the CLI composes
    assert cfg.environment == environment
    assert _read_back(cfg) == SWITCHED[environment]


@pytest.mark.parametrize("environment", ["longcot", "delethink"])
def test_one_override_switches_all_four_keys(environment):
    # the base's prompt length (512) is too short for its own Delethink carry-over (m = 100 + 3996)
    overrides = [*REQUIRED, f"environment={environment}", "data.max_prompt_length=6545"]
    cfg = compose_config("policy_iteration", overrides)
    assert _read_back(cfg) == SWITCHED[environment]
    config = load_config(cfg, check_paths=False)
    assert config_warnings(config) == []
    if environment == "delethink":  # C is set once: data.max_response_length follows the chunk size
        assert config.data.max_response_length == config.algorithm.delethink.chunk_size == 8192


def test_the_base_defaults_to_longcot_and_the_delethink_overlay_switches_back():
    assert _read_back(compose_config("policy_iteration", REQUIRED)) == SWITCHED["longcot"]
    assert _read_back(compose_config("tiny_delethink", ["environment=longcot"])) == SWITCHED["longcot"]


@pytest.mark.parametrize(
    "name",
    [
        "tiny_longcot",
        "tiny_delethink",
        "r1d-1.5b_deepscaler_longcot_8k",
        "r1d-1.5b_deepscaler_longcot_24k",
        "r1d-1.5b_deepscaler_delethink_24k",
        "r1d-1.5b_openmath_delethink_96k",
    ],
)
def test_shipped_configs_mix_nothing(name):
    assert config_warnings(load_config(compose_config(name), check_paths=False)) == []


def test_the_gym_loop_runs_on_top_of_an_environment_without_a_warning():
    gym = [f"{LOOP}=gym", "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3"]
    assert config_warnings(load_config(compose_config("tiny_longcot", gym), check_paths=False)) == []


def test_delethink_loop_with_the_naive_reward_manager_is_refused():
    with pytest.raises(ConfigError) as error:
        load_config(compose_config("tiny_delethink", [f"{REWARD}=naive"]), check_paths=False)
    assert str(error.value) == (
        "reward_model.reward_manager='naive': scores only the last chunk of a Delethink trajectory; use "
        "reward_model.reward_manager=delethink (all chunks joined, as environment=delethink sets)"
    )


@pytest.mark.parametrize(
    "name, override, warning",
    [
        (
            "tiny_delethink",
            f"{LOSS}=token-mean",
            f"{LOSS}='token-mean' mixes thinking environments: environment=delethink sets "
            "'seq-mean-token-norm-trace-length' (running the mix as asked)",
        ),
        (
            "tiny_longcot",
            f"{REWARD}=delethink",
            f"{REWARD}='delethink' mixes thinking environments: environment=longcot sets 'naive'",
        ),
        (
            "tiny_longcot",
            "trainer.name=delethink",
            "trainer.name='delethink' mixes thinking environments: environment=longcot sets 'ppo'",
        ),
    ],
)
def test_a_deliberate_mix_runs_with_a_warning_naming_the_key(name, override, warning):
    (line,) = config_warnings(load_config(compose_config(name, [override]), check_paths=False))
    assert warning in line


def test_the_cli_prints_the_warning_at_start_up():
    command = [
        "-m",
        "verl.trainer.main_policy_iteration",
        "--config-name=tiny_delethink",
        f"{LOSS}=token-mean",
    ]
    done = subprocess.run([sys.executable, *command], cwd=REPO, env={**os.environ, "DRY_RUN": "1"},
                          capture_output=True, text=True, timeout=HANG_S)  # fmt: skip
    assert done.returncode == 0, done.stderr
    warning = f"config warning: {LOSS}='token-mean' mixes thinking environments: environment=delethink"
    assert warning in done.stderr
    assert "thinking budget 128 tokens" in done.stdout  # and the run goes on (here: its dry-run plan)


@pytest.mark.parametrize(
    "overrides, budget",
    [
        ([], 16),  # null: C - keep_head - keep_tail = 32 - 4 - 12
        (["algorithm.delethink.chunk_size=64"], 48),  # follows C: 64 - 16
        (["algorithm.delethink.keep_tail=20"], 8),  # follows m: 32 - 24
    ],
)
def test_the_intermediate_budget_is_derived_by_default(overrides, budget):
    config = load_config(compose_config("tiny_delethink", overrides), check_paths=False)
    assert config.algorithm.delethink.intermediate_max_new_tokens is None
    assert config.delethink_params.intermediate_budget == budget
    assert config_warnings(config) == []


def test_an_explicit_intermediate_budget_prints_the_total_budget():
    config = load_config(compose_config("tiny_delethink", [f"{INTERMEDIATE}=8"]), check_paths=False)
    assert config.thinking_budget == 32 + 6 * 8 == 80
    assert config_warnings(config) == [
        "algorithm.delethink.intermediate_max_new_tokens=8 is not C - keep_head - keep_tail = 16: "
        "total thinking budget C + (I-1)*8 = 32 + 6*8 = 80 tokens"
    ]
    # the derived value written out explicitly is no different from null: nothing to say
    same = load_config(compose_config("tiny_delethink", [f"{INTERMEDIATE}=16"]), check_paths=False)
    assert config_warnings(same) == []
