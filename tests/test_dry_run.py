"""Every user-facing script composes, validates and prints its plan with DRY_RUN=1, without a GPU,
a model or data, and writes nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = {
    "examples/reproduce_rl_training/longcot_8k.sh": ["LongCoT", "thinking budget 8192 ", "1024 trajectories"],
    "examples/reproduce_rl_training/longcot_24k.sh": ["LongCoT", "thinking budget 24576 "],
    "examples/reproduce_rl_training/delethink_24k.sh": [
        "Delethink", "first C = 8192, later 4096, up to I = 5 chunks",
        "m = keep_head 100 + keep_tail 3996 = 4096", "<= 6545 prompt", "thinking budget 24576 ",
        "1 node(s) x 8 cuda",
    ],
    "examples/reproduce_rl_training/delethink_96k.sh": ["up to I = 23 chunks", "thinking budget 98304 "],
    "examples/longcot_template.sh": ["LongCoT", "thinking budget 128 "],
    "examples/delethink_template.sh": ["Delethink", "thinking budget 128 "],
    "examples/multi_node_template.sh": ["ray start --head --port=6379", "2 node(s) x 8 cuda", "Delethink"],
}  # fmt: skip


def dry_run(script, *overrides):
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    return subprocess.run(["bash", str(REPO / script), *overrides], env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_dry_run_prints_the_plan_and_writes_nothing(script):
    before = set(REPO.iterdir())
    done = dry_run(script)
    assert done.returncode == 0, done.stderr
    for expected in SCRIPTS[script]:
        assert expected in done.stdout, (expected, done.stdout)
    assert set(REPO.iterdir()) == before


def test_dry_run_still_validates_and_takes_overrides():
    script = "examples/reproduce_rl_training/delethink_24k.sh"
    done = dry_run(script, "algorithm.delethink.max_chunks=7", "trainer.nnodes=2")
    assert done.returncode == 0 and "up to I = 7 chunks" in done.stdout and "2 node(s) x 8" in done.stdout
    bad = dry_run(script, "algorithm.delethink.keep_tail=0")
    assert bad.returncode == 2 and "algorithm.delethink.keep_tail=0" in bad.stderr
    assert "Traceback" not in bad.stderr


def test_dry_run_describes_a_gym_run():
    done = dry_run(
        "examples/longcot_template.sh",
        "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        "actor_rollout_ref.rollout.gym.env_config={name:math,max_attempts:2}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
    )
    assert done.returncode == 0, done.stderr
    assert "gym: env math, context manager none" in done.stdout
    assert "up to 2 model turns, training on last" in done.stdout
