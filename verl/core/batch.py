"""From trajectories to the padded tensors the actor trains on.

One `TrainRow` per trainable turn: the exact prompt ids the engine saw and the exact tokens it sampled
(token in, token out), the trajectory's advantage, and the trajectory's trace length: its trained
tokens, all its chunks' together (the denominator of the trace-length-normalised loss).

The number of rows varies from step to step (Delethink: one row per chunk; any environment: after the
no-EOS filter or dynamic sampling), so it is padded with untrainable rows to a multiple of the number
of mini-batches, and the trace-length loss divides by the trajectories, `rows / rows per trajectory`
(`rows_per_trajectory`), so that every trajectory weighs the same, whatever its chunk count.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from verl.core.trajectory import Trajectory


@dataclass
class TrainRow:
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    advantage: float
    # the trajectory's trained tokens (its trainable turns' responses), the trace-length loss's normaliser;
    # its `thinking_tokens` unless some turns are context only (gym train_on=last)
    trace_length: int
    trajectory_index: int
    trainable: bool = True  # False for rows added only to make the batch divisible


def trajectory_rows(trajectories: Sequence[Trajectory], advantages: Sequence[float]) -> list[TrainRow]:
    """One row per trainable turn; every turn of a trajectory carries that trajectory's advantage, and its
    trace length counts the trainable turns' tokens only (the tokens the loss is normalised over).

    A trajectory whose env failed (`info["error"]`, gym loop) keeps its rows, so batch shapes do not
    depend on failures, but they are untrainable: a broken episode's reward says nothing about the policy.
    """
    if len(trajectories) != len(advantages):
        raise ValueError(f"{len(trajectories)} trajectories but {len(advantages)} advantages")
    rows = []
    for i, (traj, adv) in enumerate(zip(trajectories, advantages, strict=True)):
        trained = [turn for turn in traj.turns if turn.trainable]
        trace_length = sum(len(turn.response_ids) for turn in trained)
        ok = "error" not in traj.info
        rows += [
            TrainRow(t.prompt_ids, t.response_ids, t.rollout_log_probs, float(adv), trace_length, i, ok)
            for t in trained
        ]
    return rows


def pad_rows_to_multiple(rows: Sequence[TrainRow], multiple: int) -> list[TrainRow]:
    """Append copies of the last row, marked untrainable, until len(rows) is a multiple of `multiple`."""
    if multiple < 1:
        raise ValueError(f"multiple must be >= 1, got {multiple}")
    if not rows:
        raise ValueError("cannot pad an empty batch")
    missing = -len(rows) % multiple
    return list(rows) + [replace(rows[-1], trainable=False) for _ in range(missing)]


def rows_per_trajectory(num_rows: int, num_trajectories: int) -> float:
    """Rows per trajectory of a step's batch (padding rows included): what turns a mean over rows
    into a mean over trajectories.

    With trace-length normalisation each trajectory's rows sum to that trajectory's token-mean loss;
    that loss mode (`names.TRAJECTORY_MEAN_MODE`) divides a mini-batch's row terms by its rows
    over this ratio, its share of the trajectories, so the batch loss is the mean over trajectories.
    The actor takes it for that mode alone; no other mode and not the critic.
    """
    if num_trajectories < 1 or num_rows < num_trajectories:
        raise ValueError(
            f"need rows >= trajectories >= 1, got {num_rows} rows for {num_trajectories} trajectories"
        )
    return num_rows / num_trajectories


@dataclass(frozen=True)
class TokenLayout:
    """Where each trajectory's response tokens sit in the training rows.

    A trajectory's tokens are the response tokens of its rows, concatenated in row order (Delethink:
    its chunks' thinking, in order; each chunk row has a prompt of its own). Token k of the layout is
    row `row[k]`, response column `column[k]`, and position `position[k]` of trajectory
    `trajectory[k]`. Per-token values computed per trajectory ([N, L], e.g. token-level advantages)
    go onto the rows with `to_rows`; row tensors ([R, T], e.g. log-probs) come back with
    `to_trajectories`. Rows after the first `len(rows)` are padding and get zeros.
    """

    row: torch.Tensor
    column: torch.Tensor
    trajectory: torch.Tensor
    position: torch.Tensor
    num_rows: int
    width: int
    lengths: torch.Tensor  # [N] tokens of each trajectory

    @classmethod
    def of(cls, rows: Sequence[TrainRow], num_trajectories: int, num_rows: int, width: int) -> TokenLayout:
        """The layout of `rows` (unpadded, in training order) inside a [num_rows, width] response block."""
        if num_rows < len(rows):
            raise ValueError(f"num_rows={num_rows} is less than the {len(rows)} rows")
        offsets = [0] * num_trajectories
        row, column, trajectory, position = [], [], [], []
        for r, train_row in enumerate(rows):
            n, i = len(train_row.response_ids), train_row.trajectory_index
            if n > width:
                raise ValueError(f"row {r} has {n} response tokens but the batch is {width} wide")
            row += [r] * n
            column += range(n)
            trajectory += [i] * n
            position += range(offsets[i], offsets[i] + n)
            offsets[i] += n
        as_long = functools.partial(torch.tensor, dtype=torch.long)
        return cls(
            as_long(row), as_long(column), as_long(trajectory), as_long(position), num_rows, width,
            as_long(offsets),
        )  # fmt: skip

    def to_trajectories(self, values: torch.Tensor) -> torch.Tensor:
        """[num_rows, width] -> [N, max trajectory length] (0 past a trajectory's end)."""
        if values.shape != (self.num_rows, self.width):
            raise ValueError(f"expected shape {(self.num_rows, self.width)}, got {tuple(values.shape)}")
        length = max([1, *self.lengths.tolist()])
        out = values.new_zeros((self.lengths.shape[0], length))
        out[self.trajectory, self.position] = values[self.row, self.column]
        return out

    def to_rows(self, values: torch.Tensor) -> torch.Tensor:
        """[N, >= max trajectory length] -> [num_rows, width] (0 past a row's response, 0 on padding)."""
        if values.dim() != 2 or values.shape[0] != self.lengths.shape[0]:
            raise ValueError(f"expected [{self.lengths.shape[0]}, L] values, got {tuple(values.shape)}")
        out = values.new_zeros((self.num_rows, self.width))
        out[self.row, self.column] = values[self.trajectory, self.position]
        return out


def collate_rows(rows: Sequence[TrainRow], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Left-pad prompts and right-pad responses, so every response starts at the same column.

    Column layout: [prompt (left-padded) | response (right-padded)]; `responses.shape[1]` tells where
    the split is.
    """
    if not rows:
        raise ValueError("cannot collate an empty batch")
    n = len(rows)
    p = max(len(r.prompt_ids) for r in rows)
    t = max(1, max(len(r.response_ids) for r in rows))
    input_ids = torch.full((n, p + t), pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros((n, p + t), dtype=torch.long)
    response_mask = torch.zeros((n, t), dtype=torch.float32)
    rollout_log_probs = torch.zeros((n, t), dtype=torch.float32)
    for i, row in enumerate(rows):
        if len(row.response_ids) != len(row.rollout_log_probs):
            raise ValueError(
                f"row {i}: {len(row.response_ids)} response tokens but {len(row.rollout_log_probs)} log-probs"
            )
        lp, lr = len(row.prompt_ids), len(row.response_ids)
        input_ids[i, p - lp : p] = torch.tensor(row.prompt_ids, dtype=torch.long)
        input_ids[i, p : p + lr] = torch.tensor(row.response_ids, dtype=torch.long)
        attention_mask[i, p - lp : p + lr] = 1
        rollout_log_probs[i, :lr] = torch.tensor(row.rollout_log_probs, dtype=torch.float32)
        if row.trainable:
            response_mask[i, :lr] = 1.0
    advantages = torch.tensor([r.advantage for r in rows], dtype=torch.float32)[:, None] * response_mask
    return {
        "input_ids": input_ids,
        "attention_mask": attention_mask,
        "position_ids": (attention_mask.cumsum(-1) - 1).clamp(min=0),
        "responses": input_ids[:, p:].clone(),
        "response_mask": response_mask,
        "rollout_log_probs": rollout_log_probs,
        "advantages": advantages,
        "trace_lengths": torch.tensor([max(r.trace_length, 1) for r in rows], dtype=torch.float32),
        "trajectory_index": torch.tensor([r.trajectory_index for r in rows], dtype=torch.long),
    }


def select_rows(batch: dict[str, torch.Tensor], index: torch.Tensor | slice) -> dict[str, torch.Tensor]:
    return {k: v[index] for k, v in batch.items()}


def trim_padding_columns(batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Drop columns that are padding in every row (micro-batches are often much shorter than the batch)."""
    mask = batch["attention_mask"]
    used = mask.any(dim=0).nonzero().flatten()
    width = mask.shape[1]
    t = batch["responses"].shape[1]
    start = min(int(used[0]), width - t) if len(used) else width - t
    end = max(int(used[-1]) + 1, width - t + 1) if len(used) else width - t + 1
    resp_end = end - (width - t)
    out = {}
    for k, v in batch.items():
        if v.dim() == 2 and v.shape[1] == width:
            out[k] = v[:, start:end]
        elif v.dim() == 2 and v.shape[1] == t:
            out[k] = v[:, :resp_end]
        else:
            out[k] = v
    return out
