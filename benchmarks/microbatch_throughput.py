"""Actor update throughput: padded fixed-size micro-batches against token-budget micro-batches, padded
and packed, on the shift-register testbed's length mix. Prints numbers; not a test.

Run: `nice -n 19 .venv/bin/python benchmarks/microbatch_throughput.py` (a few minutes on the 2-core
machine), or `--quick` (well under a minute).

Model: `verl.models.tiny` (Qwen2, hidden 128, 2 layers, fp32, sdpa), random weights. Rows: the
testbed's RL batch (recipes/markovian_testbed): problems of 13..55 shift-register steps, drawn
uniformly, each row the chat prompt and the reference response (9(n+1) thinking tokens, then
`</think>\\boxed{....}<|end|>`: 140..518 response tokens). `--group` rows per problem, adjacent, as
the trainer lays out a GRPO group (rollout.n = 8); `--group 1` gives every row its own length.
Each variant runs the real `DataParallelPPOActor.update_policy` (forward, backward, AdamW step) on
the same batch:

- padded:        fixed micro-batches of `--micro` rows of similar length (the actor cuts each mini-batch
                 in order of row length), each padded to its longest row
- budget:        use_dynamic_bsz, micro-batches of at most `--budget` real tokens, padded
- budget+packed: the same micro-batches with use_remove_padding (rows packed into one sequence)

Throughput is real response tokens (the response mask) per CPU second of the process (one torch
thread: on a shared machine the wall time swings with other jobs, the CPU time far less). The variants
run alternately, `--repeats` rounds in one process, so what load still does hits all alike; the table
gives each variant's best and median, and the ratio of each to padded (best over best, and the median
of per-round ratios).
"""

from __future__ import annotations

import argparse
import random
import shlex
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from verl.config import ActorConfig
from verl.core.batch import TrainRow, collate_rows, select_rows
from verl.data.shift_register import make_problem
from verl.models.tiny import build_model, build_tokenizer
from verl.tools.results import Record, Table, provenance, write_record
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.micro_batching import length_sorted_groups

MIN_STEPS, MAX_STEPS = 13, 55  # the testbed's RL problem sizes


@dataclass(frozen=True)
class Variant:
    name: str
    dynamic: bool
    packed: bool


VARIANTS = (
    Variant("padded", dynamic=False, packed=False),
    Variant("budget", dynamic=True, packed=False),
    Variant("budget+packed", dynamic=True, packed=True),
)


def testbed_rows(num_rows: int, group: int, seed: int) -> list[TrainRow]:
    """`num_rows` rows, `group` adjacent rows per problem, problem sizes uniform in [13, 55] steps."""
    tokenizer = build_tokenizer()
    rng = random.Random(seed)
    rows: list[TrainRow] = []
    for index in range(0, num_rows, group):
        problem = make_problem(rng, rng.randint(MIN_STEPS, MAX_STEPS))
        prompt = tokenizer.apply_chat_template(
            [{"role": "user", "content": problem.question}], add_generation_prompt=True, return_dict=False
        )
        response = tokenizer.encode(problem.response, add_special_tokens=False) + [tokenizer.eos_token_id]
        for k in range(min(group, num_rows - index)):
            # half the group above the mean reward, half below: a policy-gradient loss that is not zero
            advantage = 1.0 if k % 2 else -1.0
            rows.append(
                TrainRow(prompt, response, [-1.0] * len(response), advantage, len(response), index + k)
            )
    return rows


def make_actor(variant: Variant, micro: int, budget: int, norm_length: int) -> DataParallelPPOActor:
    torch.manual_seed(0)  # every variant starts from the same weights
    model = build_model(build_tokenizer())
    config = ActorConfig(
        ppo_micro_batch_size_per_gpu=micro, use_dynamic_bsz=variant.dynamic, ppo_max_token_len_per_gpu=budget
    )
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    return DataParallelPPOActor(
        model, optimizer, config, temperature=1.0, norm_length=norm_length, use_remove_padding=variant.packed
    )


def timed_update(
    actor: DataParallelPPOActor, batch: dict[str, torch.Tensor], num_mini: int
) -> tuple[float, int]:
    """CPU seconds of one update_policy call, and its micro-batch count. CPU time, not wall time: on a
    shared machine other jobs stretch a one-thread run's wall time, and barely change its CPU time."""
    start = time.process_time()
    metrics = actor.update_policy(batch, num_mini_batches=num_mini)
    return time.process_time() - start, round(metrics["actor/micro_batches"] * num_mini)


def padded_tokens(batch: dict[str, torch.Tensor], micro: int, num_mini: int) -> int:
    """Positions (real + pad) the padded variant's forwards run over: the actor cuts each mini-batch
    into length-sorted micro-batches, each trimmed to its own longest row, so this is the cost padding
    adds, next to the real tokens."""
    total = 0
    for block in batch["attention_mask"].sum(-1).chunk(num_mini):
        lengths = block.tolist()
        total += sum(len(g) * max(lengths[i] for i in g) for g in length_sorted_groups(lengths, micro))
    return total


def compare(
    actors: dict[str, DataParallelPPOActor], batch: dict[str, torch.Tensor], num_mini: int, repeats: int
) -> dict[str, dict[str, float]]:
    """Each variant's update timed in alternating rounds, printed and returned: its best and median
    tokens per CPU second, best against the padded variant's best, and the median of paired ratios."""
    response_tokens = int(batch["response_mask"].sum())
    seconds: dict[str, list[float]] = {v.name: [] for v in VARIANTS}
    micro_batches: dict[str, int] = {}
    for _ in range(repeats):
        for v in VARIANTS:
            s, count = timed_update(actors[v.name], batch, num_mini)
            seconds[v.name].append(s)
            micro_batches[v.name] = count

    base = seconds["padded"]
    print(
        f"{'variant':>14} {'micro':>5} {'best tok/s':>10} {'median tok/s':>12} "
        f"{'best/best':>9} {'median pair':>11}"
    )
    results: dict[str, dict[str, float]] = {}
    for v in VARIANTS:
        times = seconds[v.name]
        best, median = response_tokens / min(times), response_tokens / statistics.median(times)
        ratio = min(base) / min(times)
        pair = statistics.median(b / t for b, t in zip(base, times, strict=True))
        results[v.name] = dict(best=best, median=median, ratio=ratio, pair=pair, micro=micro_batches[v.name])
        print(
            f"{v.name:>14} {micro_batches[v.name]:>5} {best:>10.0f} {median:>12.0f} "
            f"{ratio:>8.2f}x {pair:>10.2f}x"
        )
    return results


def main(argv: list[str] | None = None) -> dict[str, dict[str, float]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="16 rows, 2 rounds: well under a minute")
    parser.add_argument("--rows", type=int, help="rows per update (default 128 = 16 prompts x 8; quick 16)")
    parser.add_argument(
        "--group", type=int, help="adjacent rows per problem (default 8 = rollout.n; quick 4)"
    )
    parser.add_argument(
        "--mini", type=int, help="mini-batches = optimizer steps per update (default 2; quick 1)"
    )
    parser.add_argument(
        "--micro", type=int, help="rows per padded micro-batch (default 16 as the testbed; quick 8)"
    )
    parser.add_argument(
        "--budget", type=int, help="tokens per token-budget micro-batch (default 8192; quick 4096)"
    )
    parser.add_argument("--repeats", type=int, help="alternating rounds (default 3; quick 2)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--record", type=Path, help="also write the table as a results record (docs/results/)"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    quick = args.quick
    num_rows = args.rows or (16 if quick else 128)
    group = args.group or (4 if quick else 8)
    num_mini = args.mini or (1 if quick else 2)
    micro = args.micro or (8 if quick else 16)
    budget = args.budget or (4096 if quick else 8192)
    repeats = args.repeats or (2 if quick else 3)
    torch.set_num_threads(args.threads)

    rows = testbed_rows(num_rows, group, args.seed)
    batch = collate_rows(rows, build_tokenizer().pad_token_id)
    batch["old_log_probs"] = batch["rollout_log_probs"]
    response_tokens = int(batch["response_mask"].sum())
    real_tokens = int(batch["attention_mask"].sum())
    norm_length = batch["responses"].shape[1]
    actors = {v.name: make_actor(v, micro, budget, norm_length) for v in VARIANTS}
    lengths = batch["response_mask"].sum(-1)
    print(
        f"rows {num_rows} (groups of {group}), response tokens {response_tokens} "
        f"(per row {int(lengths.min())}..{int(lengths.max())}, mean {float(lengths.mean()):.0f}), "
        f"mini-batches {num_mini}, micro {micro} rows / budget {budget} tokens, "
        f"threads {args.threads}, rounds {repeats}"
    )
    print(
        f"positions per update: real {real_tokens}, padded micro-batches "
        f"{padded_tokens(batch, micro, num_mini)}"
    )
    warm_up = select_rows(batch, slice(0, 2))  # first-call allocations and kernel choices, for all
    for actor in actors.values():
        actor.update_policy(warm_up, num_mini_batches=1)

    results = compare(actors, batch, num_mini, repeats)
    if args.record:
        caption = (
            f"{num_rows} rows in groups of {group} ({response_tokens} response tokens), the real "
            f"`update_policy`, {num_mini} mini-batch(es), real response tokens per CPU second, {repeats} "
            f"alternating round(s), {args.threads} torch thread(s)."
        )
        write_record(args.record, record(results, caption, argv))
        print(f"wrote {args.record}")
    return results


def record(results: dict[str, dict[str, float]], caption: str, argv: list[str]) -> Record:
    """The run as a results record (docs/results/README.md): one row per variant."""
    columns = ["variant", "micro-batches", "best tok/s", "median tok/s", "best/best", "median pair"]
    rows = [
        [
            name,
            f"{r['micro']}",
            f"{r['best']:,.0f}",
            f"{r['median']:,.0f}",
            f"{r['ratio']:.2f}x",
            f"{r['pair']:.2f}x",
        ]
        for name, r in results.items()
    ]
    return Record(
        name="microbatch", title="Micro-batching: padded against token-budget and packed", section="actor",
        command=shlex.join(["python", "benchmarks/microbatch_throughput.py", *argv]),
        tables=[Table(columns, rows, caption)], **provenance(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
