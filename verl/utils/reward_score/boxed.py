"""Finding the final answer in a model's output: the last \\boxed{...} after the thinking.

A trace is only scored once its thinking is closed: the answer is read from the text after the first
`</think>`, and a trace with no `</think>` (a LongCoT response cut at its budget, a Delethink trace
that used up its last chunk) has no answer at all. Otherwise a correct `\\boxed{}` written mid-thought
by a trace that never finished would be reinforced as if it had.
"""

from __future__ import annotations

THINK_END = "</think>"
BOXED = "\\boxed{"


def strip_thinking(solution_str: str) -> str | None:
    """The part after the first `</think>`, or None when the thinking was never closed."""
    _, sep, after = solution_str.partition(THINK_END)
    return after if sep else None


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} with balanced braces, or None if there is none (or it is unclosed)."""
    start = text.rfind(BOXED)
    if start < 0:
        return None
    depth, i = 1, start + len(BOXED)
    for j in range(i, len(text)):
        if text[j] == "{":
            depth += 1
        elif text[j] == "}":
            depth -= 1
            if depth == 0:
                return text[i:j]
    return None


def extract_final_answer(solution_str: str) -> str | None:
    """The last \\boxed{} answer after the closed thinking; None without `</think>` or without a box."""
    answer_part = strip_thinking(solution_str)
    return None if answer_part is None else last_boxed(answer_part)
