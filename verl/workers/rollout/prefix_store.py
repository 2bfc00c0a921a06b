"""Keys and values of finished rows, found again by the longest common prefix of a new prompt.

A token's keys and values depend only on the tokens up to it (causal attention, positions from 0),
so a prompt that starts with the same tokens as a finished row can copy that row's keys and values
for the common part and prefill only the rest. Delethink's chunk k+1 starts with the question and
the head of the thinking, as chunk k did; a gym turn starts with the whole previous turn. Entries
live in a radix tree of their tokens; when the stored bytes pass the budget the store starts over,
which keeps it simple and bounded (the engine also empties it whenever it goes idle, so one rollout
step never depends on what an earlier one left behind).

The tree is path-compressed: an edge holds every token up to the next branch, so adding an entry
makes at most two nodes. A node per token (a plain trie) made one Python object per stored token:
64 finished rows of 319 tokens took 50-190 ms to add, most of it the garbage collector walking the
new objects, inside the decode step that retired them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class _Node:
    tokens: list[int]  # the edge from the parent: the tokens after the parent's, up to this node
    entry: int  # the latest entry whose tokens run through this node's whole edge
    children: dict[int, _Node] = field(default_factory=dict)  # by the first token of their edge


@dataclass(frozen=True)
class PrefixMatch:
    keys: list[torch.Tensor]  # per layer (kv heads, columns, head dim); columns [0, length) are the match
    values: list[torch.Tensor]
    length: int


def _common_length(edge: list[int], tokens: list[int], start: int) -> int:
    """How many leading tokens of `edge` equal tokens[start:]."""
    rest = tokens[start : start + len(edge)]
    if rest == edge[: len(rest)]:  # the whole overlap agrees: one comparison in C
        return len(rest)
    return next(i for i, (a, b) in enumerate(zip(edge, rest, strict=False)) if a != b)


class PrefixStore:
    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
        self.clear()

    def clear(self) -> None:
        self._root = _Node([], -1)
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
        node, depth = self._root, 0
        while depth < len(tokens):
            child = node.children.get(tokens[depth])
            if child is None:
                node.children[tokens[depth]] = _Node(tokens[depth:], entry)
                return
            common = _common_length(child.tokens, tokens, depth)
            if common < len(child.tokens):
                # split the edge where the new tokens leave it (or end): the upper half becomes a node
                upper = _Node(child.tokens[:common], child.entry, {child.tokens[common]: child})
                child.tokens = child.tokens[common:]
                node.children[tokens[depth]] = child = upper
            child.entry = entry
            node, depth = child, depth + common

    def longest(self, tokens: list[int]) -> PrefixMatch | None:
        """The stored keys and values of the longest stored prefix of `tokens`, or None."""
        node, length = self._root, 0
        while length < len(tokens):
            child = node.children.get(tokens[length])
            if child is None:
                break
            common = _common_length(child.tokens, tokens, length)
            node, length = child, length + common
            if common < len(child.tokens):
                break
        if length == 0:
            return None
        keys, values = self._entries[node.entry]
        return PrefixMatch(keys, values, length)
