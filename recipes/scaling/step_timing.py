"""Timing an RL step of each environment at a thinking budget: the rollout, the update, and the
distinct-problem rollout of claim (c)'s per-token measure (benchmark.py's docstring defines each
measure). Every rollout ignores end-of-sequence unless said, so every sample writes its whole budget.
"""

from __future__ import annotations

import asyncio
import ctypes
import statistics
import time
from typing import Any

from torch.profiler import ProfilerActivity, profile

from recipes.scaling.setups import ENVIRONMENTS, ActorSetup, Batch, BenchConfig, Environment, Setup
from verl.agent_loop.base import AgentLoop
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.core.batch import collate_rows, pad_rows_to_multiple, rows_per_trajectory, trajectory_rows
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import Trajectory
from verl.utils.peak_memory import peak_rss, reset_peak_rss
from verl.workers.rollout.hf_engine import HFRolloutEngine

Measures = dict[str, Any]
MIB = 2**20
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter number
# The kernels doing the update's arithmetic on CPU: linear layers (mm / addmm, and bmm where batched) and
# sdpa's attention, forward and backward. Every other op is elementwise work, copies, or bookkeeping.
MATMUL_OPS = frozenset({
    "aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
    "aten::_scaled_dot_product_flash_attention_for_cpu",
    "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
})  # fmt: skip


def release_large_blocks_on_free() -> None:
    """Serve every allocation of 1 MiB or more by mmap, which free returns to the system at once.
    glibc otherwise raises its mmap threshold after the first large free, and later tensors of up to
    that size come from a heap that keeps freed memory: a long LongCoT phase would then inflate the
    resident memory of every later phase."""
    ctypes.CDLL(None).mallopt(M_MMAP_THRESHOLD, MIB)


def per_token_ms(seconds: float, tokens: int) -> float:
    """Milliseconds per token; NaN for no tokens (a pass that prefilled nothing: every prompt copied)."""
    return 1e3 * seconds / tokens if tokens else float("nan")


def engine_counters(engine: HFRolloutEngine) -> Measures:
    return {
        "prefill_tokens": engine.num_prefill_tokens,  # prompt tokens through a prefill forward
        "reused_prompt_tokens": engine.num_reused_prompt_tokens,  # copied: a repeated prompt, a stored prefix
        "prefill_s": engine.prefill_seconds,
        "decode_s": engine.decode_seconds,
        "forwards": engine.num_forward_calls,
    }


def rollout(env: Environment, loop: AgentLoop, batch: Batch, params: list[SamplingParams]) -> tuple:
    """One rollout of `batch`: its measures (wall and CPU seconds, the engine's counters over it, tokens,
    the process's peak resident bytes, the computed KV cache) and its trajectories."""
    before = engine_counters(env.engine)
    reset_peak_rss()
    wall, cpu = time.perf_counter(), time.process_time()
    trajectories = asyncio.run(run_agent_loops(loop, batch.items, params))
    measures = {
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "rollout_rss": peak_rss(),
    }
    measures.update((key, value - before[key]) for key, value in engine_counters(env.engine).items())
    turns = [turn for t in trajectories for turn in t.turns]
    max_context = max(
        len(turn.prompt_ids) + len(turn.response_ids) for turn in turns
    )  # the most keys attended
    measures.update(
        trajectories=len(trajectories), thinking_tokens=sum(len(turn.response_ids) for turn in turns),
        requests=len(turns), max_context=max_context,
        # every row's turns end together when end-of-sequence is ignored, so a wave holds the whole batch
        peak_kv_bytes=len(trajectories) * max_context * env.kv_bytes_per_token,
    )  # fmt: skip
    return measures, trajectories


def update(setup: ActorSetup, trajectories: list[Trajectory], pad_token_id: int) -> Measures:
    """The old log-probs and one PPO update of `trajectories`' training rows, as the trainer makes them:
    wall and CPU seconds, the peak resident bytes, and the tokens the actor's forward ran through."""
    actor = setup.actor
    advantages = [
        1.0 if i % 2 else -1.0 for i in range(len(trajectories))
    ]  # non-zero: the loss must not be 0
    rows = pad_rows_to_multiple(trajectory_rows(trajectories, advantages), setup.num_mini_batches)
    batch = collate_rows(rows, pad_token_id)
    reset_peak_rss()
    wall, cpu = time.perf_counter(), time.process_time()
    if setup.log_prob_max_tokens is None:
        batch["old_log_probs"] = batch["rollout_log_probs"]
    else:
        batch["old_log_probs"] = actor.compute_log_prob(
            batch, actor.config.ppo_micro_batch_size_per_gpu, max_token_len=setup.log_prob_max_tokens
        )
    metrics = actor.update_policy(
        batch, setup.num_mini_batches, rows_per_trajectory(len(rows), len(trajectories))
    )
    return {
        "update_s": time.perf_counter() - wall, "update_cpu_s": time.process_time() - cpu,
        "update_rss": peak_rss(), "train_tokens": round(metrics["actor/forward_tokens"]),
    }  # fmt: skip


def summarize(repeats: list[Measures]) -> Measures:
    """One environment's repeats of one pass: each time (`*_s`) its median, peak memory (`*_rss`) its
    highest, counts as in the first repeat (the same seeds sample the same tokens in every one); the
    step's times, claim (c)'s per-token times, and every repeat's times under "repeats"."""
    row = dict(repeats[0])
    for key in row:
        if key.endswith("_s"):
            row[key] = statistics.median(r[key] for r in repeats)
        elif key.endswith("_rss"):
            row[key] = max(r[key] for r in repeats)
    if "update_s" in row:
        row["step_s"] = row["wall_s"] + row["update_s"]
        row["step_cpu_s"] = row["cpu_s"] + row["update_cpu_s"]
    row["decoded_tokens"] = row["thinking_tokens"] - row["requests"]  # each request's first token: prefill
    row["decode_ms_per_token"] = per_token_ms(row["decode_s"], row["decoded_tokens"])
    row["prefill_ms_per_token"] = per_token_ms(row["prefill_s"], row["prefill_tokens"])
    row["repeats"] = [{key: value for key, value in r.items() if key.endswith("_s")} for r in repeats]
    return row


def agent_loops(setup: Setup, delethink: DelethinkParams) -> dict[str, AgentLoop]:
    envs = setup.environments
    return {
        "longcot": SingleTurnAgentLoop(envs["longcot"].engine),
        "delethink": DelethinkAgentLoop(envs["delethink"].engine, delethink),
    }


def sampling(batch: Batch, name: str, delethink: DelethinkParams, ignore_eos: bool) -> list[SamplingParams]:
    """LongCoT's one request writes the whole budget; Delethink's loop takes C from its params, then C - m."""
    first = delethink.thinking_budget if name == "longcot" else delethink.chunk_size
    return [SamplingParams(first, seed=seed, ignore_eos=ignore_eos) for seed in batch.seeds]


def time_budget(setup: Setup, cfg: BenchConfig, budget: int, ignore_eos: bool = True) -> tuple:
    """Both environments at `budget`, `cfg.repeats` times, in alternating order (so load from other
    processes hits both alike): the step batch's rollout and update, then, with end-of-sequence ignored,
    the distinct-problem rollout. Returns the row (each environment's `summarize`d repeats, the
    distinct pass's under "distinct", and Delethink / LongCoT) and the last repeat's step trajectories."""
    delethink = cfg.delethink[budget]
    loops = agent_loops(setup, delethink)
    runs: dict[str, list[Measures]] = {name: [] for name in ENVIRONMENTS}
    distinct: dict[str, list[Measures]] = {name: [] for name in ENVIRONMENTS}
    trajectories: dict[str, list[Trajectory]] = {}
    distinct_batch = setup.distinct_batch if ignore_eos else None
    for repeat in range(cfg.repeats):
        order = list(ENVIRONMENTS) if repeat % 2 == 0 else list(reversed(ENVIRONMENTS))
        for name in order:
            env, batch = setup.environments[name], setup.step_batch
            measures, trajectories[name] = rollout(
                env, loops[name], batch, sampling(batch, name, delethink, ignore_eos)
            )
            measures.update(update(env.actor, trajectories[name], setup.pad_token_id))
            runs[name].append(measures)
            if distinct_batch is not None:
                params = sampling(distinct_batch, name, delethink, ignore_eos=True)
                distinct[name].append(rollout(env, loops[name], distinct_batch, params)[0])
    row: Measures = {"budget": budget, "max_chunks": delethink.max_chunks}
    for name in ENVIRONMENTS:
        row[name] = summarize(runs[name])
        if distinct[name]:
            row[name]["distinct"] = summarize(distinct[name])
    lc, dt = row["longcot"], row["delethink"]
    row["delethink_over_longcot"] = dt["wall_s"] / lc["wall_s"]
    row["step_delethink_over_longcot"] = dt["step_s"] / lc["step_s"]
    return row, trajectories


def warm_up(setup: Setup, cfg: BenchConfig) -> None:
    """The first calls of a process pay one-off costs (kernels, optimizer state, the prefix store): one
    untimed step per environment at two chunks."""
    delethink = DelethinkParams(cfg.chunk_size, cfg.keep_head, cfg.keep_tail, max_chunks=2)
    loops = agent_loops(setup, delethink)
    for name, env in setup.environments.items():
        params = sampling(setup.step_batch, name, delethink, ignore_eos=True)
        trajectories = rollout(env, loops[name], setup.step_batch, params)[1]
        update(env.actor, trajectories, setup.pad_token_id)


def op_time_split(self_seconds: dict[str, float], top: int = 6) -> Measures:
    """From each op's self time: the total, the share of it in MATMUL_OPS, and the `top` other ops by
    self time (name, seconds)."""
    total = sum(self_seconds.values())
    matmul = sum(t for name, t in self_seconds.items() if name in MATMUL_OPS)
    others = sorted(((n, t) for n, t in self_seconds.items() if n not in MATMUL_OPS), key=lambda x: -x[1])
    return {"op_s": total, "matmul_s": matmul, "matmul_share": matmul / total if total else 0.0,
            "top_other": others[:top]}  # fmt: skip


def profile_update(setup: Setup, cfg: BenchConfig) -> Measures:
    """One rollout per environment at the first budget, then its update under torch.profiler: the
    update's measures and `op_time_split` of its ops, by environment."""
    budget = cfg.budgets[0]
    delethink = cfg.delethink[budget]
    loops = agent_loops(setup, delethink)
    result: Measures = {"budget": budget}
    for name, env in setup.environments.items():
        params = sampling(setup.step_batch, name, delethink, ignore_eos=True)
        trajectories = rollout(env, loops[name], setup.step_batch, params)[1]
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            measures = update(env.actor, trajectories, setup.pad_token_id)
        self_seconds = {e.key: e.self_cpu_time_total / 1e6 for e in prof.key_averages()}
        result[name] = {**measures, **op_time_split(self_seconds)}
    return result
