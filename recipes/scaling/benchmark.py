"""Rollout and training cost vs thinking length, LongCoT vs Delethink, on the tiny model on CPU.

    python -m recipes.scaling.benchmark [--quick] [--out outputs/scaling/scaling.png]

Both environments think for exactly the same L tokens per trajectory: the engine gets no end-of-sequence
id, so every request runs to its budget. LongCoT samples L tokens in one response; Delethink samples I
chunks, the first of C tokens and each later one of C - m (m = keep_head + keep_tail carried over), so
L = C + (I - 1)(C - m). LongCoT's context grows to prompt + L; Delethink's never exceeds prompt + C.

Per (length, environment) it times the rollout of a batch of trajectories and one actor training step
(forward + backward + AdamW step with the trace-length-normalised loss) on the generated rows.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from verl.agent_loop.base import AgentLoop, Trajectory
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.delethink_params import DelethinkParams
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.data.rl_dataset import PromptItem
from verl.models.tiny import build_model, build_tokenizer
from verl.trainer.config_schema import ActorConfig
from verl.trainer.ppo.batch import collate_rows, flat_batch_correction_ratio, trajectory_rows
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.base import SamplingParams
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

    @property
    def carry(self) -> int:
        return self.keep_head + self.keep_tail

    def thinking_length(self, num_chunks: int) -> int:
        return self.chunk_size + (num_chunks - 1) * (self.chunk_size - self.carry)

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


@dataclass
class Measurement:
    env: str
    thinking_length: int
    rollout_s: float
    train_s: float
    tokens: int  # sampled tokens in the whole batch
    train_tokens: (
        int  # tokens the training forward runs through: Delethink re-reads question + carry per chunk
    )
    max_context: int  # longest turn (prompt + response): the most keys any decode step attended to
    peak_kv_bytes: int  # KV cache of the largest wave at its longest, computed from the model shape

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


def best_time(fn: Callable[[], object], repeats: int) -> tuple[float, object]:
    """Best wall time of `repeats` calls (the run least disturbed by other processes) and the last result."""
    best, result = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def make_loop(env: str, engine: HFRolloutEngine, cfg: BenchConfig, num_chunks: int) -> AgentLoop:
    if env == "LongCoT":
        return SingleTurnAgentLoop(engine)
    params = DelethinkParams(
        chunk_size=cfg.chunk_size, keep_head=cfg.keep_head, keep_tail=cfg.keep_tail, max_chunks=num_chunks
    )
    return DelethinkAgentLoop(engine, params)


def rollout(env: str, engine: HFRolloutEngine, prompt: list[int], cfg: BenchConfig, num_chunks: int):
    """One batch of trajectories that all think for exactly thinking_length(num_chunks) tokens."""
    loop = make_loop(env, engine, cfg, num_chunks)
    first_budget = cfg.thinking_length(num_chunks) if env == "LongCoT" else cfg.chunk_size
    params = [SamplingParams(max_new_tokens=first_budget, seed=i) for i in range(cfg.batch)]
    items = [PromptItem(prompt, "benchmark", "")] * cfg.batch
    return asyncio.run(run_agent_loops(loop, items, params))


def train_step(actor: DataParallelPPOActor, trajectories: list[Trajectory], pad_token_id: int) -> int:
    """One PPO update on all rows; returns the tokens (prompt + response, no padding) it ran through."""
    # alternating advantages so the policy-gradient loss is not zero
    rows = trajectory_rows(trajectories, [1.0 if i % 2 else -1.0 for i in range(len(trajectories))])
    batch = collate_rows(rows, pad_token_id)
    batch["old_log_probs"] = batch["rollout_log_probs"]  # on-policy: the sampler's log-probs are the old ones
    actor.update_policy(
        batch, num_mini_batches=1, correction_ratio=flat_batch_correction_ratio(len(rows), len(trajectories))
    )
    return int(batch["attention_mask"].sum())


def measure(cfg: BenchConfig, log: Callable[[str], None] = print) -> tuple[list[Measurement], dict]:
    """Run every (length, environment); return the measurements and the trajectories of each run
    (keyed by (env, thinking_length)) so callers can check what was generated."""
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
    actor_config = ActorConfig(
        loss_agg_mode="seq-mean-token-norm-trace-length", ppo_micro_batch_size_per_gpu=cfg.batch
    )
    actor = DataParallelPPOActor(
        actor_model,
        torch.optim.AdamW(actor_model.parameters(), lr=1e-6),
        actor_config,
        temperature=1.0,
        norm_length=longest,
    )
    kv_per_token = kv_bytes_per_token(engine.model)

    # warm-up: first calls pay for lazy initialisation (kernels, optimizer state) that is not rollout cost
    warm = dataclasses.replace(cfg, chunks=(2,), repeats=1)
    for env in ENVS:
        train_step(actor, rollout(env, engine, prompt, warm, 2), tokenizer.pad_token_id)

    results, trajectories = [], {}
    for num_chunks in cfg.chunks:
        length = cfg.thinking_length(num_chunks)
        for env in ENVS:
            rollout_s, trajs = best_time(partial(rollout, env, engine, prompt, cfg, num_chunks), cfg.repeats)
            train_s, train_tokens = best_time(
                partial(train_step, actor, trajs, tokenizer.pad_token_id), cfg.repeats
            )
            max_context = max(len(t.prompt_ids) + len(t.response_ids) for tr in trajs for t in tr.turns)
            m = Measurement(
                env=env,
                thinking_length=length,
                rollout_s=rollout_s,
                train_s=train_s,
                tokens=sum(tr.trace_length for tr in trajs),
                train_tokens=train_tokens,
                max_context=max_context,
                # every trajectory's turns finish together, so each wave holds the whole batch
                peak_kv_bytes=cfg.batch * max_context * kv_per_token,
            )
            results.append(m)
            trajectories[(env, length)] = trajs
            log(f"  L={length:4d} {env:9s} rollout {rollout_s:6.2f}s  train {train_s:6.2f}s")
    return results, trajectories


def ratios(results: list[Measurement]) -> dict[int, tuple[float, float, float]]:
    """Per thinking length: LongCoT / Delethink for (rollout, train step, total) time."""
    by_key = {(m.env, m.thinking_length): m for m in results}
    out = {}
    for length in sorted({m.thinking_length for m in results}):
        lc, dt = by_key[("LongCoT", length)], by_key[("Delethink", length)]
        out[length] = (lc.rollout_s / dt.rollout_s, lc.train_s / dt.train_s, lc.total_s / dt.total_s)
    return out


def format_table(results: list[Measurement]) -> str:
    lines = [
        f"{'L':>5} {'env':9} {'rollout s':>9} {'ms/token':>8} {'tok/s':>7} {'max ctx':>7} "
        f"{'KV MiB':>7} {'train s':>7} {'train tok':>9}"
    ]
    for m in results:
        lines.append(
            f"{m.thinking_length:5d} {m.env:9} {m.rollout_s:9.3f} {m.ms_per_token:8.3f} "
            f"{m.tokens / m.rollout_s:7.0f} {m.max_context:7d} {m.peak_kv_bytes / 2**20:7.2f} "
            f"{m.train_s:7.3f} {m.train_tokens:9d}"
        )
    lines.append("")
    lines.append(f"{'L':>5} {'LongCoT/Delethink:':>18} {'rollout':>7} {'train':>7} {'total':>7}")
    for length, (r, t, total) in ratios(results).items():
        lines.append(f"{length:5d} {'':18} {r:7.2f} {t:7.2f} {total:7.2f}")
    return "\n".join(lines)


def plot(results: list[Measurement], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only; there is no display
    import matplotlib.pyplot as plt

    fig, (ax_time, ax_ratio) = plt.subplots(1, 2, figsize=(11, 4.2))
    for env, color in zip(ENVS, ("tab:red", "tab:blue"), strict=True):
        ms = [m for m in results if m.env == env]
        lengths = [m.thinking_length for m in ms]
        ax_time.plot(lengths, [m.rollout_s for m in ms], "o-", color=color, label=f"{env} rollout")
        ax_time.plot(lengths, [m.train_s for m in ms], "s--", color=color, label=f"{env} train step")
    ax_time.set_xlabel("thinking length L (tokens)")
    ax_time.set_ylabel("wall time (s)")
    ax_time.legend()
    ax_time.grid(alpha=0.3)
    r = ratios(results)
    lengths = list(r)
    for i, (name, style) in enumerate((("rollout", "o-"), ("train step", "s--"), ("total", "d-"))):
        ax_ratio.plot(lengths, [r[length][i] for length in lengths], style, label=name)
    ax_ratio.axhline(1.0, color="gray", lw=0.8)
    ax_ratio.set_xlabel("thinking length L (tokens)")
    ax_ratio.set_ylabel("LongCoT time / Delethink time")
    ax_ratio.legend()
    ax_ratio.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def parse_args(argv: list[str] | None) -> tuple[BenchConfig, Path]:
    parser = argparse.ArgumentParser(description="Rollout + training cost vs thinking length on CPU.")
    parser.add_argument("--quick", action="store_true", help="small batch, few lengths, one repeat (~1 min)")
    parser.add_argument("--out", type=Path, default=Path("outputs/scaling/scaling.png"), help="plot path")
    parser.add_argument("--batch", type=int, help="trajectories per rollout (default 16, quick 4)")
    parser.add_argument("--chunks", type=int, nargs="+", help="Delethink chunk counts I, one per length")
    parser.add_argument("--chunk-size", type=int, default=64, help="C, Delethink's first-chunk budget")
    parser.add_argument("--keep-head", type=int, default=8)
    parser.add_argument("--keep-tail", type=int, default=24)
    parser.add_argument("--repeats", type=int, help="best-of repeats (default 3, quick 1)")
    args = parser.parse_args(argv)
    defaults = (
        dict(batch=4, chunks=[1, 2, 4, 8], repeats=1)
        if args.quick
        else dict(batch=16, chunks=[1, 2, 4, 8, 16, 32, 64], repeats=3)
    )
    cfg = BenchConfig(
        batch=args.batch or defaults["batch"],
        chunks=tuple(sorted(set(args.chunks or defaults["chunks"]))),
        chunk_size=args.chunk_size,
        keep_head=args.keep_head,
        keep_tail=args.keep_tail,
        repeats=args.repeats or defaults["repeats"],
    )
    return cfg, args.out


def main(argv: list[str] | None = None) -> dict:
    cfg, out = parse_args(argv)
    # respect OMP_NUM_THREADS when set; otherwise 2 threads, the machine this was written for
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", 2)))
    print(
        f"batch={cfg.batch} C={cfg.chunk_size} keep_head={cfg.keep_head} keep_tail={cfg.keep_tail} "
        f"chunks={list(cfg.chunks)} repeats={cfg.repeats} threads={torch.get_num_threads()}"
    )
    results, trajectories = measure(cfg)
    print(format_table(results))
    plot(results, out, f"tiny Qwen2 on CPU, batch {cfg.batch}, C={cfg.chunk_size}, m={cfg.carry}")
    print(f"wrote {out}")
    longest = max(m.thinking_length for m in results)
    print(f"LongCoT/Delethink total time ratio at L={longest}: {ratios(results)[longest][2]:.2f}")
    return {"config": cfg, "results": results, "trajectories": trajectories}


if __name__ == "__main__":
    main()
