"""The recipe's evaluation set: running-sum problems from the training sizes to well past B.

Three data sources, so summary.json reports each on its own:
  synthetic/running_sum/train_sizes   4..12 terms, the sizes RL trained on
  synthetic/running_sum/longer        13..23 terms: more thinking than any training problem, but the
                                      reference output (74..124 tokens) fits in B = 128
  synthetic/running_sum/beyond_B      24..40 terms: the reference output needs 129..209 tokens, past B
The reference output for n terms is 5n + 9 tokens of the tiny byte-level tokenizer: 5n - 1 of
thinking, one `</think>` token and nine for `\\boxed{d}`; the prompt is 3n + 2 tokens.
Labels cycle through a..l, the twelve letters the SFT data and RL showed the model (they never went
past 12 terms), so term 13 is labelled `a` again: a longer problem asks for more steps of the same
kind, not for symbols the model has never seen. Up to 12 terms this is the training task exactly.
Questions that occur in the training file are skipped, so no evaluation problem was trained on.

    python recipes/tiny_markovian/make_eval_data.py --out outputs/tiny_markovian/eval.jsonl
"""

from __future__ import annotations

import argparse
import random

from verl.data.rl_dataset import read_rows
from verl.data.synthetic import DATA_SOURCE, make_problem
from verl.utils.fs import atomic_write_jsonl

GROUPS = (("train_sizes", 4, 12), ("longer", 13, 23), ("beyond_B", 24, 40))
SEEN_LABELS = "abcdefghijkl"  # the labels of the 1..12-term SFT and RL problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--per-size", type=int, default=4, help="problems per number of terms")
    parser.add_argument("--train-file", default="outputs/tiny/data/train.jsonl")
    parser.add_argument("--seed", type=int, default=2026)
    parser.add_argument("--labels", default=SEEN_LABELS, help="label alphabet, cycled (default a..l)")
    args = parser.parse_args()

    seen = {row["prompt"][0]["content"] for row in read_rows(args.train_file)}
    rng = random.Random(args.seed)
    rows = []
    for group, low, high in GROUPS:
        for n in range(low, high + 1):
            for _ in range(args.per_size):
                problem = make_problem(rng, n, args.labels)
                while problem.question in seen:
                    problem = make_problem(rng, n, args.labels)
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
