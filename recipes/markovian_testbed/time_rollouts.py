"""Rollout time of one RL-step-sized batch, LongCoT-RL against Delethink-RL, at thinking budgets B..4B.

    python recipes/markovian_testbed/time_rollouts.py --longcot RUN/longcot/global_step_N \\
        --delethink RUN/delethink/global_step_N --data RUN/data/timing.jsonl --budgets 512,1024,2048 \\
        --chunk 128 --keep-head 9 --keep-tail 55 --prompts 16 --samples 8 --out RUN/eval/timing.json

Both trained models are loaded in one process, each with its own rollout engine, and the two
environments run one after the other at every budget, `--repeats` times, in alternating order, so load
from other processes hits both alike; the medians and their ratio are what to read. End-of-sequence is
ignored, so every sample writes its whole budget: the time measures the length, not where a model
happened to stop, and both environments produce the same number of thinking tokens. LongCoT at budget b
is one request of b new tokens; Delethink is C new tokens, then chunks of C - m, as many as fill b
(`DelethinkParams.for_budget`), each prefilling question + carry-over again (less what the engine
copies: identical prompts of one group, and the question and head a chunk shares with the trace's
previous chunk). The engine's counters split each run's time into prefill and decode. One more pair
at the first budget honours end-of-sequence, as training does: the rollout of an RL step as it happens.

After each rollout the same process times that batch's update as the trainer makes it: the old
log-probs (one forward over the training rows) and the PPO update, with the actor settings of
`testbed_longcot.yaml` / `testbed_delethink.yaml` (micro-batches, Delethink's shared prompt prefixes,
two optimizer steps), on a second copy of each model. Rollout + update is the whole step (reward and
bookkeeping left out), so the rows give the cost of one trajectory in both environments as the
budget grows, and the budget at which Delethink's step becomes the cheaper one.

`--profile-update` instead profiles one update per environment at the first budget (torch.profiler, after
a rollout that is not timed) and prints how much of the actor's op time is matrix multiplication and
attention kernels (forward and backward) and which other ops take the rest: where the update's time goes
that the arithmetic does not explain.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from verl.core.delethink import DelethinkParams
    from verl.core.engine import SamplingParams
    from verl.core.trajectory import Trajectory
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    # the actor, its optimizer steps per batch, and the token budget of its log-prob micro-batches
    ActorSetup = tuple[DataParallelPPOActor, int, int]

if __package__ in (None, ""):  # run as a script: the repository root holds `verl`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

MODES = ("longcot", "delethink")
# The kernels doing the update's arithmetic on CPU: linear layers (mm / addmm, and bmm where batched) and
# sdpa's attention, forward and backward. Every other op is elementwise work, copies, or bookkeeping.
MATMUL_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
})  # fmt: skip


def _load(model_path: str, num_threads: int):
    import torch
    from transformers import AutoTokenizer

    from verl.eval.config import resolve_model_dir
    from verl.single_controller.fsdp_workers import eos_token_ids, load_causal_lm
    from verl.workers.rollout.hf_engine import HFRolloutEngine

    model_dir = resolve_model_dir(model_path)
    if model_dir is None:
        raise SystemExit(f"{model_path}: no HF model in it (config.json) or in its actor/huggingface/")
    torch.set_num_threads(num_threads)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = load_causal_lm(str(model_dir))
    return tokenizer, HFRolloutEngine(
        model, eos_token_ids(model.generation_config, tokenizer), tokenizer.pad_token_id
    )


def _actor(mode: str, model_path: str, args: argparse.Namespace, budget: int) -> ActorSetup:
    """The trainer's actor for `mode` on a copy of the model (the testbed config's update settings, with
    this batch's prompts and samples), and its optimizer steps per batch."""
    from verl.config import compose_config
    from verl.core.delethink import DelethinkParams
    from verl.eval.config import resolve_model_dir
    from verl.single_controller.fsdp_workers import load_causal_lm, make_optimizer
    from verl.trainer.config_loader import load_config
    from verl.workers.actor.dp_actor import DataParallelPPOActor

    model_dir = resolve_model_dir(model_path)
    overrides = [
        f"actor_rollout_ref.model.path={model_dir}", f"data.train_batch_size={args.prompts}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, args.prompts // 2)}",
        f"actor_rollout_ref.rollout.n={args.samples}",
    ]  # fmt: skip
    if mode == "delethink":
        chunks = DelethinkParams.for_budget(budget, args.chunk, args.keep_head, args.keep_tail).max_chunks
        overrides += [
            f"algorithm.delethink.chunk_size={args.chunk}", f"algorithm.delethink.keep_head={args.keep_head}",
            f"algorithm.delethink.keep_tail={args.keep_tail}", f"algorithm.delethink.max_chunks={chunks}",
        ]  # fmt: skip
    else:
        overrides.append(f"data.max_response_length={budget}")
    config = load_config(compose_config(f"testbed_{mode}", overrides), check_paths=False)
    ref = config.actor_rollout_ref
    model = load_causal_lm(str(model_dir), ref.model.attn_implementation)
    optimizer, scheduler = make_optimizer(model, ref.actor.optim)
    actor = DataParallelPPOActor(
        model, optimizer, ref.actor, ref.rollout.temperature, config.thinking_budget, lr_scheduler=scheduler,
        use_remove_padding=ref.model.use_remove_padding, share_prompt_prefix=ref.model.share_prompt_prefix,
    )  # fmt: skip
    return actor, config.num_mini_batches, ref.rollout.log_prob_max_token_len_per_gpu


def _time_update(setup: ActorSetup, trajectories: list[Trajectory], pad_token_id: int) -> dict[str, float]:
    """Old log-probs and one PPO update of `trajectories`' training rows, as the trainer makes them."""
    from verl.core.batch import (
        collate_rows,
        pad_rows_to_multiple,
        rows_per_trajectory,
        trajectory_rows,
    )

    actor, num_mini_batches, log_prob_max_tokens = setup
    advantages = [1.0 if i % 2 else -1.0 for i in range(len(trajectories))]  # any non-zero advantages
    rows = pad_rows_to_multiple(trajectory_rows(trajectories, advantages), num_mini_batches)
    batch = collate_rows(rows, pad_token_id)
    start = time.perf_counter()
    batch["old_log_probs"] = actor.compute_log_prob(
        batch, actor.config.ppo_micro_batch_size_per_gpu, max_token_len=log_prob_max_tokens
    )
    metrics = actor.update_policy(batch, num_mini_batches, rows_per_trajectory(len(rows), len(trajectories)))
    return {"update_s": time.perf_counter() - start, "train_tokens": metrics["actor/forward_tokens"]}


def op_time_split(self_seconds: dict[str, float], top: int = 6) -> dict[str, Any]:
    """From each op's self time: the total, the share of it in MATMUL_OPS, and the `top` other ops by
    self time (name, seconds)."""
    total = sum(self_seconds.values())
    matmul = sum(t for name, t in self_seconds.items() if name in MATMUL_OPS)
    others = sorted(((n, t) for n, t in self_seconds.items() if n not in MATMUL_OPS), key=lambda x: -x[1])
    return {"op_s": total, "matmul_s": matmul, "matmul_share": matmul / total if total else 0.0,
            "top_other": others[:top]}  # fmt: skip


def _profile_update(setup: ActorSetup, trajectories: list[Trajectory], pad_token_id: int) -> dict[str, Any]:
    """`_time_update` under torch.profiler: its wall time, tokens and `op_time_split` of its ops."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        timed = _time_update(setup, trajectories, pad_token_id)
    self_seconds = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
    return {**timed, **op_time_split(self_seconds)}


def _time_one(engine, loop, items, params, update: ActorSetup, pad_token_id: int) -> dict[str, float]:
    """Run the agent loop over every item once, then the update (`update`: an `_actor` setup) of the
    trajectories; the rollout's wall time and the engine's counters over it, and the update's time."""
    from verl.agent_loop.manager import run_agent_loops

    def counters() -> tuple[float, ...]:
        e = engine
        return (
            e.num_prefill_tokens, e.num_reused_prompt_tokens, e.prefill_seconds, e.decode_seconds,
            e.num_forward_calls,
        )  # fmt: skip

    before = counters()
    start = time.perf_counter()
    trajectories = asyncio.run(run_agent_loops(loop, items, params))
    wall = time.perf_counter() - start
    prefilled, reused, prefill_s, decode_s, forwards = (
        a - b for a, b in zip(counters(), before, strict=True)
    )
    run = {
        "wall_s": wall,
        "trajectories": len(trajectories),
        "thinking_tokens": sum(len(turn.response_ids) for t in trajectories for turn in t.turns),
        "requests": sum(len(t.turns) for t in trajectories),
        "prefill_tokens": prefilled,
        "reused_prompt_tokens": reused,  # copied: a repeated prompt, or a prefix of a finished row
        "prefill_s": prefill_s,
        "decode_s": decode_s,
        "forwards": forwards,
    }
    run.update(_time_update(update, trajectories, pad_token_id))
    run["step_s"] = wall + run["update_s"]
    return run


def _median_row(runs: list[dict[str, float]]) -> dict[str, Any]:
    walls = [r["wall_s"] for r in runs]
    median = statistics.median(walls)
    typical = min(runs, key=lambda r: abs(r["wall_s"] - median))  # its breakdown goes with the median
    row = {**typical, "wall_s": median, "wall_s_all": walls}
    for key in ("update_s", "step_s"):  # medians of their own over the same repeats
        row[key] = statistics.median(r[key] for r in runs)
    return row


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--longcot", required=True, help="LongCoT-RL checkpoint (global_step_N/) or HF dir")
    parser.add_argument("--delethink", required=True, help="Delethink-RL checkpoint or HF dir")
    parser.add_argument("--data", required=True, help="jsonl of problems; the first --prompts are used")
    parser.add_argument("--budgets", required=True, help="comma-separated thinking budgets, e.g. 512,1024")
    parser.add_argument("--chunk", type=int, required=True, help="Delethink's C")
    parser.add_argument("--keep-head", type=int, required=True)
    parser.add_argument("--keep-tail", type=int, required=True)
    parser.add_argument("--prompts", type=int, default=16, help="problems per batch (an RL step's prompts)")
    parser.add_argument("--samples", type=int, default=8, help="samples per problem (an RL step's n)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-question-tokens", type=int, default=64)
    parser.add_argument("--num-threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", required=True, help="where to write the JSON results")
    parser.add_argument(
        "--profile-update", action="store_true",
        help="profile one update per environment at the first budget instead of the timing table",
    )  # fmt: skip
    return parser.parse_args(argv)


@dataclass
class Bench:
    """Both trained models in one process, each with its engine and actor, and the batch they roll out:
    `--prompts` questions x `--samples` samples."""

    args: argparse.Namespace
    loaded: dict[str, tuple[Any, Any]]  # mode -> (tokenizer, engine)
    actors: dict[str, ActorSetup]
    questions: list[Any]

    @cached_property
    def items(self) -> list[Any]:
        return [item for item in self.questions for _ in range(self.args.samples)]

    def params(self, max_new_tokens: int, ignore_eos: bool = True) -> list[SamplingParams]:
        from verl.core.engine import SamplingParams
        from verl.utils.seeding import derive_seed

        # sample j of problem p: the same seed in both environments, so their first C tokens agree
        seeds = [derive_seed(self.args.seed, *divmod(i, self.args.samples)) for i in range(len(self.items))]
        return [SamplingParams(max_new_tokens, seed=seed, ignore_eos=ignore_eos) for seed in seeds]

    def loops(self, budget: int, delethink: DelethinkParams, ignore_eos: bool = True) -> dict[str, tuple]:
        """Each environment's agent loop at `budget` and its sampling parameters."""
        from verl.agent_loop.delethink import DelethinkAgentLoop
        from verl.agent_loop.single_turn import SingleTurnAgentLoop

        return {
            "longcot": (SingleTurnAgentLoop(self.loaded["longcot"][1]), self.params(budget, ignore_eos)),
            "delethink": (
                DelethinkAgentLoop(self.loaded["delethink"][1], delethink),
                self.params(self.args.chunk, ignore_eos),
            ),
        }

    def warm_up(self) -> None:
        """The first calls of a process pay one-off costs: one untimed rollout and update per model."""
        from verl.agent_loop.single_turn import SingleTurnAgentLoop

        pad_token_id = self.loaded["longcot"][0].pad_token_id
        for mode, (_, engine) in self.loaded.items():
            loop = SingleTurnAgentLoop(engine)
            _time_one(engine, loop, self.items, self.params(self.args.chunk), self.actors[mode], pad_token_id)

    def time_both(self, budget: int, delethink: DelethinkParams, ignore_eos: bool) -> dict[str, Any]:
        """Both environments at one budget, alternating; the medians and their ratio."""
        setups = self.loops(budget, delethink, ignore_eos)
        pad_token_id = self.loaded["longcot"][0].pad_token_id
        runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in MODES}
        for repeat in range(self.args.repeats):
            for mode in MODES if repeat % 2 == 0 else reversed(MODES):
                loop, sampling = setups[mode]
                runs[mode].append(
                    _time_one(loop.engine, loop, self.items, sampling, self.actors[mode], pad_token_id)
                )
        medians = {mode: _median_row(r) for mode, r in runs.items()}
        row = {"budget": budget, "max_chunks": delethink.max_chunks, **medians}
        row["delethink_over_longcot"] = row["delethink"]["wall_s"] / row["longcot"]["wall_s"]
        row["step_delethink_over_longcot"] = row["delethink"]["step_s"] / row["longcot"]["step_s"]
        return row


def print_header(bench: Bench) -> None:
    args = bench.args
    print(
        f"{len(bench.questions)} problems x {args.samples} samples, temperature 1, end-of-sequence ignored "
        f"unless said; median of {args.repeats} alternating repeats; Delethink C = {args.chunk}, "
        f"m = {args.keep_head + args.keep_tail}"
    )
    print("rollout: the batch's generation; step: rollout + old log-probs + PPO update")
    print(f"{'budget':>7}{'I':>4}{'LongCoT s':>11}{'Delethink s':>13}{'DT/LC':>7}{'DT prefill s':>14}"
          f"{'DT decode s':>13}{'LC decode s':>13}{'LC step s':>11}{'DT step s':>11}"
          f"{'step DT/LC':>12}")  # fmt: skip


def show(row: dict[str, Any], note: str = "") -> None:
    from tqdm import tqdm

    lc, dt = row["longcot"], row["delethink"]
    tqdm.write(
        f"{row['budget']:>7}{row['max_chunks']:>4}{lc['wall_s']:>11.2f}{dt['wall_s']:>13.2f}"
        f"{row['delethink_over_longcot']:>7.2f}{dt['prefill_s']:>14.2f}{dt['decode_s']:>13.2f}"
        f"{lc['decode_s']:>13.2f}{lc['step_s']:>11.2f}{dt['step_s']:>11.2f}"
        f"{row['step_delethink_over_longcot']:>12.2f}{note}"
    )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)

    from tqdm import tqdm

    from verl.core.delethink import DelethinkParams
    from verl.data.rl_dataset import load_prompts

    budgets = [int(b) for b in args.budgets.split(",")]
    head, tail = args.keep_head, args.keep_tail
    # checked before any model loads
    delethink = {b: DelethinkParams.for_budget(b, args.chunk, head, tail) for b in budgets}
    loaded = {mode: _load(getattr(args, mode), args.num_threads) for mode in MODES}
    actors = {mode: _actor(mode, getattr(args, mode), args, budgets[0]) for mode in MODES}
    tokenizer = loaded["longcot"][0]
    questions = load_prompts([args.data], tokenizer, "prompt", args.max_question_tokens, True)[: args.prompts]
    bench = Bench(args, loaded, actors, questions)
    bench.warm_up()
    if args.profile_update:
        return _profile_both(bench, delethink[budgets[0]], budgets[0])

    print_header(bench)
    # as in training first: end-of-sequence ends a sample, each model thinks as long as it does
    as_trained = bench.time_both(budgets[0], delethink[budgets[0]], ignore_eos=False)
    show(as_trained, "  (end-of-sequence honoured, as in training)")
    rows = []
    for budget in tqdm(budgets, desc="budgets", unit="budget", leave=False):
        rows.append(bench.time_both(budget, delethink[budget], ignore_eos=True))
        show(rows[-1])
    result = {
        "prompts": len(questions), "samples": args.samples, "repeats": args.repeats, "chunk": args.chunk,
        "keep_head": args.keep_head, "keep_tail": args.keep_tail, "num_threads": args.num_threads,
        "as_trained": as_trained, "rows": rows,
    }  # fmt: skip
    _write_json(Path(args.out), result)
    return result


def _write_json(path: Path, result: dict[str, Any]) -> None:
    from verl.utils.fs import atomic_write_text

    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")


def _profile_both(bench: Bench, delethink: DelethinkParams, budget: int) -> dict[str, Any]:
    """`--profile-update`: one rollout per environment at `budget` (end-of-sequence ignored), then its
    update under the profiler; print and write the split."""
    from verl.agent_loop.manager import run_agent_loops

    result: dict[str, Any] = {"budget": budget, "num_threads": bench.args.num_threads}
    trajectories = len(bench.items)
    print(
        f"update of {trajectories} trajectories at B = {budget}, profiled (op self time, one thread per op)"
    )
    for mode, (loop, sampling) in bench.loops(budget, delethink).items():
        trajectories = asyncio.run(run_agent_loops(loop, bench.items, sampling))
        row = _profile_update(bench.actors[mode], trajectories, bench.loaded[mode][0].pad_token_id)
        result[mode] = row
        others = ", ".join(f"{name.removeprefix('aten::')} {t:.2f}" for name, t in row["top_other"])
        print(
            f"{mode:>9}: update {row['update_s']:.2f} s, {row['train_tokens']} forward tokens; ops "
            f"{row['op_s']:.2f} s, matmul + attention {row['matmul_s']:.2f} s ({row['matmul_share']:.0%}); "
            f"next: {others}"
        )
    _write_json(Path(bench.args.out), result)
    return result


if __name__ == "__main__":
    main()
