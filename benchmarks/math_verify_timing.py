"""How much math-verify scoring costs, and why it runs in a worker process. Prints numbers; not a test.

Run: `.venv/bin/python benchmarks/math_verify_timing.py` (about 10 s).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor

from math_verify import parse, verify

from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score import math_verify as scorer

DATA = VENDORED_MATH_DIR
PATHOLOGICAL = "9^{9^{9^{9}}}"


def load_items() -> tuple[list[str], list[str]]:
    """Every AIME24/25, AMC23 and MATH-500 reference answer, boxed after a closed thinking block."""
    answers = []
    for name in ("aime24", "aime25", "amc23", "math500"):
        answers += [str(json.loads(line)["answer"]) for line in (DATA / f"{name}.jsonl").open()]
    return [f"<think>...</think> So \\boxed{{{a}}}" for a in answers], answers


def in_process(gold: str, answer: str) -> bool:
    return verify(parse("\\boxed{" + gold + "}"), parse("\\boxed{" + answer + "}"))


def seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main() -> None:
    solutions, truths = load_items()
    n = len(solutions)
    print(f"{n} reference answers (aime24, aime25, amc23, math500)")

    with ThreadPoolExecutor(1) as pool:
        try:
            pool.submit(in_process, "1", "1").result()
            print("math-verify off the main thread: works")
        except ValueError as e:
            print(f"math-verify off the main thread: ValueError ({str(e)[:70]}...)")

    t = seconds(lambda: [in_process(g, a) for g, a in zip(truths, solutions, strict=True)])
    print(f"in-process parse+verify (main thread, signal timeouts): {t / n * 1e3:.2f} ms/item")

    t = seconds(lambda: scorer.compute_score("m", "</think>\\boxed{1}", "1"))
    print(f"first call, worker start (python + sympy import): {t:.2f} s")

    scores: list[float] = []
    t = seconds(lambda: scores.extend(scorer.compute_scores(solutions, truths)))
    print(f"worker, one batch of {n}, cold caches: {t / n * 1e3:.2f} ms/item; {sum(scores):.0f} scored 1.0")
    missed = [truths[i] for i, s in enumerate(scores) if s != 1.0]
    print(f"  reference answers math-verify does not match with themselves: {missed}")

    # math-verify caches parsed LaTeX, so the repeats below compare IPC patterns on warm caches
    t = seconds(lambda: scorer.compute_scores(solutions, truths))
    print(f"worker, one batch of {n}, warm caches: {t / n * 1e3:.2f} ms/item")
    t = seconds(lambda: [scorer.compute_score("m", s, g) for s, g in zip(solutions, truths, strict=True)])
    print(f"worker, one call per item, warm caches: {t / n * 1e3:.2f} ms/item")
    t = seconds(lambda: [scorer.compute_score("m", "</think>\\boxed{1}", "1") for _ in range(200)])
    print(f"worker round trip for a trivial item: {t / 200 * 1e3:.2f} ms")

    t = seconds(lambda: scorer.compute_score("m", f"</think>\\boxed{{{PATHOLOGICAL}}}", "1", timeout_s=1.0))
    print(f"pathological answer {PATHOLOGICAL} with a 1 s limit: returned after {t:.2f} s")
    t = seconds(lambda: scorer.compute_score("m", "</think>\\boxed{1}", "1"))
    print(f"next call (worker restart): {t:.2f} s")


if __name__ == "__main__":
    main()
