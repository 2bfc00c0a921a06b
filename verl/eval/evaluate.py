"""Evaluate one checkpoint in the LongCoT or Delethink environment, at one or many thinking budgets.

Generation goes through the training code itself: a rollout engine (HF, or SGLang with `engine=sglang`)
and the same agent loops (`single_turn`, `delethink`), so Delethink inference here is exactly the
environment RL trained in.
Every trace is scored on all its chunks decoded together (the Delethink reward manager's rule; for
LongCoT that is its single response). Sample j of problem p has the same seed in every run, so runs
at different budgets and in different modes are paired: a Delethink run's first chunk samples the
same tokens as LongCoT's first C tokens.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tqdm import tqdm
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from verl.agent_loop.base import AgentLoop
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import ConfigError
from verl.core.delethink import DelethinkParams
from verl.core.engine import RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem, Trajectory
from verl.data.rl_dataset import load_prompts
from verl.eval.config import EvalConfig, resolve_model_dir
from verl.eval.summary import ALL_SOURCES, summarise_run
from verl.utils.fs import atomic_write_jsonl, atomic_write_text
from verl.utils.reward_score import load_reward_function
from verl.utils.reward_score.boxed import extract_final_answer
from verl.utils.seeding import derive_seed
from verl.workers.reward_manager import DelethinkRewardManager, RewardResult


@dataclass(frozen=True)
class EvalRun:
    """One pass over the problems: an environment and its thinking budget."""

    mode: str  # longcot | delethink
    thinking_budget: int  # most thinking tokens a trace can hold
    delethink: DelethinkParams | None = None  # Delethink's parameters at this run's I; None for LongCoT

    @property
    def max_chunks(self) -> int | None:
        """Delethink's I (None for LongCoT)."""
        return None if self.delethink is None else self.delethink.max_chunks

    @property
    def label(self) -> str:
        return (
            f"delethink_I{self.max_chunks}"
            if self.mode == "delethink"
            else f"longcot_B{self.thinking_budget}"
        )


def planned_runs(config: EvalConfig) -> list[EvalRun]:
    if config.mode == "longcot":  # the delethink section is neither read nor checked
        return [EvalRun("longcot", b) for b in config.longcot.budgets]
    delethink = [EvalRun("delethink", p.thinking_budget, p) for p in config.delethink.sweep()]
    if config.mode == "delethink":
        return delethink
    # probe: LongCoT at each Delethink run's total budget C + (I-1)(C-m)
    return [r for dt in delethink for r in (EvalRun("longcot", dt.thinking_budget), dt)]


def first_turn_budget(run: EvalRun) -> int:
    return run.thinking_budget if run.delethink is None else run.delethink.chunk_size


def load_items(config: EvalConfig, tokenizer) -> list[PromptItem]:
    """Every data file and task, each cut to its first max_problems problems."""
    limit = config.max_question_tokens
    # section "": main_eval's keys are top-level (max_prompt_length, prompt_key); its messages name them so
    key = config.prompt_key
    groups = [load_prompts([path], tokenizer, key, limit, True, section="") for path in config.data_files]
    if config.tasks:
        from verl.data.tasks import load_task

        groups += [load_task(name, task, tokenizer, limit, section="") for name, task in config.tasks.items()]
    if config.max_problems > 0:
        groups = [g[: config.max_problems] for g in groups]
    return [item for g in groups for item in g]


def request_budget(run: EvalRun) -> int:
    """The most tokens one request of `run` holds after its question: the whole budget for LongCoT, the
    longest chunk for Delethink."""
    return run.thinking_budget if run.delethink is None else run.delethink.longest_chunk


def check_fits_context(config: EvalConfig, items: list[PromptItem], max_positions: int) -> int:
    """The longest request's tokens; fails before loading weights if they cannot fit the model's
    positions."""
    longest_prompt = max(len(it.prompt_ids) for it in items)
    budget = max(request_budget(run) for run in planned_runs(config))
    if longest_prompt + budget > max_positions:
        key = {
            "longcot": "longcot.budgets",
            "delethink": "delethink.chunk_size",
            "probe": "delethink.max_chunks",
        }[config.mode]
        if config.mode == "delethink" and budget > config.delethink.chunk_size:  # a later chunk is longest
            key = "delethink.intermediate_max_new_tokens"
        raise ConfigError(
            f"{key}: the longest prompt ({longest_prompt} tokens) plus {budget} thinking tokens "
            f"exceeds the model's max_position_embeddings={max_positions}"
        )
    return longest_prompt + budget


def build_loop(run: EvalRun, engine: RolloutEngine) -> AgentLoop:
    if run.delethink is None:
        return SingleTurnAgentLoop(engine)
    return DelethinkAgentLoop(engine, run.delethink)


def sample_seed(config: EvalConfig, problem: int, sample: int) -> int:
    return derive_seed(config.sampling.seed, problem, sample)


def generate(
    run: EvalRun, config: EvalConfig, engine: RolloutEngine, repeated: list[PromptItem]
) -> list[Trajectory]:
    """One trajectory per entry of `repeated`: each problem n times in a row (entry i is sample
    i % n of problem i // n)."""
    s, n = config.sampling, config.sampling.n
    budget = first_turn_budget(run)
    params = [
        SamplingParams(
            budget,
            s.temperature,
            s.top_p,
            s.top_k,
            seed=sample_seed(config, *divmod(i, n)),
            ignore_eos=s.ignore_eos,
        )  # fmt: skip
        for i in range(len(repeated))
    ]
    loops = run_agent_loops(build_loop(run, engine), repeated, params)
    # SGLang answers requests only on the event loop it was built on; the HF engine on any
    sglang_loop = getattr(engine, "event_loop", None)
    return asyncio.run(loops) if sglang_loop is None else sglang_loop.run_until_complete(loops)


def sample_records(
    run: EvalRun,
    config: EvalConfig,
    items: list[PromptItem],
    trajectories: list[Trajectory],
    results: list[RewardResult],
    tokenizer,
) -> list[dict[str, Any]]:
    n = config.sampling.n
    records = []
    for i, (traj, result) in enumerate(zip(trajectories, results, strict=True)):
        p, j = divmod(i, n)
        item = items[p]
        records.append(
            {
                "run": run.label,
                "mode": run.mode,
                "thinking_budget": run.thinking_budget,
                "max_chunks": run.max_chunks,
                "keep_head": None if run.delethink is None else run.delethink.keep_head,
                "keep_tail": None if run.delethink is None else run.delethink.keep_tail,
                "problem_index": p,
                "data_source": item.data_source,
                "problem": tokenizer.decode(item.prompt_ids),
                "ground_truth": item.ground_truth,
                "extra_info": item.extra_info,
                "sample_index": j,
                "seed": sample_seed(config, p, j),
                "chunks": [
                    {
                        "prompt": tokenizer.decode(turn.prompt_ids),
                        "response": tokenizer.decode(turn.response_ids),
                        "response_ids": list(turn.response_ids),  # the viewer cuts chunks at token edges
                        "prompt_tokens": len(turn.prompt_ids),
                        "response_tokens": len(turn.response_ids),
                        "finish_reason": turn.finish_reason,
                    }
                    for turn in traj.turns
                ],
                "trace": result.solution_str,  # what was scored: every chunk's response ids decoded as one
                "answer": extract_final_answer(result.solution_str),
                "score": result.score,
                "thinking_tokens": traj.thinking_tokens,
                "num_chunks": traj.num_turns,
                "has_eos": traj.has_eos,
            }
        )
    return records


def run_summary(
    run: EvalRun, config: EvalConfig, records: list[dict[str, Any]], wall: float
) -> dict[str, Any]:
    out: dict[str, Any] = {"label": run.label, "mode": run.mode, "thinking_budget": run.thinking_budget}
    if run.delethink is not None:
        p = run.delethink
        out.update(
            max_chunks=p.max_chunks, chunk_size=p.chunk_size, keep_head=p.keep_head, keep_tail=p.keep_tail
        )
    return {**out, **summarise_run(records, config.pass_k, wall)}


def probe_pairs(runs: list[dict[str, Any]], metric: str) -> list[dict[str, Any]]:
    """LongCoT and Delethink accuracy side by side at each equal total budget (probe mode)."""
    by_budget: dict[int, dict[str, float]] = {}
    for r in runs:
        by_budget.setdefault(r["thinking_budget"], {})[r["mode"]] = r["metrics"][ALL_SOURCES][metric]
    return [
        {"thinking_budget": b, "metric": metric, "longcot": m["longcot"], "delethink": m["delethink"]}
        for b, m in sorted(by_budget.items())
    ]


def _json_safe(value: Any) -> Any:
    """NaN is not JSON; write null instead."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    return value


def build_engine(
    config: EvalConfig, model_dir: Path, tokenizer, rows: int, longest_request: int
) -> RolloutEngine:
    """The engine `config.engine` names, serving the model in float32 (as training's actor computes it),
    for at most `rows` requests at once of at most `longest_request` tokens."""
    from verl.single_controller.fsdp_workers import eos_token_ids, load_causal_lm

    try:
        generation_config = GenerationConfig.from_pretrained(model_dir)
    except OSError:  # no generation_config.json: transformers derives it from config.json, so do we
        generation_config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(model_dir))
    eos_ids = eos_token_ids(generation_config, tokenizer)
    if config.engine == "sglang":
        from verl.workers.rollout.sglang_engine import SGLangRolloutEngine

        # its KV pool holds the rows in flight at the longest request, not every row at the model's context
        return SGLangRolloutEngine(
            str(model_dir), eos_ids, device="cpu", dtype="float32", seed=config.sampling.seed,
            max_num_seqs=rows, enable_memory_saver=False, log_level="error",
            max_total_tokens=rows * longest_request,
        )  # fmt: skip
    from verl.workers.rollout.hf_engine import HFRolloutEngine

    model = load_causal_lm(str(model_dir))
    return HFRolloutEngine(model, eos_ids, tokenizer.pad_token_id, rows, config.sampling.seed)


def run_all(
    config: EvalConfig, engine: RolloutEngine, items: list[PromptItem], scorer, tokenizer
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Every planned run, generated and scored: the sample records of all of them and each run's summary."""
    runs = planned_runs(config)
    repeated = [item for item in items for _ in range(config.sampling.n)]
    all_records, summaries = [], []
    metric = f"mean@{config.sampling.n}"
    for run in tqdm(runs, desc="budgets", unit="run"):
        start = time.perf_counter()
        trajectories = generate(run, config, engine, repeated)
        wall = time.perf_counter() - start
        results = scorer(
            trajectories,
            [it.data_source for it in repeated],
            [it.ground_truth for it in repeated],
            [it.extra_info for it in repeated],
        )
        records = sample_records(run, config, items, trajectories, results, tokenizer)
        summaries.append(run_summary(run, config, records, wall))
        all_records += records
        m = summaries[-1]["metrics"][ALL_SOURCES]
        tqdm.write(
            f"{run.label}: {metric}={m[metric]:.3f} thinking={m['thinking_tokens_mean']:.1f} "
            f"chunks={m['chunks_per_trace_mean']:.2f} eos={m['has_eos_rate']:.2f} ({wall:.1f} s)"
        )
    return all_records, summaries


def evaluate(config: EvalConfig) -> dict[str, Any]:
    """Run every planned run; write samples.jsonl, summary.json and, for several runs, a PNG."""
    model_dir = resolve_model_dir(config.model_path)
    if model_dir is None:  # load_eval_config checked it; the directory may have gone since
        raise ConfigError(f"model_path={config.model_path!r}: no HF model in it")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    items = load_items(config, tokenizer)
    longest_request = check_fits_context(
        config, items, AutoConfig.from_pretrained(model_dir).max_position_embeddings
    )
    compute_score = load_reward_function(config.reward.path, config.reward.name)
    scorer = DelethinkRewardManager(tokenizer, compute_score, thinking_tags=config.reward.thinking_tags)

    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    rows = min(config.max_num_seqs, len(items) * config.sampling.n)  # every problem's samples at once
    engine = build_engine(config, model_dir, tokenizer, rows, longest_request)
    engine_name = type(engine).__name__

    try:
        all_records, summaries = run_all(config, engine, items, scorer, tokenizer)
    finally:
        engine.shutdown()  # SGLang's processes would outlive this one

    metric = f"mean@{config.sampling.n}"
    out_dir = Path(config.output_dir)
    summary: dict[str, Any] = {
        "model_dir": str(model_dir),
        "engine": engine_name,  # the class that generated every trace
        "config": dataclasses.asdict(config),
        "runs": summaries,
    }
    if config.mode == "probe":
        summary["probe"] = probe_pairs(summaries, metric)
        for pair in summary["probe"]:
            print(
                f"probe at thinking budget {pair['thinking_budget']}: {metric} longcot={pair['longcot']:.3f} "
                f"delethink={pair['delethink']:.3f}"
            )
    if len(summaries) > 1:
        from verl.eval.plot import plot_accuracy_vs_budget

        summary["plot"] = str(out_dir / "accuracy_vs_budget.png")
        plot_accuracy_vs_budget(summaries, metric, summary["plot"])
    atomic_write_jsonl(out_dir / "samples.jsonl", all_records)
    atomic_write_text(out_dir / "summary.json", json.dumps(_json_safe(summary), indent=2) + "\n")
    return summary
