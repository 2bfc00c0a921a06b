"""The LoRA-RL against full-RL table of `lora_vs_full.sh`, from what the two recipe runs wrote.

    python recipes/markovian_testbed/lora_table.py --full OUT --lora OUT_LORA --budget 256 --rank 16 --lr 1e-4

Per environment: held-out accuracy at B on problems of the trained sizes (main_eval's mean@N, the
report's claim (a) numbers; the warm start's from the probe, or --warm-start-eval), the RL update time
per step (median of `timing/update_s` over the run's steps), and from `OUT_LORA/lora_cost.json`
(lora_cost.py) the peak resident memory and update time of one LongCoT RL step measured in a process of
its own, and the trainable parameters. Writes OUT_LORA/lora_vs_full.md and prints it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # report.py, next to this file

from report import TRAINED, accuracy_by_budget, load_summary, metric_name  # noqa: E402

from verl.utils.fs import atomic_write_text, read_jsonl  # noqa: E402

ENVIRONMENTS = {"longcot": "LongCoT", "delethink": "Delethink"}


def accuracy(root: Path, name: str, mode: str, budget: int) -> str:
    summary = load_summary(root, name)
    if summary is None:
        return "-"
    value = accuracy_by_budget(summary, mode, TRAINED).get(budget)
    return "-" if value is None else f"{value:.3f} ({metric_name(summary)})"


def update_seconds(run_dir: Path) -> str:
    path = run_dir / "metrics.jsonl"
    times = (
        [m["timing/update_s"] for m in read_jsonl(path) if "timing/update_s" in m] if path.is_file() else []
    )
    return f"{statistics.median(times):.2f} s" if times else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", type=Path, required=True)
    parser.add_argument("--lora", type=Path, required=True)
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--rank", type=int, required=True)
    parser.add_argument("--lr", required=True)
    parser.add_argument(
        "--warm-start-eval", default="probe_sft", help="the eval/ directory of FULL with the warm start at B"
    )
    args = parser.parse_args()
    lines = [
        f"# LoRA-RL (rank {args.rank}, alpha {2 * args.rank}, lr {args.lr}) against full RL, same warm start",
        "",
        f"| environment | warm start at B = {args.budget} | full RL at B | LoRA-RL at B "
        "| RL update per step, full | RL update per step, LoRA |",
        "|---|---|---|---|---|---|",
    ]  # fmt: skip
    for mode, label in ENVIRONMENTS.items():
        probe = accuracy(args.full, args.warm_start_eval, mode, args.budget)
        full = accuracy(args.full, f"{mode}_rl", mode, args.budget)
        lora = accuracy(args.lora, f"{mode}_rl", mode, args.budget)
        full_s, lora_s = update_seconds(args.full / mode), update_seconds(args.lora / mode)
        lines.append(f"| {label} | {probe} | {full} | {lora} | {full_s} | {lora_s} |")
    cost_path = args.lora / "lora_cost.json"
    if cost_path.is_file():
        cost = json.loads(cost_path.read_text())
        lines += [
            "", "One LongCoT RL step in a process of its own (lora_cost.py):", "",
            "| | trainable parameters | peak resident memory | update (median) |", "|---|---|---|---|",
        ]  # fmt: skip
        for mode in ("full", "lora"):
            r = cost[mode]
            lines.append(
                f"| {mode} | {r['trainable']:,} | {r['peak_rss_gib']:.2f} GiB | "
                f"{statistics.median(r['update_s']):.2f} s |"
            )
    text = "\n".join(lines) + "\n"
    atomic_write_text(args.lora / "lora_vs_full.md", text)
    print(text)


if __name__ == "__main__":
    main()
