"""Peak resident memory and update time of one testbed RL step, full fine-tuning against LoRA, each in a
process of its own (so each peak is its own), alternating: what `lora_vs_full.sh` puts next to the
accuracies.

    python recipes/markovian_testbed/lora_cost.py --model OUT/sft --data OUT/data/train.jsonl --budget 256 \\
        --prompts 8 --samples 8 --rank 16 [--repeats 3] --out OUT/lora_cost.json

A child builds the colocated worker of `testbed_longcot` (actor with its optimizer, the HF engine; LoRA:
the adapters, the engine's merged copy) in-process, samples one RL step's batch (prompts x samples at
budget B, seeded), computes the old log-probs and runs `repeats` PPO updates of that batch. It reports
the process's peak resident memory (VmHWM: start-up, engine, sampling and updates together), the
median update time, and the trainable parameters. The two children run one after the other: on a
shared machine compare them with care.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def child(args: argparse.Namespace) -> dict:
    from verl.config import compose_config
    from verl.core.batch import collate_rows, trajectory_rows
    from verl.core.engine import SamplingParams
    from verl.data.rl_dataset import load_prompts
    from verl.models import lora
    from verl.single_controller.fsdp_workers import ActorRolloutRefWorker
    from verl.trainer.config_loader import load_config
    from verl.utils.peak_memory import peak_rss

    overrides = [
        f"actor_rollout_ref.model.path={args.model}", f"data.train_files=[{args.data}]",
        f"data.val_files=[{args.data}]", f"data.max_response_length={args.budget}",
        f"actor_rollout_ref.model.lora_rank={args.rank if args.mode == 'lora' else 0}",
        f"actor_rollout_ref.model.lora_alpha={2 * args.rank}", "trainer.logger=[]",
        f"data.train_batch_size={args.prompts}", f"actor_rollout_ref.rollout.n={args.samples}",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={args.prompts // 2}",
    ]  # fmt: skip
    config = load_config(compose_config("testbed_longcot", overrides))
    worker = ActorRolloutRefWorker(config)
    worker.init_model()
    items = load_prompts([args.data], worker.tokenizer, "prompt", 10_000, True)[: args.prompts]
    params = [
        SamplingParams(max_new_tokens=args.budget, temperature=1.0, seed=i * args.samples + j)
        for i in range(args.prompts)
        for j in range(args.samples)
    ]
    trajectories = asyncio.run(worker.generate([it for it in items for _ in range(args.samples)], params))
    scores = [float(i % 2) - 0.5 for i in range(len(trajectories))]  # any non-zero advantages
    batch = collate_rows(trajectory_rows(trajectories, scores), worker.tokenizer.pad_token_id)
    batch["old_log_probs"] = worker.compute_log_prob(batch)
    seconds = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        worker.update_actor(dict(batch), num_mini_batches=2)
        seconds.append(time.perf_counter() - start)
    trainable = sum(p.numel() for p in lora.trainable_parameters(worker.model))
    worker.shutdown()
    tokens = int(batch["attention_mask"].sum())
    return {"peak_rss_gib": peak_rss() / 2**30, "update_s": seconds, "trainable": trainable, "tokens": tokens}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name in ("--model", "--data", "--out"):
        parser.add_argument(name, required=name != "--out")
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--samples", type=int, default=8)
    parser.add_argument("--rank", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--mode", choices=("full", "lora"), help=argparse.SUPPRESS)  # a child's
    args = parser.parse_args()
    if args.mode:
        print(json.dumps(child(args)))
        return
    results: dict[str, dict] = {}
    for mode in ("full", "lora"):
        command = [sys.executable, __file__, *sys.argv[1:], "--mode", mode]
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        if done.returncode:
            raise SystemExit(f"{mode} child failed:\n{done.stderr[-3000:]}")
        results[mode] = json.loads(done.stdout.strip().splitlines()[-1])
    for mode, r in results.items():
        runs = ", ".join(f"{s:.2f}" for s in r["update_s"])
        median = statistics.median(r["update_s"])
        print(f"{mode}: peak RSS {r['peak_rss_gib']:.2f} GiB, update median {median:.2f} s ({runs}), "
              f"trainable {r['trainable']:,}")  # fmt: skip
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
