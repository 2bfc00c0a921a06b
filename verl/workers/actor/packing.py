"""Sequence packing (`model.use_remove_padding`): a micro-batch's rows as ONE sequence, no padding.

The rows' real tokens are laid end to end in a batch of size 1, with position ids restarting at 0 at
the start of each row, and the model is called without an attention mask. Transformers (5.x) then
finds the row boundaries from the position ids (`masking_utils.find_packed_sequence_indices`: a new
row starts wherever the position does not grow by exactly 1) and gives sdpa and eager attention a
block-diagonal causal mask, so no token sees another row. With flash-attention the same call runs the
variable-length kernels (cumulative sequence lengths taken from the same position ids), which is where
packing saves the compute and memory that padding wastes; that GPU path is not exercised here.
RoPE also reads the restarted position ids, so every row is computed exactly as if it were alone
(tests/test_packing.py checks log-probs and gradients against the padded path).
"""

from __future__ import annotations

import torch


def packed_response_logits(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Logits predicting each response token, [B, T, V] like the padded path (rows from
    `collate_rows`: left-padded prompt | right-padded response), in the model's dtype. Positions past a
    row's last response token hold logits of unrelated tokens; the response mask excludes them as it
    does padding. The LM head runs on those B x T positions only (`logits_to_keep`), not on every
    packed token."""
    mask = batch["attention_mask"].bool()
    t = batch["responses"].shape[1]
    prompt_lengths = mask[:, : mask.shape[1] - t].sum(-1)
    empty = (prompt_lengths == 0).nonzero().flatten().tolist()
    if empty:
        raise ValueError(f"rows {empty} have no prompt token: nothing predicts their first response token")
    lengths = mask.sum(-1)
    positions = mask.long().cumsum(-1) - 1  # 0, 1, ... along each row's real tokens
    row_starts = lengths.cumsum(0) - lengths
    # response token j of row i is predicted from the packed position just before it
    index = (row_starts + prompt_lengths - 1)[:, None] + torch.arange(t, device=mask.device)[None]
    tokens = batch["input_ids"][mask]
    logits = model(
        input_ids=tokens[None],
        position_ids=positions[mask][None],
        attention_mask=None,
        use_cache=False,
        logits_to_keep=index.clamp(max=tokens.shape[0] - 1).flatten(),
    ).logits
    return logits.view(*index.shape, -1)
