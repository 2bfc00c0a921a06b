"""Agent loops against a scripted engine: budgets, chunk prompts, carry-over, stopping."""

import asyncio

import pytest

from verl.agent_loop import AGENT_LOOPS
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import compose_config
from verl.config.load import parse_config
from verl.core.delethink import DelethinkParams
from verl.core.engine import GenerateOutput, RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem
from verl.utils.seeding import chunk_seed

EOS = 999


class CountingEngine(RolloutEngine):
    """Emits consecutive integers 1, 2, 3, ... across calls of one trajectory (the next token continues
    from the last prompt token when it is a thinking token), and EOS once `stop_after` thinking tokens
    were emitted in total. Records every request."""

    def __init__(self, stop_after: int | None = None) -> None:
        self.stop_after = stop_after
        self.requests: list[tuple[list[int], SamplingParams]] = []

    async def generate(self, prompt_ids, sampling_params):
        self.requests.append((list(prompt_ids), sampling_params))
        start = prompt_ids[-1] + 1 if prompt_ids[-1] >= 1 else 1
        tokens: list[int] = []
        for tok in range(start, start + sampling_params.max_new_tokens):
            if self.stop_after is not None and tok > self.stop_after:
                tokens.append(EOS)
                return GenerateOutput(tokens, [-0.5] * len(tokens), "stop")
            tokens.append(tok)
        return GenerateOutput(tokens, [-0.5] * len(tokens), "length")

    def update_weights(self, named_tensors):
        raise NotImplementedError


QUESTION = [-3, -2, 0]  # non-positive ids stand for question tokens


def item(prompt_ids):
    return PromptItem(list(prompt_ids), "test", "0")


def run(loop, prompt=QUESTION, budget=10, seed=5):
    return asyncio.run(loop.run(item(prompt), SamplingParams(max_new_tokens=budget, seed=seed)))


def test_registry_has_both_loops():
    assert AGENT_LOOPS["single_turn"] is SingleTurnAgentLoop
    assert AGENT_LOOPS["delethink"] is DelethinkAgentLoop


def test_single_turn_is_one_turn_with_full_budget():
    engine = CountingEngine()
    traj = run(SingleTurnAgentLoop(engine), budget=7)
    assert traj.num_turns == 1 and traj.response_ids == [1, 2, 3, 4, 5, 6, 7]
    assert traj.turns[0].prompt_ids == QUESTION and traj.turns[0].finish_reason == "length"


def test_delethink_chunks_budgets_and_carry_over():
    # C = 10, keep_head 2, keep_tail 3 (m = 5), later chunks C - m = 5, I = 4
    engine = CountingEngine()
    loop = DelethinkAgentLoop(engine, DelethinkParams(chunk_size=10, keep_head=2, keep_tail=3, max_chunks=4))
    traj = run(loop, budget=10)
    assert [len(t.response_ids) for t in traj.turns] == [10, 5, 5, 5]
    # budget formula C + (I-1)(C-m) = 10 + 3*5 = 25, every token used since no EOS
    assert traj.thinking_tokens == 25 and traj.response_ids == list(range(1, 26))
    # chunk 2 prompt: question + first 2 thinking tokens + last 3 of the 10 so far
    assert traj.turns[1].prompt_ids == QUESTION + [1, 2, 8, 9, 10]
    # chunk 3: thinking so far is 1..15 -> head [1, 2] (always the first tokens), tail [13, 14, 15]
    assert traj.turns[2].prompt_ids == QUESTION + [1, 2, 13, 14, 15]
    assert traj.turns[3].prompt_ids == QUESTION + [1, 2, 18, 19, 20]
    for turn in traj.turns:
        assert len(turn.prompt_ids) <= len(QUESTION) + 2 + 3
    assert [sp.max_new_tokens for _, sp in engine.requests] == [10, 5, 5, 5]
    # each chunk samples from a seed of its own (the first from the trajectory's)
    assert [sp.seed for _, sp in engine.requests] == [5, chunk_seed(5, 1), chunk_seed(5, 2), chunk_seed(5, 3)]
    assert not traj.has_eos


def test_delethink_budgets_come_from_its_params():
    # an explicit later-chunk budget (4, not C - m = 5); the sampling params' max_new_tokens is not read
    engine = CountingEngine()
    params = DelethinkParams(
        chunk_size=10, keep_head=2, keep_tail=3, intermediate_max_new_tokens=4, max_chunks=3
    )
    traj = run(DelethinkAgentLoop(engine, params), budget=99)
    assert [sp.max_new_tokens for _, sp in engine.requests] == [10, 4, 4]
    assert traj.thinking_tokens == params.thinking_budget == 10 + 2 * 4


def test_delethink_stops_at_eos():
    engine = CountingEngine(stop_after=13)
    loop = DelethinkAgentLoop(engine, DelethinkParams(chunk_size=10, keep_head=2, keep_tail=3, max_chunks=10))
    traj = run(loop, budget=10)
    assert traj.num_turns == 2 and traj.has_eos
    assert traj.turns[1].response_ids == [11, 12, 13, EOS]
    assert len(engine.requests) == 2


def test_delethink_one_chunk_samples_exactly_like_longcot():
    a, b = CountingEngine(), CountingEngine()
    longcot = run(SingleTurnAgentLoop(a), budget=10, seed=42)
    one_chunk = run(
        DelethinkAgentLoop(b, DelethinkParams(chunk_size=10, keep_head=2, keep_tail=3, max_chunks=1)),
        budget=10,
        seed=42,
    )
    assert longcot.turns == one_chunk.turns
    assert a.requests == b.requests  # same prompt, same budget, same seed


def test_chunk_seeds_differ_per_chunk_and_keep_the_first():
    seeds = [chunk_seed(123, i) for i in range(5)]
    assert seeds[0] == 123 and len(set(seeds)) == 5
    assert chunk_seed(None, 3) is None
    assert chunk_seed(123, 2) == chunk_seed(123, 2)


def test_manager_runs_all_in_order():
    engine = CountingEngine()
    prompts = [[0], [-1, 0], [-2, -1, 0]]
    trajs = asyncio.run(
        run_agent_loops(
            SingleTurnAgentLoop(engine),
            [item(p) for p in prompts],
            [SamplingParams(max_new_tokens=n) for n in (1, 2, 3)],
        )
    )
    assert [t.turns[0].prompt_ids for t in trajs] == prompts
    assert [t.thinking_tokens for t in trajs] == [1, 2, 3]
    with pytest.raises(ValueError, match="3 items but 1 sampling"):
        asyncio.run(
            run_agent_loops(
                SingleTurnAgentLoop(engine), [item(p) for p in prompts], [SamplingParams(max_new_tokens=1)]
            )
        )


def delethink_config(*overrides):
    """tiny_delethink (C = 32, keep_head 4 + keep_tail 12 = m = 16, I = 7, prompts of 96 tokens, 16 x 8
    trajectories a step) with `overrides`, typed but not checked: the loop's own checks are the subject."""
    return parse_config(compose_config("tiny_delethink", list(overrides)))


def test_the_delethink_loop_is_built_from_the_configs_params():
    config, engine = delethink_config(), CountingEngine()
    loop = DelethinkAgentLoop.from_config(config, engine, tokenizer=None)
    assert loop.engine is engine and loop.params == config.delethink_params
    assert DelethinkAgentLoop.config_problems(config) == []


def test_the_delethink_loop_names_each_key_it_cannot_run_with():
    rollout, delethink = "actor_rollout_ref.rollout", "algorithm.delethink"
    cases = {
        "trainer.name=ppo": f"{rollout}.agent.default_agent_loop='delethink': trainer.name=ppo trains "
        "one row per trajectory; use trainer.name=delethink",
        "reward_model.reward_manager=naive": "reward_model.reward_manager='naive': scores only the last "
        "chunk of a Delethink trajectory; use reward_model.reward_manager=delethink (all chunks joined, as "
        "environment=delethink sets)",
        "data.max_response_length=64": f"data.max_response_length=64: must equal {delethink}.chunk_size=32: "
        "with the delethink loop C is set there alone (environment=delethink links the two; leave "
        "data.max_response_length unset)",
        f"{rollout}.multi_turn.max_assistant_turns=7": f"{rollout}.multi_turn.max_assistant_turns=7: is the "
        f"gym loop's turn limit and the delethink loop does not read it; set I with {delethink}.max_chunks",
        # a chunk's prompt: the question and m = 16 carried tokens; 16 leaves the question no room
        "data.max_prompt_length=16": f"data.max_prompt_length=16: must be > {delethink}.keep_head + "
        "keep_tail = 16: a chunk's prompt is the question plus the carry-over, so the question needs "
        "room too",
    }
    for override, problem in cases.items():
        assert DelethinkAgentLoop.config_problems(delethink_config(override)) == [problem], override
    assert DelethinkAgentLoop.config_problems(delethink_config("data.max_prompt_length=17")) == []
    # with algorithm.delethink itself wrong (its own check says so) the carry-over is not compared
    bad_params = delethink_config(f"{delethink}.keep_tail=0", "data.max_prompt_length=4")
    assert DelethinkAgentLoop.config_problems(bad_params) == []


def test_the_delethink_plan_rows():
    rows = DelethinkAgentLoop.plan_rows(delethink_config())
    assert rows == [
        ("environment", "Delethink (Markovian thinking)"),
        ("chunk budget", "first C = 32, later 16, up to I = 7 chunks"),
        ("carry-over", "m = keep_head 4 + keep_tail 12 = 16 (progressive trimmer)"),
        ("context", "<= 96 prompt + 32 new per chunk"),
        ("rows per step", "128 to 896 (one per chunk)"),
    ]
