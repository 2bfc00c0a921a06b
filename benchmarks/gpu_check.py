"""The CUDA path in one command: what the actor, the engine and a local RL run cost on this GPU, next to
what the repository predicts. Prints figures; not a test.

    python benchmarks/gpu_check.py [--out gpu_check.md]    # one CUDA GPU (docs/GPU.md: flags, time)
    python benchmarks/gpu_check.py --smoke                  # the same code at tiny sizes on CPU

It needs torch, transformers and this package's pure-Python dependencies: nothing it imports loads Ray
or SGLang. Every model is randomly initialised from dimensions written here (nothing is downloaded):
memory and speed do not depend on the weights' values.

1. actor: one micro-batch of one row (the paper's 2048-token prompt and a B-token response, B = 8K and
   24K: the longest rows of r1d-1.5b_deepscaler_longcot_{8k,24k}) through the actor's own code
   (`DataParallelPPOActor`: old log-probs, then a PPO update) on R1-Distill-Qwen-1.5B's dimensions,
   FSDP2 on one rank, with and without gradient checkpointing. Each phase's peak (the CUDA allocator's
   max_memory_allocated) is set next to DRY_RUN's estimate for that config on one GPU
   (`verl/tools/memory_estimate.py`), term by term where a term can be measured on its own: the
   weights shard from the allocator, the gradients and Adam moments by counting their tensors, the rest
   (gathered weights, activations, logits) as one remainder. The estimate's engine and runtime-overhead
   terms have no counterpart here and are left out. A case that runs out of memory says so.
2. engine: `HFRolloutEngine` at the same dimensions (float32, as the trainer builds it) generating
   Delethink (C, m = C/2, I chunks) and LongCoT to Delethink's total budget C + (I-1)C/2, the same new
   tokens per sequence: wall time, tokens/s, the peak above the weights (KV cache, prefix store, forward
   buffers), and LongCoT / Delethink. Default C = 8K, I = 5 (LongCoT 24K); `--chunk-size 2048`
   scales both (LongCoT 6K) where 24K does not fit a time limit. The table says which lengths ran.
3. rl: three steps of each environment with trainer.launcher=local on a smaller random model (the
   tiny byte-level tokenizer, bf16 compute on CUDA): step time split into generation, old log-probs
   and update, the workers' peak memory (perf/max_memory_allocated_gib), and whether every loss is
   finite.

On CPU (`--smoke`) memory is the process's resident set, which holds the libraries and everything else
too: those figures check that the code runs, not the estimate.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import importlib.util
import math
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist
from transformers import Qwen2Config, Qwen2ForCausalLM

from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import PolicyIterationConfig, compose_config
from verl.core.batch import collate_rows, trajectory_rows
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.data.synthetic import write_dataset
from verl.models.tiny import save_tiny
from verl.single_controller.fsdp_workers import free_port, make_optimizer, shard_model
from verl.tools.memory_check import KNOWN_MODELS, settings_from_config, shape_from_hf_config
from verl.tools.memory_estimate import GIB, estimate_memory
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.utils.fs import read_jsonl
from verl.utils.peak_memory import current_rss, peak_rss, reset_peak_rss
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.rollout.hf_engine import HFRolloutEngine

PAPER_MODEL = "deepseek-ai/deepseek-r1-distill-qwen-1.5b"  # a KNOWN_MODELS key: the dims DRY_RUN uses
# What config.json of R1-Distill-Qwen-1.5B adds to KNOWN_MODELS' dims: its RoPE base and context length
PAPER_EXTRA = {"rope_theta": 10000.0, "max_position_embeddings": 131072, "rms_norm_eps": 1e-6}
SMOKE_DIMS = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "intermediate_size": 128,
    "vocab_size": 512,
    "tie_word_embeddings": False,
}
PAPER_PROMPT = 2048  # data.max_prompt_length of the LongCoT paper configs
# (config, its thinking budget B): the rows measured are PAPER_PROMPT + B tokens
ACTOR_CASES = (("r1d-1.5b_deepscaler_longcot_8k", 8192), ("r1d-1.5b_deepscaler_longcot_24k", 24576))
SMOKE_ACTOR_LENGTHS = (16, 48)  # (prompt, each case's B) in --smoke
ENGINE_PROMPT = 128  # question tokens of each engine sequence
# The RL section's model: small enough for three quick steps, large enough that the GPU does the work
RL_DIMS = {"hidden_size": 512, "intermediate_size": 1536, "num_hidden_layers": 4, "num_attention_heads": 8,
           "num_key_value_heads": 2, "max_position_embeddings": 2048}  # fmt: skip
# The RL section's Delethink; LongCoT gets its thinking budget (1024; smoke: 24)
RL_DELETHINK = DelethinkParams(chunk_size=512, keep_head=32, keep_tail=224, max_chunks=3)
SMOKE_RL_DELETHINK = DelethinkParams(chunk_size=12, keep_head=2, keep_tail=4, max_chunks=3)  # e2e_utils'


class Meter:
    """Bytes held now and the most since `reset`: the CUDA caching allocator's live tensors on a GPU, the
    process's resident set on CPU."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self.label = "CUDA max_memory_allocated" if self.cuda else "CPU resident set, not the GPU's figure"
        self.unit, self.unit_name = (GIB, "GiB") if self.cuda else (2**20, "MiB")  # tiny sizes on CPU

    def size(self, value: float | None) -> str:
        return "-" if value is None else f"{value / self.unit:.2f}"

    def reset(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
        else:
            reset_peak_rss()

    def current(self) -> int:
        return torch.cuda.memory_allocated(self.device) if self.cuda else current_rss()

    def peak(self) -> int:
        if self.cuda:
            torch.cuda.synchronize(self.device)
            return torch.cuda.max_memory_allocated(self.device)
        return peak_rss()


def release(device: torch.device) -> None:
    """Give back what the last case's objects held before the next measures."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


@contextlib.contextmanager
def one_rank_group(device: torch.device) -> Iterator[None]:
    """The one-rank process group FSDP2 needs, as the worker forms it."""
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo", rank=0, world_size=1,
        init_method=f"tcp://127.0.0.1:{free_port()}",
    )  # fmt: skip
    try:
        yield
    finally:
        dist.destroy_process_group()


def model_dims(smoke: bool) -> dict:
    """The config.json values the memory estimate reads (DRY_RUN's for the paper model)."""
    return SMOKE_DIMS if smoke else KNOWN_MODELS[PAPER_MODEL][1]


def model_config(smoke: bool, attn: str) -> Qwen2Config:
    extra = {} if smoke else PAPER_EXTRA
    return Qwen2Config(**model_dims(smoke), **extra, use_sliding_window=False, attn_implementation=attn)


def random_model(config: Qwen2Config, device: torch.device, seed: int = 0) -> Qwen2ForCausalLM:
    """float32 weights, as the worker loads them, initialised on `device` (no CPU copy of 1.5B)."""
    torch.manual_seed(seed)
    with torch.device(device):
        return Qwen2ForCausalLM(config).to(torch.float32)


def random_ids(n: int, vocab: int, seed: int) -> list[int]:
    return torch.randint(1, vocab, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


def ratio(measured: float | None, estimated: float | None) -> str:
    return "-" if measured is None or not estimated else f"{measured / estimated:.2f}"


def markdown(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])


# 1. actor -----------------------------------------------------------------------------------------
ACTOR_TERMS = ("weights shard", "gradients shard", "Adam moments")  # measured one by one
REST_TERMS = ("gathered weights", "activations", "logits")  # measured together, as the remainder


@dataclass
class ActorCase:
    name: str
    checkpointing: bool
    prompt: int
    response: int
    config: PolicyIterationConfig


def actor_config(name: str, checkpointing: bool, prompt: int, response: int, attn: str,
                 device: torch.device) -> PolicyIterationConfig:  # fmt: skip
    """The paper config on one GPU, one row per micro-batch: what DRY_RUN=1 estimates with these keys."""
    overrides = [
        "trainer.n_gpus_per_node=1",
        f"trainer.device={device.type}",
        "actor_rollout_ref.rollout.name=hf",  # the estimate's engine term is not compared: no engine here
        f"actor_rollout_ref.model.enable_gradient_checkpointing={checkpointing}",
        f"actor_rollout_ref.model.attn_implementation={attn}",
        f"actor_rollout_ref.model.use_remove_padding={attn == 'flash_attention_2'}",
        "actor_rollout_ref.actor.use_dynamic_bsz=false",
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=1",
        f"data.max_prompt_length={prompt}",
        f"data.max_response_length={response}",
    ]
    return load_config(compose_config(name, overrides), check_paths=False)


def one_row_batch(prompt: int, response: int, vocab: int, device: torch.device) -> dict[str, torch.Tensor]:
    turn = Turn(random_ids(prompt, vocab, 1), random_ids(response, vocab, 2), [0.0] * response, "length")
    batch = collate_rows(trajectory_rows([Trajectory([turn])], [1.0]), pad_token_id=0)
    return {k: v.to(device) for k, v in batch.items()}


def tensor_bytes(tensors) -> int:
    def local(t: torch.Tensor) -> torch.Tensor:
        return t.to_local() if hasattr(t, "to_local") else t

    return sum(local(t).numel() * local(t).element_size() for t in tensors)


def measure_actor(case: ActorCase, model_cfg: Qwen2Config, device: torch.device, meter: Meter) -> dict:
    """Bytes: each term that can be measured alone, and each phase's peak; "oom": the phase that ran out
    of memory. What it built is freed when it returns."""
    arr = case.config.actor_rollout_ref
    base = meter.current()
    measured: dict = {}
    phase = "model"
    try:
        model = random_model(model_cfg, device)
        if case.checkpointing:
            model.gradient_checkpointing_enable()
        mesh = dist.device_mesh.init_device_mesh(device.type, (1,))
        model = shard_model(model, mesh, arr.actor.fsdp_config)
        measured["weights shard"] = meter.current() - base
        optimizer, scheduler = make_optimizer(model, arr.actor.optim)
        actor = DataParallelPPOActor(
            model, optimizer, arr.actor, arr.rollout.temperature, case.config.thinking_budget,
            lr_scheduler=scheduler, use_remove_padding=arr.model.use_remove_padding,
        )  # fmt: skip
        # a short first update makes the gradients and Adam moments, as every step after the first has
        warm = one_row_batch(4, 4, model_cfg.vocab_size, device)
        warm["old_log_probs"] = actor.compute_log_prob(warm, 1)
        actor.update_policy(warm, 1)
        measured["gradients shard"] = tensor_bytes(p.grad for p in model.parameters() if p.grad is not None)
        measured["Adam moments"] = tensor_bytes(
            v for state in optimizer.state.values() for v in state.values() if torch.is_tensor(v) and v.dim()
        )
        batch = one_row_batch(case.prompt, case.response, model_cfg.vocab_size, device)
        phase = "old log-probs"
        meter.reset()
        batch["old_log_probs"] = actor.compute_log_prob(batch, 1)
        measured["old log-probs"] = meter.peak() - base
        phase = "update"
        meter.reset()
        metrics = actor.update_policy(batch, 1)
        measured["update"] = meter.peak() - base
        measured["loss finite"] = math.isfinite(metrics["actor/pg_loss"])
    except torch.OutOfMemoryError:
        measured["oom"] = phase
    return measured


def actor_section(smoke: bool, attn: str, device: torch.device, meter: Meter) -> str:
    model_cfg = model_config(smoke, attn)
    shape = shape_from_hf_config(model_dims(smoke))
    rows = []
    for (name, budget), smoke_response in zip(ACTOR_CASES, SMOKE_ACTOR_LENGTHS, strict=True):
        prompt, response = (SMOKE_ACTOR_LENGTHS[0], smoke_response) if smoke else (PAPER_PROMPT, budget)
        for checkpointing in (True, False):
            config = actor_config(name, checkpointing, prompt, response, attn, device)
            case = ActorCase(name, checkpointing, prompt, response, config)
            estimate = estimate_memory(shape, settings_from_config(config, shape))
            with one_rank_group(device):
                measured = measure_actor(case, model_cfg, device, meter)
            release(device)
            label = f"{name}, {prompt}+{response} tokens, checkpointing {'on' if checkpointing else 'off'}"
            case_rows = actor_rows(estimate.phases, measured, meter)
            rows += [[label if i == 0 else "", *row] for i, row in enumerate(case_rows)]
    unit = meter.unit_name
    header = ["case", "term", f"estimated {unit}", f"measured {unit} ({meter.label})", "measured / estimated"]
    return "\n".join([
        f"## Actor: one micro-batch on {'tiny' if smoke else 'R1-Distill-Qwen-1.5B'} dimensions, "
        f"FSDP2 on one rank, {attn}",
        "",
        markdown(header, rows),
    ])  # fmt: skip


def actor_rows(phases: dict[str, dict[str, float]], measured: dict, meter: Meter) -> list[list[str]]:
    """(term, estimated, measured, ratio) rows of one case."""
    rows = []
    if "oom" in measured:
        rows.append(["all", "-", f"out of memory in {measured['oom']}", "-"])
    update = phases["update"]
    for term in ACTOR_TERMS:
        rows.append([term, meter.size(update.get(term)), meter.size(measured.get(term)),
                     ratio(measured.get(term), update.get(term))])  # fmt: skip
    for phase in ("old log-probs", "update"):
        terms = phases[phase]
        rest = sum(terms.get(t, 0.0) for t in REST_TERMS)
        static = sum(measured.get(t, 0) for t in ACTOR_TERMS if t in terms)
        peak = measured.get(phase)
        above = None if peak is None else peak - static
        rows.append([f"{phase}: {' + '.join(REST_TERMS)}", meter.size(rest), meter.size(above),
                     ratio(above, rest)])  # fmt: skip
        total = sum(terms.get(t, 0.0) for t in (*ACTOR_TERMS, *REST_TERMS))
        rows.append([f"{phase}: peak", meter.size(total), meter.size(peak), ratio(peak, total)])
    if "loss finite" in measured:
        rows.append(["update loss finite", "-", str(measured["loss finite"]), "-"])
    return rows


# 2. engine ----------------------------------------------------------------------------------------
def delethink_params(chunk_size: int, chunks: int) -> DelethinkParams:
    """The paper's shape at chunk size C: m = C/2, of which the first min(100, C/8) tokens are the head."""
    head = min(100, chunk_size // 8)
    return DelethinkParams(chunk_size=chunk_size, keep_head=head, keep_tail=chunk_size // 2 - head,
                           max_chunks=chunks)  # fmt: skip


def time_generation(loop, sequences: int, budget: int, vocab: int, meter: Meter) -> dict[str, float]:
    items = [PromptItem(random_ids(ENGINE_PROMPT, vocab, 10 + i), "gpu_check", "") for i in range(sequences)]
    sampling = [SamplingParams(budget, temperature=1.0, seed=i, ignore_eos=True) for i in range(sequences)]
    static = meter.current()
    meter.reset()
    start = time.perf_counter()
    trajectories = asyncio.run(run_agent_loops(loop, items, sampling))
    seconds = time.perf_counter() - start
    tokens = sum(t.thinking_tokens for t in trajectories)
    return {"seconds": seconds, "tokens": tokens, "above_weights": meter.peak() - static}


def engine_section(smoke: bool, chunk_size: int, chunks: int, sequences: int, device: torch.device,
                   meter: Meter) -> str:  # fmt: skip
    model_cfg = model_config(smoke, "sdpa")
    params = delethink_params(chunk_size, chunks)
    budget = params.thinking_budget
    kv_token = shape_from_hf_config(model_dims(smoke)).kv_bytes_per_token(4)  # the engine's float32 cache
    model = random_model(model_cfg, device)
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, max_num_seqs=sequences)
    time_generation(SingleTurnAgentLoop(engine), 1, 8, model_cfg.vocab_size, meter)  # kernels, allocator
    runs = {
        f"Delethink C={chunk_size} m={params.carry} I={chunks}": (
            DelethinkAgentLoop(engine, params), ENGINE_PROMPT + chunk_size),
        f"LongCoT B={budget}": (SingleTurnAgentLoop(engine), ENGINE_PROMPT + budget),
    }  # fmt: skip
    rows, results = [], []
    for label, (loop, context) in runs.items():
        result = time_generation(loop, sequences, budget, model_cfg.vocab_size, meter)
        results.append(result)
        rows.append([label, str(result["tokens"]), f"{result['seconds']:.1f}",
                     f"{result['tokens'] / result['seconds']:.0f}", meter.size(result["above_weights"]),
                     meter.size(sequences * context * kv_token)])  # fmt: skip
    delethink, longcot = results
    speed = [r["tokens"] / r["seconds"] for r in (longcot, delethink)]
    rows.append(["LongCoT / Delethink", f"{longcot['tokens'] / delethink['tokens']:.2f}",
                 f"{longcot['seconds'] / delethink['seconds']:.2f}", f"{speed[0] / speed[1]:.2f}",
                 ratio(longcot["above_weights"], delethink["above_weights"]), "-"])  # fmt: skip
    del engine, model, runs
    release(device)
    unit = meter.unit_name
    header = ["run", "new tokens", "seconds", "tokens/s", f"peak above weights, {unit} ({meter.label})",
              f"KV of every sequence at its longest context, {unit}"]  # fmt: skip
    return "\n".join([
        f"## Engine: HFRolloutEngine, {'tiny' if smoke else 'R1-Distill-Qwen-1.5B'} dimensions, float32, "
        f"{sequences} sequences of a {ENGINE_PROMPT}-token prompt, every one writing {budget} tokens",
        "",
        markdown(header, rows),
    ])  # fmt: skip


# 3. RL steps --------------------------------------------------------------------------------------
def rl_config(env: str, workdir: Path, smoke: bool, device: torch.device) -> PolicyIterationConfig:
    p = SMOKE_RL_DELETHINK if smoke else RL_DELETHINK
    lengths = (
        [f"data.max_response_length={p.thinking_budget}"] if env == "longcot" else [
            f"algorithm.delethink.chunk_size={p.chunk_size}", f"algorithm.delethink.keep_head={p.keep_head}",
            f"algorithm.delethink.keep_tail={p.keep_tail}", f"algorithm.delethink.max_chunks={p.max_chunks}",
            f"data.max_prompt_length={96 + p.carry}",  # tiny_*'s question room plus the carry-over
        ]
    )  # fmt: skip
    rows = ["data.train_batch_size=2", "actor_rollout_ref.rollout.n=2"] if smoke else [
        "data.train_batch_size=8", "actor_rollout_ref.rollout.n=4"]  # fmt: skip
    dtype = [] if smoke else ["actor_rollout_ref.actor.fsdp_config.param_dtype=bfloat16"]
    overrides = [
        f"actor_rollout_ref.model.path={workdir / 'model'}",
        f"data.train_files=[{workdir / 'data' / 'train.jsonl'}]",
        f"data.val_files=[{workdir / 'data' / 'val.jsonl'}]",
        f"trainer.default_local_dir={workdir / env}",
        "trainer.launcher=local",
        f"trainer.device={device.type}",
        "trainer.logger=[jsonl]",
        "trainer.total_training_steps=3",
        "trainer.val_before_train=false",
        "trainer.test_freq=-1",
        "trainer.log_rollouts=false",
        "actor_rollout_ref.actor.ppo_mini_batch_size=1",
        *rows,
        *lengths,
        *dtype,
    ]
    return load_config(compose_config(f"tiny_{env}", overrides))


def rl_section(smoke: bool, device: torch.device, workdir: Path) -> str:
    save_tiny(workdir / "model", seed=0, **({} if smoke else RL_DIMS))
    write_dataset(workdir / "data", train_size=64, val_size=8, min_terms=2, max_terms=4, seed=0)
    rows = []
    for env in ("longcot", "delethink"):
        run(rl_config(env, workdir, smoke, device))
        steps = read_jsonl(workdir / env / "metrics.jsonl")
        timings = ("timing/gen_s", "timing/old_log_prob_s", "timing/update_s", "timing/step_s")
        mean = {k: sum(m.get(k, 0.0) for m in steps) / len(steps) for k in timings}
        peaks = [m["perf/max_memory_allocated_gib"] for m in steps if "perf/max_memory_allocated_gib" in m]
        finite = all(math.isfinite(m["actor/pg_loss"]) for m in steps if "actor/pg_loss" in m)
        rows.append([env, str(len(steps)), *(f"{mean[k]:.2f}" for k in mean),
                     f"{max(peaks):.2f}" if peaks else "- (not on CUDA)", str(finite)])  # fmt: skip
        release(device)
    header = ["environment", "steps", "generation s", "old log-probs s", "update s", "step s",
              "peak memory GiB (perf/max_memory_allocated_gib)", "losses finite"]  # fmt: skip
    dims = "tiny_* defaults" if smoke else ", ".join(f"{k} {v}" for k, v in RL_DIMS.items())
    p = SMOKE_RL_DELETHINK if smoke else RL_DELETHINK
    return "\n".join([
        f"## RL: 3 steps per environment, trainer.launcher=local on {device.type} (model: {dims}; "
        f"LongCoT B={p.thinking_budget}, Delethink C={p.chunk_size} m={p.carry} I={p.max_chunks}; "
        "means per step)",
        "",
        markdown(header, rows),
    ])  # fmt: skip


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny sizes on CPU: checks that the code runs")
    parser.add_argument("--chunk-size", type=int, default=8192, help="engine: Delethink's C; LongCoT follows")
    parser.add_argument("--chunks", type=int, default=5, help="engine: Delethink's I")
    parser.add_argument("--sequences", type=int, default=8, help="engine: sequences generated at once")
    parser.add_argument("--sections", default="actor,engine,rl", help="comma-separated subset to run")
    parser.add_argument("--out", type=Path, help="also write the tables to this markdown file")
    args = parser.parse_args(argv)
    if args.smoke:
        device, chunk_size, chunks, sequences = torch.device("cpu"), 16, 3, 2
    else:
        if not torch.cuda.is_available():
            sys.exit("gpu_check: no CUDA device is visible; --smoke runs the same code on CPU")
        device = torch.device("cuda", 0)
        chunk_size, chunks, sequences = args.chunk_size, args.chunks, args.sequences
    attn = "flash_attention_2" if device.type == "cuda" and importlib.util.find_spec("flash_attn") else "sdpa"
    meter = Meter(device)
    sections = args.sections.split(",")
    parts = [f"# gpu_check on {torch.cuda.get_device_name(device) if meter.cuda else 'CPU (--smoke)'}, "
             f"torch {torch.__version__}"]  # fmt: skip
    if "actor" in sections:
        parts.append(actor_section(args.smoke, attn, device, meter))
        print(parts[-1] + "\n", flush=True)
    if "engine" in sections:
        parts.append(engine_section(args.smoke, chunk_size, chunks, sequences, device, meter))
        print(parts[-1] + "\n", flush=True)
    if "rl" in sections:
        with tempfile.TemporaryDirectory(prefix="gpu_check_") as workdir:
            parts.append(rl_section(args.smoke, device, Path(workdir)))
        print(parts[-1] + "\n", flush=True)
    report = "\n\n".join(parts) + "\n"
    if args.out:
        args.out.write_text(report)
    return report


if __name__ == "__main__":
    main()
