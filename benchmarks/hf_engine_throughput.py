"""Decode throughput of HFRolloutEngine against plain batched HF `generate`, on this CPU.
Prints numbers; not a test.

Run: `.venv/bin/python benchmarks/hf_engine_throughput.py` (about 4 minutes on this 2-core
machine), or `--quick` (under a minute).

Model: `verl.models.tiny` (Qwen2, hidden 128, 2 layers, 4 heads, 2 kv heads, byte vocabulary of 263,
fp32, sdpa), random weights, position table widened to fit the longest case. A case BxP+N sends B
concurrent requests of P prompt tokens, each sampling exactly N tokens (temperature 1, no top-k /
top-p, no eos), to our engine, and the same B prompts as one batch to `model.generate`. tokens/s
counts sampled tokens, prefill included in the time. The two are timed alternately in one process,
`--repeats` times each, so machine load drifts hit both alike; the ratio is ours / HF for the best
run of each, and the median of the per-pair ratios.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers

from verl.core.engine import SamplingParams
from verl.models.tiny import build_model, build_tokenizer
from verl.tools.cost_model import qwen2_dims, sequence_cost
from verl.workers.rollout.hf_engine import HFRolloutEngine

FULL_CASES = ["64x64+1024", "64x512+512", "8x64+1024", "8x512+512"]
QUICK_CASES = ["64x64+128", "8x64+128"]


@dataclass(frozen=True)
class Case:
    batch: int
    prompt: int
    new: int

    @classmethod
    def parse(cls, text: str) -> Case:
        """'BxP+N' -> batch B, prompt P tokens, N new tokens."""
        batch, rest = text.split("x")
        prompt, new = rest.split("+")
        return cls(int(batch), int(prompt), int(new))

    def __str__(self) -> str:
        return f"{self.batch}x{self.prompt}+{self.new}"


def prompts_for(case: Case) -> list[list[int]]:
    # byte ids 32..126 (printable ASCII): never pad, eos or a special token
    return [[32 + (row * 7 + 3 * col) % 95 for col in range(case.prompt)] for row in range(case.batch)]


@dataclass(frozen=True)
class EngineRun:
    tokens: int  # sampled tokens
    decode_seconds: float  # the engine's time in decode steps (prefill and first draws excluded)


def run_engine(model: transformers.PreTrainedModel, case: Case) -> EngineRun:
    """Run HFRolloutEngine over the case's concurrent requests."""
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0, max_num_seqs=case.batch)
    params = [SamplingParams(max_new_tokens=case.new, seed=row) for row in range(case.batch)]

    async def all_requests():
        return await asyncio.gather(
            *(engine.generate(p, s) for p, s in zip(prompts_for(case), params, strict=True))
        )

    tokens = sum(len(out.token_ids) for out in asyncio.run(all_requests()))
    return EngineRun(tokens, engine.decode_seconds)


def decode_step_matmuls(
    config: transformers.PretrainedConfig, batch: int, context: int
) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """(left, right) operand shapes of every matmul one decode step of a Qwen2-style model makes: one
    new token per row, attending to `context` keys (query heads share their kv head's keys, so
    attention is per query head, as sdpa computes it)."""
    h, inter, vocab = config.hidden_size, config.intermediate_size, config.vocab_size
    heads = config.num_attention_heads
    head_dim = h // heads
    kv = config.num_key_value_heads * head_dim
    per_layer = [
        ((batch, h), (h, h)),  # q
        ((batch, h), (h, kv)),  # k
        ((batch, h), (h, kv)),  # v
        ((batch, heads, 1, head_dim), (batch, heads, head_dim, context)),  # QK^T
        ((batch, heads, 1, context), (batch, heads, context, head_dim)),  # AV
        ((batch, h), (h, h)),  # o
        ((batch, h), (h, inter)),  # gate
        ((batch, h), (h, inter)),  # up
        ((batch, inter), (inter, h)),  # down
    ]
    return per_layer * config.num_hidden_layers + [((batch, h), (h, vocab))]  # + the LM head


def matmul_rate(shapes: list[tuple[tuple[int, ...], tuple[int, ...]]], repeats: int = 20) -> float:
    """FLOP/s of running `torch.matmul` over `shapes` in sequence, bare (no module, no allocation
    outside the matmuls), best of `repeats` passes."""
    operands = [(torch.randn(a), torch.randn(b)) for a, b in shapes]
    flops = sum(2 * left.numel() * right.shape[-1] for left, right in operands)
    best = float("inf")
    for _ in range(repeats + 1):  # the first pass warms up
        start = time.perf_counter()
        for left, right in operands:
            torch.matmul(left, right)
        best = min(best, time.perf_counter() - start)
    return flops / best


def decode_floor_seconds(config: transformers.PretrainedConfig, case: Case) -> float:
    """The case's decode FLOPs over the measured matmul rate of its middle decode step. The engine's
    decode steps feed positions P..P+N-2 (the prefill samples each row's first token)."""
    flops = case.batch * sequence_cost(qwen2_dims(config), case.prompt, case.new - 1).decode_flops
    rate = matmul_rate(decode_step_matmuls(config, case.batch, case.prompt + case.new // 2))
    return flops / rate


def run_hf_generate(model: transformers.PreTrainedModel, case: Case) -> int:
    """Tokens sampled by one batched `model.generate` call over the same prompts."""
    input_ids = torch.tensor(prompts_for(case))
    config = transformers.GenerationConfig(
        do_sample=True,
        temperature=1.0,
        top_k=0,  # generate's default top-k of 50 would filter where our engine does not
        top_p=1.0,
        max_new_tokens=case.new,
        eos_token_id=None,  # no eos: every row samples exactly `new` tokens, as in the engine
        pad_token_id=0,
    )
    with torch.inference_mode():
        output = model.generate(
            input_ids, attention_mask=torch.ones_like(input_ids), generation_config=config
        )
    return (output.shape[1] - case.prompt) * case.batch


def timed(run: Callable[[], int]) -> float:
    """Tokens per second of one call to `run`."""
    start = time.perf_counter()
    tokens = run()
    return tokens / (time.perf_counter() - start)


def compare(
    model: transformers.PreTrainedModel, case: Case, repeats: int, with_hf: bool = True
) -> tuple[list[float], list[float], list[float]]:
    """(engine tok/s, HF tok/s, engine decode seconds) per repeat, the engine and HF timed alternately
    (HF's list empty when `with_hf` is false)."""
    ours, theirs, decode = [], [], []
    for _ in range(repeats):
        start = time.perf_counter()
        run = run_engine(model, case)
        ours.append(run.tokens / (time.perf_counter() - start))
        decode.append(run.decode_seconds)
        if with_hf:
            theirs.append(timed(lambda: run_hf_generate(model, case)))
    return ours, theirs, decode


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", help=f"BxP+N cases (default {' '.join(FULL_CASES)})")
    parser.add_argument("--repeats", type=int, help="alternating runs per case (default 3; 2 with --quick)")
    parser.add_argument("--quick", action="store_true", help=f"cases {' '.join(QUICK_CASES)}, 2 repeats")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    parser.add_argument(
        "--engine-only", action="store_true", help="skip HF generate: the engine and its floor only"
    )
    args = parser.parse_args(argv)
    cases = [Case.parse(c) for c in (args.cases or (QUICK_CASES if args.quick else FULL_CASES))]
    repeats = args.repeats or (2 if args.quick else 3)

    torch.set_num_threads(args.threads)
    longest = max(c.prompt + c.new for c in cases)
    model = build_model(build_tokenizer(), max_position_embeddings=max(longest, 64)).eval()
    warm_up = Case(4, 8, 8)  # first-call allocations and kernel selection, for both
    run_engine(model, warm_up)
    if not args.engine_only:
        run_hf_generate(model, warm_up)

    print(f"torch threads: {args.threads}, repeats: {repeats} (alternating), tok/s = sampled tokens / s")
    print(
        "floor: decode FLOPs / this process's matmul rate at the case's shapes; "
        "engine/floor: the engine's best decode time over it"
    )
    print(
        f"{'case BxP+N':>12} {'ours best':>10} {'HF best':>10} {'best/best':>10} {'median pair':>12} "
        f"{'floor tok/s':>12} {'engine/floor':>13}"
    )
    for case in cases:
        ours, theirs, decode = compare(model, case, repeats, with_hf=not args.engine_only)
        floor = decode_floor_seconds(model.config, case)
        decoded = case.batch * (case.new - 1)  # tokens the decode steps sample
        versus_hf = f"{'-':>10} {'-':>10} {'-':>12}"
        if theirs:
            pair_ratio = statistics.median(o / t for o, t in zip(ours, theirs, strict=True))
            versus_hf = f"{max(theirs):>10.0f} {max(ours) / max(theirs):>9.2f}x {pair_ratio:>11.2f}x"
        print(
            f"{case!s:>12} {max(ours):>10.0f} {versus_hf} "
            f"{decoded / floor:>12.0f} {min(decode) / floor:>12.1f}x"
        )


if __name__ == "__main__":
    main()
