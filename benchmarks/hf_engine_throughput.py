"""Decode throughput of HFRolloutEngine on this CPU, and what batching concurrent requests buys.
Prints numbers; not a test.

Run: `.venv/bin/python benchmarks/hf_engine_throughput.py` (a few minutes on 2 cores).

Model: random Qwen2 (hidden 128, 4 layers, 4 heads, vocab 64, fp32, sdpa), the size PLATFORM.md
measured HF generate with. "context" is the prompt length; every request samples `--new-tokens`
tokens (no eos), so tokens/s counts sampled tokens only, prefill included in the time.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import time

import torch
import transformers

from verl.workers.rollout.base import SamplingParams
from verl.workers.rollout.hf_engine import HFRolloutEngine


def build_model() -> transformers.Qwen2ForCausalLM:
    torch.manual_seed(0)
    config = transformers.Qwen2Config(
        hidden_size=128,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=4,
        vocab_size=64,
        max_position_embeddings=4096,
        attn_implementation="sdpa",
    )
    return transformers.Qwen2ForCausalLM(config).eval()


def timed_wave(model, prompt_len: int, max_new_tokens: list[int], repeats: int) -> tuple[float, int]:
    """Submit one request per entry of `max_new_tokens` concurrently; return (best seconds of `repeats`
    runs, tokens sampled per run). The best run is the one least disturbed by other processes."""
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=0)
    prompts = [[2 + (i + 3 * j) % 62 for j in range(prompt_len)] for i in range(len(max_new_tokens))]

    async def main():
        params = [SamplingParams(max_new_tokens=n, seed=i) for i, n in enumerate(max_new_tokens)]
        return await asyncio.gather(*(engine.generate(p, s) for p, s in zip(prompts, params, strict=True)))

    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        outputs = asyncio.run(main())
        best = min(best, time.perf_counter() - start)
    return best, sum(len(o.token_ids) for o in outputs)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8, 32, 64])
    parser.add_argument("--contexts", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    model = build_model()
    timed_wave(model, 16, [8] * 4, repeats=1)  # warm-up: first-call allocations and kernel selection

    print(f"new tokens per request: {args.new_tokens}, torch threads: {args.threads}")
    print(f"{'context':>7} {'batch':>5} {'seconds':>8} {'tok/s':>8} {'vs one-at-a-time':>17}")
    for context in args.contexts:
        one_at_a_time = None
        for batch in args.batch_sizes:
            seconds, tokens = timed_wave(model, context, [args.new_tokens] * batch, args.repeats)
            rate = tokens / seconds
            # a batch of 1 is the one-at-a-time rate: sequential requests each run alone
            one_at_a_time = one_at_a_time or (rate if batch == 1 else None)
            speedup = f"{rate / one_at_a_time:.1f}x" if one_at_a_time else "-"
            print(f"{context:>7} {batch:>5} {seconds:>8.2f} {rate:>8.0f} {speedup:>17}")

    # Rows finishing at different steps (as eos does) exercise dropping finished rows from the batch.
    lengths = [random.Random(i).randint(1, 2 * args.new_tokens) for i in range(64)]
    seconds, tokens = timed_wave(model, 64, lengths, args.repeats)
    longest = 2 * args.new_tokens
    print(f"ragged finish (64 rows, context 64, 1..{longest} new tokens): {tokens / seconds:.0f} tok/s")


if __name__ == "__main__":
    main()
