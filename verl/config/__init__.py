"""Typed view of the Hydra config: one dataclass per section, each section's rules beside its fields.

Every key the code reads is a field of a section here. The modules, one floor above verl.core:

- `rules.py`: allowed names, `ConfigError`, the rule helpers;
- one module per section: `data`, `actor_rollout_ref`, `critic`, `algorithm`, `reward`, `trainer`;
- `policy_iteration.py`: the whole config and the numbers derived from several keys;
- `load.py`: composition and type checks (`parse_config`, `to_dataclass`);
- `checks.py`: the rules between sections and the files a run reads.

What only the floors above know (plugins, registered names, the agent loop's and the rollout source's
needs) is checked by `verl/trainer/config_loader.py`, whose `load_config` is what entry points call.
"""

from verl.config.actor_rollout_ref import (
    ActorConfig,
    ActorRolloutRefConfig,
    AgentConfig,
    EnvManagerConfig,
    FSDPConfig,
    GymConfig,
    ModelConfig,
    MultiTurnConfig,
    OptimConfig,
    RefConfig,
    RolloutConfig,
    SamplingConfig,
)
from verl.config.algorithm import (
    AlgorithmConfig,
    DelethinkConfig,
    FilterGroupsConfig,
    KLControlConfig,
    RolloutCorrectionConfig,
)
from verl.config.critic import CriticConfig, CriticModelConfig
from verl.config.data import DataConfig, TaskConfig
from verl.config.load import compose_config, config_error, parse_config, to_dataclass
from verl.config.policy_iteration import PolicyIterationConfig
from verl.config.reward import CustomRewardFunctionConfig, RewardModelConfig
from verl.config.rules import CONFIG_DIR, ENVIRONMENT_DIR, ENVIRONMENT_KEYS, ConfigError, lora_key_problems
from verl.config.trainer import TrainerConfig

__all__ = [
    "CONFIG_DIR",
    "ENVIRONMENT_DIR",
    "ENVIRONMENT_KEYS",
    "ActorConfig",
    "ActorRolloutRefConfig",
    "AgentConfig",
    "AlgorithmConfig",
    "ConfigError",
    "CriticConfig",
    "CriticModelConfig",
    "CustomRewardFunctionConfig",
    "DataConfig",
    "DelethinkConfig",
    "EnvManagerConfig",
    "FSDPConfig",
    "FilterGroupsConfig",
    "GymConfig",
    "KLControlConfig",
    "ModelConfig",
    "MultiTurnConfig",
    "OptimConfig",
    "PolicyIterationConfig",
    "RefConfig",
    "RewardModelConfig",
    "RolloutConfig",
    "RolloutCorrectionConfig",
    "SamplingConfig",
    "TaskConfig",
    "TrainerConfig",
    "compose_config",
    "config_error",
    "lora_key_problems",
    "parse_config",
    "to_dataclass",
]
