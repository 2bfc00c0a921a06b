"""A trajectory: what an agent loop produces and every later stage reads.

A trajectory is a list of turns. LongCoT has one turn; Delethink has one turn per chunk. Each turn
keeps the exact prompt ids the engine saw and the exact tokens it sampled, so the trainer trains on
what was sampled without re-tokenising anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from verl.core.engine import FinishReason


@dataclass
class Turn:
    prompt_ids: list[int]
    response_ids: list[int]
    rollout_log_probs: list[float]
    finish_reason: FinishReason
    trainable: bool = True  # False: the turn is context only (gym train_on=last trains the last turn only)


@dataclass
class Trajectory:
    turns: list[Turn]
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def response_ids(self) -> list[int]:
        """The whole thinking trace: every turn's sampled tokens, in order."""
        return [t for turn in self.turns for t in turn.response_ids]

    @property
    def thinking_tokens(self) -> int:
        """How many tokens the model sampled in all turns (the `thinking_tokens` metrics). The loss's
        trace length, `TrainRow.trace_length`, counts the trainable turns' tokens only."""
        return sum(len(turn.response_ids) for turn in self.turns)

    @property
    def num_turns(self) -> int:
        return len(self.turns)

    @property
    def has_eos(self) -> bool:
        return self.turns[-1].finish_reason == "stop"


@dataclass
class PromptItem:
    """What an agent loop runs from: one prompt row, chat-templated into token ids once
    (verl/data/rl_dataset.py reads the files), with what scores its trajectory."""

    prompt_ids: list[int]
    data_source: str
    ground_truth: str
    extra_info: dict[str, Any] = field(default_factory=dict)
    val_n: int | None = None  # validation samples for this prompt; None: rollout.val_kwargs.n
    messages: list[dict[str, str]] = field(default_factory=list)  # the prompt as chat messages (gym reset)
    env_config: dict[str, Any] | None = None  # row column for the gym loop; wins over rollout.gym's
    ctx_config: dict[str, Any] | None = None  # row column for the gym loop; wins over rollout.gym's
