"""Training rows: collation layout, Delethink flattening, padding and rows_per_trajectory; the token
layout between rows and trajectories; and the errors each names."""

import re

import pytest
import torch

from verl.core import core_algos
from verl.core.batch import (
    TokenLayout,
    TrainRow,
    collate_rows,
    pad_rows_to_multiple,
    rows_per_trajectory,
    trajectory_rows,
    trim_padding_columns,
)
from verl.core.trajectory import Trajectory, Turn

PAD = 0


def two_trajectories():
    # A: two chunks (2 + 1 response tokens, trace length 3); B: one chunk of 2 tokens
    a = Trajectory([Turn([5, 6], [7, 8], [-0.1, -0.2], "length"), Turn([5, 6, 7, 8], [9], [-0.3], "stop")])
    b = Trajectory([Turn([5], [10, 11], [-0.4, -0.5], "stop")])
    return [a, b]


def test_flatten_one_row_per_chunk_with_trajectory_advantage_and_trace_length():
    rows = trajectory_rows(two_trajectories(), [1.5, -2.0])
    assert [(r.trajectory_index, r.advantage, r.trace_length) for r in rows] == [
        (0, 1.5, 3),
        (0, 1.5, 3),
        (1, -2.0, 2),
    ]
    assert rows[1].prompt_ids == [5, 6, 7, 8] and rows[1].response_ids == [9]


def test_a_failed_environments_rows_are_kept_but_untrainable():
    a, b = two_trajectories()
    a.info["note"] = "any other key"  # only "error" marks a failure
    b.info["error"] = "the environment crashed"
    rows = trajectory_rows([a, b], [1.5, -2.0])
    assert [(r.trajectory_index, r.trainable) for r in rows] == [(0, True), (0, True), (1, False)]
    batch = collate_rows(rows, PAD)
    assert batch["response_mask"].tolist() == [[1, 1], [1, 0], [0, 0]]
    assert batch["advantages"].tolist() == [[1.5, 1.5], [1.5, 0.0], [0.0, 0.0]]


def test_collate_layout_left_pads_prompts_right_pads_responses():
    batch = collate_rows(trajectory_rows(two_trajectories(), [1.5, -2.0]), PAD)
    # prompt width 4, response width 2
    assert batch["input_ids"].tolist() == [[0, 0, 5, 6, 7, 8], [5, 6, 7, 8, 9, 0], [0, 0, 0, 5, 10, 11]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0], [0, 0, 0, 1, 1, 1]]
    assert batch["position_ids"].tolist() == [[0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 4], [0, 0, 0, 0, 1, 2]]
    assert batch["responses"].tolist() == [[7, 8], [9, 0], [10, 11]]
    assert batch["response_mask"].tolist() == [[1, 1], [1, 0], [1, 1]]
    assert batch["advantages"].tolist() == [[1.5, 1.5], [1.5, 0.0], [-2.0, -2.0]]
    assert batch["trace_lengths"].tolist() == [3.0, 3.0, 2.0]
    torch.testing.assert_close(
        batch["rollout_log_probs"], torch.tensor([[-0.1, -0.2], [-0.3, 0.0], [-0.4, -0.5]])
    )


def test_padding_rows_are_untrainable_and_make_the_batch_divisible():
    rows = trajectory_rows(two_trajectories(), [1.5, -2.0])
    padded = pad_rows_to_multiple(rows, 2)
    assert len(padded) == 4 and [r.trainable for r in padded] == [True, True, True, False]
    assert pad_rows_to_multiple(rows, 3) == rows
    batch = collate_rows(padded, PAD)
    assert batch["response_mask"][3].sum() == 0 and batch["advantages"][3].abs().sum() == 0
    with pytest.raises(ValueError):
        pad_rows_to_multiple([], 2)


def test_rows_per_trajectory_turns_row_mean_into_trajectory_mean():
    # per-token losses: A's tokens 1, 2 | 3 ; B's tokens 4, 6
    # trajectory token-means: A = (1+2+3)/3 = 2, B = (4+6)/2 = 5 -> mean over trajectories 3.5
    rows = pad_rows_to_multiple(trajectory_rows(two_trajectories(), [1.0, 1.0]), 2)  # 3 rows + 1 padding
    batch = collate_rows(rows, PAD)
    loss_mat = torch.tensor([[1.0, 2.0], [3.0, 0.0], [4.0, 6.0], [9.0, 9.0]])
    ratio = rows_per_trajectory(len(rows), num_trajectories=2)
    assert ratio == 2.0  # 4 rows / 2 trajectories
    row_mean = core_algos.agg_loss(
        loss_mat,
        batch["response_mask"],
        "seq-mean-token-norm-trace-length",
        trace_lengths=batch["trace_lengths"],
    )
    # rows: 3/3 + 3/3 + 10/2 + 0 (padding) = 7, over 4 rows = 1.75; times 2 = 3.5
    torch.testing.assert_close(row_mean * ratio, torch.tensor(3.5))
    with pytest.raises(ValueError):
        rows_per_trajectory(1, 2)


def test_trim_padding_columns_keeps_the_response_split():
    rows = trajectory_rows(two_trajectories(), [1.0, 1.0])
    full = collate_rows(rows, PAD)
    # row B alone: its two left-padding prompt columns go, both response columns stay
    sub = trim_padding_columns({k: v[2:] for k, v in full.items()})
    assert sub["input_ids"].tolist() == [[5, 10, 11]]
    assert sub["responses"].tolist() == [[10, 11]] and sub["position_ids"].tolist() == [[0, 1, 2]]
    # the chunk row alone: no prompt padding, and its response padding column goes
    one = trim_padding_columns({k: v[1:2] for k, v in full.items()})
    assert one["input_ids"].tolist() == [[5, 6, 7, 8, 9]] and one["responses"].tolist() == [[9]]


def row(prompt, response, trajectory_index=0):
    return TrainRow(prompt, response, [-0.5] * len(response), 1.0, len(response), trajectory_index)


def test_collate_dtypes_and_the_narrowest_response_block():
    batch = collate_rows([row([5], [6]), row([5, 6], [7])], PAD)
    assert {k: v.dtype for k, v in batch.items()} == {
        "input_ids": torch.long, "attention_mask": torch.long, "position_ids": torch.long,
        "responses": torch.long, "response_mask": torch.float32, "rollout_log_probs": torch.float32,
        "advantages": torch.float32, "trace_lengths": torch.float32, "trajectory_index": torch.long,
    }  # fmt: skip
    assert batch["responses"].shape == (2, 1)  # one-token responses: one response column
    # responses without tokens still get one (masked) column, so the split stays where it is
    empty = collate_rows([row([5, 6], [])], PAD)
    assert empty["input_ids"].tolist() == [[5, 6, PAD]] and empty["response_mask"].tolist() == [[0.0]]


@pytest.fixture
def float64_default():
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    yield
    torch.set_default_dtype(previous)


def test_collate_makes_float32_tensors_whatever_torchs_default_dtype(float64_default):
    batch = collate_rows([row([5], [6, 7])], PAD)
    floats = ("response_mask", "rollout_log_probs", "advantages", "trace_lengths")
    assert {k: batch[k].dtype for k in floats} == dict.fromkeys(floats, torch.float32)


def test_trace_lengths_below_one_are_one():
    # trace lengths 1 (one token) and 0 (no token): both 1, the divisor never 0
    batch = collate_rows([row([5], [6]), row([5], [])], PAD)
    assert batch["trace_lengths"].tolist() == [1.0, 1.0]
    assert collate_rows([row([5], [6, 7])], PAD)["trace_lengths"].tolist() == [2.0]


def test_padding_copies_the_last_row():
    rows = [row([1], [2]), row([3], [4]), row([5], [6])]
    padded = pad_rows_to_multiple(rows, 5)
    assert [(r.prompt_ids, r.trainable) for r in padded[3:]] == [([5], False), ([5], False)]


def test_rows_per_trajectory_takes_one_row_per_trajectory_and_one_trajectory():
    assert rows_per_trajectory(1, 1) == 1.0
    assert rows_per_trajectory(3, 3) == 1.0
    with pytest.raises(ValueError, match=r"^need rows >= trajectories >= 1, got 3 rows for 0 trajectories$"):
        rows_per_trajectory(3, 0)


def test_trim_padding_columns_keeps_one_response_column_when_no_row_has_a_response():
    full = collate_rows([row([2, 3], [4, 5, 6]), row([7, 8, 9], []), row([], [])], PAD)  # 3 + 3 columns
    # a prompt and no response: its prompt columns and the first response column
    prompt_only = trim_padding_columns({k: v[1:2] for k, v in full.items()})
    assert prompt_only["input_ids"].tolist() == [[7, 8, 9, PAD]] and prompt_only["responses"].tolist() == [
        [PAD]
    ]
    # nothing at all (the padding row of an empty micro-batch): the first response column alone
    nothing = trim_padding_columns({k: v[2:3] for k, v in full.items()})
    assert nothing["input_ids"].tolist() == [[PAD]] and nothing["responses"].tolist() == [[PAD]]
    assert nothing["response_mask"].tolist() == [[0.0]]


def test_token_layout_of_rows_without_tokens_and_of_one_token_each():
    layout = TokenLayout.of([row([1], [], 0)], num_trajectories=1, num_rows=2, width=1)
    assert layout.row.dtype == layout.lengths.dtype == torch.long
    assert layout.to_trajectories(torch.ones(2, 1)).tolist() == [[0.0]]  # no token: one zero column
    one_each = TokenLayout.of([row([1], [7], 0), row([1], [8], 1)], 2, 2, 3)
    values = torch.tensor([[1.0, 9.0, 9.0], [2.0, 9.0, 9.0]])
    assert one_each.to_trajectories(values).tolist() == [[1.0], [2.0]]


def test_batch_errors_name_what_is_wrong():
    with pytest.raises(ValueError, match=r"^2 trajectories but 1 advantages$"):
        trajectory_rows(two_trajectories(), [1.0])
    with pytest.raises(ValueError, match=r"^cannot collate an empty batch$"):
        collate_rows([], PAD)
    with pytest.raises(ValueError, match=r"^row 1: 2 response tokens but 1 log-probs$"):
        collate_rows([row([1], [2]), TrainRow([1], [2, 3], [-0.5], 1.0, 2, 1)], PAD)
    with pytest.raises(ValueError, match=r"^multiple must be >= 1, got 0$"):
        pad_rows_to_multiple([row([1], [2])], 0)
    with pytest.raises(ValueError, match=r"^cannot pad an empty batch$"):
        pad_rows_to_multiple([], 2)
    with pytest.raises(ValueError, match=r"^num_rows=1 is less than the 2 rows$"):
        TokenLayout.of([row([1], [2]), row([1], [3])], 1, 1, 4)
    with pytest.raises(ValueError, match=r"^row 0 has 3 response tokens but the batch is 2 wide$"):
        TokenLayout.of([row([1], [2, 3, 4])], 1, 1, 2)
    layout = TokenLayout.of([row([1], [2, 3])], 1, 1, 2)
    with pytest.raises(ValueError, match=r"^expected shape \(1, 2\), got \(1, 3\)$"):
        layout.to_trajectories(torch.zeros(1, 3))
    for wrong in (torch.zeros(1), torch.zeros(2, 2)):  # not [N, L], or another N
        with pytest.raises(
            ValueError, match=f"^{re.escape(f'expected [1, L] values, got {tuple(wrong.shape)}')}$"
        ):
            layout.to_rows(wrong)
