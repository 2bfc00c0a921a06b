"""Real-looking SFT rows for the tiny CPU path and the tests: math questions with <think> traces and
\\boxed answers, in the prompt/response format of data.train_files.

    python -m verl.trainer.sft.demo_rows --out DIR   # DIR/train.jsonl (12 rows), DIR/val.jsonl (4 rows)
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def math_row(i: int) -> dict[str, str]:
    a, b = 3 + 7 * i, 11 + 5 * i
    thinking = (
        f"We need {a} + {b} * 2. Multiplication first: {b} * 2 = {2 * b}. "
        f"Then {a} + {2 * b} = {a + 2 * b}. Check: {a + 2 * b} - {2 * b} = {a}, right."
    )
    return {
        "prompt": f"What is {a} + {b} * 2? Put the final answer in \\boxed{{}}.",
        "response": f"{thinking}</think>The answer is \\boxed{{{a + 2 * b}}}.",
    }


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    out = parser.parse_args().out
    write_rows(out / "train.jsonl", [math_row(i) for i in range(12)])
    write_rows(out / "val.jsonl", [math_row(i) for i in range(12, 16)])


if __name__ == "__main__":
    main()
