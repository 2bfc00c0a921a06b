"""Actor updates with shared prompt prefixes (`model.share_prompt_prefix`) against the padded forward,
for LongCoT and Delethink rows of the same problems. Prints numbers; not a test.

Run: `nice -n 19 .venv/bin/python benchmarks/shared_prefix.py` (a few minutes on the 2-core machine), or
`--quick` (well under a minute).

Rows: the shift-register testbed's RL batch (recipes/markovian_testbed, full setting): `--prompts`
problems of 13..55 steps, `--group` samples each, with the lengths of the reference responses
(`benchmarks/microbatch_throughput.testbed_rows`) but random tokens, different in every sample: the
samples of a group then share their prompt and nothing else, the least sharing a real batch has (a
trained policy's samples often agree on their first thinking tokens, which Delethink carries over).
LongCoT trains one row per sample. Delethink trains the same thinking cut the way `DelethinkAgentLoop`
cuts it (the testbed's C = 128, m = 9 + 55): the first chunk's row is the question and C tokens, every
later row is the question + the carry-over and the next C - m tokens, so a trajectory's later chunks
share the question and their 9 head tokens.

Per environment both variants run the real `DataParallelPPOActor.update_policy` (forward, backward,
AdamW step) on the same batch, fixed micro-batches of `--micro` rows:
- padded: rows in order of length, each micro-batch padded to its longest row (the default)
- shared: rows in order of prompt, each micro-batch's shared prefixes computed once

It reports the real tokens the forward passes run over (`actor/forward_tokens`), the positions with
padding (the padded variant pads every micro-batch to its longest prompt + longest response; the
shared one packs without padding, its attention views padded per segment), and the CPU seconds of
the update (one torch thread; on a shared machine CPU time moves far less than wall time with other
jobs), the variants alternating over `--repeats` rounds in one process, best and median.
"""

from __future__ import annotations

import argparse
import shlex
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).parent))  # run as a script: microbatch_throughput is a sibling

from microbatch_throughput import testbed_rows  # noqa: E402

from verl.config import ActorConfig  # noqa: E402
from verl.core.batch import TrainRow, collate_rows, select_rows  # noqa: E402
from verl.core.delethink import DelethinkParams  # noqa: E402
from verl.models.tiny import build_model, build_tokenizer  # noqa: E402
from verl.tools.results import Record, Table, provenance, write_record  # noqa: E402
from verl.workers.actor.dp_actor import DataParallelPPOActor  # noqa: E402
from verl.workers.micro_batching import length_sorted_groups  # noqa: E402

TESTBED_DELETHINK = DelethinkParams(chunk_size=128, keep_head=9, keep_tail=55, max_chunks=7)
VARIANTS = ("padded", "shared")


def distinct_samples(rows: list[TrainRow], vocab_size: int, seed: int) -> list[TrainRow]:
    """The rows with random response tokens (the last, end-of-sequence, kept) and the same lengths."""
    generator = torch.Generator().manual_seed(seed)
    out = []
    for row in rows:
        body = torch.randint(3, vocab_size, (len(row.response_ids) - 1,), generator=generator).tolist()
        out.append(replace(row, response_ids=body + row.response_ids[-1:]))
    return out


def delethink_rows(rows: list[TrainRow], params: DelethinkParams) -> list[TrainRow]:
    """Each LongCoT row's response cut into Delethink chunk rows, prompts as the agent loop builds them."""
    out = []
    for row in rows:
        thinking = row.response_ids
        start, budget, prompt = 0, params.chunk_size, row.prompt_ids
        while start < len(thinking):
            chunk = thinking[start : start + budget]
            out.append(TrainRow(prompt, chunk, [-1.0] * len(chunk), row.advantage, len(thinking),
                                row.trajectory_index))  # fmt: skip
            start += len(chunk)
            prompt = row.prompt_ids + params.carry_over(thinking[:start])
            budget = params.intermediate_budget
    return out


def padded_positions(batch: dict[str, torch.Tensor], micro: int) -> int:
    """Positions the padded variant's forwards run over, padding included: each length-sorted
    micro-batch is as wide as its longest prompt plus its longest response."""
    t = batch["responses"].shape[1]
    prompts = batch["attention_mask"][:, :-t].sum(-1).tolist()
    responses = batch["attention_mask"][:, -t:].sum(-1).tolist()
    totals = [p + r for p, r in zip(prompts, responses, strict=True)]
    return sum(
        len(g) * (max(prompts[i] for i in g) + max(responses[i] for i in g))
        for g in length_sorted_groups(totals, micro)
    )


def make_actor(share: bool, micro: int, norm_length: int) -> DataParallelPPOActor:
    torch.manual_seed(0)  # every variant starts from the same weights
    model = build_model(build_tokenizer())
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    config = ActorConfig(ppo_micro_batch_size_per_gpu=micro)
    return DataParallelPPOActor(model, optimizer, config, 1.0, norm_length, share_prompt_prefix=share)


def main(argv: list[str] | None = None) -> dict[str, dict[str, dict[str, float]]]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 problems x 4 samples, 1 round")
    parser.add_argument("--prompts", type=int, help="problems per update (default 4; quick 2)")
    parser.add_argument("--group", type=int, help="samples per problem (default 8 = rollout.n; quick 4)")
    parser.add_argument(
        "--micro", type=int, default=16, help="rows per micro-batch (default 16, the testbed's)"
    )
    parser.add_argument("--repeats", type=int, help="alternating rounds (default 3; quick 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--record", type=Path, help="also write the table as a results record (docs/results/)"
    )
    argv = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(argv)
    prompts = args.prompts or (2 if args.quick else 4)
    group = args.group or (4 if args.quick else 8)
    repeats = args.repeats or (1 if args.quick else 3)
    torch.set_num_threads(args.threads)

    tokenizer = build_tokenizer()
    longcot = distinct_samples(testbed_rows(prompts * group, group, args.seed), len(tokenizer), args.seed)
    envs = {"LongCoT": longcot, "Delethink": delethink_rows(longcot, TESTBED_DELETHINK)}
    pad_id = tokenizer.pad_token_id
    results: dict[str, dict[str, dict[str, float]]] = {}
    print(f"{prompts} problems x {group} samples, micro-batches of {args.micro} rows, "
          f"{args.threads} thread(s), {repeats} round(s)")  # fmt: skip
    print(f"{'env':>9} {'variant':>7} {'rows':>5} {'forward tokens':>14} {'positions':>9} {'best s':>7} "
          f"{'median s':>8} {'speed-up':>8}")  # fmt: skip
    for env, rows in envs.items():
        batch = collate_rows(rows, pad_id)
        batch["old_log_probs"] = batch["rollout_log_probs"]
        norm_length = batch["responses"].shape[1]
        actors = {v: make_actor(v == "shared", args.micro, norm_length) for v in VARIANTS}
        for actor in actors.values():  # first-call allocations and kernel choices
            actor.update_policy(select_rows(batch, slice(0, 2)), num_mini_batches=1)
        seconds: dict[str, list[float]] = {v: [] for v in VARIANTS}
        forward: dict[str, float] = {}
        for _ in range(repeats):
            for v in VARIANTS:
                start = time.process_time()
                metrics = actors[v].update_policy(batch, num_mini_batches=1)
                seconds[v].append(time.process_time() - start)
                forward[v] = metrics["actor/forward_tokens"]
        results[env] = {}
        positions = {"padded": padded_positions(batch, args.micro), "shared": forward["shared"]}
        for v in VARIANTS:
            best, median = min(seconds[v]), statistics.median(seconds[v])
            speedup = min(seconds["padded"]) / best
            results[env][v] = dict(rows=len(rows), forward_tokens=forward[v], positions=positions[v],
                                   best_s=best, median_s=median, speedup=speedup)  # fmt: skip
            print(f"{env:>9} {v:>7} {len(rows):>5} {forward[v]:>14.0f} {positions[v]:>9.0f} {best:>7.2f} "
                  f"{median:>8.2f} {speedup:>7.2f}x")  # fmt: skip
    for v in VARIANTS:
        dt, lc = results["Delethink"][v], results["LongCoT"][v]
        print(f"Delethink / LongCoT, {v}: forward tokens {dt['forward_tokens'] / lc['forward_tokens']:.2f}x, "
              f"positions {dt['positions'] / lc['positions']:.2f}x, "
              f"update time {dt['best_s'] / lc['best_s']:.2f}x")  # fmt: skip
    if args.record:
        caption = (
            f"{prompts} problems x {group} samples (C = 128, m = 9 + 55), the real `update_policy`, "
            f"micro-batches of {args.micro} rows, CPU seconds, {repeats} alternating round(s), "
            f"{args.threads} torch thread(s)."
        )
        write_record(args.record, record(results, caption, argv))
        print(f"wrote {args.record}")
    return results


def record(results: dict[str, dict[str, dict[str, float]]], caption: str, argv: list[str]) -> Record:
    """The run as a results record (docs/results/README.md): one row per environment and variant."""
    columns = ["env", "variant", "rows", "forward tokens", "positions", "best s", "median s", "speed-up"]
    rows = [
        [env, v, f"{r['rows']}", f"{r['forward_tokens']:,.0f}", f"{r['positions']:,.0f}",
         f"{r['best_s']:.2f}", f"{r['median_s']:.2f}", f"{r['speedup']:.2f}x"]
        for env, variants in results.items() for v, r in variants.items()
    ]  # fmt: skip
    return Record(
        name="shared_prefix", title="Shared prompt prefixes in the actor's update", section="actor",
        command=shlex.join(["python", "benchmarks/shared_prefix.py", *argv]),
        tables=[Table(columns, rows, caption)], **provenance(),
    )  # fmt: skip


if __name__ == "__main__":
    main()
