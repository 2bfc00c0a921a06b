"""Training rows: collation layout, Delethink flattening, padding and rows_per_trajectory."""

import pytest
import torch

from verl.core import core_algos
from verl.core.batch import (
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
