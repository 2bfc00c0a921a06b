"""The shift-register task: reference traces, the Markov property of its steps, scoring, the dataset."""

import json
import random

import pytest

from verl.data import shift_register as sr
from verl.models.tiny import build_tokenizer
from verl.utils.reward_score import default_compute_score
from verl.utils.reward_score.synthetic import compute_score


def test_a_hand_worked_trace():
    # 8153 -> 1539 (8+1) -> 5396 (1+5) -> 3968 (5+3) -> 9682 (3+9=12) -> 6825 (9+6=15)
    p = sr.solve("8153", 5)
    assert p.question == "005:8153"  # the first state, which the thinking restates
    assert sr.parse_question(p.question) == ("8153", 5)
    assert p.thinking == " 005:8153 004:1539 003:5396 002:3968 001:9682 000:6825"  # each step after a space
    assert p.answer == "6825"
    assert p.response == " 005:8153 004:1539 003:5396 002:3968 001:9682 000:6825</think>\\boxed{6825}"
    assert p.size == p.num_steps == 5


def test_one_step_and_the_counter_borrow():
    assert sr.step("0000") == "0000"
    assert sr.step("9900") == "9008"  # 9 + 9 = 18
    p = sr.solve("1234", 101)
    steps = p.thinking.split()
    assert steps[0] == "101:1234"
    assert [s[:3] for s in steps[1:4]] == ["100", "099", "098"]  # borrows across two digits
    assert steps[-1] == f"000:{p.answer}"


def test_every_step_follows_from_the_previous_one_alone():
    # the Markov property the testbed rests on: each step is a function of the step before it
    rng = random.Random(0)
    for n in (1, 2, 17, 56, 226, 999):
        steps = sr.make_problem(rng, n).thinking.split()
        assert len(steps) == n + 1
        for before, after in zip(steps, steps[1:], strict=False):
            remaining, register = before.split(":")
            assert after == f"{int(remaining) - 1:03d}:{sr.step(register)}"


def test_thinking_length_in_tokens_at_every_size():
    tokenizer = build_tokenizer()
    rng = random.Random(1)
    for n in (1, 9, 55, 56, 226, 227, 999):
        p = sr.make_problem(rng, n)
        tokens = len(tokenizer.encode(p.thinking, add_special_tokens=False))
        assert tokens == len(p.thinking) == sr.thinking_tokens(n) == 9 * (n + 1)
        assert len(tokenizer.encode(p.question, add_special_tokens=False)) == sr.TOKENS_PER_STEP - 1
    # the largest n that fits a budget, and that n + 1 does not
    for budget in (8, 9, 17, 128, 512, 2048):
        n = sr.steps_for_thinking_tokens(budget)
        assert n == 0 or sr.thinking_tokens(n) <= budget
        assert sr.thinking_tokens(n + 1) > budget
    assert sr.steps_for_thinking_tokens(512) == 55
    assert sr.steps_for_thinking_tokens(2048) == 226


def test_the_map_is_a_permutation_so_no_state_is_absorbing():
    images = {sr.step(f"{i:04d}") for i in range(10**4)}
    assert len(images) == 10**4


@pytest.mark.parametrize(
    "start, steps, match",
    [
        ("123", 5, "4 digits"),
        ("12a4", 5, "4 digits"),
        ("1234", 0, r"\[1, 999\]"),
        ("1234", 1000, r"\[1, 999\]"),
    ],
)
def test_bad_problems_are_refused(start, steps, match):
    with pytest.raises(ValueError, match=match):
        sr.solve(start, steps)


@pytest.mark.parametrize(
    ("solution", "score"),
    [
        ("001:1234 000:2343</think>\\boxed{2343}", 1.0),
        ("001:1234 000:2349</think>\\boxed{2349}", 0.0),  # an arithmetic slip
        ("001:1234 000:2343 \\boxed{2343}", 0.0),  # cut at the budget: the thinking never closed
        ("001:1234 000:2343</think>2343", 0.0),  # no box
    ],
)
def test_scoring_is_exact_and_needs_closed_thinking(solution, score):
    assert sr.solve("1234", 1).answer == "2343"
    assert compute_score(solution, "2343") == score
    assert default_compute_score(sr.DATA_SOURCE, solution, "2343") == score


def test_problem_sizes_spread_over_the_range():
    assert sr.problem_sizes(5, 10, 50) == [10, 20, 30, 40, 50]
    assert sr.problem_sizes(1, 10, 50) == [50]
    assert sr.problem_sizes(3, 7, 7) == [7, 7, 7]


def test_dataset_files(tmp_path):
    sr.write_dataset(
        tmp_path,
        train_size=300,
        val_size=12,
        min_steps=4,
        max_steps=30,
        seed=3,
        val_min_steps=60,
        val_max_steps=170,
    )
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").open()]
    val = [json.loads(line) for line in (tmp_path / "val.jsonl").open()]
    assert len(train) == 300 and len(val) == 12
    assert {r["data_source"] for r in train + val} == {sr.DATA_SOURCE}
    assert all(4 <= r["extra_info"]["num_steps"] <= 30 for r in train)
    assert [r["extra_info"]["num_steps"] for r in val] == sr.problem_sizes(12, 60, 170)
    assert not {r["prompt"][0]["content"] for r in val} & {r["prompt"][0]["content"] for r in train}
    for r in train[:20] + val:
        start, n = sr.parse_question(r["prompt"][0]["content"])
        assert r["reward_model"]["ground_truth"] == sr.solve(start, n).answer
        assert r["extra_info"]["thinking_tokens"] == sr.thinking_tokens(n)
    # the same seed writes the same files
    sr.write_dataset(tmp_path / "again", 300, 12, 4, 30, 3, 60, 170)
    assert (tmp_path / "again" / "train.jsonl").read_text() == (tmp_path / "train.jsonl").read_text()


def test_dataset_cli_refuses_bad_ranges(tmp_path, capsys):
    with pytest.raises(SystemExit):
        sr.main(["--out", str(tmp_path), "--min-steps", "40", "--max-steps", "10"])
    assert "min_steps <= max_steps" in capsys.readouterr().err
    assert not (tmp_path / "train.jsonl").exists()


def test_zero_rich_starts_keep_the_uniform_stream_at_zero_probability():
    # zero_prob 0 draws exactly what a plain start draws, so earlier data streams are unchanged
    plain, zero = random.Random(5), random.Random(5)
    uniform = [sr.make_problem(plain, 3) for _ in range(20)]
    assert uniform == [sr.make_problem(zero, 3, 0.0) for _ in range(20)]
    rng = random.Random(0)
    assert {sr.make_problem(rng, 2, 1.0).question for _ in range(5)} == {"002:0000"}  # all zeros
    # at 0.5 each start digit is 0 with probability 0.5 + 0.5 / 10
    starts = [sr.parse_question(sr.make_problem(rng, 1, 0.5).question)[0] for _ in range(4000)]
    assert sum(d == "0" for s in starts for d in s) / 16000 == pytest.approx(0.55, abs=0.02)


def test_training_problems_never_repeat_a_validation_question(tmp_path):
    # one-step problems have only 10^4 questions, so 2000 training draws would hit several of the 50
    # validation questions by chance (about 10 expected): the writer must redraw those
    sr.write_dataset(tmp_path, train_size=2000, val_size=50, min_steps=1, max_steps=1, seed=0)
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").open()]
    val = [json.loads(line) for line in (tmp_path / "val.jsonl").open()]
    assert len(train) == 2000 and len(val) == 50
    assert not {r["prompt"][0]["content"] for r in val} & {r["prompt"][0]["content"] for r in train}


def test_dataset_cli_passes_every_size_option_through(tmp_path, capsys):
    sr.main(
        ["--out", str(tmp_path), "--train-size", "20", "--val-size", "4", "--min-steps", "2",
         "--max-steps", "5", "--val-min-steps", "3", "--val-max-steps", "9", "--seed", "1"]
    )  # fmt: skip
    assert "wrote 20 train and 4 val problems" in capsys.readouterr().out
    train = [json.loads(line) for line in (tmp_path / "train.jsonl").open()]
    val = [json.loads(line) for line in (tmp_path / "val.jsonl").open()]
    assert len(train) == 20 and all(2 <= r["extra_info"]["num_steps"] <= 5 for r in train)
    assert [r["extra_info"]["num_steps"] for r in val] == [3, 5, 7, 9]  # spread over [3, 9]
    # the seed is passed through too: the library call with the same arguments writes the same files
    sr.write_dataset(tmp_path / "lib", 20, 4, 2, 5, 1, 3, 9)
    assert (tmp_path / "lib" / "train.jsonl").read_text() == (tmp_path / "train.jsonl").read_text()
