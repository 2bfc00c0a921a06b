"""Delethink's parameters: one object for training, evaluation, SFT and the gym context manager.

Delethink thinks in chunks. The first chunk may write C tokens; at every boundary the context is reset
to the question plus a carry-over of the first keep_head and last keep_tail thinking tokens
(m = keep_head + keep_tail), and the next chunk may write `intermediate_max_new_tokens` more (C - m
unless set, so no chunk's context holds more than question + C). After I chunks the trace stops, so
a trace holds at most C + (I-1)(C-m) thinking tokens.

Every config that sets these values uses the field names below (training: `algorithm.delethink.*`,
evaluation: `delethink.*`, SFT: `task.continuation.*`, the context manager: its ctx_config keys) and
builds this object from them, so the rules and the derived numbers exist once.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cached_property

from verl.core.trimmers import TRIMMERS, get_trimmer


class DelethinkParamsError(ValueError):
    """Values that cannot form DelethinkParams; `problems` has one `field=value: rule` line each."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


# The smallest value each integer field may take, and why (empty: no reason needed).
_INT_MINIMA = {
    "chunk_size": (1, ""),
    "keep_head": (0, ""),
    "keep_tail": (1, " (carry over the latest thinking)"),
    "max_chunks": (1, ""),
}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class DelethinkParams:
    """Defaults are the paper's 24K setting (C = 8K, m = C/2, I = 5), as in policy_iteration.yaml."""

    chunk_size: int = 8192  # C: the first chunk's budget (with later chunks of C - m: the most a chunk holds)
    keep_head: int = 100  # carry-over: the first keep_head thinking tokens of the whole trace
    keep_tail: int = 3996  # carry-over: the last keep_tail thinking tokens (>= 1)
    intermediate_max_new_tokens: int | None = None  # new tokens per chunk after the first; None: C - m
    max_chunks: int = 5  # I: the most chunks per trace
    trimmer: str = "progressive"  # how the carry-over is cut (core.trimmers.TRIMMERS)

    def __post_init__(self) -> None:
        problems = self._problems()
        if problems:
            raise DelethinkParamsError(problems)

    def _problems(self) -> list[str]:
        problems = []
        for name, (low, why) in _INT_MINIMA.items():
            value = getattr(self, name)
            if not _is_int(value):
                problems.append(f"{name}={value!r}: must be an integer")
            elif value < low:
                problems.append(f"{name}={value!r}: must be >= {low}{why}")
        if not problems:  # the rules between fields need every integer to be one
            c, head, tail = self.chunk_size, self.keep_head, self.keep_tail
            if head + tail >= c:
                problems.append(
                    f"keep_tail={tail}: keep_head + keep_tail = {head} + {tail} must be < chunk_size={c} "
                    "(the chunk size C): the carry-over must leave room to think"
                )
            later = self.intermediate_max_new_tokens
            if later is not None and not (_is_int(later) and 1 <= later <= c):
                problems.append(
                    f"intermediate_max_new_tokens={later!r}: must be null (C - keep_head - keep_tail) "
                    f"or in [1, chunk_size={c}]"
                )
        if self.trimmer not in TRIMMERS:
            problems.append(f"trimmer={self.trimmer!r}: must be one of {sorted(TRIMMERS)}")
        return problems

    @cached_property
    def carry(self) -> int:
        """m: the most thinking tokens carried from one chunk into the next."""
        return self.keep_head + self.keep_tail

    @cached_property
    def derived_intermediate(self) -> int:
        """C - m: what a later chunk may write so that carry-over + new tokens fill exactly C."""
        return self.chunk_size - self.carry

    @cached_property
    def intermediate_budget(self) -> int:
        """New tokens each chunk after the first may write: the explicit value, else C - m."""
        explicit = self.intermediate_max_new_tokens
        return self.derived_intermediate if explicit is None else explicit

    @cached_property
    def longest_chunk(self) -> int:
        """The most thinking tokens one chunk's request holds after its question: C in the first, m carried
        + the intermediate budget in a later one (more than C when intermediate_max_new_tokens > C - m)."""
        return max(self.chunk_size, self.carry + self.intermediate_budget)

    @cached_property
    def thinking_budget(self) -> int:
        """The most thinking tokens a trace can hold: C + (I-1) * intermediate, the paper's C + (I-1)(C-m)."""
        return self.chunk_size + (self.max_chunks - 1) * self.intermediate_budget

    @classmethod
    def for_budget(
        cls, thinking_budget: int, chunk_size: int, keep_head: int, keep_tail: int
    ) -> DelethinkParams:
        """The parameters whose `thinking_budget` is exactly `thinking_budget`: its C, m and the I that
        fills it (later chunks of C - m). A DelethinkParamsError when no I does."""
        params = cls(chunk_size, keep_head, keep_tail, max_chunks=1)
        later, rest = divmod(thinking_budget - chunk_size, params.intermediate_budget)
        if thinking_budget < chunk_size or rest:
            raise DelethinkParamsError([
                f"thinking_budget={thinking_budget}: must be C = {chunk_size} plus whole chunks of "
                f"C - m = {params.intermediate_budget} tokens"
            ])  # fmt: skip
        return replace(params, max_chunks=1 + later)

    def carry_over(self, thinking_ids: list[int]) -> list[int]:
        """What the next chunk's prompt holds after the question, cut from ALL thinking so far."""
        return get_trimmer(self.trimmer)(thinking_ids, self.keep_head, self.keep_tail)


def delethink_param_problems(**values: object) -> list[str]:
    """The `field=value: rule` lines DelethinkParams(**values) raises; [] when the values are good.
    For config loaders that report every problem at once, each under its own key prefix."""
    try:
        DelethinkParams(**values)
    except DelethinkParamsError as e:
        return e.problems
    return []
