"""Delethink continuation examples: a reference response resumed from a chunk boundary.

A model trained only on whole traces has never seen thinking that starts from a carry-over, so it
cannot continue a Delethink chunk; these examples show it. The prompt is exactly what
DelethinkAgentLoop sends for the chunk after a cut: the question's chat prompt + the carry-over of the
reference response so far. Cuts fall where the loop cuts: after chunk_size, then every
chunk_size - keep_head - keep_tail. Both data sources (the synthetic task and files) use this module.
"""

from __future__ import annotations

from verl.core.delethink import DelethinkParams


def delethink_cuts(target_len: int, params: DelethinkParams) -> list[int]:
    """The token counts after which the Delethink loop cuts a `target_len`-token response: C, C + (C - m),
    ... A chunk that ends in the response's last token (eos) stops the loop, so no cut is at target_len.
    (Cuts past I chunks are kept: the examples teach continuing from any boundary.)"""
    return list(range(params.chunk_size, target_len, params.intermediate_budget))


def continuation_example(
    prompt: list[int], target: list[int], cut: int, params: DelethinkParams
) -> tuple[list[int], list[int]]:
    """(question prompt + carry-over of target[:cut], the tokens the loop generates next): the chunk after
    a cut, which ends at the next cut or at the response's end. Only that chunk is a target, so no
    example puts a token further from its prompt than a Delethink chunk does."""
    return prompt + params.carry_over(target[:cut]), target[cut : cut + params.intermediate_budget]
