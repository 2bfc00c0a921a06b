"""The tiny_markovian report: tables (markdown) and PNGs from the two RL runs and their evaluations.

    python recipes/tiny_markovian/report.py --root outputs/tiny_markovian

Reads the training runs (metrics.jsonl, rollouts/; default ROOT/{longcot,delethink}) and
ROOT/eval/*/summary.json (written by verl.trainer.main_eval); writes ROOT/report.md,
ROOT/accuracy_vs_budget.png and ROOT/training_cost.png. (a) accuracy at the training budget B,
(b) accuracy vs budget past B, (c) training cost: wall time and FLOPs estimated with
verl/tools/cost_model.py from every logged trajectory, (d) the Markovian-ness probe of the SFT checkpoint.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoConfig, AutoTokenizer

from verl.eval.plot import save_figure
from verl.eval.summary import ALL_SOURCES
from verl.tools.cost_model import logged_run_flops, qwen2_dims
from verl.utils.fs import atomic_write_text, read_jsonl

TRAIN_BUDGET = 128  # B of both RL runs
SOURCE_PREFIX = "synthetic/running_sum/"


def load_summary(path: Path) -> dict[str, Any] | None:
    return json.loads(path.read_text()) if path.is_file() else None


def run_at(summary: dict[str, Any], mode: str, budget: int) -> dict[str, Any] | None:
    return next((r for r in summary["runs"] if r["mode"] == mode and r["thinking_budget"] == budget), None)


def sources(summary: dict[str, Any]) -> list[str]:
    return [s for s in summary["runs"][0]["metrics"] if s != ALL_SOURCES]


def short(source: str) -> str:
    return source.removeprefix(SOURCE_PREFIX)


def accuracy_row(label: str, run: dict[str, Any], metric: str, srcs: list[str]) -> str:
    m = run["metrics"]
    cells = [f"{m[ALL_SOURCES][metric]:.3f}"] + [f"{m[s][metric]:.3f}" for s in srcs]
    a = m[ALL_SOURCES]
    extra = [
        f"{a['thinking_tokens_mean']:.1f}",
        f"{a['chunks_per_trace_mean']:.2f}",
        f"{a['has_eos_rate']:.2f}",
    ]
    return f"| {label} | {run['thinking_budget']} | " + " | ".join(cells + extra) + " |"


def accuracy_table(rows: list[tuple[str, dict[str, Any]]], metric: str, srcs: list[str]) -> list[str]:
    head = ["run", "budget", f"{metric} all"] + [short(s) for s in srcs] + ["thinking", "chunks", "EOS rate"]
    return [
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
        *[accuracy_row(label, run, metric, srcs) for label, run in rows],
    ]


def plot_sweeps(sweeps: dict[str, dict[str, Any]], metric: str, srcs: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [ALL_SOURCES, *srcs]
    fig, axes = plt.subplots(1, len(panels), figsize=(4 * len(panels), 3.6), squeeze=False)
    for ax, source in zip(axes[0], panels, strict=True):
        for label, summary in sweeps.items():
            points = sorted((r["thinking_budget"], r["metrics"][source][metric]) for r in summary["runs"])
            ax.plot([b for b, _ in points], [a for _, a in points], marker="o", label=label)
        ax.axvline(TRAIN_BUDGET, color="grey", linestyle=":", label=f"training budget B={TRAIN_BUDGET}")
        ax.set_title(short(source))
        ax.set_xlabel("thinking budget (tokens)")
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel(metric)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def plot_cost(curves: dict[str, list[dict]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
    for label, records in curves.items():
        # validation before training (step 0) has no time yet
        val = [(r.get("perf/cum_time_s", 0.0), r["val/score_mean"]) for r in records if "val/score_mean" in r]
        axes[0].plot([t for t, _ in val], [v for _, v in val], marker="o", label=label)
        steps = [r for r in records if "perf/cum_time_s" in r]
        axes[1].plot([r["step"] for r in steps], [r["perf/cum_time_s"] for r in steps], label=label)
    axes[0].set_xlabel("training wall time (s)")
    axes[0].set_ylabel("validation accuracy (greedy)")
    axes[1].set_xlabel("step")
    axes[1].set_ylabel("cumulative wall time (s)")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path)


def probe_section(title: str, probe: dict[str, Any]) -> list[str]:
    metric = f"mean@{probe['config']['sampling']['n']}"
    lines = [title, "", f"| thinking budget | LongCoT {metric} | Delethink {metric} |", "|---|---|---|"]
    lines += [
        f"| {p['thinking_budget']} | {p['longcot']:.3f} | {p['delethink']:.3f} |" for p in probe["probe"]
    ]
    lines += ["", "Per data source:", ""]
    return lines + accuracy_table([(r["label"], r) for r in probe["runs"]], metric, sources(probe)) + [""]


def cost_section(run_dirs: dict[str, Path], chunk: int, carry: int, out: Path) -> list[str]:
    hf_dir = sorted(next(iter(run_dirs.values())).glob("global_step_*/actor/huggingface"))[-1]
    dims = qwen2_dims(AutoConfig.from_pretrained(hf_dir))
    tokenizer = AutoTokenizer.from_pretrained(hf_dir)
    lines = [
        "## (c) training cost",
        "",
        "FLOPs: verl/tools/cost_model.py summed over every logged training trajectory (generation plus",
        f"3x its forward for training; validation not counted), model dims {dims}.",
        "",
        "Wall time depends on what else the machine runs; the median step time is the steadier number.",
        "",
        "| run | steps | wall time (s) | median step (s) | thinking tokens | est. FLOPs | val acc first "
        "| val acc last |",
        "|---|---|---|---|---|---|---|---|",
    ]
    curves = {}
    for mode, run_dir in run_dirs.items():
        records = read_jsonl(run_dir / "metrics.jsonl")
        curves[mode] = records
        last = [r for r in records if "perf/cum_time_s" in r][-1]
        val = [r["val/score_mean"] for r in records if "val/score_mean" in r]
        flops = logged_run_flops(run_dir, dims, tokenizer, (chunk, carry) if mode == "delethink" else None)
        wall, thinking = last["perf/cum_time_s"], last["perf/cum_thinking_tokens"]
        median_step = float(np.median([r["timing/step_s"] for r in records if "timing/step_s" in r]))
        cells = [
            mode,
            last["step"],
            f"{wall:.0f}",
            f"{median_step:.2f}",
            f"{thinking:.0f}",
            f"{flops:.3e}",
            f"{val[0]:.3f}",
            f"{val[-1]:.3f}",
        ]
        lines.append("| " + " | ".join(str(c) for c in cells) + " |")
    plot_cost(curves, out / "training_cost.png")
    return lines + ["", "![training cost](training_cost.png)", ""]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--root", default="outputs/tiny_markovian", help="evaluations in ROOT/eval/; the report"
    )
    parser.add_argument("--longcot-run", default=None, help="LongCoT-RL run directory (default ROOT/longcot)")
    parser.add_argument("--delethink-run", default=None, help="Delethink-RL run dir (default ROOT/delethink)")
    parser.add_argument("--chunk", type=int, default=32, help="Delethink-RL's C")
    parser.add_argument("--carry", type=int, default=16, help="Delethink-RL's keep_head + keep_tail")
    args = parser.parse_args()
    root = Path(args.root)
    names = ("longcot_rl", "delethink_rl", "probe_sft", "probe_longcot_rl", "probe_delethink_rl")
    evals = {name: load_summary(root / "eval" / name / "summary.json") for name in names}
    lines = ["# tiny_markovian report (generated by recipes/tiny_markovian/report.py)", ""]

    lc_eval, dt_eval = evals["longcot_rl"], evals["delethink_rl"]
    if lc_eval and dt_eval:
        metric = f"mean@{lc_eval['config']['sampling']['n']}"
        srcs = sources(lc_eval)
        at_b = [
            ("LongCoT-RL, LongCoT inference", run_at(lc_eval, "longcot", TRAIN_BUDGET)),
            ("Delethink-RL, Delethink inference", run_at(dt_eval, "delethink", TRAIN_BUDGET)),
        ]
        lines += [f"## (a) accuracy at the training budget B = {TRAIN_BUDGET}", ""]
        lines += accuracy_table([(label, run) for label, run in at_b if run], metric, srcs) + [""]
        lines += ["## (b) accuracy vs thinking budget", ""]
        rows = [("LongCoT-RL", r) for r in lc_eval["runs"]] + [("Delethink-RL", r) for r in dt_eval["runs"]]
        lines += accuracy_table(rows, metric, srcs) + [""]
        sweeps = {"LongCoT-RL (LongCoT)": lc_eval, "Delethink-RL (Delethink)": dt_eval}
        plot_sweeps(sweeps, metric, srcs, root / "accuracy_vs_budget.png")
        lines += ["![accuracy vs budget](accuracy_vs_budget.png)", ""]
        for name, summary in (("LongCoT-RL", lc_eval), ("Delethink-RL", dt_eval)):
            walls = ", ".join(f"{r['label']} {r['wall_time_s']:.0f} s" for r in summary["runs"])
            lines.append(f"- evaluation wall time, {name}: {walls}")
        lines.append("")

    run_dirs = {
        "longcot": Path(args.longcot_run or root / "longcot"),
        "delethink": Path(args.delethink_run or root / "delethink"),
    }
    run_dirs = {mode: d for mode, d in run_dirs.items() if (d / "metrics.jsonl").is_file()}
    if run_dirs:
        lines += cost_section(run_dirs, args.chunk, args.carry, root)

    titles = {
        "probe_sft": "## (d) Markovian-ness probe of the SFT checkpoint (equal total budgets)",
        "probe_longcot_rl": "## the same probe on the LongCoT-RL checkpoint",
        "probe_delethink_rl": "## the same probe on the Delethink-RL checkpoint",
    }
    for name, title in titles.items():
        if evals[name]:
            lines += probe_section(title, evals[name])

    atomic_write_text(root / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
