"""The recipe's evaluation set: running-sum problems from the training sizes up to the longest possible.

Three data sources, so summary.json reports each on its own:
  synthetic/running_sum/train_sizes   4..12 terms, the sizes RL trained on
  synthetic/running_sum/longer        13..22 terms: more thinking than any training problem, within B
  synthetic/running_sum/beyond_B      23..26 terms: the reference output needs 124..139 tokens, at or
                                      past B = 128 (24 terms and more exceed it)
The reference output for n terms is 5n + 9 tokens of the tiny byte-level tokenizer: 5n - 1 of
thinking, one `</think>` token and nine for `\\boxed{d}`.
26 terms is the task's limit (one label letter each). Questions that occur in the training file are
skipped, so no evaluation problem was trained on.

    python recipes/tiny_markovian/make_eval_data.py --out outputs/tiny_markovian/eval.jsonl
"""

from __future__ import annotations

import argparse
import random

from verl.data.rl_dataset import read_rows
from verl.data.synthetic import DATA_SOURCE, make_problem
from verl.utils.fs import atomic_write_jsonl

GROUPS = (("train_sizes", 4, 12), ("longer", 13, 22), ("beyond_B", 23, 26))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-size", type=int, default=4, help="problems per number of terms")
    parser.add_argument("--train-file", default="outputs/tiny/data/train.jsonl")
    parser.add_argument("--seed", type=int, default=2026)
    args = parser.parse_args()

    seen = {row["prompt"][0]["content"] for row in read_rows(args.train_file)}
    rng = random.Random(args.seed)
    rows = []
    for group, low, high in GROUPS:
        for n in range(low, high + 1):
            for _ in range(args.per_size):
                problem = make_problem(rng, n)
                while problem.question in seen:
                    problem = make_problem(rng, n)
                seen.add(problem.question)
                rows.append(
                    {
                        "data_source": f"{DATA_SOURCE}/{group}",
                        "prompt": [{"role": "user", "content": problem.question}],
                        "reward_model": {"style": "rule", "ground_truth": problem.answer},
                        "extra_info": {"index": len(rows), "num_terms": n},
                    }
                )
    atomic_write_jsonl(args.out, rows)
    print(f"wrote {len(rows)} problems to {args.out}")


if __name__ == "__main__":
    main()
