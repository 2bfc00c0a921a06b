"""The env layer without a model: registries and how names are chosen and checked, plugins, the built-in
envs and context manager, and what happens when an env misbehaves (scripted engine, tiny tokenizer)."""

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.e2e_utils import HANG_S, tiny_config
from verl.agent_loop.gym import GymAgentLoop, continuation_ids, run_episode
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import ConfigError
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.engine import GenerateOutput, RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.data.rl_dataset import encode_prompt, load_prompts
from verl.envs import (
    CONTEXT_MANAGERS,
    ENVS,
    Env,
    EnvRequest,
    make_context_manager,
    make_env,
    register_env,
)
from verl.envs.base import close_env, close_open_envs, open_env_count
from verl.envs.calculator import calculator_reply
from verl.envs.plugins import import_plugins
from verl.envs.report import CompletionsLog, env_metrics
from verl.utils.fs import read_jsonl
from verl.utils.seeding import chunk_seed
from verl.workers.reward_manager import NaiveRewardManager

PLUGIN = Path(__file__).parent / "assets" / "gym_plugin.py"
EOS = 256  # the tiny tokenizer's <|end|>


@pytest.fixture(scope="module")
def tokenizer(tiny_assets):
    return AutoTokenizer.from_pretrained(tiny_assets / "model")


@pytest.fixture(scope="module", autouse=True)
def plugin():
    import_plugins([str(PLUGIN)])


class ScriptedEngine(RolloutEngine):
    """Replies with the given texts in turn (each ending in EOS); records every prompt and sampling seed."""

    def __init__(self, tokenizer, replies):
        self.tokenizer, self.replies, self.prompts, self.seeds = tokenizer, list(replies), [], []

    async def generate(self, prompt_ids, sampling_params):
        self.prompts.append(list(prompt_ids))
        self.seeds.append(sampling_params.seed)
        ids = self.tokenizer(self.replies.pop(0), add_special_tokens=False)["input_ids"] + [EOS]
        return GenerateOutput(ids, [-1.0] * len(ids), "stop")

    def update_weights(self, named_tensors):
        raise NotImplementedError


def request(question="a3 b5", answer="8"):
    return EnvRequest([{"role": "user", "content": question}], "synthetic/running_sum", answer, seed=1)


def episode(tokenizer, env_config, replies, ctx=None, max_turns=4, timeout=HANG_S, train_on="last"):
    engine = ScriptedEngine(tokenizer, replies)
    env = make_env(env_config)
    traj = asyncio.run(
        run_episode(
            env, ctx, engine, tokenizer, request(), SamplingParams(8, seed=3),
            max_turns=max_turns, step_timeout_s=timeout, train_on=train_on,
        )
    )  # fmt: skip
    return traj, engine, env


class ScriptedStepsEnv(Env):
    """Answers each step with the next `env_config["steps"]` entry (observation, reward, done) and an empty
    info; its reset info records the request's seed and trajectory id; closing raises with close_raises."""

    async def reset(self, request):
        self.steps = [tuple(s) for s in self.env_config.get("steps", [])]
        return request.question, {"seed": request.seed, "trajectory_id": request.trajectory_id}, None

    async def step(self, messages):
        return (*self.steps.pop(0), {})

    async def close(self):
        if self.env_config.get("close_raises"):
            raise RuntimeError("close exploded")


if "scripted_steps" not in ENVS:  # the module is imported once per process; the registry refuses repeats
    register_env("scripted_steps")(ScriptedStepsEnv)

# -- registries, names, plugins ----------------------------------------------------------------------


def test_registries_hold_the_builtins_and_refuse_duplicates():
    assert {"math", "calculator"} <= set(ENVS) and "delethink" in CONTEXT_MANAGERS
    with pytest.raises(ValueError, match="'math' is already registered by MathEnv"):
        register_env("math")(Env)
    with pytest.raises(ValueError, match=r"unknown env name 'nope'; registered: \[.*'calculator'.*'math'"):
        make_env({"name": "nope"})
    with pytest.raises(ValueError, match="must be a dict"):
        make_env("math")
    with pytest.raises(ValueError, match=r"unknown context manager name 'x'; registered: \['delethink'\]"):
        make_context_manager({"name": "x"})


def test_plugin_file_registers_once_and_bad_entries_name_themselves(tmp_path):
    assert "digit_share" in ENVS and "flaky" in ENVS
    import_plugins([str(PLUGIN)])  # a second import of the same file is a no-op, not a duplicate
    with pytest.raises(ValueError, match="no such file"):
        import_plugins([str(tmp_path / "missing.py")])
    broken = tmp_path / "broken.py"
    broken.write_text("raise RuntimeError('bad plugin')\n")
    with pytest.raises(ValueError, match="importing it failed: RuntimeError"):
        import_plugins([str(broken)])
    with pytest.raises(ValueError, match="cannot import it"):
        import_plugins(["no_such_module_for_sure"])


def test_dataset_rows_choose_envs_and_unknown_names_fail_at_load(tokenizer, tmp_path):
    rows = [
        {"prompt": "a1", "reward_model": {"ground_truth": "1"}},
        {
            "prompt": "a2",
            "env_config": {"name": "digit_share", "turns": 3},
            "ctx_config": '{"name": "delethink"}',  # JSON text, as a parquet column may hold it
        },
    ]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plain, env_row = load_prompts([str(path)], tokenizer, "prompt", 64, True)
    assert plain.env_config is None and plain.messages == [{"role": "user", "content": "a1"}]
    assert env_row.env_config == {"name": "digit_share", "turns": 3} and env_row.ground_truth == ""
    assert env_row.ctx_config == {"name": "delethink"}

    path.write_text(json.dumps({"prompt": "a", "env_config": {"name": "nope"}}) + "\n")
    with pytest.raises(ValueError, match=r"rows.jsonl row 0: column 'env_config' unknown env name 'nope'; "):
        load_prompts([str(path)], tokenizer, "prompt", 64, True)
    path.write_text(json.dumps({"prompt": "a"}) + "\n")  # no env to judge it: needs a ground truth
    with pytest.raises(ValueError, match="row 0: missing reward_model.ground_truth"):
        load_prompts([str(path)], tokenizer, "prompt", 64, True)


def test_global_names_are_checked_at_config_time_after_plugins(tiny_assets, tmp_path):
    gym = "actor_rollout_ref.rollout.gym"
    ok = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path, "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        f"{gym}.env_config={{name: digit_share}}", f"{gym}.ctx_config={{name: delethink, keep_tail: 4}}",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3", f"external_plugins=[{PLUGIN}]",
    )  # fmt: skip
    assert ok.actor_rollout_ref.rollout.gym.env_config == {"name": "digit_share"}
    with pytest.raises(ConfigError) as e:
        tiny_config(
            "tiny_longcot", tiny_assets, tmp_path, "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
            f"{gym}.env_config={{name: nope}}", f"{gym}.train_on=all", "external_plugins=[missing_plugin.py]",
            "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
        )  # fmt: skip
    text = str(e.value)
    assert "external_plugins[0]: external plugin 'missing_plugin.py': no such file" in text
    assert f"{gym}.env_config={{'name': 'nope'}}: unknown env name 'nope'; registered: [" in text
    assert f"{gym}.train_on='all': train_on=all trains every assistant turn" in text
    assert "use trainer.name=delethink" in text
    # all turns train as rows of their own with the Delethink trainer
    tiny_config(
        "tiny_delethink", tiny_assets, tmp_path, "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        f"{gym}.env_config={{name: math}}", f"{gym}.train_on=all",
    )  # fmt: skip


# -- built-in envs and context manager ---------------------------------------------------------------


def test_math_env_retry_mode():
    async def play(max_attempts, replies):
        env = make_env({"name": "math", "max_attempts": max_attempts})
        observation, info, system = await env.reset(request())
        assert (observation, info, system) == ("a3 b5", {"max_attempts": max_attempts}, None)
        history, out = [{"role": "user", "content": observation}], []
        for reply in replies:
            history.append({"role": "assistant", "content": reply})
            out.append(await env.step(history))
        return out

    wrong, right = "a3=3 b5=7</think>\\boxed{7}", "a3=3 b5=8</think>\\boxed{8}"
    assert asyncio.run(play(3, [wrong, right])) == [
        ("Wrong, try again.", 0.0, False, {"attempt": 1, "correct": False}),
        (None, 0.5, True, {"attempt": 2, "correct": True}),  # correct at attempt 2: 0.5 ** 1
    ]
    assert asyncio.run(play(2, [wrong, wrong]))[-1] == (None, 0.0, True, {"attempt": 2, "correct": False})
    assert asyncio.run(play(1, [right])) == [(None, 1.0, True, {"attempt": 1, "correct": True})]


def test_calculator_env_answers_calls_safely_then_judges():
    assert calculator_reply("3+5*2") == "<result>13</result>"
    assert calculator_reply("7 // 2") == "<result>3</result>"
    assert calculator_reply("__import__('os').system('true')").startswith("<result>error:")
    assert calculator_reply("1/0").startswith("<result>error:")

    async def play(replies, max_calls=4):
        env = make_env({"name": "calculator", "max_calls": max_calls})
        observation, _, system = await env.reset(request())
        assert observation == "a3 b5" and "<calc>" in system
        history, out = [{"role": "user", "content": observation}], []
        for reply in replies:
            history.append({"role": "assistant", "content": reply})
            out.append(await env.step(history))
            history.append({"role": "user", "content": out[-1][0] or ""})
        return out

    steps = asyncio.run(play(["I need <calc>3+5</calc>", "so</think>\\boxed{8}"]))
    assert steps[0] == ("<result>8</result>", 0.0, False, {"call": "3+5", "result": "<result>8</result>"})
    assert steps[1] == (None, 1.0, True, {"calls": 1, "correct": True})
    over = asyncio.run(play(["<calc>1+1</calc>", "<calc>2+2</calc>"], max_calls=1))
    assert over[1] == (None, 0.0, True, {"call": "2+2", "over_call_limit": True})


def test_delethink_context_manager_trims_thinking_per_message(tokenizer):
    # byte-level tokenizer: one character = one token, so the trims can be read off the strings
    ctx = make_context_manager({"name": "delethink", "keep_head": 2, "keep_tail": 3}, tokenizer)
    history = [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "abcdefghij</think>\\boxed{1}"},
        {"role": "user", "content": "Wrong, try again."},
        {"role": "assistant", "content": "xyz</think>ok"},  # 3 <= 2 + 3: kept whole
        {"role": "user", "content": "more"},
        {"role": "assistant", "content": "12345678"},  # thinking never closed: all of it is thinking
    ]
    original = [dict(m) for m in history]
    managed = ctx.manage_context(history, "t0")
    assert [m["content"] for m in managed] == [
        "question", "abhij</think>\\boxed{1}", "Wrong, try again.", "xyz</think>ok", "more", "12678",
    ]  # fmt: skip
    assert history == original  # the input is not edited
    with pytest.raises(ValueError, match="keep_tail=0: must be >= 1"):
        make_context_manager({"name": "delethink", "keep_tail": 0}, tokenizer)
    with pytest.raises(ValueError, match=r"unknown ctx_config keys \['trimmer_name'\]"):
        make_context_manager({"name": "delethink", "trimmer_name": "progressive"}, tokenizer)
    with pytest.raises(ValueError, match="needs the policy's tokenizer"):
        make_context_manager({"name": "delethink"})


# -- episodes against a scripted engine ----------------------------------------------------------------


def test_episode_prompts_extend_by_tokens_unless_the_context_was_rewritten(tokenizer):
    replies = ["a3=3 b5=7</think>\\boxed{7}", "a3=3 b5=8</think>\\boxed{8}"]
    traj, engine, _ = episode(tokenizer, {"name": "math", "max_attempts": 3}, replies)
    first, second = traj.turns
    retry = tokenizer("<|user|>Wrong, try again.<|assistant|><think>", add_special_tokens=False)["input_ids"]
    assert first.prompt_ids == encode_prompt(tokenizer, "a3 b5")
    assert second.prompt_ids == first.prompt_ids + first.response_ids + retry  # EOS sampled: not doubled
    assert traj.info["step_rewards"] == [0.0, 0.5] and traj.info["env_reward"] == 0.5
    assert [t.trainable for t in traj.turns] == [False, True]
    assert traj.info["trajectory_infos"] == [
        {"max_attempts": 3}, {"attempt": 1, "correct": False}, {"attempt": 2, "correct": True},
    ]  # fmt: skip
    assert traj.info["messages"][1] == {"role": "assistant", "content": "<think>" + replies[0]}
    assert not traj.info["truncated"] and "error" not in traj.info

    # a length-truncated reply gets the template's end-of-turn token before the next user message
    assert (
        continuation_ids(tokenizer, None, "hi")
        == tokenizer("<|end|><|user|>hi<|assistant|><think>", add_special_tokens=False)["input_ids"]
    )

    # long thinking trimmed by the delethink manager: the next prompt is templated afresh from the messages
    ctx = make_context_manager({"name": "delethink", "keep_head": 2, "keep_tail": 3}, tokenizer)
    traj, engine, _ = episode(tokenizer, {"name": "math", "max_attempts": 2}, replies, ctx=ctx)
    # thinking "<think>a3=3 b5=7" (10 tokens: <think> is one) -> head 2 "<think>a", tail 3 "5=7"
    managed = [
        {"role": "user", "content": "a3 b5"},
        {"role": "assistant", "content": "<think>a5=7</think>\\boxed{7}"},
        {"role": "user", "content": "Wrong, try again."},
    ]
    assert traj.turns[1].prompt_ids == encode_prompt(tokenizer, managed)


@pytest.mark.parametrize(
    ("env_config", "error"),
    [
        ({"fail": "reset"}, "reset raised RuntimeError('reset exploded')"),
        ({"fail": "raise", "fail_at": 2}, "step raised RuntimeError('step exploded')"),
        ({"fail": "shape"}, "step must return (observation, reward, done, info), got ('obs', 1.0, False)"),
        ({"fail": "reward"}, "step's reward must be a finite number, got 'high'"),
        ({"fail": "sleep"}, "step took longer than step_timeout_s=0.2"),
    ],
)
def test_a_failing_env_ends_its_episode_with_a_recorded_error(tokenizer, env_config, error):
    # a short limit, yet no load can trip it but the sleep's: asyncio.wait_for never times out a call that
    # returns without waiting, as every other reset and step of this env does
    traj, _, _ = episode(tokenizer, {"name": "flaky", **env_config}, ["r1", "r2", "r3"], timeout=0.2)
    assert traj.info["error"] == error and traj.info["trajectory_infos"][-1] == {"error": error}
    assert env_metrics("env", [traj])["env/error_rate"] == 1.0
    # it keeps a row (the batch keeps its shape) that trains nothing
    rows = trajectory_rows([traj], [1.0])
    assert len(rows) == 1 and not rows[0].trainable
    assert collate_rows(rows, 0)["response_mask"].sum() == 0
    if env_config["fail"] == "reset":  # nothing was sampled: one empty stand-in turn
        assert len(traj.turns) == 1 and traj.turns[0].response_ids == []
    if env_config.get("fail_at") == 2:
        assert len(traj.turns) == 2 and traj.info["step_rewards"] == [1.0]


def test_gym_loop_closes_every_env_and_shutdown_closes_leftovers(tokenizer, tmp_path):
    loop = GymAgentLoop(ScriptedEngine(tokenizer, ["r1", "r2"]), tokenizer=tokenizer, max_turns=3)
    item = PromptItem(
        [1],
        "s",
        "",
        messages=[{"role": "user", "content": "q"}],
        env_config={"name": "flaky", "fail": "raise"},
    )
    before = open_env_count()
    traj = asyncio.run(loop.run(item, SamplingParams(4, seed=0)))
    assert traj.info["error"].startswith("step raised") and open_env_count() == before
    with pytest.raises(ValueError, match="needs an env"):
        asyncio.run(loop.run(PromptItem([1], "s", "1", messages=item.messages), SamplingParams(4)))
    with pytest.raises(ValueError, match="PromptItem.messages is empty"):
        asyncio.run(loop.run(PromptItem([1], "s", "1", env_config={"name": "flaky"}), SamplingParams(4)))

    left_open = make_env({"name": "flaky"})
    assert close_open_envs() >= 1 and left_open.closed == 1
    assert close_open_envs() == 0  # closed once only

    # a process that exits with an env still open closes it at exit
    marker = tmp_path / "closed.txt"
    code = (
        f"from verl.envs.plugins import import_plugins; import_plugins([{str(PLUGIN)!r}]); "
        f"from verl.envs import make_env; make_env({{'name': 'flaky', 'close_marker': {str(marker)!r}}})"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).parent.parent, timeout=HANG_S)
    assert marker.read_text() == "closed"


# -- scoring and logging ------------------------------------------------------------------------------


def test_env_reward_is_the_score_and_a_custom_function_adds_to_it(tokenizer):
    def traj(env_reward=None):
        info = {} if env_reward is None else {"env_reward": env_reward}
        ids = tokenizer("x</think>\\boxed{8}", add_special_tokens=False)["input_ids"]
        return Trajectory([Turn([1], ids, [0.0] * len(ids), "stop")], info)

    trajs, sources = [traj(0.25), traj(0.5), traj()], ["synthetic/running_sum"] * 3
    # env rows: the env's reward only, even with a ground truth
    default = GymAgentLoop.scorer(NaiveRewardManager(tokenizer))
    assert [r.score for r in default(trajs, sources, ["", "8", "8"])] == [0.25, 0.5, 1.0]
    custom = GymAgentLoop.scorer(
        NaiveRewardManager(tokenizer, lambda data_source, solution_str, ground_truth, extra_info: 10.0)
    )
    assert [r.score for r in custom(trajs, sources, ["", "8", "8"])] == [0.25, 10.5, 10.0]
    # the other loops' trajectories are scored by the reward manager alone
    assert SingleTurnAgentLoop.scorer(default.reward_manager) is default.reward_manager


def test_completions_log_truncates_on_resume(tmp_path):
    log = CompletionsLog(tmp_path, resume_step=None)
    for step in (1, 2, 3):
        log.append([{"step": step, "index": 0}, {"step": step, "index": 1}])
    CompletionsLog(tmp_path, resume_step=2)  # a run resumed from step 2's checkpoint
    lines = read_jsonl(tmp_path / "completions.jsonl")
    assert [r["step"] for r in lines] == [1, 1, 2, 2]
    CompletionsLog(tmp_path, resume_step=None)  # a fresh run starts a fresh file
    assert (tmp_path / "completions.jsonl").read_text() == ""


# -- episode bookkeeping: rewards, seeds, limits, ids, closing ---------------------------------------


def test_env_request_question_is_the_last_user_message():
    # a few-shot prompt holds earlier user turns; the question the env judges is the last one
    messages = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "a1 b1"},
        {"role": "assistant", "content": "2"},
        {"role": "user", "content": "a3 b5"},
    ]
    assert EnvRequest(messages, "s", "8").question == "a3 b5"
    assert EnvRequest([{"role": "system", "content": "x"}], "s", "").question == ""


def test_delethink_context_manager_leaves_system_messages_and_honours_think_end(tokenizer):
    # only assistant thinking is trimmed: a long system prompt is an instruction, not carry-over
    ctx = make_context_manager({"name": "delethink", "keep_head": 2, "keep_tail": 3}, tokenizer)
    history = [
        {"role": "system", "content": "a long system prompt"},
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "abcdefghij</think>x"},
    ]
    assert [m["content"] for m in ctx.manage_context(history, "t0")] == [
        "a long system prompt", "question", "abhij</think>x",
    ]  # fmt: skip
    # a configured think_end is where the thinking ends (byte-level tokenizer: one character, one token)
    ctx = make_context_manager(
        {"name": "delethink", "keep_head": 2, "keep_tail": 3, "think_end": "</reason>"}, tokenizer
    )
    assert ctx.think_end == "</reason>"
    managed = ctx.manage_context([{"role": "assistant", "content": "abcdefghij</reason>ok"}], "t0")
    assert managed == [{"role": "assistant", "content": "abhij</reason>ok"}]


def test_env_reward_is_the_sum_of_the_step_rewards_and_max_turns_truncates(tokenizer):
    steps = [["o1", 0.25, False], ["o2", 0.5, False], ["o3", 1.0, False]]  # never done
    traj, _, _ = episode(
        tokenizer, {"name": "scripted_steps", "steps": steps}, ["r1", "r2", "r3"], max_turns=3
    )
    assert traj.info["step_rewards"] == [0.25, 0.5, 1.0]
    assert traj.info["env_reward"] == 1.75  # 0.25 + 0.5 + 1.0, not the last step's reward
    assert traj.info["truncated"] and traj.num_turns == 3 and "error" not in traj.info


def test_each_turn_samples_with_its_chunk_seed(tokenizer):
    # turn 0 keeps the trajectory's seed (3, from the episode helper), later turns get derived ones
    traj, engine, _ = episode(tokenizer, {"name": "flaky"}, ["r1", "r2", "r3"], max_turns=3)
    assert traj.num_turns == 3
    assert engine.seeds == [3, chunk_seed(3, 1), chunk_seed(3, 2)]
    assert len(set(engine.seeds)) == 3


def test_a_failed_episode_is_not_counted_as_truncated(tokenizer):
    # truncated means "ran out of turns or prompt room"; an env error is reported as an error instead
    traj, _, _ = episode(tokenizer, {"name": "flaky", "fail": "raise"}, ["r1"], max_turns=3)
    assert traj.info["error"] == "step raised RuntimeError('step exploded')"
    assert traj.info["truncated"] is False


def test_none_observation_is_only_allowed_once_done(tokenizer):
    not_done = {"name": "scripted_steps", "steps": [[None, 0.0, False]]}
    traj, _, _ = episode(tokenizer, not_done, ["r1"])
    assert traj.info["error"] == "step's observation must be a str (or None when done), got NoneType"
    done = {"name": "scripted_steps", "steps": [[None, 1.0, True]]}
    traj, _, _ = episode(tokenizer, done, ["r1"])
    assert "error" not in traj.info and traj.info["env_reward"] == 1.0 and not traj.info["truncated"]


def test_max_prompt_tokens_allows_a_prompt_of_exactly_that_length(tokenizer):
    first_prompt = encode_prompt(tokenizer, "a3 b5")  # what the episode helper's request templates to

    def run(limit):
        engine = ScriptedEngine(tokenizer, ["r1", "r2"])
        traj = asyncio.run(
            run_episode(
                make_env({"name": "flaky"}), None, engine, tokenizer, request(), SamplingParams(8, seed=3),
                max_turns=2, max_prompt_tokens=limit,
            )
        )  # fmt: skip
        return traj, engine.prompts

    # the first prompt fits exactly and is sampled; the second (longer) one is not
    at_limit, prompts = run(len(first_prompt))
    assert prompts == [first_prompt]
    r1 = tokenizer("r1", add_special_tokens=False)["input_ids"] + [EOS]
    assert at_limit.num_turns == 1 and at_limit.turns[0].response_ids == r1
    assert at_limit.info["truncated"]
    # not even the first prompt fits: nothing sampled, the untrainable stand-in turn
    below, prompts = run(len(first_prompt) - 1)
    assert prompts == [] and below.num_turns == 1 and below.turns[0].response_ids == []
    assert below.info["truncated"]


def test_gym_loop_names_the_trajectory_by_its_seed_and_records_a_failing_close(tokenizer):
    item = PromptItem(
        [1], "s", "", messages=[{"role": "user", "content": "q"}],
        env_config={"name": "scripted_steps", "steps": [["o", 1.0, True]], "close_raises": True},
    )  # fmt: skip
    loop = GymAgentLoop(ScriptedEngine(tokenizer, ["r1"]), tokenizer=tokenizer, max_turns=2)
    traj = asyncio.run(loop.run(item, SamplingParams(4, seed=7)))
    # a seeded trajectory's id is its seed, so a context manager keyed by it sees the same id on a rerun
    assert traj.info["trajectory_infos"][0] == {"seed": 7, "trajectory_id": "7"}
    # the episode itself went fine; the close error is logged after the step infos, not as an episode error
    assert traj.info["trajectory_infos"][-1] == {"error": "close failed: RuntimeError('close exploded')"}
    assert "error" not in traj.info and traj.info["env_reward"] == 1.0
    unseeded = asyncio.run(
        GymAgentLoop(ScriptedEngine(tokenizer, ["r1"]), tokenizer=tokenizer, max_turns=2).run(
            item, SamplingParams(4)
        )
    )
    trajectory_id = unseeded.info["trajectory_infos"][0]["trajectory_id"]
    assert len(trajectory_id) == 32 and trajectory_id != "None"  # a fresh uuid


def test_close_env_closes_once(tokenizer):
    env = make_env({"name": "flaky"})
    assert asyncio.run(close_env(env, 1.0)) is None
    assert asyncio.run(close_env(env, 1.0)) is None  # already closed: nothing to do
    assert env.closed == 1
