"""The running-sum task: reference traces, scoring, and the JSONL dataset."""

import json
import random

import pytest

from verl.data import synthetic
from verl.models.tiny import build_tokenizer
from verl.utils.reward_score.synthetic import compute_score as synthetic_score


def test_trace_of_hand_made_examples():
    p = synthetic.solve([3, 5, 2, 7, 1])
    assert p.question == "a3 b5 c2 d7 e1"
    assert p.thinking == "a3=3 b5=8 c2=0 d7=7 e1=8"
    assert p.answer == "8"
    assert p.response == "a3=3 b5=8 c2=0 d7=7 e1=8</think>\\boxed{8}"
    assert p.num_terms == 5

    p = synthetic.solve([9, 9, 9])
    assert (p.question, p.thinking, p.answer) == ("a9 b9 c9", "a9=9 b9=8 c9=7", "7")


def test_random_problems_agree_with_the_digit_sum():
    rng = random.Random(0)
    for n in range(1, 27):
        p = synthetic.make_problem(rng, n)
        digits = [int(term[1]) for term in p.question.split()]
        labels = [term[0] for term in p.question.split()]
        assert labels == list("abcdefghijklmnopqrstuvwxyz"[:n])
        assert p.answer == str(sum(digits) % 10)
        assert p.thinking.split()[-1].endswith(f"={p.answer}")


def test_thinking_length_grows_linearly():
    tokenizer = build_tokenizer()
    rng = random.Random(1)
    for n in (1, 4, 12, 26):
        p = synthetic.make_problem(rng, n)
        assert len(p.thinking) == 5 * n - 1
        assert len(tokenizer.encode(p.thinking, add_special_tokens=False)) == 5 * n - 1
        assert len(tokenizer.encode(p.question, add_special_tokens=False)) == 3 * n - 1


def test_labels_cycle_through_the_alphabet():
    p = synthetic.solve([3, 5, 2, 7, 1], labels="abc")
    assert p.question == "a3 b5 c2 a7 b1"
    assert p.thinking == "a3=3 b5=8 c2=0 a7=7 b1=8"
    assert p.answer == "8"
    assert p.response == "a3=3 b5=8 c2=0 a7=7 b1=8</think>\\boxed{8}"
    assert p.num_terms == 5
    # scoring reads only the answer after the thinking, so repeated labels change nothing there
    assert synthetic_score(p.response, p.answer) == 1.0
    assert synthetic_score("a3=3 b5=8 c2=0 a7=7 b1=8</think>\\boxed{7}", p.answer) == 0.0

    # the default alphabet: the 27th term is labelled `a` again, the 28th `b`
    p = synthetic.solve([1] * 28)
    assert p.question.split()[25:] == ["z1", "a1", "b1"]
    assert p.thinking.split()[25:] == ["z1=6", "a1=7", "b1=8"]
    assert p.answer == "8"


def test_cycled_labels_keep_five_tokens_per_step():
    tokenizer = build_tokenizer()
    p = synthetic.make_problem(random.Random(2), 40, labels="abcdefghijkl")
    assert [term[0] for term in p.question.split()] == list("abcdefghijkl" * 4)[:40]
    assert len(tokenizer.encode(p.thinking, add_special_tokens=False)) == 5 * 40 - 1
    assert len(tokenizer.encode(p.question, add_special_tokens=False)) == 3 * 40 - 1


def test_make_problem_rejects_zero_terms():
    with pytest.raises(ValueError, match="at least 1 term, got 0"):
        synthetic.make_problem(random.Random(0), 0)


@pytest.mark.parametrize("labels", ["", "aba", "a1", "a ", "é"])
def test_solve_rejects_bad_alphabets(labels):
    with pytest.raises(ValueError, match="distinct ASCII letters"):
        synthetic.solve([1, 2], labels=labels)


def test_solve_rejects_non_digits():
    with pytest.raises(ValueError, match="digits 0..9"):
        synthetic.solve([3, 12])


@pytest.mark.parametrize(
    ("solution", "ground_truth", "score"),
    [
        ("a3=3 b5=8</think>\\boxed{8}", "8", 1.0),  # right
        ("a3=3 b5=8</think>\\boxed{ 8 }", "8 ", 1.0),  # whitespace does not matter
        ("a3=3 b5=8</think>\\boxed{8}", 8, 1.0),  # a ground truth that is not a string
        ("a3=3 b5=9</think>\\boxed{9}", "8", 0.0),  # wrong
        ("a3=3 b5=8</think>the answer is 8", "8", 0.0),  # no \boxed
        ("a3=3 b5=8</think>\\boxed{8", "8", 0.0),  # unclosed \boxed
        ("\\boxed{8} a3=3</think>\\boxed{1}", "8", 0.0),  # only the answer after </think> counts
        ("", "8", 0.0),
        ("a3=3 b5=8 \\boxed{8}", "8", 0.0),  # truncated: the thinking never closed
    ],
)
def test_compute_score(solution, ground_truth, score):
    assert synthetic_score(solution, ground_truth) == score


def read_jsonl(path):
    with open(path) as f:
        return [json.loads(line) for line in f]


def test_dataset_row_format(tmp_path):
    synthetic.write_dataset(tmp_path, train_size=20, val_size=9, min_terms=4, max_terms=12, seed=0)
    train, val = read_jsonl(tmp_path / "train.jsonl"), read_jsonl(tmp_path / "val.jsonl")
    assert (len(train), len(val)) == (20, 9)
    for split, rows in (("train", train), ("val", val)):
        for i, row in enumerate(rows):
            question = row["prompt"][0]["content"]
            digits = [int(term[1]) for term in question.split()]
            assert row == {
                "data_source": "synthetic/running_sum",
                "prompt": [{"role": "user", "content": question}],
                "reward_model": {"style": "rule", "ground_truth": str(sum(digits) % 10)},
                "extra_info": {"index": i, "split": split, "num_terms": len(digits)},
            }
    # every size from 4 to 12 appears in the validation set
    assert sorted(row["extra_info"]["num_terms"] for row in val) == list(range(4, 13))


def test_train_and_val_share_no_question_even_in_a_small_space(tmp_path):
    # 2 terms: only 100 distinct questions, so 300 training draws would hit the 60 val questions often
    synthetic.write_dataset(tmp_path, train_size=300, val_size=60, min_terms=2, max_terms=2, seed=0)
    train = {row["prompt"][0]["content"] for row in read_jsonl(tmp_path / "train.jsonl")}
    val = [row["prompt"][0]["content"] for row in read_jsonl(tmp_path / "val.jsonl")]
    assert len(set(val)) == 60
    assert not train & set(val)


def test_dataset_is_reproducible_from_its_seed(tmp_path):
    for name, seed in (("a", 3), ("b", 3), ("c", 4)):
        synthetic.write_dataset(
            tmp_path / name, train_size=10, val_size=5, min_terms=4, max_terms=6, seed=seed
        )
    text = {name: (tmp_path / name / "train.jsonl").read_text() for name in "abc"}
    assert text["a"] == text["b"] != text["c"]


def test_dataset_rejects_a_space_too_small_for_val(tmp_path):
    with pytest.raises(ValueError, match="only 10 distinct questions"):
        synthetic.write_dataset(tmp_path, train_size=5, val_size=10, min_terms=1, max_terms=1, seed=0)
    with pytest.raises(ValueError, match="min_terms"):
        synthetic.write_dataset(tmp_path, train_size=5, val_size=1, min_terms=5, max_terms=4, seed=0)


def test_cli_writes_both_splits(tmp_path, capsys):
    synthetic.main(["--out", str(tmp_path), "--train-size", "7", "--val-size", "3", "--seed", "1"])
    assert len(read_jsonl(tmp_path / "train.jsonl")) == 7
    assert len(read_jsonl(tmp_path / "val.jsonl")) == 3
    with pytest.raises(SystemExit) as exit_info:
        synthetic.main(["--out", str(tmp_path), "--min-terms", "0", "--max-terms", "3"])
    assert exit_info.value.code == 2
    assert "need 1 <= min_terms <= max_terms, got 0, 3" in capsys.readouterr().err


def test_cli_labels_cycle_through_the_given_alphabet(tmp_path, capsys):
    synthetic.main(
        [
            "--out",
            str(tmp_path),
            "--train-size",
            "6",
            "--val-size",
            "2",
            "--min-terms",
            "8",
            "--max-terms",
            "8",
        ]
        + ["--labels", "abc"]
    )
    for split in ("train", "val"):
        for row in read_jsonl(tmp_path / f"{split}.jsonl"):
            assert [term[0] for term in row["prompt"][0]["content"].split()] == list("abcabcab")
    # the alphabet only relabels: the same seed draws the same digits and answers
    args = ["--train-size", "6", "--val-size", "2", "--min-terms", "8", "--max-terms", "8"]
    synthetic.main(["--out", str(tmp_path / "default"), *args])
    default_rows = read_jsonl(tmp_path / "default" / "train.jsonl")
    cycled_rows = read_jsonl(tmp_path / "train.jsonl")
    digits = [
        [[t[1] for t in r["prompt"][0]["content"].split()] for r in rows]
        for rows in (default_rows, cycled_rows)
    ]
    assert digits[0] == digits[1]
    assert [r["reward_model"] for r in default_rows] == [r["reward_model"] for r in cycled_rows]
    with pytest.raises(SystemExit):
        synthetic.main(["--out", str(tmp_path), "--labels", "aa"])
    assert "labels must be distinct ASCII letters" in capsys.readouterr().err
