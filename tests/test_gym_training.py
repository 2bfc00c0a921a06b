"""A real gym training run on the tiny model (Ray, FSDP2 worker, HF engine): envs chosen per dataset row
(a built-in and a plugin env, plus one that fails), a context manager chosen per row, completions.jsonl."""

import json
from pathlib import Path

import pytest

from tests.e2e_utils import ONE_PROCESS, tiny_config
from verl.data.synthetic import make_problem
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl

pytestmark = pytest.mark.slow

PLUGIN = Path(__file__).parent / "assets" / "gym_plugin.py"
DELETHINK_CTX = {"name": "delethink", "keep_head": 4, "keep_tail": 8}
ROW_ENVS = [
    ({"name": "math", "max_attempts": 2}, DELETHINK_CTX),  # built-in, Markovian across retries
    ({"name": "digit_share", "turns": 2}, None),  # from the plugin file
    ({"name": "flaky", "fail": "raise", "fail_at": 2}, None),  # fails in its second step
]


def write_rows(path: Path, count: int) -> None:
    import random

    rng = random.Random(0)
    rows = []
    for i in range(count):
        problem = make_problem(rng, 3)
        env_config, ctx_config = ROW_ENVS[i % len(ROW_ENVS)]
        row = {
            "data_source": "synthetic/running_sum",
            "prompt": [{"role": "user", "content": problem.question}],
            "reward_model": {"ground_truth": problem.answer},
            "env_config": env_config,
        }
        if ctx_config:
            row["ctx_config"] = ctx_config
        rows.append(row)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_gym_run_with_per_row_envs_plugin_and_a_failing_env(tiny_assets, ray_session, tmp_path):
    data = tmp_path / "gym.jsonl"
    write_rows(data, 6)
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        "tiny_longcot", tiny_assets, run_dir,
        f"data.train_files=[{data}]", "data.train_batch_size=6",
        "actor_rollout_ref.actor.ppo_mini_batch_size=3",
        "data.max_response_length=12", "data.shuffle=false",
        "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"external_plugins=[{PLUGIN}]", "trainer.total_training_steps=2",
    )  # fmt: skip
    run(cfg)

    metrics = read_jsonl(run_dir / "metrics.jsonl")
    assert [m["step"] for m in metrics] == [1, 2]  # the failing env did not stop the run
    for m in metrics:
        assert m["env/error_rate"] == pytest.approx(1 / 3)  # the flaky rows: a third of every batch
        assert m["actor/grad_norm"] > 0 and m["train/batch_rows"] == 12  # train_on=last: a row each

    lines = read_jsonl(run_dir / "completions.jsonl")
    assert [r["step"] for r in lines] == [1] * 12 + [2] * 12
    by_env = {env: [r for r in lines if r["env"] == env] for env in ("math", "digit_share", "flaky")}
    assert all(len(rs) == 8 for rs in by_env.values())
    for r in lines:
        assert r["prompt"][0]["role"] == "user" and r["completion"][0]["role"] == "assistant"
        assert len(r["trajectory_infos"]) == 1 + len(r["rewards"]["steps"]) + (r["error"] is not None)
        assert isinstance(r["advantage"], float) and r["trainable_turns"] == [len(r["completion"]) // 2]
    for r in by_env["math"]:
        assert r["ctx"] == "delethink" and r["trajectory_infos"][0] == {"max_attempts": 2}
        assert r["trajectory_infos"][1]["attempt"] == 1
    for r in by_env["digit_share"]:  # two replies, each rewarded with its share of digits
        assert [i["turns_left"] for i in r["trajectory_infos"][1:]] == [1, 0] and r["ctx"] is None
        assert r["rewards"]["env_total"] == pytest.approx(sum(r["rewards"]["steps"]))
    for r in by_env["flaky"]:
        assert r["error"] == "step raised RuntimeError('step exploded')"
        assert r["trajectory_infos"][-1] == {"error": r["error"]} and r["rewards"]["steps"] == [1.0]


def test_train_on_all_trains_every_turn_with_the_flat_trainer(tiny_assets, tmp_path):
    data = tmp_path / "gym.jsonl"
    write_rows(data, 3)
    run_dir = tmp_path / "run"
    cfg = tiny_config(
        "tiny_delethink", tiny_assets, run_dir,
        f"data.train_files=[{data}]", "data.train_batch_size=3",
        "actor_rollout_ref.actor.ppo_mini_batch_size=3", "reward_model.reward_manager=naive",
        "data.max_response_length=12", "data.shuffle=false", "actor_rollout_ref.rollout.gym.train_on=all",
        "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=2",
        f"external_plugins=[{PLUGIN}]", "trainer.total_training_steps=1", ONE_PROCESS,
    )  # fmt: skip
    run(cfg)
    (metrics,) = read_jsonl(run_dir / "metrics.jsonl")
    lines = read_jsonl(run_dir / "completions.jsonl")
    turns = [len(r["completion"]) // 2 + 1 for r in lines]
    assert [r["trainable_turns"] for r in lines] == [list(range(n)) for n in turns]
    assert sum(turns) > len(lines)  # some episodes took two turns, and each turn is a row
    assert metrics["delethink/flat_batch_size"] == sum(turns)
    assert metrics["actor/grad_norm"] > 0
