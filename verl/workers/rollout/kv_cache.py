"""A preallocated KV cache for the HF rollout engine's running batch.

Per layer, keys and values live in buffers of shape (row capacity, kv heads, column capacity, head
dim). The request in slot r owns row r; its tokens sit in columns 0..length-1, so a token's column
is its position, whatever the other rows hold. A decode step writes one column per row in place
(where `DynamicCache` copies the whole cache with `torch.cat` every step) and attends over a view of
the first max-length + 1 columns, masking each row past its own length. Requests join by a prefill
that copies their prompt's keys and values into the next free slots, and leave by moving later
rows into the freed slots, so the running rows are always slots 0..n-1 and only moved rows are
copied. Capacity doubles when the rows outgrow it (a handful of copies per batch), so memory
follows the longest row rather than the largest budget a request asked for.

The model calls `update` once per layer per forward; `begin_prefill` / `begin_decode` say what
kind of forward comes next.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import Cache


@dataclass(frozen=True)
class _Prefill:
    prompt_lens: torch.Tensor  # (new rows,) tokens of each left-padded prompt


@dataclass(frozen=True)
class _Decode:
    rows: torch.Tensor  # arange(running rows)
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

    def begin_prefill(self, prompt_lens: torch.Tensor) -> None:
        """The next forward prefills len(prompt_lens) left-padded prompts (all ending in the last
        column): store row i's keys and values in slot num_rows + i, then `end_prefill`."""
        self._next = _Prefill(prompt_lens.to(self.lengths.device))

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
        self._next = _Decode(torch.arange(self.num_rows, device=self.lengths.device), width)
        columns = torch.arange(width, device=self.lengths.device)
        return (columns <= self.lengths.unsqueeze(-1))[:, None, None, :]

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
            self._reserve(layer_idx, self.num_rows + len(step.prompt_lens), key_states.shape[2])
            for buffer, states in (
                (self.keys[layer_idx], key_states),
                (self.values[layer_idx], value_states),
            ):
                self._store_prompts(buffer, states, step.prompt_lens)
            return key_states, value_states  # the prompts attend to themselves, not to other rows
        if isinstance(step, _Decode):
            keys, values = self.keys[layer_idx], self.values[layer_idx]
            keys[step.rows, :, self.lengths] = key_states[:, :, 0]
            values[step.rows, :, self.lengths] = value_states[:, :, 0]
            return keys[: self.num_rows, :, : step.width], values[: self.num_rows, :, : step.width]
        raise RuntimeError("SlotKVCache.update called outside begin_prefill / begin_decode")

    def _store_prompts(self, buffer: torch.Tensor, states: torch.Tensor, prompt_lens: torch.Tensor) -> None:
        # Left padding: prompt i is the last prompt_lens[i] columns of its row; it goes to columns
        # 0..len-1 of its slot. Its keys were rotated at positions 0..len-1, so they are exactly what an
        # unpadded forward would cache.
        width = states.shape[2]
        for i, length in enumerate(prompt_lens.tolist()):
            buffer[self.num_rows + i, :, :length] = states[i, :, width - length :]

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
                buffer[target, :, :used] = buffer[source, :, :used]
        self.lengths = self.lengths[torch.tensor(order, dtype=torch.long)]
        return order
