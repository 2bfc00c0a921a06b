"""LoRA and the CPU rollout engine: adapters applied in the engine's forward, or merged into its weights?

    .venv/bin/python benchmarks/lora_engine_sync.py [--rank 8] [--repeats 3] [--requests 64] \\
        [--new-tokens 256]

Engines on the same trained-looking LoRA policy (`verl.models.tiny`, random base weights, adapters with
random A and B so that the update is not zero):
- applied: the engine's model is a `PeftModel` running the adapters in every forward; a sync copies
  the adapter tensors only;
- merged (what the worker does, `lora.engine_model`): the same wrapped model with the adapters merged
  into its weights; a sync unmerges, copies every weight (base included) and merges again;
- plain: the base model without adapters, no sync: the speed merging aims for.
Printed per mode: sync time (median of 5), generation tokens/s (`requests` concurrent requests of 64
prompt tokens, `new_tokens` sampled each, no eos, temperature 1; best of `repeats`, the modes
alternating) and how far the engine's log-probs of its sampled tokens are from the actor's forward
(max |difference| over 8 requests): what the importance ratios see. One torch thread.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from types import SimpleNamespace

import torch

from verl.core.engine import SamplingParams
from verl.models import lora
from verl.models.lora_keys import ALL_LINEAR
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.rollout.hf_engine import HFRolloutEngine


def trained_policy(keys: SimpleNamespace) -> torch.nn.Module:
    """A wrapped tiny model whose adapters are not zero (fresh peft adapters have B = 0)."""
    model = lora.add_adapters(build_model(build_tokenizer(), seed=0), keys, lora.CAUSAL_LM)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in lora.trainable_parameters(model):
            p.copy_(torch.randn(p.shape, generator=generator) * 0.05)
    return model.eval()


def sync(engine: HFRolloutEngine, policy: torch.nn.Module, mode: str) -> None:
    """applied: the adapters copied straight into the model (the engine's `update_weights` would merge
    them); merged: the worker's sync."""
    if mode == "applied":
        engine.model.load_state_dict(dict(lora.weights_for_engine(policy, adapters_only=True)), strict=False)
    else:
        engine.update_weights(lora.weights_for_engine(policy, adapters_only=False))


async def generate(engine: HFRolloutEngine, requests: int, new_tokens: int) -> tuple[float, list]:
    params = SamplingParams(max_new_tokens=new_tokens, temperature=1.0, ignore_eos=True)
    prompts = [[(7 * i + j) % 200 + 10 for j in range(64)] for i in range(requests)]
    start = time.perf_counter()
    outputs = await asyncio.gather(
        *(engine.generate(p, SamplingParams(**{**vars(params), "seed": i})) for i, p in enumerate(prompts))
    )
    elapsed = time.perf_counter() - start
    return requests * new_tokens / elapsed, list(zip(prompts, outputs, strict=True))


def max_log_prob_gap(policy: torch.nn.Module, samples: list) -> float:
    gap = 0.0
    with torch.no_grad():
        for prompt, out in samples[:8]:
            ids = torch.tensor([prompt + out.token_ids[:-1]])
            logits = policy(input_ids=ids).logits[0, len(prompt) - 1 :]
            actor = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(out.token_ids)[:, None])[
                :, 0
            ]
            gap = max(gap, float((actor - torch.tensor(out.log_probs)).abs().max()))
    return gap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--requests", type=int, default=64)
    parser.add_argument("--new-tokens", type=int, default=256)
    args = parser.parse_args()
    torch.set_num_threads(1)
    keys = SimpleNamespace(lora_rank=args.rank, lora_alpha=2.0 * args.rank, target_modules=[ALL_LINEAR])
    policy = trained_policy(keys)
    tokenizer = build_tokenizer()
    models = {
        "applied": lora.add_adapters(build_model(tokenizer, seed=0), keys, lora.CAUSAL_LM),
        "merged": lora.engine_model(build_model(tokenizer, seed=0), keys),
        "plain": build_model(tokenizer, seed=0),
    }
    engines = {
        mode: HFRolloutEngine(model, [tokenizer.eos_token_id], tokenizer.pad_token_id)
        for mode, model in models.items()
    }
    sync_s: dict[str, list[float]] = {"applied": [], "merged": []}
    for _ in range(5):
        for mode, times in sync_s.items():
            start = time.perf_counter()
            sync(engines[mode], policy, mode)
            times.append(time.perf_counter() - start)
    rates: dict[str, list[float]] = {m: [] for m in engines}
    gaps: dict[str, float] = {}
    for _ in range(args.repeats):
        for mode, engine in engines.items():
            rate, samples = asyncio.run(generate(engine, args.requests, args.new_tokens))
            rates[mode].append(rate)
            gaps[mode] = max_log_prob_gap(policy, samples)
    print(f"rank {args.rank}, {args.requests} requests x 64 prompt + {args.new_tokens} new tokens, 1 thread")
    print(f"| mode | sync (median of 5) | generation tok/s (best of {args.repeats}) | max abs log-prob gap |")
    print("|---|---|---|---|")
    for mode in engines:
        sync_ms = f"{statistics.median(sync_s[mode]) * 1e3:.1f} ms" if mode in sync_s else "-"
        gap = f"{gaps[mode]:.2e}" if mode in sync_s else "(not the policy)"
        print(f"| {mode} | {sync_ms} | {max(rates[mode]):,.0f} | {gap} |")


if __name__ == "__main__":
    main()
