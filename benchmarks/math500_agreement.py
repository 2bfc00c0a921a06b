"""How the reward scores MATH-500's reference solutions. Prints numbers; not a test.

Each of the 500 reference solutions is scored as a finished trace (`</think>` + solution) against its
own answer (a correct scorer gives 1.0 to all) and against the next problem's answer (a correct scorer
gives 0.0 except where the two answers mean the same thing). `--save FILE` keeps the per-problem scores
and `--compare FILE` lists the problems whose score changed since such a file, so that two versions of
the scorer can be compared on the same data.

Run: `nice -n 19 .venv/bin/python benchmarks/math500_agreement.py [--save a.json] [--compare b.json]`
(10-15 s on the 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from verl.data.tasks import normalise_answer, read_task_rows
from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score.math_verify import compute_scores

MATH500 = VENDORED_MATH_DIR / "math500.jsonl"
TIMEOUT_S = 30.0  # per item: on a loaded machine a slow verify must not turn into a miss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, help="write {unique_id: [own, next]} scores here")
    parser.add_argument("--compare", type=Path, help="a file written by --save to list changes against")
    args = parser.parse_args()

    rows = read_task_rows(str(MATH500))
    ids = [r["unique_id"] for r in rows]
    solutions = ["</think>" + r["solution"] for r in rows]
    answers = [normalise_answer(r["answer"]) for r in rows]
    start = time.perf_counter()
    own = compute_scores(solutions, answers, timeout_s=TIMEOUT_S)
    # the last solution is paired with the first answer, so every solution is scored twice
    others = compute_scores(solutions, answers[1:] + answers[:1], timeout_s=TIMEOUT_S)
    seconds = time.perf_counter() - start

    print(f"{len(rows)} MATH-500 reference solutions, {seconds:.0f} s for {2 * len(rows)} scores")
    missed = [i for i, s in zip(ids, own, strict=True) if s != 1.0]
    print(f"own answer scores 1.0: {sum(own):.0f}; missed: {missed}")
    # (id, its answer, the next problem's answer) where the next problem's answer scored 1.0
    coincidences = [
        (ids[k], answers[k], answers[(k + 1) % len(rows)]) for k, s in enumerate(others) if s == 1.0
    ]
    print(f"next problem's answer scores 1.0: {sum(others):.0f}: {coincidences}")
    scores = {i: [a, b] for i, a, b in zip(ids, own, others, strict=True)}
    if args.save:
        args.save.write_text(json.dumps(scores, indent=0))
    if args.compare:
        before = json.loads(args.compare.read_text())
        changed = {i: (before[i], now) for i, now in scores.items() if before.get(i) != now}
        print(f"changed against {args.compare} ([own, next] before -> now): {len(changed)}")
        for i, (was, now) in changed.items():
            print(f"  {i}: {was} -> {now}")


if __name__ == "__main__":
    main()
