"""From (prompt ids, target ids) pairs to the forwards of one optimizer step, and their loss.

A batch is cut into micro-batches (one forward each) either by count, sorted by length so each pads
only to its own longest row, or by a token budget (`micro_batching.partition_by_token_budget`). With
several ranks each takes its token-balanced share of the batch first, and all run the same number of
forwards (FSDP2 gathers parameters in each): a rank with fewer pieces runs zero-weight passes.
The loss of every piece is weighted by its share of the batch's target tokens over all ranks, so the
gradient is that of one forward over the whole batch, however it is cut.
"""

from __future__ import annotations

import numpy as np
import torch
from transformers import PreTrainedModel

from verl.trainer.sft.parallel import SINGLE, Ranks, all_max, all_sum
from verl.workers.micro_batching import (
    balance_rows_across_ranks,
    partition_by_token_budget,
    split_to_count,
)

IGNORE_INDEX = -100  # label of a token that carries no loss (prompt and padding)

Pair = tuple[list[int], list[int]]  # (prompt ids, target ids)
Batch = dict[str, torch.Tensor]


def collate(examples: list[Pair], pad_id: int) -> Batch:
    """Right-padded input ids, attention mask and labels (IGNORE_INDEX on prompt and padding)."""
    width = max(len(p) + len(t) for p, t in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX)
    for row, (prompt, target) in enumerate(examples):
        ids = prompt + target
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        labels[row, len(prompt) : len(ids)] = torch.tensor(target)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def collate_packed(examples: list[Pair]) -> Batch:
    """The rows end to end as one unpadded sequence with position ids restarting at 0 per row and no
    attention mask: transformers finds the rows from the position ids and keeps them apart, as in the
    actor's packing (workers/actor/packing.py). Every row starts with its prompt (IGNORE_INDEX), so no
    row's first token is a target predicted from the row before it."""
    ids = [torch.tensor(p + t) for p, t in examples]
    labels = [torch.tensor([IGNORE_INDEX] * len(p) + t) for p, t in examples]
    positions = [torch.arange(len(x)) for x in ids]
    return {
        "input_ids": torch.cat(ids)[None],
        "position_ids": torch.cat(positions)[None],
        "labels": torch.cat(labels)[None],
    }


def length_sorted_split(token_counts: list[int], num_micro_batches: int) -> list[list[int]]:
    """Row indices sorted by length, cut into up to `num_micro_batches` pieces of near-equal row counts."""
    ordered = sorted(range(len(token_counts)), key=lambda i: token_counts[i])
    bounds = np.linspace(0, len(ordered), min(num_micro_batches, len(ordered)) + 1).round().astype(int)
    return [ordered[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]


def length_sorted_micro_batches(examples: list[Pair], num_micro_batches: int, pad_id: int) -> list[Batch]:
    """The examples sorted by length and cut into up to `num_micro_batches` collated pieces of near-equal
    row counts, so that each piece pads only to its own longest example."""
    groups = length_sorted_split([len(p) + len(t) for p, t in examples], num_micro_batches)
    return [collate([examples[i] for i in g], pad_id) for g in groups]


def local_micro_batches(
    examples: list[Pair],
    ranks: Ranks,
    pad_id: int,
    num_micro_batches: int,
    max_tokens: int | None = None,
    packed: bool = False,
) -> list[Batch | None]:
    """This rank's forwards for one batch (every rank gets the whole batch and takes its share):
    `num_micro_batches` length-sorted pieces, or as few as fit `max_tokens` tokens each; None marks a
    zero-weight pass that keeps this rank in step with ranks that have more pieces."""
    counts = [len(p) + len(t) for p, t in examples]
    mine = (
        balance_rows_across_ranks(counts, ranks.world_size)[ranks.rank]
        if ranks.sharded
        else range(len(counts))
    )
    local = [examples[i] for i in mine]
    local_counts = [counts[i] for i in mine]
    if max_tokens is None:
        groups = length_sorted_split(local_counts, num_micro_batches)
    else:
        groups = partition_by_token_budget(local_counts, max_tokens)
    if ranks.sharded:
        groups = split_to_count(local_counts, groups, all_max(len(groups), ranks))
    pieces: list[Batch | None] = []
    for group in groups:
        rows = [local[i] for i in group]
        batch = (collate_packed(rows) if packed else collate(rows, pad_id)) if rows else None
        pieces.append(None if batch is None else {k: v.to(ranks.device) for k, v in batch.items()})
    return pieces


def sft_loss(model: PreTrainedModel, batch: Batch) -> torch.Tensor:
    """Mean next-token cross-entropy over the target tokens of the batch. No KV cache: with one,
    transformers does not look for packed rows in the position ids, and rows would see each other."""
    return model(**batch, use_cache=False).loss


def num_targets(batch: Batch) -> int:
    """Tokens the loss is taken over (the causal LM predicts labels[1:] from the tokens before them)."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def backward_mean_loss(
    model: PreTrainedModel, micro_batches: list[Batch | None], ranks: Ranks = SINGLE
) -> float:
    """Backpropagate the mean loss over every target token of all micro-batches (of all ranks), one
    forward each; return that mean. Each piece's mean is weighted by its share of the target tokens, so
    the gradient is the one of a single forward over the whole batch (summed over ranks by FSDP)."""
    present = [b for b in micro_batches if b is not None]
    (total,) = all_sum([sum(num_targets(b) for b in present)], ranks)
    mean = 0.0
    for batch in micro_batches:
        if batch is None:  # same collectives as a real piece, no gradient
            (sft_loss(model, present[0]) * 0.0).backward()
            continue
        loss = sft_loss(model, batch) * (num_targets(batch) / total)
        loss.backward()
        mean += loss.item()
    (mean,) = all_sum([mean], ranks)
    return mean


@torch.no_grad()
def mean_loss(model: PreTrainedModel, micro_batches: list[Batch | None], ranks: Ranks) -> tuple[float, int]:
    """(mean loss over every target token of the pieces of all ranks, that token count), no gradient."""
    present = [b for b in micro_batches if b is not None]
    weighted, tokens = 0.0, 0
    for batch in micro_batches:
        loss = sft_loss(model, batch if batch is not None else present[0])
        if batch is not None:
            weighted += loss.item() * num_targets(batch)
            tokens += num_targets(batch)
    weighted, tokens = all_sum([weighted, tokens], ranks)
    return weighted / max(tokens, 1), int(tokens)
