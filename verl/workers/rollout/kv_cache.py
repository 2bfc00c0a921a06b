"""A preallocated KV cache for the HF rollout engine's running batch.

Per layer, keys and values live in buffers of shape (row capacity, kv heads, column capacity, head
dim). The request in slot r owns row r; its tokens sit in columns 0..length-1, so a token's column
is its position, whatever the other rows hold. A decode step writes one column per row in place
(where `DynamicCache` copies the whole cache with `torch.cat` every step) and attends over a view of
the first max-length + 1 columns, masking each row past its own length. Requests join by a prefill
that writes their prompt's keys and values into the next free slots (the part of a prompt found in
the engine's prefix store is copied from there, and only the rest goes through the forward; a
prompt identical to another joining one is copied from its row), and leave by moving later
rows into the freed slots, so the running rows are always slots 0..n-1 and only moved rows are
copied. Capacity doubles when the rows outgrow it (a handful of copies per batch), so memory
follows the longest row rather than the largest budget a request asked for.

The model calls `update` once per layer per forward; `begin_prefill` / `begin_decode` say what
kind of forward comes next. The buffers live on the model's device (its keys' device); the row
lengths stay on the host, where the cache's sizes are decided, and the indices built from them move
to the buffers' device before they index it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache

from verl.workers.rollout.prefix_store import PrefixMatch


@dataclass(frozen=True)
class _Prefill:
    prompt_lens: torch.Tensor  # (new rows,) whole prompt lengths
    prefixes: list[PrefixMatch | None]  # per new row: its first columns, copied from the prefix store


@dataclass(frozen=True)
class _Decode:
    rows: torch.Tensor  # arange(running rows), on the buffers' device
    columns: torch.Tensor  # each row's column for this step's token (its length), on the buffers' device
    width: int  # columns attended: the longest row plus the token written this step


def _doubled(capacity: int, needed: int, cap: int) -> int:
    """The capacity that holds `needed`: unchanged if it does, else doubled (at least `needed`, at
    most `cap`)."""
    return capacity if needed <= capacity else min(cap, max(needed, 2 * capacity))


class SlotKVCache(Cache):
    def __init__(self, max_rows: int, max_columns: int):
        super().__init__(layers=[])
        self.max_rows, self.max_columns = max_rows, max_columns
        self.keys: list[torch.Tensor] = []
        self.values: list[torch.Tensor] = []
        self.lengths = torch.zeros(0, dtype=torch.long)  # tokens cached per running row
        self._next: _Prefill | _Decode | None = None

    @property
    def num_rows(self) -> int:
        return len(self.lengths)

    def clear(self) -> None:
        """Drop every row and free the buffers (the engine is idle)."""
        self.keys, self.values = [], []
        self.lengths = torch.zeros(0, dtype=torch.long)
        self._next = None

    def begin_prefill(self, prompt_lens: torch.Tensor, prefixes: list[PrefixMatch | None]) -> None:
        """The next forward prefills len(prompt_lens) prompts: new row i's prompt has prompt_lens[i]
        tokens, of which the first prefixes[i].length (0 when None) come from the prefix store and the
        rest are the forward's left-padded row i (ending in the last column). Row i goes to slot
        num_rows + i, at columns 0..prompt_lens[i]-1; the forward attends over those slots' columns,
        so its mask is in slot columns (`prefill_inputs`). Then `end_prefill`."""
        self._next = _Prefill(prompt_lens.to(self.lengths.device), prefixes)

    def end_prefill(self) -> None:
        assert isinstance(self._next, _Prefill)
        self.lengths = torch.cat([self.lengths, self._next.prompt_lens])
        self._next = None

    def begin_decode(self) -> torch.Tensor:
        """The next forward feeds one token per running row, at position `lengths`; return its
        attention mask (rows, 1, 1, width): True where a row may attend."""
        width = int(self.lengths.max()) + 1
        for layer_idx in range(len(self.keys)):
            self._reserve(layer_idx, self.num_rows, width)
        device = self.keys[0].device if self.keys else self.lengths.device  # decodes follow a prefill
        lengths = self.lengths.to(device)
        self._next = _Decode(torch.arange(self.num_rows, device=device), lengths, width)
        columns = torch.arange(width, device=device)
        return (columns <= lengths.unsqueeze(-1))[:, None, None, :]

    def end_decode(self) -> None:
        assert isinstance(self._next, _Decode)
        self.lengths = self.lengths + 1
        self._next = None

    def update(
        self, key_states: torch.Tensor, value_states: torch.Tensor, layer_idx: int, *args, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor]:
        step = self._next
        if isinstance(step, _Prefill):
            if layer_idx == len(self.keys):  # the first prefill meets the layers in order
                empty = key_states.new_zeros(0, key_states.shape[1], 0, key_states.shape[3])
                self.keys.append(empty)
                self.values.append(empty)
            new_rows = slice(self.num_rows, self.num_rows + len(step.prompt_lens))
            width = int(step.prompt_lens.max())
            self._reserve(layer_idx, new_rows.stop, width)
            keys, values = self.keys[layer_idx], self.values[layer_idx]
            self._store_prompts(keys, key_states, step, layer_idx, "keys")
            self._store_prompts(values, value_states, step, layer_idx, "values")
            return keys[new_rows, :, :width], values[new_rows, :, :width]
        if isinstance(step, _Decode):
            keys, values = self.keys[layer_idx], self.values[layer_idx]
            keys[step.rows, :, step.columns] = key_states[:, :, 0]
            values[step.rows, :, step.columns] = value_states[:, :, 0]
            return keys[: self.num_rows, :, : step.width], values[: self.num_rows, :, : step.width]
        raise RuntimeError("SlotKVCache.update called outside begin_prefill / begin_decode")

    def _store_prompts(
        self, buffer: torch.Tensor, states: torch.Tensor, step: _Prefill, layer_idx: int, kind: str
    ) -> None:
        # Row i's stored prefix goes to columns 0..p-1 of its slot and the forward's row i (left padded:
        # its tokens are the last len - p columns) to columns p..len-1. The forward rotated its keys at
        # positions p..len-1, so the slot holds exactly what an unpadded forward of the prompt would.
        width = states.shape[2]
        for i, (length, prefix) in enumerate(zip(step.prompt_lens.tolist(), step.prefixes, strict=True)):
            cached = 0 if prefix is None else prefix.length
            if cached:
                stored = (prefix.keys if kind == "keys" else prefix.values)[layer_idx]
                buffer[self.num_rows + i, :, :cached] = stored[:, :cached]
            buffer[self.num_rows + i, :, cached:length] = states[i, :, width - (length - cached) :]

    def copy_rows(self, sources: list[int]) -> None:
        """Append one new row per entry of `sources`, holding a copy of that running row's cache."""
        source = torch.tensor(sources, dtype=torch.long)
        used = int(self.lengths[source].max())
        target = slice(self.num_rows, self.num_rows + len(sources))
        for layer_idx in range(len(self.keys)):
            self._reserve(layer_idx, target.stop, used)
        for buffer in self.keys + self.values:
            buffer[target, :, :used] = buffer[source.to(buffer.device), :, :used]
        self.lengths = torch.cat([self.lengths, self.lengths[source]])

    def rows(self, slots: list[int]) -> list[tuple[list[torch.Tensor], list[torch.Tensor]]]:
        """Per slot in `slots`: a copy of its keys and values per layer, (kv heads, its length, head
        dim). One gather per layer copies them all; each slot's tensors are views into it."""
        index = torch.tensor(slots, dtype=torch.long)
        lengths = self.lengths[index].tolist()
        width = max(lengths)
        if self.keys:
            index = index.to(self.keys[0].device)
        keys = [k[index, :, :width] for k in self.keys]  # advanced indexing copies
        values = [v[index, :, :width] for v in self.values]
        return [
            ([k[i, :, :length] for k in keys], [v[i, :, :length] for v in values])
            for i, length in enumerate(lengths)
        ]

    def _reserve(self, layer_idx: int, rows: int, columns: int) -> None:
        """Make layer `layer_idx`'s buffers hold `rows` rows of `columns` columns. Growing doubles the
        capacity (up to the caps), so growing rows copy the cache O(log length) times."""
        capacity_rows, _, capacity_columns, _ = self.keys[layer_idx].shape
        if rows <= capacity_rows and columns <= capacity_columns:
            return
        rows = _doubled(capacity_rows, rows, self.max_rows)
        columns = _doubled(capacity_columns, columns, self.max_columns)
        self.keys[layer_idx] = self._grown(self.keys[layer_idx], rows, columns)
        self.values[layer_idx] = self._grown(self.values[layer_idx], rows, columns)

    def _grown(self, buffer: torch.Tensor, rows: int, columns: int) -> torch.Tensor:
        # Zeros, not empty: masked columns still enter attention as score -inf times a value, and
        # uninitialised memory could hold NaN, which survives a zero weight.
        grown = buffer.new_zeros(rows, buffer.shape[1], columns, buffer.shape[3])
        used = int(self.lengths.max()) if self.num_rows else 0
        grown[: self.num_rows, :, :used] = buffer[: self.num_rows, :, :used]
        return grown

    def keep_rows(self, survivors: list[int]) -> list[int]:
        """Keep the running rows in `survivors` (ascending slots) and drop the rest. Return the new
        order: slot i now holds the row that was in slot order[i]."""
        kept = len(survivors)
        holes = sorted(set(range(kept)) - set(survivors))
        movers = [slot for slot in survivors if slot >= kept]  # as many as there are holes
        order = list(range(kept))
        for hole, mover in zip(holes, movers, strict=True):
            order[hole] = mover
        if holes:
            source, target = torch.tensor(movers), torch.tensor(holes)
            used = int(self.lengths[source].max())
            for buffer in self.keys + self.values:
                buffer[target.to(buffer.device), :, :used] = buffer[source.to(buffer.device), :, :used]
        self.lengths = self.lengths[torch.tensor(order, dtype=torch.long)]
        return order
