"""Keys and values of finished rows, found again by the longest common prefix of a new prompt.

A token's keys and values depend only on the tokens up to it (causal attention, positions from 0),
so a prompt that starts with the same tokens as a finished row can copy that row's keys and values
for the common part and prefill only the rest. Delethink's chunk k+1 starts with the question and
the head of the thinking, as chunk k did; a gym turn starts with the whole previous turn. Entries
live in a token trie; when the stored bytes pass the budget the store starts over, which keeps it
simple and bounded (the engine also empties it whenever it goes idle, so one rollout step never
depends on what an earlier one left behind).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class _Node:
    children: dict[int, _Node] = field(default_factory=dict)
    entry: int = -1  # the latest entry whose tokens pass through this node


@dataclass(frozen=True)
class PrefixMatch:
    keys: list[torch.Tensor]  # per layer (kv heads, columns, head dim); columns [0, length) are the match
    values: list[torch.Tensor]
    length: int


class PrefixStore:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.clear()

    def clear(self) -> None:
        self._root = _Node()
        self._entries: list[tuple[list[torch.Tensor], list[torch.Tensor]]] = []
        self.num_bytes = 0

    def add(self, tokens: list[int], keys: list[torch.Tensor], values: list[torch.Tensor]) -> None:
        """Store the keys and values (per layer, (kv heads, len(tokens), head dim), owned by the store)
        of `tokens`."""
        size = sum(t.numel() * t.element_size() for t in keys + values)
        if size > self.max_bytes:
            return
        if self.num_bytes + size > self.max_bytes:
            self.clear()
        entry = len(self._entries)
        self._entries.append((keys, values))
        self.num_bytes += size
        node = self._root
        for token in tokens:
            node = node.children.setdefault(token, _Node())
            node.entry = entry

    def longest(self, tokens: list[int]) -> PrefixMatch | None:
        """The stored keys and values of the longest stored prefix of `tokens`, or None."""
        node, length = self._root, 0
        for token in tokens:
            child = node.children.get(token)
            if child is None:
                break
            node, length = child, length + 1
        if length == 0:
            return None
        keys, values = self._entries[node.entry]
        return PrefixMatch(keys, values, length)
