"""Every user-facing script composes, validates and prints its plan with DRY_RUN=1, without a GPU,
a model or data, and writes nothing. The GPU scripts also print the peak-memory estimate, and one that
cannot fit its declared GPU memory is refused (exit 2) naming the keys to change."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.e2e_utils import HANG_S

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
    "examples/critic_gae.sh": [
        "LongCoT", "advantages      gae (gamma 1, lam 0.95): critic from outputs/tiny/sft, lr 0.0001",
    ],
    "examples/multi_node_template.sh": [
        "ray start --head --port=6379", "2 node(s) x 8 cuda", "Delethink",
        "placement       node 1: ranks 0-7; node 2: ranks 8-15", "one bundle of 1 GPU + 1 CPU per rank",
    ],
}  # fmt: skip
# The estimate's last lines (hand check of 60.75 for the 8K-token rows: engine 0.6 x 79.6 = 47.76,
# gradients 0.83 + Adam 1.65 (4 and 8 bytes x 1.777e9 / 8 ranks), gathered weights 1.04, activations
# 16384 x 103424 B = 1.58, logits (2 x 16384 + 4 x 441) x 151936 B = 4.89, overhead 3).
FITS = "peak 60.75 GiB (old log-probs) of trainer.gpu_memory_gib=79.6: fits"
ESTIMATES = {
    "examples/reproduce_rl_training/longcot_8k.sh": [FITS, "128 sequences x 10240 tokens need 35.00 GiB"],
    "examples/reproduce_rl_training/longcot_24k.sh": [
        "peak 64.06 GiB (old log-probs) of trainer.gpu_memory_gib=79.6: fits",
        "largest update micro-batch: 26624 tokens, 24576 response positions",
    ],
    "examples/reproduce_rl_training/delethink_24k.sh": [
        FITS, "128 sequences x 14737 tokens need 50.37 GiB",
        # the checkpoints: 4 (float32 weights) + 8 (AdamW moments) bytes x 1.777e9 parameters = 6.62 + 13.24
        # GiB each; 1000 steps, one every 10, none deleted: 100 of them
        "checkpoint size   19.86 GiB each (weights 6.62 GiB, AdamW moments 13.24 GiB; model: dims of "
        "DeepSeek-R1-Distill-Qwen-1.5B)",
        "checkpoints       100 save(s) after step 0; at most 100 on disk at once, 1.94 TiB",
    ],
    "examples/reproduce_rl_training/delethink_96k.sh": [
        FITS, "dims of DeepSeek-R1-Distill-Qwen-1.5B's, assumed (not read)",
    ],
    "examples/longcot_template.sh": ["peak GPU memory: not estimated (trainer.device=cpu)"],
    "examples/delethink_template.sh": ["peak GPU memory: not estimated (trainer.device=cpu)"],
    "examples/critic_gae.sh": ["peak GPU memory: not estimated (trainer.device=cpu)"],
    # 16 ranks halve the gradients and Adam moments: 60.75 - (0.83 + 1.65) / 2
    "examples/multi_node_template.sh": ["peak 59.51 GiB (old log-probs) of trainer.gpu_memory_gib=79.6"],
}  # fmt: skip


def dry_run(script, *overrides):
    env = {**os.environ, "DRY_RUN": "1", "PYTHON": sys.executable}
    return subprocess.run(["bash", str(REPO / script), *overrides], env=env, capture_output=True, text=True,
                          timeout=HANG_S)  # fmt: skip


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_dry_run_prints_the_plan_and_writes_nothing(script):
    before = set(REPO.iterdir())
    done = dry_run(script)
    assert done.returncode == 0, done.stderr
    for expected in SCRIPTS[script] + ESTIMATES[script]:
        assert expected in done.stdout, (expected, done.stdout)
    if script.startswith("examples/reproduce_rl_training/"):
        assert "peak GPU memory per rank, estimated in GiB" in done.stdout
    assert set(REPO.iterdir()) == before


def test_a_refused_script_names_the_keys():
    done = dry_run("examples/reproduce_rl_training/longcot_24k.sh", "trainer.gpu_memory_gib=40")
    assert done.returncode == 2
    refused = "memory error: estimated peak GPU memory per rank 40.30 GiB (old log-probs) exceeds "
    assert done.stderr.startswith(refused)
    assert "data.max_response_length=24576 (one row alone exceeds the budget 16384)" in done.stderr
    assert "actor_rollout_ref.rollout.gpu_memory_utilization=0.6" in done.stderr
    assert "Traceback" not in done.stderr


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
