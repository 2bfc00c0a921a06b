"""Rollout and training cost vs thinking length, LongCoT vs Delethink, on the tiny model on CPU.

    python -m recipes.scaling.benchmark [--quick] [--out outputs/scaling/scaling.png] [--threads 1]

Both environments think for exactly the same L tokens per trajectory: the engine gets no end-of-sequence
id, so every request runs to its budget. LongCoT samples L tokens in one response; Delethink samples I
chunks, the first of C tokens and each later one of C - m (m = keep_head + keep_tail carried over), so
L is DelethinkParams' thinking budget. LongCoT's context grows to prompt + L; Delethink's never exceeds
prompt + C.

Per (length, environment) it takes the CPU time of the rollout of a batch of trajectories and of one
actor training step (forward + backward + AdamW step with the trace-length-normalised loss, micro-batches
by token budget) on the generated rows, the two environments alternating within each repeat, and
measures each phase's peak resident memory: the kernel's high-water mark (VmHWM), reset through
/proc/self/clear_refs just before the phase, with glibc told to hand every block of 1 MiB or more back
to the system on free, so one phase's peak does not carry over into the next.
"""

from __future__ import annotations

import argparse
import asyncio
import ctypes
import dataclasses
import shlex
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import torch

from verl.agent_loop.base import AgentLoop
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import ActorConfig
from verl.core.batch import collate_rows, rows_per_trajectory, trajectory_rows
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem, Trajectory
from verl.models.tiny import build_model, build_tokenizer
from verl.tools.results import Record, Table, provenance, write_record
from verl.utils.peak_memory import peak_rss, reset_peak_rss
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.hf_engine import HFRolloutEngine

QUESTION = "What is 17 + 25? Think step by step."
ENVS = ("LongCoT", "Delethink")


@dataclass(frozen=True)
class BenchConfig:
    batch: int  # trajectories per rollout (all with the same question)
    chunks: tuple[int, ...]  # Delethink chunk counts I; each gives one thinking length L
    chunk_size: int = 64  # C
    keep_head: int = 8
    keep_tail: int = 24
    repeats: int = 1  # timings are the best of this many runs
    micro_tokens: int = 16384  # the actor's token budget per micro-batch (use_dynamic_bsz), both envs
    # Delethink's actor computes the prompt prefixes its rows share once (the testbed's Delethink config
    # does; LongCoT's long rows train faster on the padded path's causal kernel, so it stays padded)
    share_prompt_prefix: bool = True

    @property
    def carry(self) -> int:
        return self.keep_head + self.keep_tail

    def delethink(self, num_chunks: int) -> DelethinkParams:
        return DelethinkParams(self.chunk_size, self.keep_head, self.keep_tail, max_chunks=num_chunks)

    def thinking_length(self, num_chunks: int) -> int:
        return self.delethink(num_chunks).thinking_budget

    def __post_init__(self) -> None:
        if self.batch < 1:
            raise ValueError(f"--batch={self.batch}; it must be >= 1")
        if not self.chunks or min(self.chunks) < 1:
            raise ValueError(f"--chunks={list(self.chunks)}; give one or more chunk counts >= 1")
        if self.chunk_size <= self.carry:
            raise ValueError(
                f"--chunk-size={self.chunk_size} must exceed keep_head + keep_tail = {self.carry}, "
                "or later chunks have no room to think"
            )
        if self.repeats < 1:
            raise ValueError(f"--repeats={self.repeats}; it must be >= 1")
        if self.micro_tokens < 1:
            raise ValueError(f"--micro-tokens={self.micro_tokens}; it must be >= 1")


@dataclass
class Measurement:
    env: str
    thinking_length: int
    rollout_s: float
    train_s: float
    tokens: int  # sampled tokens in the whole batch
    # real tokens the training forward runs through (actor/forward_tokens): Delethink re-reads the carry
    # per chunk, and the question too unless the actor shares prompt prefixes
    train_tokens: int
    max_context: int  # longest turn (prompt + response): the most keys any decode step attended to
    peak_kv_bytes: int  # KV cache of the largest wave at its longest, computed from the model shape
    rollout_rss: int  # peak resident bytes of the whole process during the rollout
    train_rss: int  # the same during the training step

    @property
    def total_s(self) -> float:
        return self.rollout_s + self.train_s

    @property
    def ms_per_token(self) -> float:
        return 1e3 * self.rollout_s / self.tokens


def kv_bytes_per_token(model: torch.nn.Module) -> int:
    cfg = model.config
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    element_size = next(model.parameters()).element_size()
    return 2 * cfg.num_hidden_layers * cfg.num_key_value_heads * head_dim * element_size  # 2: keys + values


MIB = 2**20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number


def release_large_blocks_on_free() -> None:
    """Serve every allocation of 1 MiB or more by mmap, which free returns to the system at once.
    glibc otherwise raises its mmap threshold after the first large free, and later tensors of up to
    that size come from a heap that keeps freed memory: a long LongCoT phase would then inflate the
    resident memory of every later phase."""
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MIB)


def timed(fn: Callable[[], object]) -> tuple[float, object, int]:
    """CPU seconds of one call, its result, and the process's peak resident bytes during it. CPU time,
    not wall time: on a shared machine other jobs stretch the wall time of a one-thread run by a factor
    that changes from minute to minute, and barely change the CPU time it needs."""
    reset_peak_rss()
    start = time.process_time()
    result = fn()
    return time.process_time() - start, result, peak_rss()


def make_loop(env: str, engine: HFRolloutEngine, cfg: BenchConfig, num_chunks: int) -> AgentLoop:
    if env == "LongCoT":
        return SingleTurnAgentLoop(engine)
    return DelethinkAgentLoop(engine, cfg.delethink(num_chunks))


def rollout(env: str, engine: HFRolloutEngine, prompt: list[int], cfg: BenchConfig, num_chunks: int):
    """One batch of trajectories that all think for exactly thinking_length(num_chunks) tokens."""
    loop = make_loop(env, engine, cfg, num_chunks)
    first_budget = cfg.thinking_length(num_chunks) if env == "LongCoT" else cfg.chunk_size
    params = [SamplingParams(max_new_tokens=first_budget, seed=i) for i in range(cfg.batch)]
    items = [PromptItem(prompt, "benchmark", "")] * cfg.batch
    return asyncio.run(run_agent_loops(loop, items, params))


def train_step(
    actor: DataParallelPPOActor, trajectories: list[Trajectory], pad_token_id: int
) -> dict[str, float]:
    """One PPO update on all rows; its metrics."""
    # alternating advantages so the policy-gradient loss is not zero
    rows = trajectory_rows(trajectories, [1.0 if i % 2 else -1.0 for i in range(len(trajectories))])
    batch = collate_rows(rows, pad_token_id)
    batch["old_log_probs"] = batch["rollout_log_probs"]  # on-policy: the sampler's log-probs are the old ones
    return actor.update_policy(
        batch, num_mini_batches=1, rows_per_trajectory=rows_per_trajectory(len(rows), len(trajectories))
    )


@dataclass
class Setup:
    """What every measurement shares: the prompt, one engine, and each environment's actor."""

    prompt: list[int]
    pad_token_id: int
    engine: HFRolloutEngine
    actors: dict[str, DataParallelPPOActor]


def build(cfg: BenchConfig) -> Setup:
    """The tiny model as the engine's policy and, in a second copy, the actor both environments train."""
    tokenizer = build_tokenizer()
    longest = cfg.thinking_length(max(cfg.chunks))
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True, return_dict=False
    )
    positions = max(1024, len(prompt) + longest)
    # eos_token_ids=[]: nothing ends a trajectory early, so every one thinks for exactly its budget
    engine = HFRolloutEngine(
        build_model(tokenizer, max_position_embeddings=positions),
        eos_token_ids=[],
        pad_token_id=tokenizer.pad_token_id,
    )
    actor_model = build_model(tokenizer, max_position_embeddings=positions)
    # micro-batches by token budget, as a trainer with rows this uneven in count would use: Delethink's
    # I x B short rows then share forwards, and a LongCoT row of L tokens is not split either way
    actor_config = ActorConfig(
        loss_agg_mode="seq-mean-token-norm-trace-length",
        use_dynamic_bsz=True,
        ppo_max_token_len_per_gpu=cfg.micro_tokens,
    )
    optimizer = torch.optim.AdamW(actor_model.parameters(), lr=1e-6)
    # one model and optimizer; with share_prompt_prefix Delethink's rows go through the shared-prefix forward
    actors = {
        env: DataParallelPPOActor(
            actor_model,
            optimizer,
            actor_config,
            temperature=1.0,
            norm_length=longest,
            share_prompt_prefix=cfg.share_prompt_prefix and env == "Delethink",
        )  # fmt: skip
        for env in ENVS
    }
    return Setup(prompt, tokenizer.pad_token_id, engine, actors)


@dataclass
class Timed:
    """One length's repeats, per (env, phase) with phase "rollout" or "train": the best time and the
    highest peak; per env: the last repeat's trajectories and the training forward's tokens."""

    best: dict[tuple[str, str], float] = field(default_factory=lambda: defaultdict(lambda: float("inf")))
    peak: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))
    trajectories: dict[str, list[Trajectory]] = field(default_factory=dict)
    train_tokens: dict[str, int] = field(default_factory=dict)

    def add(self, env: str, phase: str, seconds: float, rss: int) -> None:
        self.best[env, phase] = min(self.best[env, phase], seconds)
        self.peak[env, phase] = max(self.peak[env, phase], rss)


def time_length(setup: Setup, cfg: BenchConfig, num_chunks: int) -> Timed:
    """`cfg.repeats` rollouts and training steps of both environments at one length. The environments
    alternate within each repeat, so a change in machine load hits both alike."""
    timed_runs = Timed()
    for _ in range(cfg.repeats):
        for env in ENVS:
            seconds, trajs, rss = timed(partial(rollout, env, setup.engine, setup.prompt, cfg, num_chunks))
            timed_runs.add(env, "rollout", seconds, rss)
            timed_runs.trajectories[env] = trajs
            seconds, metrics, rss = timed(partial(train_step, setup.actors[env], trajs, setup.pad_token_id))
            timed_runs.add(env, "train", seconds, rss)
            timed_runs.train_tokens[env] = round(metrics["actor/forward_tokens"])
    return timed_runs


def measurement(env: str, length: int, runs: Timed, batch: int, kv_per_token: int) -> Measurement:
    trajs = runs.trajectories[env]
    max_context = max(len(t.prompt_ids) + len(t.response_ids) for tr in trajs for t in tr.turns)
    return Measurement(
        env=env,
        thinking_length=length,
        rollout_s=runs.best[env, "rollout"],
        train_s=runs.best[env, "train"],
        tokens=sum(tr.thinking_tokens for tr in trajs),
        train_tokens=runs.train_tokens[env],
        max_context=max_context,
        # every trajectory's turns finish together, so each wave holds the whole batch
        peak_kv_bytes=batch * max_context * kv_per_token,
        rollout_rss=runs.peak[env, "rollout"],
        train_rss=runs.peak[env, "train"],
    )


def measure(cfg: BenchConfig, log: Callable[[str], None] = print) -> tuple[list[Measurement], dict]:
    """Run every (length, environment); return the measurements and the trajectories of each run
    (keyed by (env, thinking_length)) so callers can check what was generated."""
    setup = build(cfg)
    kv_per_token = kv_bytes_per_token(setup.engine.model)
    # warm-up: first calls pay for lazy initialisation (kernels, optimizer state) that is not rollout cost
    warm = dataclasses.replace(cfg, chunks=(2,), repeats=1)
    for env in ENVS:
        train_step(setup.actors[env], rollout(env, setup.engine, setup.prompt, warm, 2), setup.pad_token_id)
    reset_peak_rss()
    log(f"resident memory after warm-up (models, optimizer, libraries): {peak_rss() / MIB:.0f} MiB")

    results, trajectories = [], {}
    for num_chunks in cfg.chunks:
        length = cfg.thinking_length(num_chunks)
        runs = time_length(setup, cfg, num_chunks)
        for env in ENVS:
            trajectories[(env, length)] = runs.trajectories[env]
            m = measurement(env, length, runs, cfg.batch, kv_per_token)
            results.append(m)
            log(
                f"  L={length:4d} {env:9s} rollout {m.rollout_s:7.2f}s  train {m.train_s:7.2f}s  "
                f"peak RSS {m.rollout_rss / MIB:.0f} / {m.train_rss / MIB:.0f} MiB"
            )
    return results, trajectories


def ratios(results: list[Measurement]) -> dict[int, tuple[float, float, float]]:
    """Per thinking length: LongCoT / Delethink for (rollout, train, whole step = rollout + train) time."""
    by_key = {(m.env, m.thinking_length): m for m in results}
    out = {}
    for length in sorted({m.thinking_length for m in results}):
        lc, dt = by_key[("LongCoT", length)], by_key[("Delethink", length)]
        out[length] = (lc.rollout_s / dt.rollout_s, lc.train_s / dt.train_s, lc.total_s / dt.total_s)
    return out


# the table's columns and their printed widths (env left-aligned, the rest right-aligned)
COLUMNS = {"L": 5, "env": 9, "rollout s": 9, "ms/token": 8, "max ctx": 7, "KV MiB": 7, "roll RSS": 8,
           "train s": 8, "train tok": 9, "train RSS": 9, "step s": 8}  # fmt: skip


def measurement_cells(m: Measurement) -> list[str]:
    """One row of the table: seconds are CPU seconds, memory in MiB."""
    return [
        str(m.thinking_length), m.env, f"{m.rollout_s:.3f}", f"{m.ms_per_token:.3f}", str(m.max_context),
        f"{m.peak_kv_bytes / MIB:.2f}", f"{m.rollout_rss / MIB:.0f}", f"{m.train_s:.3f}", str(m.train_tokens),
        f"{m.train_rss / MIB:.0f}", f"{m.total_s:.3f}",
    ]  # fmt: skip


def aligned(cells: list[str]) -> str:
    return " ".join(
        c.ljust(w) if name == "env" else c.rjust(w)
        for c, (name, w) in zip(cells, COLUMNS.items(), strict=True)
    )


def format_table(results: list[Measurement]) -> str:
    lines = [aligned(list(COLUMNS)), *(aligned(measurement_cells(m)) for m in results), ""]
    lines.append(f"{'L':>5} {'LongCoT/Delethink:':>18} {'rollout':>7} {'train':>7} {'step':>7}")
    for length, (r, t, total) in ratios(results).items():
        lines.append(f"{length:5d} {'':18} {r:7.2f} {t:7.2f} {total:7.2f}")
    return "\n".join(lines)


def plot(results: list[Measurement], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; there is no display
    import matplotlib.pyplot as plt

    fig, (ax_token, ax_step, ax_ratio) = plt.subplots(1, 3, figsize=(15, 4.4))
    for env, color in zip(ENVS, ("tab:red", "tab:blue"), strict=True):
        ms = [m for m in results if m.env == env]
        lengths = [m.thinking_length for m in ms]
        ax_token.plot(lengths, [m.ms_per_token for m in ms], "o-", color=color, label=env)
        ax_step.plot(lengths, [m.total_s for m in ms], "o-", color=color, label=f"{env} step")
        ax_step.plot(lengths, [m.train_s for m in ms], "s--", color=color, label=f"{env} train only")
    ax_token.set_ylabel("rollout ms per sampled token")
    ax_token.set_ylim(bottom=0)
    ax_step.set_ylabel("CPU time (s): rollout + train")
    ax_step.set_yscale("log")
    r = ratios(results)
    lengths = list(r)
    for i, (name, style) in enumerate((("rollout", "o-"), ("train", "s--"), ("step", "d-"))):
        ax_ratio.plot(lengths, [r[length][i] for length in lengths], style, label=name)
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


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(description="Rollout + training cost vs thinking length on CPU.")
    parser.add_argument(
        "--quick", action="store_true", help="batch 8, L = 64, 512, 2048, one repeat (about a minute)"
    )
    parser.add_argument("--out", type=Path, default=Path("outputs/scaling/scaling.png"), help="plot path")
    parser.add_argument(
        "--record", type=Path, help="also write the table as a results record (docs/results/)"
    )
    parser.add_argument("--batch", type=int, help="trajectories per rollout (default 16, quick 8)")
    parser.add_argument("--chunks", type=int, nargs="+", help="Delethink chunk counts I, one per length")
    parser.add_argument("--chunk-size", type=int, default=64, help="C, Delethink's first-chunk budget")
    parser.add_argument("--keep-head", type=int, default=8)
    parser.add_argument("--keep-tail", type=int, default=24)
    parser.add_argument("--repeats", type=int, help="best-of repeats (default 2, quick 1)")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--micro-tokens",
        type=int,
        default=16384,
        help="actor tokens per micro-batch (ppo_max_token_len_per_gpu)",
    )
    parser.add_argument(
        "--share-prompt-prefix",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="Delethink's actor computes the prompt prefixes its rows share once (model.share_prompt_prefix, "
        "as the testbed's Delethink config); --no-share-prompt-prefix trains it padded",
    )
    args = parser.parse_args(argv)
    # I = 2^k - 1 chunks gives L = C * 2^(k-1) with the default C = 64, m = 32: 64, 128, ..., 8192 = 128 C
    defaults = (
        dict(batch=8, chunks=[1, 15, 63], repeats=1)
        if args.quick
        else dict(batch=16, chunks=[1, 3, 7, 15, 31, 63, 127, 255], repeats=2)
    )
    cfg = BenchConfig(
        batch=args.batch or defaults["batch"],
        chunks=tuple(sorted(set(args.chunks or defaults["chunks"]))),
        chunk_size=args.chunk_size,
        keep_head=args.keep_head,
        keep_tail=args.keep_tail,
        repeats=args.repeats or defaults["repeats"],
        micro_tokens=args.micro_tokens,
        share_prompt_prefix=args.share_prompt_prefix,
    )
    return cfg, args


def record(cfg: BenchConfig, results: list[Measurement], argv: list[str]) -> Record:
    """The run as a results record: the table, with what it ran on (docs/results/README.md)."""
    prefix = "shares prompt prefixes" if cfg.share_prompt_prefix else "trains padded"
    caption = (
        f"Each environment thinks exactly L tokens (end-of-sequence off): random-init tiny model, batch "
        f"{cfg.batch}, C = {cfg.chunk_size}, m = {cfg.keep_head} + {cfg.keep_tail}, the environments "
        f"alternating, best of {cfg.repeats}, {torch.get_num_threads()} torch thread(s); Delethink's actor "
        f"{prefix}. Seconds are CPU seconds; RSS in MiB."
    )
    return Record(
        name="thinking_length_cost", section="scaling",
        title="Rollout and training cost against thinking length",
        command=shlex.join(["python", "-m", "recipes.scaling.benchmark", *argv]),
        tables=[Table(list(COLUMNS), [measurement_cells(m) for m in results], caption)], **provenance(),
    )  # fmt: skip


def main(argv: list[str] | None = None) -> dict:
    argv = sys.argv[1:] if argv is None else argv
    cfg, args = parse_args(argv)
    out = args.out
    torch.set_num_threads(args.threads)
    release_large_blocks_on_free()
    print(
        f"batch={cfg.batch} C={cfg.chunk_size} keep_head={cfg.keep_head} keep_tail={cfg.keep_tail} "
        f"chunks={list(cfg.chunks)} repeats={cfg.repeats} threads={torch.get_num_threads()} "
        f"share_prompt_prefix={cfg.share_prompt_prefix}"
    )
    results, trajectories = measure(cfg, log=partial(print, flush=True))
    print(format_table(results))
    plot(results, out, f"tiny Qwen2 on CPU, batch {cfg.batch}, C={cfg.chunk_size}, m={cfg.carry}")
    print(f"wrote {out}")
    if args.record:
        write_record(args.record, record(cfg, results, argv))
        print(f"wrote {args.record}")
    delethink = [m for m in results if m.env == "Delethink"]
    shortest, longest = delethink[0], delethink[-1]
    print(
        f"Delethink rollout ms/token L={shortest.thinking_length} -> {longest.thinking_length}: "
        f"{shortest.ms_per_token:.3f} -> {longest.ms_per_token:.3f} "
        f"({longest.ms_per_token / shortest.ms_per_token:.2f}x)"
    )
    rollout_ratio, _, step_ratio = ratios(results)[longest.thinking_length]
    print(
        f"LongCoT/Delethink at L={longest.thinking_length}: rollout {rollout_ratio:.2f}x, "
        f"whole step {step_ratio:.2f}x"
    )
    return {"config": cfg, "results": results, "trajectories": trajectories}


if __name__ == "__main__":
    main()
