"""The LoRA-RL against full-RL table of `lora_vs_full.sh`, from what its runs and evaluations wrote.

    python recipes/markovian_testbed/lora_table.py --full OUT --lora OUT_LORA [--lora OUT_LORA2 ...] \\
        --budget 256 --cost OUT/lora_cost_r16.json --out OUT_LORA/lora_vs_full.md

Per environment and run (the warm start, full RL, each LoRA run): held-out accuracy at B on the held-out
evaluation of lora_vs_full.sh (eval/heldout_*: the warm start's from the probe) with its standard error
over problems, the gain over the warm start paired by problem (every run samples problem p's sample j with
the same seed, so the difference of per-problem means is much less noisy than either accuracy), and the
RL update time per step (median of `timing/update_s` over the run's steps). From the --cost file
(lora_cost.py): the trainable parameters, peak resident memory and update time of one LongCoT RL step,
each measured in a process of its own.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from omegaconf import OmegaConf

from verl.eval.paired import Scores, accuracy, fmt, paired_gain, problem_scores
from verl.utils.fs import atomic_write_text, read_jsonl

ENVIRONMENTS = {"longcot": "LongCoT", "delethink": "Delethink"}


def run_label(run_dir: Path) -> str:
    """'full RL, lr 1e-05' or 'LoRA r 16 (alpha 32), lr 0.0001', from the run's saved Hydra config."""
    model = OmegaConf.load(run_dir / ".hydra" / "config.yaml").actor_rollout_ref
    lr = f"lr {model.actor.optim.lr:g}"
    if model.model.lora_rank:
        return f"LoRA r {model.model.lora_rank} (alpha {model.model.lora_alpha:g}), {lr}"
    return f"full RL, {lr}"


def root_label(root: Path) -> str:
    """run_label of either environment's run under a run.sh output (both share the actor's keys; a sweep
    point cut short may have run one environment only)."""
    runs = [root / mode for mode in ENVIRONMENTS if (root / mode / ".hydra" / "config.yaml").is_file()]
    if not runs:
        raise SystemExit(f"{root}: no RL run (longcot/ or delethink/ with .hydra/config.yaml)")
    return run_label(runs[0])


def update_seconds(run_dir: Path) -> str:
    path = run_dir / "metrics.jsonl"
    rows = read_jsonl(path) if path.is_file() else []
    times = [m["timing/update_s"] for m in rows if "timing/update_s" in m]
    return f"{statistics.median(times):.2f} s" if times else "-"


def heldout(root: Path, name: str, mode: str, budget: int) -> Scores | None:
    """Scores by problem of one held-out evaluation; None if it was not run (a sweep point cut short)."""
    path = root / "eval" / name / "samples.jsonl"
    if not path.is_file():
        return None
    scores = problem_scores(read_jsonl(path), mode, budget)
    if not scores:
        raise SystemExit(f"{path}: no {mode} samples at budget {budget}")
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--full", type=Path, required=True, help="run.sh's output with the full-RL runs")
    parser.add_argument("--lora", type=Path, action="append", required=True, help="a LoRA run.sh output")
    parser.add_argument("--budget", type=int, required=True)
    parser.add_argument("--cost", type=Path, help="lora_cost.py's output")
    parser.add_argument("--out", type=Path, help="where to write the table (markdown)")
    args = parser.parse_args()
    lines = [f"# LoRA-RL against full RL from the same warm start (B = {args.budget})", ""]
    rows = [
        "| environment | run | held-out accuracy at B | gain over the warm start (paired) "
        "| RL update per step |",
        "|---|---|---|---|---|",
    ]
    for mode, label in ENVIRONMENTS.items():
        warm = heldout(args.full, "heldout_sft", mode, args.budget)
        if warm is None:
            raise SystemExit(f"{args.full}: no held-out evaluation of the warm start (eval/heldout_sft)")
        rows.append(f"| {label} | warm start | {fmt(accuracy(warm))} | | |")
        for root in (args.full, *args.lora):
            scores = heldout(root, f"heldout_{mode}_rl", mode, args.budget)
            run = root / mode
            if scores is None:
                rows.append(f"| {label} | {root_label(root)} | not measured | | {update_seconds(run)} |")
                continue
            rows.append(
                f"| {label} | {root_label(root)} | {fmt(accuracy(scores))} | "
                f"{fmt(paired_gain(scores, warm), signed=True)} | {update_seconds(run)} |"
            )
    samples = len(next(iter(warm.values())))
    lines += [
        f"Held-out: {len(warm)} problems of the trained sizes x {samples} samples at T = 1; accuracy ± one "
        "standard error over problems.",
        "",
        *rows,
    ]
    if args.cost:
        cost = json.loads(args.cost.read_text())
        lines += [
            "", "One LongCoT RL step in a process of its own (lora_cost.py):", "",
            "| | trainable parameters | peak resident memory | update (median) |", "|---|---|---|---|",
        ]  # fmt: skip
        for kind in ("full", "lora"):
            r = cost[kind]
            lines.append(
                f"| {kind} | {r['trainable']:,} | {r['peak_rss_gib']:.2f} GiB | "
                f"{statistics.median(r['update_s']):.2f} s |"
            )
    text = "\n".join(lines) + "\n"
    if args.out:
        atomic_write_text(args.out, text)
    print(text)


if __name__ == "__main__":
    main()
