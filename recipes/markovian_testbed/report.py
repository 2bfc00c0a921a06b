"""The Markovian testbed report: the paper's three claims, measured, as tables (markdown) and PNGs.

    python recipes/markovian_testbed/report.py --root outputs/markovian_testbed --budget 512 \\
        --chunk 128 --carry 64

Reads ROOT/{longcot,delethink}/ (the two RL runs: metrics.jsonl, rollouts/) and ROOT/eval/*/summary.json
(written by verl.trainer.main_eval) and ROOT/eval/timing.json, and writes ROOT/report.md,
ROOT/accuracy_vs_budget.png and ROOT/cost.png. Each claim is checked against its target and printed as
held / not held, with the numbers it was decided on: nothing is decided here that the measurements do not say.

- (a) accuracy at the training budget B on held-out problems of the trained sizes;
- (b) accuracy vs thinking budget on problems whose reference thinking is longer than B;
- (c) cost: rollout and update time per RL step, estimated FLOPs, and the rollout and update of one
  step-sized batch at budgets B..8B for both trained models (ROOT/eval/timing.json, from
  time_rollouts.py): seconds, seconds per thinking token, and the cost per trajectory with the budget
  from which Delethink is the cheaper one (ROOT/crossover.png);
- the Markovian-ness probe of the warm start (Delethink inference vs LongCoT inference at B).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
from transformers import AutoConfig, AutoTokenizer

from verl.eval.plot import save_figure
from verl.tools.cost_model import logged_run_flops, qwen2_dims
from verl.utils.fs import atomic_write_text, read_jsonl

TRAINED = "synthetic/shift_register/trained"  # eval rows of the RL training sizes (make_eval_data.py)
PAST_B = "synthetic/shift_register/past_budget"  # eval rows whose reference thinking is longer than B

# the targets, as numbers the report compares against
TARGET_A_RATIO = 0.95  # Delethink-RL accuracy at B >= this x LongCoT-RL's
TARGET_B_LONGCOT_SHARE = 0.5  # LongCoT's gain from B to 2B < this x Delethink's
TARGET_C_FLAT = 1.2  # Delethink's per-token rollout time at 4B / at B <= this


def load_summary(root: Path, name: str) -> dict[str, Any] | None:
    path = root / "eval" / name / "summary.json"
    return json.loads(path.read_text()) if path.is_file() else None


def metric_name(summary: dict[str, Any]) -> str:
    return f"mean@{summary['config']['sampling']['n']}"


def accuracy_by_budget(summary: dict[str, Any], mode: str, source: str) -> dict[int, float]:
    metric = metric_name(summary)
    return {
        r["thinking_budget"]: r["metrics"][source][metric]
        for r in summary["runs"]
        if r["mode"] == mode and source in r["metrics"]
    }


def ms_per_token(run: dict[str, Any]) -> float:
    """Milliseconds of rollout per thinking token of one timed run (time_rollouts.py)."""
    return 1e3 * run["wall_s"] / run["thinking_tokens"]


def ms_per_trajectory(run: dict[str, Any], key: str) -> float:
    """Milliseconds of `key` (wall_s: the rollout; step_s: rollout + update) per trajectory of a timed run."""
    return 1e3 * run[key] / run["trajectories"]


def crossover(rows: list[dict[str, Any]], ratio_key: str) -> int | None:
    """The smallest measured budget from which Delethink / LongCoT (`ratio_key`) stays below 1 at every
    larger measured budget; None if it is not below 1 at the largest."""
    found = None
    for row in reversed(rows):
        if row[ratio_key] >= 1:
            break
        found = row["budget"]
    return found


def crossover_sentence(rows: list[dict[str, Any]]) -> str:
    """Where Delethink becomes the cheaper environment on this machine, per trajectory."""
    step, rollout = crossover(rows, "step_delethink_over_longcot"), crossover(rows, "delethink_over_longcot")
    largest = rows[-1]["budget"]

    def where(budget: int | None) -> str:
        if budget is None:
            return f"at no measured budget (up to {largest})"
        return f"from budget {budget}" + (" (the smallest measured)" if budget == rows[0]["budget"] else "")

    last = rows[-1]
    return (
        f"On this machine Delethink's whole step (rollout + update) per trajectory is the cheaper one "
        f"{where(step)}, its rollout {where(rollout)}; at {largest} Delethink / LongCoT is "
        f"{last['step_delethink_over_longcot']:.2f} for the step and {last['delethink_over_longcot']:.2f} "
        "for the rollout."
    )


def verdict(held: bool) -> str:
    return "**held**" if held else "**not held**"


def claim_a(lc: dict[str, Any], dt: dict[str, Any], budget: int) -> list[str]:
    lc_acc = accuracy_by_budget(lc, "longcot", TRAINED).get(budget)
    dt_acc = accuracy_by_budget(dt, "delethink", TRAINED).get(budget)
    lines = [
        f"## (a) accuracy at the training budget B = {budget} (held-out problems of the trained sizes)",
        "",
    ]
    if lc_acc is None or dt_acc is None:
        return lines + [f"not measured: no evaluation at budget {budget} in both sweeps", ""]
    ratio = dt_acc / lc_acc if lc_acc > 0 else float("nan")
    return lines + [
        f"| run | {metric_name(lc)} |",
        "|---|---|",
        f"| LongCoT-RL, LongCoT inference | {lc_acc:.3f} |",
        f"| Delethink-RL, Delethink inference | {dt_acc:.3f} |",
        "",
        f"Delethink / LongCoT = {ratio:.3f} (target >= {TARGET_A_RATIO}): {verdict(ratio >= TARGET_A_RATIO)}",
        "",
    ]


def claim_b(lc: dict[str, Any], dt: dict[str, Any], budget: int) -> list[str]:
    lc_acc = accuracy_by_budget(lc, "longcot", PAST_B)
    dt_acc = accuracy_by_budget(dt, "delethink", PAST_B)
    lines = [f"## (b) accuracy vs thinking budget on problems longer than B = {budget}", ""]
    budgets = sorted(set(lc_acc) | set(dt_acc))
    lines += ["| budget | LongCoT-RL (longer budget) | Delethink-RL (more chunks) |", "|---|---|---|"]
    lines += [
        f"| {b} | {lc_acc.get(b, float('nan')):.3f} | {dt_acc.get(b, float('nan')):.3f} |" for b in budgets
    ]
    lines.append("")
    twice = 2 * budget
    if not {budget, twice} <= set(lc_acc) & set(dt_acc):
        return lines + [f"not decided: both sweeps need budgets {budget} and {twice}", ""]
    dt_points = [dt_acc[b] for b in sorted(dt_acc) if budget <= b <= twice]
    dt_rises = dt_acc[twice] > dt_acc[budget]
    dt_rises = dt_rises and all(b >= a for a, b in zip(dt_points, dt_points[1:], strict=False))
    dt_gain, lc_gain = dt_acc[twice] - dt_acc[budget], lc_acc[twice] - lc_acc[budget]
    held = dt_rises and lc_gain < TARGET_B_LONGCOT_SHARE * dt_gain
    return lines + [
        f"From B to 2B: Delethink gains {dt_gain:+.3f} ({'rising' if dt_rises else 'not rising'} at every "
        f"measured budget), LongCoT gains {lc_gain:+.3f} (target: Delethink rises and LongCoT gains < "
        f"{TARGET_B_LONGCOT_SHARE} x Delethink's gain): {verdict(held)}",
        "",
    ]


def median_of(records: list[dict[str, Any]], key: str) -> float:
    values = [r[key] for r in records if key in r]
    return float(np.median(values)) if values else float("nan")


def timed_updates(rows: list[dict[str, Any]]) -> bool:
    """Whether the timing runs include their updates (timing.json files written before they did do not)."""
    return all("step_delethink_over_longcot" in r for r in rows)


def cost_curve(rows: list[dict[str, Any]]) -> list[str]:
    """Rollout, update and whole step per trajectory at each budget, and where Delethink becomes cheaper."""
    lines = ["", "### The cost curve: one trajectory, LongCoT against Delethink", ""]
    if not timed_updates(rows):
        return lines + ["not measured: eval/timing.json predates the update timing; delete it and rerun", ""]
    lines += [
        "The same runs, each followed by the update the trainer makes of that batch (old log-probs + PPO "
        "update, the testbed configs' actor settings); step = rollout + update, per trajectory.",
        "",
        "| budget | LongCoT rollout ms | Delethink rollout ms | LongCoT update ms | Delethink update ms "
        "| LongCoT step ms | Delethink step ms | step Delethink / LongCoT |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        per_trajectory = [
            f"{ms_per_trajectory(r[mode], key):.1f}"
            for key in ("wall_s", "update_s", "step_s")
            for mode in ("longcot", "delethink")
        ]
        step_ratio = r["step_delethink_over_longcot"]
        lines.append(f"| {r['budget']} | {' | '.join(per_trajectory)} | {step_ratio:.2f} |")
    return lines + ["", crossover_sentence(rows), "", "![crossover](crossover.png)", ""]


def claim_c(
    run_dirs: dict[str, Path], timing: dict[str, Any] | None, budget: int, chunk: int, carry: int
) -> tuple[list[str], dict[str, list[dict[str, Any]]]]:
    lines = ["## (c) training cost", ""]
    records = {mode: read_jsonl(d / "metrics.jsonl") for mode, d in run_dirs.items()}
    if run_dirs:
        hf_dir = sorted(next(iter(run_dirs.values())).glob("global_step_*/actor/huggingface"))[-1]
        dims = qwen2_dims(AutoConfig.from_pretrained(hf_dir))
        tokenizer = AutoTokenizer.from_pretrained(hf_dir)
        lines += [
            "Per RL step, medians over the run (rollout = generation; update = old log-probs + PPO update).",
            "FLOPs: verl/tools/cost_model.py over every logged training trajectory (generation + 3x",
            "forward).",
            "",
            "| run | steps | rollout (s) | update (s) | step (s) | thinking tokens / traj | est. FLOPs |",
            "|---|---|---|---|---|---|---|",
        ]
        for mode, recs in records.items():
            update = [
                r["timing/old_log_prob_s"] + r["timing/update_s"] for r in recs if "timing/update_s" in r
            ]
            flops = logged_run_flops(
                run_dirs[mode], dims, tokenizer, (chunk, carry) if mode == "delethink" else None
            )
            steps = [r for r in recs if "timing/step_s" in r]
            lines.append(
                f"| {mode} | {len(steps)} | {median_of(recs, 'timing/gen_s'):.2f} | "
                f"{np.median(update):.2f} | {median_of(recs, 'timing/step_s'):.2f} | "
                f"{median_of(recs, 'train/thinking_tokens_mean'):.0f} | {flops:.3e} |"
            )
        if {"longcot", "delethink"} <= set(records):
            lc_gen, dt_gen = (
                median_of(records["longcot"], "timing/gen_s"),
                median_of(records["delethink"], "timing/gen_s"),
            )
            lines += [
                "",
                f"Rollout per step, Delethink / LongCoT = {dt_gen / lc_gen:.2f} (target < 1, same run, same "
                f"machine): {verdict(dt_gen < lc_gen)}",
            ]
        lines.append("")
    if timing is None:
        return lines + ["![cost](cost.png)", ""], {"records": records, "timing": []}
    rows = timing["rows"]
    lines += [
        f"Rollout of one RL-step-sized batch ({timing['prompts']} problems x {timing['samples']} samples) at "
        "budgets B..8B (`time_rollouts.py`): end-of-sequence ignored, so every sample writes its whole "
        f"budget; both trained models alternate in one process, median of {timing['repeats']} repeats.",
        "",
        "| budget | I | LongCoT s | Delethink s | Delethink / LongCoT | LongCoT ms/token "
        "| Delethink ms/token | Delethink prefill s (tokens prefilled / copied) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lc, dt = r["longcot"], r["delethink"]
        lines.append(
            f"| {r['budget']} | {r['max_chunks']} | {lc['wall_s']:.2f} | {dt['wall_s']:.2f} | "
            f"{r['delethink_over_longcot']:.2f} | {ms_per_token(lc):.3f} | "
            f"{ms_per_token(dt):.3f} | {dt['prefill_s']:.2f} ({dt['prefill_tokens']} / "
            f"{dt['reused_prompt_tokens']}) |"
        )
    lines += cost_curve(rows)
    trained = timing["as_trained"]
    lc, dt, ratio = trained["longcot"], trained["delethink"], trained["delethink_over_longcot"]
    lines.append(
        f"- at {trained['budget']} with end-of-sequence honoured, as in training: "
        f"Delethink {dt['wall_s']:.2f} s ({dt['thinking_tokens']} thinking tokens), "
        f"LongCoT {lc['wall_s']:.2f} s ({lc['thinking_tokens']}); "
        f"Delethink / LongCoT = {ratio:.2f} (target < 1): {verdict(ratio < 1)}"
    )
    cheaper = [r["budget"] for r in rows if r["delethink_over_longcot"] < 1]
    lines.append(f"- budgets at which Delethink's rollout is the cheaper one: {cheaper or 'none measured'}")
    if len(rows) >= 2:
        first, last = rows[0], rows[-1]
        growth = {m: ms_per_token(last[m]) / ms_per_token(first[m]) for m in ("longcot", "delethink")}
        for mode in ("longcot", "delethink"):
            lines.append(
                f"- {mode}: per-token time at {last['budget']} / at {first['budget']} = {growth[mode]:.2f}x"
            )
        lc_grows = growth["longcot"] > max(1.0, growth["delethink"])
        held = growth["delethink"] <= TARGET_C_FLAT and lc_grows
        lines.append(
            f"- target: Delethink flat within {TARGET_C_FLAT}x, LongCoT growing (> 1x) and faster than "
            f"Delethink: {verdict(held)}"
        )
    lines.append("")
    return lines + ["![cost](cost.png)", ""], {"records": records, "timing": rows}


def plot(root: Path, lc: dict | None, dt: dict | None, budget: int, cost: dict[str, Any]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if lc and dt:
        fig, axes = plt.subplots(1, 2, figsize=(9, 3.6))
        for ax, source in zip(axes, (TRAINED, PAST_B), strict=True):
            for label, summary, mode in (("LongCoT-RL", lc, "longcot"), ("Delethink-RL", dt, "delethink")):
                points = sorted(accuracy_by_budget(summary, mode, source).items())
                ax.plot([b for b, _ in points], [a for _, a in points], marker="o", label=label)
            ax.axvline(budget, color="grey", linestyle=":", label=f"training budget B={budget}")
            ax.set_title(source.rsplit("/", 1)[-1].replace("_", " ") + " sizes")
            ax.set_xlabel("thinking budget (tokens)")
            ax.set_ylim(-0.02, 1.02)
            ax.grid(alpha=0.3)
        axes[0].set_ylabel(metric_name(lc))
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, root / "accuracy_vs_budget.png")

    fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
    for mode, recs in cost["records"].items():
        steps = [r for r in recs if "timing/gen_s" in r]
        axes[0].plot([r["step"] for r in steps], [r["timing/gen_s"] for r in steps], label=f"{mode} rollout")
    budgets = [r["budget"] for r in cost["timing"]]
    for mode in ("longcot", "delethink") if cost["timing"] else ():
        runs = [r[mode] for r in cost["timing"]]
        axes[1].plot(budgets, [run["wall_s"] for run in runs], marker="o", label=mode)
        axes[2].plot(budgets, [ms_per_token(run) for run in runs], marker="o", label=mode)
    axes[0].set_xlabel("RL step")
    axes[0].set_ylabel("rollout time in training (s)")
    axes[1].set_xlabel("thinking budget (tokens)")
    axes[1].set_ylabel("rollout of a step-sized batch (s)")
    axes[2].set_xlabel("thinking budget (tokens)")
    axes[2].set_ylabel("rollout ms per thinking token")
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, root / "cost.png")
    if cost["timing"] and timed_updates(cost["timing"]):
        plot_crossover(root, cost["timing"])


def plot_crossover(root: Path, rows: list[dict[str, Any]]) -> None:
    """Rollout and whole step per trajectory against the budget, both environments: where they cross."""
    import matplotlib.pyplot as plt

    budgets = [r["budget"] for r in rows]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.8))
    panels = (("wall_s", "rollout"), ("step_s", "whole step (rollout + update)"))
    for ax, (key, title) in zip(axes, panels, strict=True):
        for mode, label in (("longcot", "LongCoT"), ("delethink", "Delethink")):
            ax.plot(budgets, [ms_per_trajectory(r[mode], key) for r in rows], marker="o", label=label)
        ax.set_title(f"{title} per trajectory")
        ax.set_xlabel("thinking budget (tokens)")
        ax.set_ylabel("ms per trajectory")
        ax.set_ylim(bottom=0)
        ax.set_xscale("log", base=2)
        ax.set_xticks(budgets, [str(b) for b in budgets])
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, root / "crossover.png")


def probe_section(probe: dict[str, Any]) -> list[str]:
    metric = metric_name(probe)
    lines = [
        "## Markovian-ness probe of the warm start (same total budget)",
        "",
        f"| thinking budget | LongCoT {metric} | Delethink {metric} | ratio |",
        "|---|---|---|---|",
    ]
    for p in probe["probe"]:
        ratio = p["delethink"] / p["longcot"] if p["longcot"] > 0 else float("nan")
        lines.append(f"| {p['thinking_budget']} | {p['longcot']:.3f} | {p['delethink']:.3f} | {ratio:.3f} |")
    return lines + [""]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the recipe's output directory")
    parser.add_argument("--budget", type=int, required=True, help="B, the LongCoT training budget")
    parser.add_argument("--chunk", type=int, required=True, help="Delethink-RL's C")
    parser.add_argument("--carry", type=int, required=True, help="Delethink-RL's keep_head + keep_tail")
    args = parser.parse_args(argv)
    root = Path(args.root)
    lc, dt = load_summary(root, "longcot_rl"), load_summary(root, "delethink_rl")
    lines = ["# Markovian testbed report (generated by recipes/markovian_testbed/report.py)", ""]
    probe = load_summary(root, "probe_sft")
    if probe:
        lines += probe_section(probe)
    if lc and dt:
        lines += claim_a(lc, dt, args.budget) + claim_b(lc, dt, args.budget)
    run_dirs = {m: root / m for m in ("longcot", "delethink") if (root / m / "metrics.jsonl").is_file()}
    timing_path = root / "eval" / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else None
    cost_lines, cost = claim_c(run_dirs, timing, args.budget, args.chunk, args.carry)
    lines += cost_lines
    plot(root, lc, dt, args.budget, cost)
    atomic_write_text(root / "report.md", "\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
