"""How long math scoring takes when many callers share it and some answers are pathological. Prints
numbers; not a test.

T caller threads each make C `compute_score` calls, one answer per call, as the math env's episodes do.
A fixed fraction of each thread's calls (shuffled with a fixed seed) are pathological answers, in turn
a power tower (math-verify's 2 s verify limit ends it), 2000-deep nested fractions and 1 MB of inline
math (its 1 s parse limit ends those); the rest are MATH-500 reference solutions against their own
answers, which all score 1.0. A call's wait is the time from the call to its score. Well-formed waits
are the figure that matters: a pathological answer should cost its own time, not theirs.

Run: `nice -n 19 .venv/bin/python benchmarks/reward_throughput.py` (8 threads x 200 calls, 40%
pathological) or `--quick` (4 x 20, under a minute); `--processes N` sets the scoring pool's size.
"""

from __future__ import annotations

import argparse
import os
import random
import threading
import time

from verl.data.tasks import normalise_answer, read_task_rows
from verl.utils.math_data import VENDORED_MATH_DIR
from verl.utils.reward_score import math_verify as scorer

MATH500 = VENDORED_MATH_DIR / "math500.jsonl"
PATHOLOGICAL = [
    "</think>\\boxed{9^{9^{9^{9}}}}",
    "</think>\\boxed{" + "\\frac{1}{" * 2000 + "1" + "}" * 2000 + "}",
    "</think>" + "$x$ " * 250_000,
]


def calls_of_thread(thread: int, calls: int, bad_fraction: float, rows: list[dict]) -> list[tuple]:
    """(solution, truth, is_pathological) for each call of one thread, in the order it makes them."""
    n_bad = round(calls * bad_fraction)
    kinds = [True] * n_bad + [False] * (calls - n_bad)
    rng = random.Random(thread)
    rng.shuffle(kinds)
    out = []
    for j, bad in enumerate(kinds):
        if bad:
            out.append((PATHOLOGICAL[j % len(PATHOLOGICAL)], "1", True))
        else:
            row = rows[rng.randrange(len(rows))]
            out.append(("</think>" + row["solution"], normalise_answer(row["answer"]), False))
    return out


def percentile(sorted_values: list[float], q: float) -> float:
    return sorted_values[min(len(sorted_values) - 1, int(q * len(sorted_values)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, help="caller threads (default 8; 4 with --quick)")
    parser.add_argument("--calls", type=int, help="calls per thread (default 200; 20 with --quick)")
    parser.add_argument("--bad-fraction", type=float, default=0.4, help="share of pathological calls")
    parser.add_argument("--limit", type=float, default=scorer.DEFAULT_TIMEOUT_S, help="per-item limit, s")
    parser.add_argument("--processes", type=int, help="scoring pool size (default: the scorer's own)")
    parser.add_argument("--quick", action="store_true", help="4 threads x 20 calls")
    args = parser.parse_args()
    threads = args.threads or (4 if args.quick else 8)
    calls = args.calls or (20 if args.quick else 200)
    if args.processes is not None:
        scorer.set_pool_size(args.processes)

    rows = read_task_rows(str(MATH500))
    plans = [calls_of_thread(t, calls, args.bad_fraction, rows) for t in range(threads)]
    waits: list[tuple[bool, float, float]] = []  # (pathological, wait, score)
    lock = threading.Lock()

    def caller(plan: list[tuple]) -> None:
        for solution, truth, bad in plan:
            start = time.perf_counter()
            score = scorer.compute_score("math", solution, truth, timeout_s=args.limit)
            with lock:
                waits.append((bad, time.perf_counter() - start, score))

    start = time.perf_counter()
    scorer.warm_up_pool()  # start-ups are a one-off cost of a run: keep them outside the clock
    print(f"started the scoring processes in {time.perf_counter() - start:.1f} s", flush=True)
    print(f"{threads} threads x {calls} calls, {args.bad_fraction:.0%} pathological, limit {args.limit} s, "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}", flush=True)  # fmt: skip
    start = time.perf_counter()
    workers = [threading.Thread(target=caller, args=(plan,)) for plan in plans]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    total = time.perf_counter() - start

    good = sorted(wait for bad, wait, _ in waits if not bad)
    bad = sorted(wait for is_bad, wait, _ in waits if is_bad)
    good_scores = [score for is_bad, _, score in waits if not is_bad]
    print(f"total {total:.1f} s for {len(waits)} calls; load average at the end {os.getloadavg()[0]:.1f}")
    print(
        f"well-formed ({len(good)}): wait p50 {percentile(good, 0.5):.2f} s, "
        f"p99 {percentile(good, 0.99):.2f} s, max {good[-1]:.2f} s; {sum(good_scores):.0f} scored 1.0"
    )
    print(f"pathological ({len(bad)}): wait p50 {percentile(bad, 0.5):.2f} s, max {bad[-1]:.2f} s")


if __name__ == "__main__":
    main()
