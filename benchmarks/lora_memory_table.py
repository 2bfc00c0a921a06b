"""Which paper config fits which GPU with LoRA and not without: the DRY_RUN memory estimate (formulas in
verl/tools/memory_estimate.py, never measured on a GPU here), for each r1d-1.5b config on 1 or 8 GPUs
of a node, full fine-tuning against LoRA (rank 32 on every linear layer).

    .venv/bin/python benchmarks/lora_memory_table.py [--rank 32]

Each GPU's declared memory is what the device reports, in GiB; the engine keeps the configs'
gpu_memory_utilization (0.6) of it, as a run with trainer.gpu_memory_gib set to it would.
"""

from __future__ import annotations

import argparse

from verl.config import compose_config
from verl.tools.memory_check import lookup_model_shape, settings_from_config
from verl.tools.memory_estimate import GIB, estimate_memory
from verl.trainer.config_loader import load_config

CONFIGS = {
    "LongCoT-8K": "r1d-1.5b_deepscaler_longcot_8k",
    "LongCoT-24K": "r1d-1.5b_deepscaler_longcot_24k",
    "Delethink-24K": "r1d-1.5b_deepscaler_delethink_24k",
    "Delethink-96K": "r1d-1.5b_openmath_delethink_96k",
}
GPUS = {"L4 24GB": 22.5, "A100 40GB": 39.4, "L40S 48GB": 44.9, "H100 80GB": 79.6}  # GiB the device reports


def peak_gib(config_name: str, gpus: int, memory_gib: float, rank: int) -> float:
    overrides = [
        f"trainer.n_gpus_per_node={gpus}", f"trainer.gpu_memory_gib={memory_gib}",
        f"actor_rollout_ref.model.lora_rank={rank}",
    ]  # fmt: skip
    config = load_config(compose_config(config_name, overrides), check_paths=False)
    shape, _ = lookup_model_shape(config.actor_rollout_ref.model.path)
    return estimate_memory(shape, settings_from_config(config, shape)).peak / GIB


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rank", type=int, default=32)
    args = parser.parse_args()
    print(f"peak GiB per rank, full / LoRA rank {args.rank}; **LoRA only**: fits with LoRA and not without")
    print("| config | GPUs | " + " | ".join(GPUS) + " |")
    print("|---|---|" + "---|" * len(GPUS))
    for label, name in CONFIGS.items():
        for gpus in (1, 8):
            cells = []
            for memory in GPUS.values():
                full, lora = peak_gib(name, gpus, memory, 0), peak_gib(name, gpus, memory, args.rank)
                verdict = "both" if full <= memory else "**LoRA only**" if lora <= memory else "neither"
                cells.append(f"{full:.1f} / {lora:.1f}: {verdict}")
            print(f"| {label} | {gpus} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
