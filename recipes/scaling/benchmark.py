"""An RL step's rollout and update cost against the thinking budget, LongCoT against Delethink.

    python -m recipes.scaling.benchmark [--quick] [--record docs/results/thinking_length_cost.yaml]
    python -m recipes.scaling.benchmark --longcot RUN/longcot/global_step_N \\
        --delethink RUN/delethink/global_step_N --data RUN/data/timing.jsonl --budgets 512,1024,2048,4096 \\
        --chunk-size 128 --keep-head 9 --keep-tail 55 --prompts 16 --samples 8 --repeats 3 --threads 2 \\
        --json RUN/eval/timing.json

The first line builds the tiny random model (one question, --batch samples of it; recipes/scaling/
README.md); the second loads two trained checkpoints, each with its own rollout engine and, on a second
copy, the trainer's actor with the testbed configs' update settings (the Markovian testbed's timing stage;
its report.py reads the JSON). At every budget L both environments write exactly L thinking tokens per
sample (end-of-sequence ignored): LongCoT one request of L tokens, Delethink C tokens, then chunks of
C - m (m = keep_head + keep_tail carried over) as many as fill L, each prefilling question + carry-over
again, less what the engine copies (identical prompts, and the question and head a chunk shares with its
trace's previous chunk). The environments alternate over --repeats repeats, in alternating order, so load
from other processes hits both alike. Per budget and environment (the JSON's rows):

- the step batch (--prompts problems x --samples samples, an RL step's): the rollout's wall (`wall_s`) and
  CPU (`cpu_s`) seconds, the engine's counters over it (prefilled and copied prompt tokens, prefill and
  decode seconds, forwards), the most context a decode attended to and the KV cache that gives, the peak
  resident memory (a phase's own with the tiny model, whose run has glibc return large blocks at once);
  then the update as the trainer makes it (old log-probs, unless in bypass mode as the tiny model's,
  then the PPO update): `update_s`, `update_cpu_s`, the tokens the actor ran through and its peak memory;
  `step_s` = rollout + update. Times are medians over the repeats (every repeat's are under "repeats";
  the scaling table takes the best CPU time), peak memory the highest.
- claim (c)'s per-token measure (under "distinct"; with checkpoints): one more rollout whose rows are
  --prompts x --samples DISTINCT problems of --data, one sample each, end-of-sequence ignored: the same
  rows at every budget. From the engine's counters over it:
      decode ms per token  = 1000 x decode seconds / tokens decoded
                             (every sampled token but each request's first, which the prefill samples)
      prefill ms per token = 1000 x prefill seconds / prompt tokens through a prefill forward
  No row copies another's question, so neither moves with how alike a model's samples are, and a decode
  forward carries the same rows at every budget, so what changes with L is the context each token is
  computed against. Claim (c): Delethink's decode ms per token at the largest budget / at the first <= 1.2
  (TARGET_C_FLAT, recipes/markovian_testbed/settings.py), LongCoT's growing more. The earlier measure, the
  step batch's rollout wall ms per thinking token, stays beside it in the JSON and the report.
- with checkpoints, one more pair at the first budget honours end-of-sequence, as training does
  ("as_trained").

--profile-update instead profiles one update per environment at the first budget (torch.profiler, after
an untimed rollout): how much of the actor's op time is matrix multiplication and attention kernels
(forward and backward), and which other ops take the rest.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm

from recipes.scaling.setups import (
    ENVIRONMENTS,
    BenchConfig,
    Checkpoints,
    Setup,
    TinyModel,
    checkpoint_setup,
    tiny_setup,
)
from recipes.scaling.step_timing import (
    MIB,
    profile_update,
    release_large_blocks_on_free,
    time_budget,
    warm_up,
)
from verl.core.delethink import DelethinkParams
from verl.tools.results import Record, Table, provenance, write_record
from verl.utils.fs import atomic_write_text
from verl.utils.peak_memory import peak_rss, reset_peak_rss

# I = 2^k - 1 chunks gives L = C * 2^(k-1) with the default C = 64, m = 32: 64, 128, ..., 8192 = 128 C
TINY_DEFAULTS = {"samples": 16, "repeats": 2, "chunks": [1, 3, 7, 15, 31, 63, 127, 255], "chunk_size": 64,
                 "keep_head": 8, "keep_tail": 24, "prompts": 1, "micro_tokens": 16384,
                 "share_prompt_prefix": True}  # fmt: skip
QUICK = {"samples": 8, "repeats": 1, "chunks": [1, 15, 63]}
CHECKPOINT_DEFAULTS = {"prompts": 16, "samples": 8, "repeats": 3, "max_question_tokens": 64}
TINY_ONLY = ("quick", "micro_tokens", "share_prompt_prefix")
CHECKPOINT_ONLY = ("data", "max_question_tokens", "prompts")
NEEDED_WITH_CHECKPOINTS = ("longcot", "delethink", "data", "chunk_size", "keep_head", "keep_tail")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    models = parser.add_argument_group("what is timed: the tiny random model, unless checkpoints are given")
    models.add_argument("--longcot", help="LongCoT-RL checkpoint (global_step_N/) or HF directory")
    models.add_argument("--delethink", help="Delethink-RL checkpoint or HF directory")
    models.add_argument(
        "--data", help="checkpoints: jsonl of at least --prompts x --samples distinct problems"
    )
    models.add_argument(
        "--max-question-tokens", type=int, help="checkpoints: longer questions are skipped (64)"
    )
    models.add_argument(
        "--quick",
        action="store_true",
        default=None,
        help="tiny model: batch 8, L = 64, 512, 2048, one repeat",
    )
    models.add_argument("--micro-tokens", type=int, help="tiny model: actor tokens per micro-batch (16384)")
    models.add_argument(
        "--share-prompt-prefix", action=argparse.BooleanOptionalAction,
        help="tiny model: Delethink's actor computes the prompt prefixes its rows share once (the default, "
        "as the testbed's Delethink config); --no-share-prompt-prefix trains it padded",
    )  # fmt: skip
    batch = parser.add_argument_group("batches and budgets")
    lengths = batch.add_mutually_exclusive_group()
    lengths.add_argument(
        "--budgets", help="comma-separated thinking budgets L, each C + whole chunks of C - m"
    )
    lengths.add_argument("--chunks", type=int, nargs="+", help="Delethink chunk counts I, one budget each")
    batch.add_argument("--chunk-size", type=int, help="C, Delethink's first-chunk budget (tiny model: 64)")
    batch.add_argument("--keep-head", type=int, help="carry-over head (tiny model: 8)")
    batch.add_argument("--keep-tail", type=int, help="carry-over tail (tiny model: 24)")
    batch.add_argument("--prompts", type=int, help="checkpoints: problems per step batch (16)")
    batch.add_argument(
        "--samples", "--batch", type=int, help="samples per problem (checkpoints 8; tiny 16, quick 8)"
    )
    batch.add_argument(
        "--repeats", type=int, help="alternating repeats per budget (checkpoints 3; tiny 2, quick 1)"
    )
    batch.add_argument("--seed", type=int, default=0, help="sampling seed")
    batch.add_argument("--threads", type=int, default=1, help="torch threads")
    out = parser.add_argument_group("what is written")
    out.add_argument("--json", type=Path, help="every measure as JSON (the testbed's eval/timing.json)")
    out.add_argument("--out", type=Path, help="the plot (tiny model: outputs/scaling/scaling.png)")
    out.add_argument("--record", type=Path, help="the table as a results record (docs/results/README.md)")
    out.add_argument(
        "--profile-update", action="store_true",
        help="profile one update per environment at the first budget instead of timing every budget",
    )  # fmt: skip
    return parser


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def budgets_from(
    args: argparse.Namespace, chunk_size: int, keep_head: int, keep_tail: int
) -> tuple[int, ...]:
    """--budgets as given, or the budget of each of --chunks' chunk counts."""
    if args.budgets is None:
        return tuple(
            DelethinkParams(chunk_size, keep_head, keep_tail, max_chunks=i).thinking_budget
            for i in args.chunks
        )
    try:
        return tuple(int(b) for b in args.budgets.split(","))
    except ValueError:
        raise ValueError(f"--budgets {args.budgets!r}: give comma-separated whole numbers") from None


def configs(args: argparse.Namespace, parser: argparse.ArgumentParser) -> tuple:
    """BenchConfig and the models' settings (TinyModel or Checkpoints) from the flags, each mode's defaults
    filled in; a flag of the other mode, a missing one or a bad value stops here, naming the flag."""
    trained = args.longcot is not None or args.delethink is not None
    if trained:
        missing = [flag(n) for n in NEEDED_WITH_CHECKPOINTS if getattr(args, n) is None]
        if args.budgets is None and args.chunks is None:
            missing.append("--budgets or --chunks")
        if missing:
            parser.error(f"with checkpoints give {', '.join(missing)}")
    other = [flag(n) for n in (TINY_ONLY if trained else CHECKPOINT_ONLY) if getattr(args, n) is not None]
    if other:
        parser.error(f"{other[0]} is for {'the tiny model' if trained else 'checkpoints'} only")
    if args.threads < 1:
        parser.error(f"--threads={args.threads}; it must be >= 1")
    defaults = CHECKPOINT_DEFAULTS if trained else {**TINY_DEFAULTS, **(QUICK if args.quick else {})}
    args = argparse.Namespace(
        **{name: defaults.get(name) if v is None else v for name, v in vars(args).items()}
    )
    try:
        shape = (args.chunk_size, args.keep_head, args.keep_tail)
        cfg = BenchConfig(
            tuple(sorted(set(budgets_from(args, *shape)))), *shape, args.prompts, args.samples, args.repeats,
            args.seed,
        )  # fmt: skip
        if trained:
            return cfg, Checkpoints(args.longcot, args.delethink, args.data, args.max_question_tokens)
        return cfg, TinyModel(args.micro_tokens, args.share_prompt_prefix)
    except ValueError as e:  # DelethinkParamsError too: a shape or budget that no chunks fill
        parser.error(str(e))


def progress_lines(row: dict[str, Any]) -> list[str]:
    """One line per environment of a timed budget: rollout and update, per-token times, peak memory."""
    lines = []
    for name, label in ENVIRONMENTS.items():
        run = row[name]
        distinct = run.get("distinct")
        decode = f"  distinct rows: decode {distinct['decode_ms_per_token']:.3f} ms/token" if distinct else ""
        lines.append(
            f"  L={row['budget']:5d} {label:9s} rollout {run['wall_s']:7.2f} s ({run['cpu_s']:.2f} CPU)  "
            f"update {run['update_s']:6.2f} s  peak RSS {run['rollout_rss'] / MIB:.0f} / "
            f"{run['update_rss'] / MIB:.0f} MiB{decode}"
        )
    return lines


def as_trained_line(row: dict[str, Any]) -> str:
    lc, dt = row["longcot"], row["delethink"]
    return (
        f"at L={row['budget']} with end-of-sequence honoured, as in training: LongCoT {lc['wall_s']:.2f} s "
        f"({lc['thinking_tokens']} thinking tokens), Delethink {dt['wall_s']:.2f} s "
        f"({dt['thinking_tokens']}): Delethink / LongCoT {row['delethink_over_longcot']:.2f}"
    )


def measure(setup: Setup, cfg: BenchConfig, log: Callable[[str], None] = print) -> tuple:
    """The as-trained pair (trained models only; else None), then every budget's row; and the last
    repeat's step trajectories by (environment, budget), for callers that check what was generated."""
    as_trained = None
    if setup.trained:
        as_trained = time_budget(setup, cfg, cfg.budgets[0], ignore_eos=False)[0]
        log(as_trained_line(as_trained))
    rows, trajectories = [], {}
    for budget in tqdm(cfg.budgets, desc="budgets", unit="budget", leave=False):
        row, kept = time_budget(setup, cfg, budget)
        rows.append(row)
        trajectories.update(((name, budget), t) for name, t in kept.items())
        for line in progress_lines(row):
            tqdm.write(line)
    return as_trained, rows, trajectories


def best(run: dict[str, Any], key: str) -> float:
    """The least time of `key` over the repeats: on a shared machine, the least disturbed one."""
    return min(r[key] for r in run["repeats"])


# the table's columns and their printed widths (env left-aligned, the rest right-aligned)
COLUMNS = {"L": 5, "env": 9, "rollout s": 9, "ms/token": 8, "max ctx": 7, "KV MiB": 7, "roll RSS": 8,
           "train s": 8, "train tok": 9, "train RSS": 9, "step s": 8}  # fmt: skip


def cells(budget: int, label: str, run: dict[str, Any]) -> list[str]:
    """One row of the table: seconds are the best repeat's CPU seconds, memory in MiB."""
    rollout_s, train_s = best(run, "cpu_s"), best(run, "update_cpu_s")
    return [
        str(budget), label, f"{rollout_s:.3f}", f"{1e3 * rollout_s / run['thinking_tokens']:.3f}",
        str(run["max_context"]), f"{run['peak_kv_bytes'] / MIB:.2f}", f"{run['rollout_rss'] / MIB:.0f}",
        f"{train_s:.3f}", str(run["train_tokens"]), f"{run['update_rss'] / MIB:.0f}",
        f"{rollout_s + train_s:.3f}",
    ]  # fmt: skip


def table_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    return [cells(row["budget"], label, row[name]) for row in rows for name, label in ENVIRONMENTS.items()]


def ratios(row: dict[str, Any]) -> tuple[float, float, float]:
    """LongCoT / Delethink best CPU time at one budget: rollout, update, whole step."""
    lc, dt = row["longcot"], row["delethink"]
    rollout = [best(run, "cpu_s") for run in (lc, dt)]
    train = [best(run, "update_cpu_s") for run in (lc, dt)]
    return rollout[0] / rollout[1], train[0] / train[1], (rollout[0] + train[0]) / (rollout[1] + train[1])


def aligned(row: list[str]) -> str:
    return " ".join(
        c.ljust(w) if name == "env" else c.rjust(w) for c, (name, w) in zip(row, COLUMNS.items(), strict=True)
    )


def format_table(rows: list[dict[str, Any]]) -> str:
    lines = [aligned(list(COLUMNS)), *(aligned(r) for r in table_rows(rows)), ""]
    lines.append(f"{'L':>5} {'LongCoT/Delethink:':>18} {'rollout':>7} {'train':>7} {'step':>7}")
    for row in rows:
        r, t, total = ratios(row)
        lines.append(f"{row['budget']:5d} {'':18} {r:7.2f} {t:7.2f} {total:7.2f}")
    return "\n".join(lines)


def growth(values: list[float]) -> str:
    return f"{values[0]:.3f} -> {values[-1]:.3f} ({values[-1] / values[0]:.2f}x)"


def summary_lines(rows: list[dict[str, Any]]) -> list[str]:
    """Claim (c)'s per-token growth from the first budget to the last (with a distinct pass), the step
    batch's, and the LongCoT / Delethink ratios at the last budget."""
    first, last = rows[0], rows[-1]
    span = f"L={first['budget']} -> {last['budget']}"
    lines = []
    if "distinct" in last["delethink"]:
        decode = {
            name: growth([row[name]["distinct"]["decode_ms_per_token"] for row in (first, last)])
            for name in ENVIRONMENTS
        }
        lines.append(
            f"decode ms/token, distinct rows, {span}: Delethink {decode['delethink']}, "
            f"LongCoT {decode['longcot']}"
        )
    per_token = [
        1e3 * best(row["delethink"], "cpu_s") / row["delethink"]["thinking_tokens"] for row in (first, last)
    ]
    lines.append(f"Delethink rollout ms/token {span}: {growth(per_token)}")
    rollout_ratio, _, step_ratio = ratios(last)
    lines.append(
        f"LongCoT/Delethink at L={last['budget']}: rollout {rollout_ratio:.2f}x, whole step {step_ratio:.2f}x"
    )
    return lines


def plot(rows: list[dict[str, Any]], out: Path, title: str) -> None:
    """Per-token rollout time, the step's time and the LongCoT / Delethink ratios against L."""
    import matplotlib

    matplotlib.use("Agg")  # files only; there is no display
    import matplotlib.pyplot as plt

    fig, (ax_token, ax_step, ax_ratio) = plt.subplots(1, 3, figsize=(15, 4.4))
    lengths = [row["budget"] for row in rows]
    for (name, label), color in zip(ENVIRONMENTS.items(), ("tab:red", "tab:blue"), strict=True):
        runs = [row[name] for row in rows]
        rollout_s, train_s = [best(r, "cpu_s") for r in runs], [best(r, "update_cpu_s") for r in runs]
        per_token = [1e3 * s / r["thinking_tokens"] for s, r in zip(rollout_s, runs, strict=True)]
        ax_token.plot(lengths, per_token, "o-", color=color, label=f"{label} rollout")
        if all("distinct" in r for r in runs):
            decode = [r["distinct"]["decode_ms_per_token"] for r in runs]
            ax_token.plot(lengths, decode, "s--", color=color, label=f"{label} decode, distinct rows")
        ax_step.plot(lengths, [a + b for a, b in zip(rollout_s, train_s, strict=True)], "o-", color=color,
                     label=f"{label} step")  # fmt: skip
        ax_step.plot(lengths, train_s, "s--", color=color, label=f"{label} train only")
    ax_token.set_ylabel("ms per sampled token")
    ax_token.set_ylim(bottom=0)
    ax_step.set_ylabel("CPU time (s): rollout + train")
    ax_step.set_yscale("log")
    by_phase = list(zip(*(ratios(row) for row in rows), strict=True))
    for values, (name, style) in zip(
        by_phase, (("rollout", "o-"), ("train", "s--"), ("step", "d-")), strict=True
    ):
        ax_ratio.plot(lengths, values, style, label=name)
    ax_ratio.axhline(1.0, color="gray", lw=0.8)
    ax_ratio.set_ylabel("LongCoT time / Delethink time")
    for ax in (ax_token, ax_step, ax_ratio):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("thinking length L (tokens)")
        ax.legend()
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def record(result: dict[str, Any], argv: list[str]) -> Record:
    """The run as a results record: the table, with what it ran on (docs/results/README.md)."""
    models = result["models"]
    batch = f"{result['prompts']} problems x {result['samples']} samples"
    what = (
        f"random-init tiny model, batch {result['samples']}" if models == "tiny"
        else f"{models['longcot']} and {models['delethink']}, {batch}"
    )  # fmt: skip
    prefix = {True: "shares prompt prefixes", False: "trains padded", None: "as its testbed config"}
    caption = (
        f"Each environment thinks exactly L tokens (end-of-sequence off): {what}, C = {result['chunk']}, "
        f"m = {result['keep_head']} + {result['keep_tail']}, the environments alternating, best of "
        f"{result['repeats']}, {result['num_threads']} torch thread(s); Delethink's actor "
        f"{prefix[result['share_prompt_prefix']]}. Seconds are CPU seconds; RSS in MiB."
    )
    return Record(
        name="thinking_length_cost", section="scaling",
        title="Rollout and training cost against thinking length",
        command=shlex.join(["python", "-m", "recipes.scaling.benchmark", *argv]),
        tables=[Table(list(COLUMNS), table_rows(result["rows"]), caption)], **provenance(),
    )  # fmt: skip


def write_json(path: Path, result: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps(result, indent=2) + "\n")
    print(f"wrote {path}")


def show_profile(result: dict[str, Any]) -> None:
    print(f"update of the step batch at L = {result['budget']}, profiled (op self time, one thread per op)")
    for name in ENVIRONMENTS:
        row = result[name]
        others = ", ".join(f"{op.removeprefix('aten::')} {t:.2f}" for op, t in row["top_other"])
        print(
            f"{name:>9}: update {row['update_s']:.2f} s, {row['train_tokens']} forward tokens; ops "
            f"{row['op_s']:.2f} s, matmul + attention {row['matmul_s']:.2f} s ({row['matmul_share']:.0%}); "
            f"next: {others}"
        )


def header(cfg: BenchConfig, settings: TinyModel | Checkpoints, setup: Setup) -> dict[str, Any]:
    """What the JSON says of the run before its rows."""
    trained = isinstance(settings, Checkpoints)
    return {
        "models": {"longcot": settings.longcot, "delethink": settings.delethink} if trained else "tiny",
        "data": settings.data if trained else None, "prompts": cfg.prompts, "samples": cfg.samples,
        "repeats": cfg.repeats, "chunk": cfg.chunk_size, "keep_head": cfg.keep_head,
        "keep_tail": cfg.keep_tail, "num_threads": torch.get_num_threads(), "seed": cfg.seed,
        "share_prompt_prefix": None if trained else settings.share_prompt_prefix,
        "distinct_rows": 0 if setup.distinct_batch is None else len(setup.distinct_batch.items),
    }  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser()
    args = parser.parse_args(argv)
    cfg, settings = configs(args, parser)
    torch.set_num_threads(args.threads)
    if isinstance(settings, Checkpoints):
        setup = checkpoint_setup(cfg, settings, distinct=not args.profile_update)
    else:
        # the scaling table's peak memory per phase needs it; the testbed's times keep the allocator the
        # trainer runs with (a mmap per large tensor costs page faults)
        release_large_blocks_on_free()
        setup = tiny_setup(cfg, settings)
    log = partial(print, flush=True)
    log(" ".join(f"{key}={value}" for key, value in header(cfg, settings, setup).items()))
    warm_up(setup, cfg)
    if args.profile_update:
        result = {**header(cfg, settings, setup), **profile_update(setup, cfg)}
        show_profile(result)
        if args.json:
            write_json(args.json, result)
        return {"config": cfg, "result": result}
    reset_peak_rss()
    log(f"resident memory after warm-up (models, optimizer, libraries): {peak_rss() / MIB:.0f} MiB")
    as_trained, rows, trajectories = measure(setup, cfg, log)
    result = {**header(cfg, settings, setup), "as_trained": as_trained, "rows": rows}
    print(format_table(rows))
    if args.json:
        write_json(args.json, result)
    out = args.out or (None if setup.trained else Path("outputs/scaling/scaling.png"))
    if out:
        models = "trained models" if setup.trained else "tiny Qwen2"
        shape = (
            f"C={cfg.chunk_size}, m={cfg.keep_head + cfg.keep_tail}, {cfg.prompts} x {cfg.samples} samples"
        )
        plot(rows, out, f"{models} on CPU, {shape}")
        print(f"wrote {out}")
    if args.record:
        write_record(args.record, record(result, argv))
        print(f"wrote {args.record}")
    print("\n".join(summary_lines(rows)))
    return {"config": cfg, "result": result, "trajectories": trajectories}


if __name__ == "__main__":
    main()
