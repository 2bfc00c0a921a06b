"""RL entry point: `python -m verl.trainer.main_policy_iteration --config-name=tiny_delethink [key=value]`.

LongCoT or Delethink is chosen by the config alone (`environment=longcot|delethink`). A config that
breaks a rule stops here with one line per problem and exit code 2, before Ray or any model starts; one
that is valid but probably not meant (e.g. a key that mixes the two environments) runs after one
`config warning:` line per such key. With `DRY_RUN=1` in the environment the run stops after validation
and prints its plan, the disk its checkpoints take (verl/trainer/disk_check.py) and, for
trainer.device=cuda, an estimate of peak GPU memory per rank (no model, data or GPU needed). A cuda run
whose estimate exceeds trainer.gpu_memory_gib stops with exit code 2 and the keys to change, dry or not,
before anything starts; a run whose first checkpoint cannot fit on the disk of
trainer.default_local_dir stops the same way (verl/trainer/launch.py, not in a dry run: the disk is
this machine's).
"""

import os
import sys

import hydra
from omegaconf import DictConfig

from verl.config import PolicyIterationConfig
from verl.trainer.cli_keys import exit_2_on_input_errors, exit_on_unknown_keys
from verl.trainer.config_loader import config_warnings, load_config
from verl.utils.config_resolvers import register_resolvers

register_resolvers()  # before Hydra composes: the YAML uses ${eval:...}


@hydra.main(config_path="config", config_name="policy_iteration", version_base="1.3")
def main(cfg: DictConfig) -> None:
    dry_run = os.environ.get("DRY_RUN") == "1"
    with exit_2_on_input_errors():
        config = load_config(cfg, check_paths=not dry_run)
    for warning in config_warnings(config):
        print(f"config warning: {warning}", file=sys.stderr)
    if dry_run:
        from verl.trainer.disk_check import describe_disk
        from verl.trainer.plan import describe_plan

        print(describe_plan(config))
        # the disk is this machine's, not necessarily the run's: a dry run reports, the run refuses
        disk = describe_disk(config)
        print(disk.text)
        if disk.refusal or disk.warning:
            print(f"disk here: {disk.refusal or disk.warning}")
    from verl.tools.memory_check import describe_memory

    memory, refusal = describe_memory(config)
    if dry_run or config.trainer.device == "cuda":  # a real run logs it too, to compare with nvidia-smi
        print(memory)
    if refusal:
        print(f"memory error: {refusal}", file=sys.stderr)
        sys.exit(2)
    if dry_run:
        return
    from verl.trainer.launch import run  # imports torch (and Ray when used): only once the config is good

    run(config)


if __name__ == "__main__":
    exit_on_unknown_keys(PolicyIterationConfig)
    if os.environ.get("DRY_RUN") == "1":
        # a dry run writes nothing: no run directory, no Hydra log file
        sys.argv += ["hydra.output_subdir=null", "hydra.run.dir=.", "hydra/job_logging=stdout"]
    main()
