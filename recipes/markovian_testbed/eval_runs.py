"""Several main_eval runs in one process, so that torch and transformers load once (each is seconds of
start-up, more than a smoke-size evaluation takes):

    python recipes/markovian_testbed/eval_runs.py -- KEY=VALUE ... [-- KEY=VALUE ...]

Each `--` opens a run, given the overrides `python -m verl.trainer.main_eval` takes (config/eval.yaml).
Every run's config is checked before the first one starts; a bad one stops with main_eval's line and exit
code 2. The runs then go in order, each writing what main_eval writes to its output_dir.
"""

from __future__ import annotations

import sys

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException, OverrideParseException

from verl.config import ConfigError
from verl.config.load import compose_config
from verl.eval.config import EvalConfig, load_eval_config
from verl.trainer.cli_keys import exit_2_on_input_errors, unknown_key_errors


def split_runs(argv: list[str]) -> list[list[str]]:
    """The overrides of each run: `argv` cut at every `--`, which must open it."""
    if not argv or argv[0] != "--":
        raise ConfigError("eval_runs.py: each run starts with `--`, then its main_eval overrides")
    runs: list[list[str]] = []
    for word in argv:
        if word == "--":
            runs.append([])
        else:
            runs[-1].append(word)
    if any(not run for run in runs):
        raise ConfigError("eval_runs.py: a `--` with no overrides after it")
    return runs


def load_runs(runs: list[list[str]]) -> list[EvalConfig]:
    configs = []
    for i, overrides in enumerate(runs, 1):
        try:
            problems = unknown_key_errors(EvalConfig, overrides)
            if problems:
                raise ConfigError(problems[0])
            configs.append(load_eval_config(compose_config("eval", overrides)))
        except ConfigError as e:
            raise ConfigError(f"run {i} of {len(runs)}: {e}") from None
        except HydraException as e:  # an override Hydra cannot parse or apply
            reason = str(e).splitlines()[0]
            raise ConfigError(
                f"run {i} of {len(runs)}: {unparsable(overrides) or 'its overrides'}: {reason}"
            ) from None
    return configs


def unparsable(overrides: list[str]) -> str | None:
    """The first override Hydra's grammar rejects on its own, quoted."""
    parser = OverridesParser.create()
    for override in overrides:
        try:
            parser.parse_overrides([override])
        except OverrideParseException:
            return repr(override)
    return None


def main(argv: list[str]) -> None:
    with exit_2_on_input_errors():
        configs = load_runs(split_runs(argv))
        from verl.eval.evaluate import evaluate  # torch and transformers: only for good configs

        for config in configs:
            evaluate(config)


if __name__ == "__main__":
    main(sys.argv[1:])
