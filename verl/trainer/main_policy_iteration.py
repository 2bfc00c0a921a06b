"""RL entry point: `python -m verl.trainer.main_policy_iteration --config-name=tiny_delethink [key=value]`.

LongCoT or Delethink is chosen by the config alone. A config that breaks a rule stops here with one
line per problem and exit code 2, before Ray or any model starts.
"""

import sys

import hydra
from omegaconf import DictConfig

from verl.trainer.config_schema import ConfigError, load_config
from verl.utils.config_resolvers import register_resolvers

register_resolvers()  # before Hydra composes: the YAML uses ${eval:...}


@hydra.main(config_path="config", config_name="policy_iteration", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        config = load_config(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    from verl.trainer.launch import run  # imports torch and Ray: only once the config is known to be good

    run(config)


if __name__ == "__main__":
    main()
