"""Compose a tiny training config the way the CLI does, pointed at test assets."""

from pathlib import Path

from verl.config import PolicyIterationConfig, compose_config
from verl.trainer.config_loader import load_config

# Delethink small enough for tests: C = 12, m = 2 + 4, later chunks C - m = 6, I = 3 -> budget 12 + 2 * 6 = 24
DELETHINK = (
    "algorithm.delethink.chunk_size=12",
    "algorithm.delethink.keep_head=2",
    "algorithm.delethink.keep_tail=4",
    "algorithm.delethink.max_chunks=3",
)

# A limit on a subprocess or a wait is a safety net against a hang, never a measurement: a crowded machine
# runs the tiny runs many times slower than a quiet one, so it is far above what any of them takes.
HANG_S = 900

# The one-process launcher runs what Ray runs (tests/test_local_launcher.py: equal metrics, equal
# checkpoints) without starting worker processes: about a sixth of a tiny run's time on 2 cores. Tests
# whose subject is not Ray use it; the Ray path keeps its own end-to-end tests (test_e2e_tiny.py,
# test_worker_group.py, test_local_launcher.py, the environment manager's, gym plugins', SIGTERM's).
ONE_PROCESS = "trainer.launcher=local"


def varies_between_runs(key: str) -> bool:
    """Metrics that differ between any two runs of the same computation: wall-clock times and a CPU
    process's peak resident memory."""
    return key.startswith("timing/") or key in ("perf/cum_time_s", "perf/peak_rss_gib")


def asset_paths(assets) -> list[str]:
    """The overrides that point a config at the test model and data."""
    return [
        f"actor_rollout_ref.model.path={assets / 'model'}",
        f"data.train_files=[{assets / 'data' / 'train.jsonl'}]",
        f"data.val_files=[{assets / 'data' / 'val.jsonl'}]",
    ]


def tiny_longcot_with(assets, *overrides: str) -> PolicyIterationConfig:
    """tiny_longcot on the test assets with `overrides` and nothing else (config checks)."""
    return load_config(compose_config("tiny_longcot", [*asset_paths(assets), *overrides]))


def tiny_overrides(assets, run_dir) -> list[str]:
    """The overrides of a tiny test run: the test assets, a small batch, no validation, the digit reward."""
    return [
        *asset_paths(assets),
        f"trainer.default_local_dir={run_dir}",
        "trainer.logger=[jsonl]",
        "data.train_batch_size=2",
        "actor_rollout_ref.rollout.n=2",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        "actor_rollout_ref.actor.optim.lr=1e-3",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        f"custom_reward_function.path={Path(__file__).parent / 'assets' / 'digit_reward.py'}",
    ]


def tiny_config(name: str, assets, run_dir, *overrides: str) -> PolicyIterationConfig:
    return load_config(compose_config(name, tiny_overrides(assets, run_dir) + list(overrides)))
