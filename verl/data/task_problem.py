"""What a generated task's problem holds, whichever task made it: the running sum
(verl/data/synthetic.py) and the shift register (verl/data/shift_register.py) both write a question, its
exact answer and the reference thinking that reaches it, and say how hard the problem is."""

from __future__ import annotations

from dataclasses import dataclass

from verl.utils.reward_score.boxed import THINK_END


@dataclass(frozen=True)
class TaskProblem:
    question: str  # the user's message
    answer: str  # what the final \boxed{} must hold: the exact verifier's ground truth
    thinking: str  # the reference thinking, written after the generation prompt's `<think>`

    @property
    def size(self) -> int:
        """The difficulty knob, each task's own count (terms, steps)."""
        raise NotImplementedError

    @property
    def response(self) -> str:
        """The reference output following the generation prompt's `<think>` (end-of-sequence not included)."""
        return f"{self.thinking}{THINK_END}\\boxed{{{self.answer}}}"

    def row(self, data_source: str, index: int, split: str, **extra_info: int) -> dict:
        """The problem as a prompt row in the training format, `extra_info` beside its index and split."""
        return {
            "data_source": data_source,
            "prompt": [{"role": "user", "content": self.question}],
            "reward_model": {"style": "rule", "ground_truth": self.answer},
            "extra_info": {"index": index, "split": split, **extra_info},
        }
