"""Finding the final answer in a model's output: the last \\boxed{...} after the thinking."""

from __future__ import annotations

THINK_END = "</think>"
BOXED = "\\boxed{"


def strip_thinking(solution_str: str) -> str:
    """The part after the last `</think>`; the whole string when the model never closed its thinking."""
    _, sep, after = solution_str.rpartition(THINK_END)
    return after if sep else solution_str


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
    return last_boxed(strip_thinking(solution_str))
