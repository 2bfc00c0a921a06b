"""The gym loop with the HF engine on the tiny model: token-exact multi-turn prompts, what trains
(train_on last vs all), row vs global env choice, and a failing env."""

import asyncio
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.e2e_utils import tiny_config
from verl.agent_loop.gym import run_episode
from verl.agent_loop.manager import build_agent_loop, run_agent_loops
from verl.core import log_softmax
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.data.rl_dataset import encode_prompt
from verl.envs import EnvRequest, make_env
from verl.envs.plugins import import_plugins
from verl.single_controller.fsdp_workers import eos_token_ids, load_causal_lm
from verl.workers.actor.dp_actor import response_logits
from verl.workers.rollout.hf_engine import HFRolloutEngine

PLUGIN = Path(__file__).parent / "assets" / "gym_plugin.py"
RETRY = "Wrong, try again."
SOURCE = "synthetic/running_sum"


@pytest.fixture(scope="module")
def tiny(tiny_assets):
    import_plugins([str(PLUGIN)])
    tokenizer = AutoTokenizer.from_pretrained(tiny_assets / "model")
    model = load_causal_lm(str(tiny_assets / "model")).eval()
    engine = HFRolloutEngine(
        model, eos_token_ids(model.generation_config, tokenizer), tokenizer.pad_token_id, max_num_seqs=16
    )
    return tokenizer, engine


def ids(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def math_episode(tiny, train_on, seed=11, max_turns=3):
    tokenizer, engine = tiny
    request = EnvRequest([{"role": "user", "content": "a3 b5 c2"}], "synthetic/running_sum", "0", seed=seed)
    env = make_env({"name": "math", "max_attempts": max_turns})
    return asyncio.run(
        run_episode(
            env, None, engine, tokenizer, request, SamplingParams(16, temperature=1.0, seed=seed),
            max_turns=max_turns, train_on=train_on,
        )
    )  # fmt: skip


def test_each_prompt_is_the_previous_one_plus_sampled_ids_plus_the_observation(tiny):
    tokenizer, _ = tiny
    traj = math_episode(tiny, "all")
    assert traj.num_turns == 3 and traj.info["step_rewards"] == [0.0, 0.0, 0.0]  # untrained: never right
    assert traj.turns[0].prompt_ids == encode_prompt(tokenizer, "a3 b5 c2")
    for prev, nxt in zip(traj.turns, traj.turns[1:], strict=False):
        # the template closes an assistant turn with <|end|>; a reply that sampled it does not get a second
        end = "" if prev.finish_reason == "stop" else "<|end|>"
        observation = ids(tokenizer, f"{end}<|user|>{RETRY}<|assistant|><think>")
        assert nxt.prompt_ids == prev.prompt_ids + prev.response_ids + observation


def test_train_on_last_vs_all_and_observations_never_in_the_loss(tiny):
    tokenizer, _ = tiny
    last, every = math_episode(tiny, "last"), math_episode(tiny, "all")
    assert [t.response_ids for t in last.turns] == [t.response_ids for t in every.turns]  # same seeds
    assert [t.trainable for t in last.turns] == [False, False, True]

    rows_last = trajectory_rows([last], [1.0])
    rows_all = trajectory_rows([every], [1.0])
    assert len(rows_last) == 1 and rows_last[0].response_ids == last.turns[-1].response_ids
    assert rows_last[0].trace_length == len(last.turns[-1].response_ids)  # normalised by trained tokens
    assert len(rows_all) == 3 and rows_all[0].trace_length == every.thinking_tokens

    retry = ids(tokenizer, f"<|user|>{RETRY}")
    for rows, turns in ((rows_last, last.turns[-1:]), (rows_all, every.turns)):
        batch = collate_rows(rows, tokenizer.pad_token_id)
        mask = batch["response_mask"].bool()
        assert int(mask.sum()) == sum(len(t.response_ids) for t in turns)
        for i, turn in enumerate(turns):
            # the trained tokens are exactly the sampled ones; the observation sits in the prompt columns
            assert batch["responses"][i][mask[i]].tolist() == turn.response_ids
            prompt_part = batch["input_ids"][i, : -batch["responses"].shape[1]].tolist()
            if i > 0 or rows is rows_last:
                assert any(prompt_part[j : j + len(retry)] == retry for j in range(len(prompt_part)))
            assert not any(
                batch["responses"][i][mask[i]].tolist()[j : j + len(retry)] == retry
                for j in range(len(turn.response_ids))
            )


def test_row_env_wins_over_the_global_one_and_a_failing_env_is_recorded(tiny, tiny_assets, tmp_path):
    tokenizer, engine = tiny
    gym = "actor_rollout_ref.rollout.gym"
    cfg = tiny_config(
        "tiny_longcot", tiny_assets, tmp_path, "actor_rollout_ref.rollout.agent.default_agent_loop=gym",
        f"{gym}.env_config={{name: math, max_attempts: 2}}", f"external_plugins=[{PLUGIN}]",
        "actor_rollout_ref.rollout.multi_turn.max_assistant_turns=3",
    )  # fmt: skip
    loop = build_agent_loop(cfg, engine, tokenizer)
    prompt = encode_prompt(tokenizer, "a1 b2")
    messages = [{"role": "user", "content": "a1 b2"}]
    row_envs = [None, {"name": "digit_share", "turns": 3}, {"name": "flaky", "fail": "raise", "fail_at": 2}]
    items = [
        PromptItem(prompt, "synthetic/running_sum", "3", messages=messages, env_config=e) for e in row_envs
    ]
    params = [SamplingParams(8, seed=s) for s in range(3)]
    default, row_env, failing = asyncio.run(run_agent_loops(loop, items, params))

    assert default.info["env"] == "math" and default.num_turns == 2  # max_attempts 2 < max turns 3
    assert row_env.info["env"] == "digit_share" and row_env.num_turns == 3
    assert [i["turns_left"] for i in row_env.info["trajectory_infos"][1:]] == [2, 1, 0]
    assert failing.info["error"] == "step raised RuntimeError('step exploded')"
    assert failing.num_turns == 2 and failing.info["step_rewards"] == [1.0]
    assert not any(r.trainable for r in trajectory_rows([failing], [1.0]))


def test_observation_tokens_get_no_gradient(tiny, tiny_assets):
    """Backpropagate the masked response log-likelihood of a gym batch (as the actor computes it) and
    read the gradient at the final hidden state of every position (the LM head runs on the response
    positions only): positions predicting observation tokens get none."""
    tokenizer, _ = tiny
    traj = math_episode(tiny, "all")
    batch = collate_rows(trajectory_rows([traj], [1.0]), tokenizer.pad_token_id)
    model = load_causal_lm(str(tiny_assets / "model"))
    captured = []

    def keep_hidden(module, inputs, output):
        output.retain_grad()
        captured.append(output)

    handle = model.model.norm.register_forward_hook(keep_hidden)
    log_probs = log_softmax.log_probs_from_logits(response_logits(model, batch), batch["responses"])
    (-(log_probs * batch["response_mask"]).sum()).backward()
    handle.remove()
    has_grad = captured[0].grad.abs().sum(-1) > 0  # [rows, positions]

    retry = ids(tokenizer, f"<|user|>{RETRY}")
    width, t = batch["input_ids"].shape[1], batch["responses"].shape[1]
    for i, turn in enumerate(traj.turns):
        # exactly the positions predicting this row's sampled tokens carry gradient
        predicting_response = list(range(width - t - 1, width - t - 1 + len(turn.response_ids)))
        assert has_grad[i].nonzero().flatten().tolist() == predicting_response
        row = batch["input_ids"][i].tolist()
        starts = [j for j in range(width) if row[j : j + len(retry)] == retry]
        assert len(starts) == i  # turn i's prompt holds i observations
        for s in starts:  # the positions predicting them have none
            assert not has_grad[i, s - 1 : s - 1 + len(retry)].any()
