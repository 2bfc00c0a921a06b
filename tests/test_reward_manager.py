import pytest

from verl.core.trajectory import Trajectory, Turn
from verl.models.tiny import build_tokenizer
from verl.workers.reward_manager import (
    REWARD_MANAGERS,
    DelethinkRewardManager,
    NaiveRewardManager,
    get_reward_manager,
)


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def trajectory(tokenizer, *chunks: str | list[int], eos: bool = True) -> Trajectory:
    """One turn per chunk (text, or ready-made ids); the last turn ends with end-of-sequence."""
    turns = []
    for i, chunk in enumerate(chunks):
        ids = tokenizer.encode(chunk, add_special_tokens=False) if isinstance(chunk, str) else list(chunk)
        last = i == len(chunks) - 1
        if last and eos:
            ids.append(tokenizer.eos_token_id)
        turns.append(Turn([1, 2, 3], ids, [-0.5] * len(ids), "stop" if last and eos else "length"))
    return Trajectory(turns)


def test_an_answer_split_across_chunks_counts_only_for_delethink(tokenizer):
    split = trajectory(tokenizer, "add them up</think> so \\box", "ed{42}")
    args = ([split], ["math"], ["42"])
    (naive,) = NaiveRewardManager(tokenizer)(*args)
    (delethink,) = DelethinkRewardManager(tokenizer)(*args)
    assert (naive.score, naive.solution_str) == (0.0, "ed{42}")  # the end-of-sequence token is skipped
    assert (delethink.score, delethink.solution_str) == (1.0, "add them up</think> so \\boxed{42}")


def test_a_truncated_trace_scores_zero_even_with_a_correct_box_in_its_thinking(tokenizer):
    # a Delethink trace that used up its last chunk (no EOS, no </think>) and a LongCoT trace cut at
    # its budget: both boxed the right answer mid-thought, neither closed its thinking
    truncated_delethink = trajectory(tokenizer, "try 6*7 = \\boxed{42} ", "check again: 42", eos=False)
    truncated_longcot = trajectory(tokenizer, "so \\boxed{42} is it? let me verify", eos=False)
    finished = trajectory(tokenizer, "try 6*7 = \\boxed{42} ", "check: 42</think> \\boxed{42}")
    args = ([truncated_delethink, truncated_longcot, finished], ["math"] * 3, ["42"] * 3)
    assert [r.score for r in DelethinkRewardManager(tokenizer)(*args)] == [0.0, 0.0, 1.0]
    # the tiny task's verifier applies the same gate
    args = ([truncated_delethink, finished], ["synthetic/running_sum"] * 2, ["42"] * 2)
    assert [r.score for r in DelethinkRewardManager(tokenizer)(*args)] == [0.0, 1.0]


def test_single_turn_trajectories_score_the_same_in_both(tokenizer):
    trajectories = [
        trajectory(tokenizer, "six times seven</think> \\boxed{42}"),
        trajectory(tokenizer, "a guess</think> \\boxed{41}"),
        trajectory(tokenizer, "ran out of budget \\boxed{4", eos=False),
        trajectory(tokenizer, "thinking</think> \\boxed{\\frac{1}{2}}"),
    ]
    args = (trajectories, ["math"] * 4, ["42", "42", "42", "0.5"])
    naive = NaiveRewardManager(tokenizer)(*args)
    delethink = DelethinkRewardManager(tokenizer)(*args)
    assert [r.score for r in naive] == [1.0, 0.0, 0.0, 1.0]
    assert naive == delethink


def test_delethink_decodes_the_concatenated_ids_once(tokenizer):
    # the tiny tokenizer has one token per byte, so a chunk boundary can fall inside the two bytes of "π"
    text = "circle</think> \\boxed{2π}"
    ids = tokenizer.encode(text, add_special_tokens=False)
    cut = ids.index("π".encode()[1])  # the second byte of π: the first turn ends mid-character
    first, second = ids[:cut], ids[cut:]
    assert (
        tokenizer.decode(first) + tokenizer.decode(second) != text
    )  # joining decoded strings would mangle it

    def exact_answer(data_source, solution_str, ground_truth, extra_info=None):
        return float(solution_str.endswith(f"\\boxed{{{ground_truth}}}"))

    (result,) = DelethinkRewardManager(tokenizer, exact_answer)(
        [trajectory(tokenizer, first, second)], ["m"], ["2π"]
    )
    assert (result.score, result.solution_str) == (1.0, text)


def test_a_custom_reward_function_is_called_per_item_with_keywords(tokenizer):
    calls = []

    def reward(data_source, solution_str, ground_truth, extra_info=None):
        calls.append((data_source, solution_str, ground_truth, extra_info))
        return len(solution_str) / 10

    trajectories = [trajectory(tokenizer, "abc"), trajectory(tokenizer, "de", "fgh")]
    results = DelethinkRewardManager(tokenizer, reward)(
        trajectories, ["s1", "s2"], ["1", "2"], [{"i": 0}, {"i": 1}]
    )
    assert [r.score for r in results] == [0.3, 0.5]
    assert calls == [("s1", "abc", "1", {"i": 0}), ("s2", "defgh", "2", {"i": 1})]
    # without extra infos the reward function gets extra_info=None
    NaiveRewardManager(tokenizer, reward)(trajectories[:1], ["s1"], ["1"])
    assert calls[-1] == ("s1", "abc", "1", None)


def test_the_default_reward_dispatches_synthetic_sources(tokenizer):
    # the synthetic verifier compares strings exactly; math-verify reads "07" as the number 7
    trajectories = [trajectory(tokenizer, "sum</think> \\boxed{07}")] * 2
    results = NaiveRewardManager(tokenizer)(trajectories, ["synthetic/running_sum", "math"], ["7", "7"])
    assert [r.score for r in results] == [0.0, 1.0]


def test_bad_inputs_name_what_is_wrong(tokenizer):
    manager = NaiveRewardManager(tokenizer)
    one = [trajectory(tokenizer, "x")]
    with pytest.raises(ValueError, match="1 trajectories but 2 data sources, 1 ground truths"):
        manager(one, ["a", "b"], ["1"])
    with pytest.raises(ValueError, match="and 0 extra infos"):
        manager(one, ["a"], ["1"], [])
    not_a_number = NaiveRewardManager(tokenizer, lambda **kwargs: "1.0")
    with pytest.raises(ValueError, match=r"returned '1\.0' \(str\) for item 0 \(data_source='a'\)"):
        not_a_number(one, ["a"], ["1"])


def test_registry():
    assert get_reward_manager("naive") is NaiveRewardManager
    assert get_reward_manager("delethink") is DelethinkRewardManager
    assert set(REWARD_MANAGERS) == {"naive", "delethink"}
    with pytest.raises(ValueError, match=r"unknown reward manager 'prime'; known: \['delethink', 'naive'\]"):
        get_reward_manager("prime")


@pytest.mark.parametrize("manager", [NaiveRewardManager, DelethinkRewardManager])
def test_without_thinking_tags_an_ended_response_is_its_answer_and_a_cut_one_scores_zero(tokenizer, manager):
    # a model that never writes </think> (reward_model.thinking_tags=false): the response is the answer
    ended = trajectory(tokenizer, "48 / 2 = 24 in May, 48 + 24 = 72. ", "The answer is \\boxed{72}")
    cut = trajectory(
        tokenizer, "48 / 2 = 24 in May, so \\boxed{72} is", " what I get, let me check", eos=False
    )
    args = ([ended, cut], ["math"] * 2, ["72"] * 2)
    untagged = manager(tokenizer, thinking_tags=False)(*args)
    assert [r.score for r in untagged] == [1.0, 0.0]
    assert "</think>" not in untagged[0].solution_str  # what is logged is what the model wrote
    # with the gate of thinking models (the default) neither has an answer: the thinking never closed
    assert [r.score for r in manager(tokenizer)(*args)] == [0.0, 0.0]
