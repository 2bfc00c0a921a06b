"""The Markovian testbed report: a verdict table first (each claim, its target, what was measured with its
spread, held or not), then the plots, then the tables each verdict was decided on.

    python recipes/markovian_testbed/report.py --root outputs/markovian_testbed

Reads ROOT/run_config.json (the settings run.sh started ROOT with, run_config.py: B, C, m and I),
ROOT/sft/ (the warm start and its accuracy checks), ROOT/{longcot,delethink}/ (the two RL runs:
metrics.jsonl, rollouts/), ROOT/eval/*/ (main_eval's summary.json and samples.jsonl) and
ROOT/eval/timing.json, and writes ROOT/report.md, ROOT/verdicts.json (what aggregate.py reads over seeds),
ROOT/accuracy_vs_budget.png and ROOT/cost.png. Nothing is decided here that the measurements do not say.

- the warm start reached its target accuracy (warm_start.py stops the recipe when it did not);
- RL gains over its own warm start, in each environment: held-out accuracy at B, the same problems and
  sample seeds before and after, the gain paired by problem and held if above two standard errors;
- (a) Delethink-RL's held-out accuracy at B against LongCoT-RL's, with a bootstrap standard error, and
  where each failed held-out sample first left its reference (the start of a trace, just after a cut);
- (b) accuracy vs thinking budget on problems whose reference thinking is longer than B;
- (c) cost: rollout and update time per RL step, estimated FLOPs, and the rollout and update of one
  step-sized batch at budgets B..8B for both trained models (ROOT/eval/timing.json, from
  recipes/scaling/benchmark.py): seconds, decode and prefill time per token, and the cost per
  trajectory with the budget from which Delethink is the cheaper one (ROOT/crossover.png).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from verl.data import shift_register
from verl.eval.paired import Scores, accuracy, fmt, paired_gain, paired_ratio, problem_scores
from verl.eval.plot import save_figure
from verl.tools.cost_model import logged_run_flops, qwen2_dims
from verl.tools.summary_picture import ENVIRONMENTS, SummaryPicture, picture_dict
from verl.tools.summary_picture import save as save_picture
from verl.trainer.sft import outcome
from verl.utils.checkpoint import step_dirs
from verl.utils.fs import atomic_write_text, read_jsonl
from verl.utils.reward_score.boxed import THINK_END

if __package__ in (None, ""):  # run as a script: the repository root holds `recipes`
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from recipes.markovian_testbed import run_config  # noqa: E402
from recipes.markovian_testbed.settings import (  # noqa: E402
    TARGET_A_RATIO,
    TARGET_B_LONGCOT_SHARE,
    TARGET_C_FLAT,
    TARGET_C_ROLLOUT,
    TARGET_GAIN_SE,
)

TRAINED = "synthetic/shift_register/trained"  # eval rows of the RL training sizes (make_eval_data.py)
PAST_B = "synthetic/shift_register/past_budget"  # eval rows whose reference thinking is longer than B


@dataclass
class Verdict:
    """One row of the verdict table, and what aggregate.py averages over seeds."""

    key: str  # the claim's name in verdicts.json, the same in every run
    claim: str
    target: str
    measured: str  # the number and its spread, as printed
    value: float | None = None  # the number the verdict was decided on; None: not measured
    held: bool | None = None  # None: not measured here


# per environment: the warm start's and the RL run's held-out accuracy at B, each (mean, standard error)
Accuracies = dict[str, tuple[tuple[float, float], tuple[float, float]]]


def not_measured(key: str, claim: str, target: str, why: str) -> Verdict:
    return Verdict(key, claim, target, f"not measured: {why}")


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
    """The earlier per-token measure of claim (c): milliseconds of rollout wall time per thinking token of
    one timed step batch. It moves with how alike the samples are (the engine copies identical prompts)
    and with the engine's batching, so the claim now reads `decode_ms_per_token`; this stays beside it."""
    return 1e3 * run["wall_s"] / run["thinking_tokens"]


def decode_ms_per_token(run: dict[str, Any]) -> float:
    """Claim (c)'s per-token measure: the engine's decode milliseconds per token it decoded in the timed
    budget's distinct-problem pass (recipes/scaling/benchmark.py defines it)."""
    return run["distinct"]["decode_ms_per_token"]


def distinct_pass(rows: list[dict[str, Any]]) -> bool:
    """Whether the timing runs include the distinct-problem pass (timing.json files written before it do
    not)."""
    return all("distinct" in r[mode] for r in rows for mode in ENVIRONMENTS)


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


B_CLAIM = "(b) past B, from B to 2B: more chunks help Delethink, a longer budget not LongCoT"
B_TARGET = f"Delethink rises, LongCoT gains < {TARGET_B_LONGCOT_SHARE} x Delethink's gain"


def claim_b(lc: dict[str, Any], dt: dict[str, Any], budget: int) -> tuple[list[str], Verdict]:
    key, claim, target = "b", B_CLAIM, B_TARGET
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
        why = f"both sweeps need budgets {budget} and {twice}"
        return lines + [f"not decided: {why}", ""], not_measured(key, claim, target, why)
    dt_points = [dt_acc[b] for b in sorted(dt_acc) if budget <= b <= twice]
    dt_rises = dt_acc[twice] > dt_acc[budget]
    dt_rises = dt_rises and all(b >= a for a, b in zip(dt_points, dt_points[1:], strict=False))
    dt_gain, lc_gain = dt_acc[twice] - dt_acc[budget], lc_acc[twice] - lc_acc[budget]
    held = dt_rises and lc_gain < TARGET_B_LONGCOT_SHARE * dt_gain
    measured = f"Delethink {dt_gain:+.3f} ({'rising' if dt_rises else 'not rising'}), LongCoT {lc_gain:+.3f}"
    return lines + [
        f"From B to 2B: Delethink gains {dt_gain:+.3f} ({'rising' if dt_rises else 'not rising'} at every "
        f"measured budget), LongCoT gains {lc_gain:+.3f} (target: Delethink rises and LongCoT gains < "
        f"{TARGET_B_LONGCOT_SHARE} x Delethink's gain): {verdict(held)}",
        "",
    ], Verdict(key, claim, target, measured, dt_gain, held)


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


def rollout_ratio_per_step(records: dict[str, list[dict[str, Any]]]) -> list[float]:
    """Delethink / LongCoT rollout time at each RL step both runs logged: same seed, so the same prompts."""
    gen = {
        mode: {r["step"]: r["timing/gen_s"] for r in recs if "timing/gen_s" in r}
        for mode, recs in records.items()
    }
    steps = sorted(set(gen["longcot"]) & set(gen["delethink"]))
    return [gen["delethink"][s] / gen["longcot"][s] for s in steps]


C_ROLLOUT_CLAIM = "(c) Delethink's rollout per RL step, against LongCoT's (in training)"
C_ROLLOUT_TARGET = f"<= {TARGET_C_ROLLOUT}x"
C_CROSSOVER_CLAIM = "(c) the budget from which Delethink's whole RL step per trajectory is the cheaper"
C_CROSSOVER_TARGET = "within the measured budgets"
C_FLAT_CLAIM = "(c) Delethink's decode time per token stays flat as the budget grows, LongCoT's grows"
C_FLAT_TARGET = f"Delethink <= {TARGET_C_FLAT}x, LongCoT more"


def claim_c(
    run_dirs: dict[str, Path], timing: dict[str, Any] | None, budget: int, chunk: int, carry: int
) -> tuple[list[str], dict[str, list[dict[str, Any]]], list[Verdict]]:
    """The cost section: each RL run's step times and FLOPs, the in-training rollout ratio, and the timing
    stage's tables (`timing`: recipes/scaling/benchmark.py's JSON); its lines, what the plots need, its
    verdicts."""
    records = {mode: read_jsonl(d / "metrics.jsonl") for mode, d in run_dirs.items()}
    lines = ["## (c) training cost", ""]
    rollout = not_measured("c_rollout", C_ROLLOUT_CLAIM, C_ROLLOUT_TARGET, "no pair of RL runs")
    if run_dirs:
        lines += training_table(records, run_flops(run_dirs, chunk, carry))
        ratio_lines, in_training = rollout_in_training(records)
        lines += [*ratio_lines, ""]
        rollout = in_training or rollout
    verdicts = [rollout]
    if timing is None:
        verdicts += [
            not_measured("c_crossover", C_CROSSOVER_CLAIM, C_CROSSOVER_TARGET, "no timing stage"),
            not_measured("c_flat", C_FLAT_CLAIM, C_FLAT_TARGET, "no timing stage"),
        ]
        return lines + ["![cost](cost.png)", ""], {"records": records, "timing": []}, verdicts
    rows = timing["rows"]
    lines += timing_table(timing) + per_token_table(timing) + cost_curve(rows)
    lines += as_trained_lines(timing["as_trained"], rows)
    verdicts.append(crossover_verdict(rows, budget))
    flat_lines, flat = flatness(rows)
    lines += [*flat_lines, ""]
    verdicts.append(flat)
    return lines + ["![cost](cost.png)", ""], {"records": records, "timing": rows}, verdicts


def run_flops(run_dirs: dict[str, Path], chunk: int, carry: int) -> dict[str, float]:
    """Each RL run's estimated FLOPs over every logged training trajectory (verl/tools/cost_model.py:
    generation + 3x forward), with the model shape and tokenizer of the newest checkpoint."""
    hf_dir = step_dirs(next(iter(run_dirs.values())))[0] / "actor" / "huggingface"
    # the checkpoint's files read directly: transformers' Auto classes would import torch, seconds a report
    dims = qwen2_dims(SimpleNamespace(**json.loads((hf_dir / "config.json").read_text())))
    tokenizer = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))

    def count_tokens(text: str) -> int:
        return len(tokenizer.encode(text, add_special_tokens=False).ids)

    return {
        mode: logged_run_flops(d, dims, count_tokens, (chunk, carry) if mode == "delethink" else None)
        for mode, d in run_dirs.items()
    }


def training_table(records: dict[str, list[dict[str, Any]]], flops: dict[str, float]) -> list[str]:
    lines = [
        "Per RL step, medians over the run (rollout = generation; update = old log-probs + PPO update).",
        "FLOPs: verl/tools/cost_model.py over every logged training trajectory (generation + 3x",
        "forward).",
        "",
        "| run | steps | rollout (s) | update (s) | step (s) | thinking tokens / traj | est. FLOPs |",
        "|---|---|---|---|---|---|---|",
    ]
    for mode, recs in records.items():
        update = [r["timing/old_log_prob_s"] + r["timing/update_s"] for r in recs if "timing/update_s" in r]
        steps = [r for r in recs if "timing/step_s" in r]
        lines.append(
            f"| {mode} | {len(steps)} | {median_of(recs, 'timing/gen_s'):.2f} | "
            f"{np.median(update):.2f} | {median_of(recs, 'timing/step_s'):.2f} | "
            f"{median_of(recs, 'train/thinking_tokens_mean'):.0f} | {flops[mode]:.3e} |"
        )
    return lines


def rollout_in_training(records: dict[str, list[dict[str, Any]]]) -> tuple[list[str], Verdict | None]:
    """The in-training rollout claim: Delethink / LongCoT rollout time step by step (None: not both runs)."""
    ratios = rollout_ratio_per_step(records) if {"longcot", "delethink"} <= set(records) else []
    if not ratios:
        return [], None
    median = float(np.median(ratios))
    low, high = np.percentile(ratios, [25, 75])
    held = median <= TARGET_C_ROLLOUT
    lines = [
        "",
        f"Rollout per step, Delethink / LongCoT = {median:.2f} (median over {len(ratios)} steps, "
        f"each step's two rollouts on the same prompts; quartiles {low:.2f}-{high:.2f}; target "
        f"{C_ROLLOUT_TARGET}): {verdict(held)}",
    ]
    measured = f"{median:.2f}x (quartiles {low:.2f}-{high:.2f} over {len(ratios)} steps)"
    return lines, Verdict("c_rollout", C_ROLLOUT_CLAIM, C_ROLLOUT_TARGET, measured, median, held)


def timing_table(timing: dict[str, Any]) -> list[str]:
    """The timing stage's rollouts at each budget: seconds, ratio, Delethink's prefill."""
    lines = [
        f"Rollout of one RL-step-sized batch ({timing['prompts']} problems x {timing['samples']} samples) at "
        "budgets B..8B (`python -m recipes.scaling.benchmark`): end-of-sequence ignored, so every sample "
        f"writes its whole budget; both trained models alternate in one process, median of "
        f"{timing['repeats']} repeats.",
        "",
        "| budget | I | LongCoT s | Delethink s | Delethink / LongCoT "
        "| Delethink prefill s (tokens prefilled / copied) |",
        "|---|---|---|---|---|---|",
    ]
    for r in timing["rows"]:
        lc, dt = r["longcot"], r["delethink"]
        lines.append(
            f"| {r['budget']} | {r['max_chunks']} | {lc['wall_s']:.2f} | {dt['wall_s']:.2f} | "
            f"{r['delethink_over_longcot']:.2f} | {dt['prefill_s']:.2f} ({dt['prefill_tokens']} / "
            f"{dt['reused_prompt_tokens']}) |"
        )
    return lines


def per_token_table(timing: dict[str, Any]) -> list[str]:
    """Claim (c)'s per-token times at each budget: decode and prefill ms per token of the distinct-problem
    pass, each environment, and the earlier measure (`ms_per_token`) beside them."""
    rows = timing["rows"]
    lines = ["", "### Time per token: the context each token is computed against", ""]
    if not distinct_pass(rows):
        return lines + ["not measured: eval/timing.json predates the distinct-problem pass; delete it, rerun"]
    lines += [
        f"One more rollout per budget whose {timing['distinct_rows']} rows are distinct problems, one sample "
        "each, end-of-sequence ignored: no row copies another's question, and every budget decodes the same "
        "rows. The engine's decode seconds per token decoded and prefill seconds per prompt token prefilled, "
        "apart; the earlier measure, the step batch's rollout wall time per thinking token, beside them.",
        "",
        "| budget | LongCoT decode ms/token | Delethink decode ms/token | LongCoT prefill ms/token "
        "| Delethink prefill ms/token | earlier measure: LongCoT ms/token | Delethink ms/token |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lc, dt = r["longcot"], r["delethink"]
        lines.append(
            f"| {r['budget']} | {decode_ms_per_token(lc):.3f} | {decode_ms_per_token(dt):.3f} | "
            f"{lc['distinct']['prefill_ms_per_token']:.3f} | {dt['distinct']['prefill_ms_per_token']:.3f} | "
            f"{ms_per_token(lc):.3f} | {ms_per_token(dt):.3f} |"
        )
    return lines


def crossover_verdict(rows: list[dict[str, Any]], budget: int) -> Verdict:
    """The budget from which Delethink's whole step per trajectory stays the cheaper, in units of B."""
    if not timed_updates(rows):
        return not_measured("c_crossover", C_CROSSOVER_CLAIM, C_CROSSOVER_TARGET, "old timing.json")
    step = crossover(rows, "step_delethink_over_longcot")
    last = rows[-1]
    at_last = f"{last['step_delethink_over_longcot']:.2f}x at {last['budget']}"
    measured = f"from {step} = {step / budget:g}B ({at_last})" if step else f"none measured ({at_last})"
    return Verdict(
        "c_crossover", C_CROSSOVER_CLAIM, C_CROSSOVER_TARGET, measured,
        None if step is None else step / budget, step is not None,
    )  # fmt: skip


def as_trained_lines(trained: dict[str, Any], rows: list[dict[str, Any]]) -> list[str]:
    """The pair with end-of-sequence honoured, and the budgets at which Delethink's rollout is cheaper."""
    lc, dt, ratio = trained["longcot"], trained["delethink"], trained["delethink_over_longcot"]
    cheaper = [r["budget"] for r in rows if r["delethink_over_longcot"] < 1]
    return [
        f"- at {trained['budget']} with end-of-sequence honoured, as in training: "
        f"Delethink {dt['wall_s']:.2f} s ({dt['thinking_tokens']} thinking tokens), "
        f"LongCoT {lc['wall_s']:.2f} s ({lc['thinking_tokens']}); "
        f"Delethink / LongCoT = {ratio:.2f} (target < 1): {verdict(ratio < 1)}",
        f"- budgets at which Delethink's rollout is the cheaper one: {cheaper or 'none measured'}",
    ]


def flatness(rows: list[dict[str, Any]]) -> tuple[list[str], Verdict]:
    """Decode time per token (`decode_ms_per_token`) at the largest budget over at the smallest, each
    environment, with the earlier measure's growth beside it; the claim, decided on the decode time."""
    if len(rows) < 2:
        return [], not_measured("c_flat", C_FLAT_CLAIM, C_FLAT_TARGET, "one budget timed")
    if not distinct_pass(rows):
        return [], not_measured("c_flat", C_FLAT_CLAIM, C_FLAT_TARGET, "old timing.json (no distinct pass)")
    first, last = rows[0], rows[-1]
    growth = {m: decode_ms_per_token(last[m]) / decode_ms_per_token(first[m]) for m in ENVIRONMENTS}
    earlier = {m: ms_per_token(last[m]) / ms_per_token(first[m]) for m in ENVIRONMENTS}
    lines = [
        f"- {mode}: decode time per token at {last['budget']} / at {first['budget']} = {growth[mode]:.2f}x "
        f"(the earlier measure, rollout time per thinking token: {earlier[mode]:.2f}x)"
        for mode in ENVIRONMENTS
    ]
    held = growth["delethink"] <= TARGET_C_FLAT and growth["longcot"] > max(1.0, growth["delethink"])
    lines.append(
        f"- target: Delethink flat within {TARGET_C_FLAT}x, LongCoT growing (> 1x) and faster than "
        f"Delethink: {verdict(held)}"
    )
    measured = (
        f"Delethink {growth['delethink']:.2f}x, LongCoT {growth['longcot']:.2f}x from {first['budget']} "
        f"to {last['budget']}"
    )
    return lines, Verdict("c_flat", C_FLAT_CLAIM, C_FLAT_TARGET, measured, growth["delethink"], held)


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
        if ax.lines:
            ax.legend(fontsize=8)
        else:  # a run stopped before the timing stage (STOP_AFTER=heldout)
            ax.text(0.5, 0.5, "not measured", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    save_figure(fig, root / "cost.png")
    if cost["timing"] and timed_updates(cost["timing"]):
        plot_crossover(root, cost["timing"])


def summary_picture(accuracies: Accuracies, rows: list[dict[str, Any]], budget: int) -> SummaryPicture:
    """The numbers of the run's summary picture (verl/tools/summary_picture.py): held-out accuracy at B before
    and after RL, and the whole RL step per trajectory at each timed budget (when the updates were timed)."""
    accuracy = {mode: [round(x, 4) for x in (*warm, *rl)] for mode, (warm, rl) in accuracies.items()}
    if not (rows and timed_updates(rows)):
        return SummaryPicture(budget, accuracy)
    step_ms = {mode: [round(ms_per_trajectory(r[mode], "step_s"), 2) for r in rows] for mode in ENVIRONMENTS}
    return SummaryPicture(budget, accuracy, [r["budget"] for r in rows], step_ms)


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


def warm_start_verdict(root: Path) -> Verdict:
    key, claim = "warm_start", "the warm start learned the task (held-out T = 1 accuracy)"
    if not (root / "sft" / "sft_metrics.json").is_file():
        return not_measured(key, claim, "its train.stop_at_accuracy", "no warm start")
    warm = outcome.read(root / "sft")
    target = "no target" if warm.target is None else f">= {warm.target}"
    if not warm.checks:
        return Verdict(key, claim, target, f"no accuracy checks in {warm.steps} steps", None, warm.reached)
    step, acc = next(
        ((s, a) for s, a in warm.checks if warm.target is None or a >= warm.target), warm.checks[-1]
    )
    return Verdict(
        key, claim, target, f"{acc:.3f} at SFT step {step} of {warm.steps}", warm.best, warm.reached
    )


def heldout_scores(root: Path, name: str, mode: str, budget: int) -> Scores | None:
    """Scores by problem of one held-out evaluation at B; None if it was not run."""
    path = root / "eval" / name / "samples.jsonl"
    if not path.is_file():
        return None
    return problem_scores(read_jsonl(path), mode, budget) or None


def heldout_section(root: Path, budget: int, chunks: int) -> tuple[list[str], list[Verdict], Accuracies]:
    """RL against its own warm start in each environment, and (a), on the held-out problems at B."""
    warm = {mode: heldout_scores(root, "heldout_sft", mode, budget) for mode in ENVIRONMENTS}
    rl = {mode: heldout_scores(root, f"heldout_{mode}_rl", mode, budget) for mode in ENVIRONMENTS}
    lines = [
        f"## RL against its warm start, and (a): held-out problems of the trained sizes at B = {budget}",
        "",
    ]
    verdicts = []
    accuracies: Accuracies = {}
    gain_target = f"> {TARGET_GAIN_SE:g} standard errors"
    any_scores = next((s for s in (*warm.values(), *rl.values()) if s), None)
    if any_scores:
        lines += [
            f"{len(any_scores)} problems x {len(next(iter(any_scores.values())))} samples at T = 1, the same "
            "problems and sample seeds in every evaluation; accuracy ± one standard error over problems; the "
            "gain is paired by problem. Delethink inference: "
            f"I = {chunks} chunks, the same total budget.",
            "",
            "| environment | warm start | after RL | gain (paired) |",
            "|---|---|---|---|",
        ]
    for mode, label in ENVIRONMENTS.items():
        claim = f"{label}-RL gains over its own warm start (held-out accuracy at B)"
        if warm[mode] is None or rl[mode] is None:
            verdicts.append(not_measured(f"gain_{mode}", claim, gain_target, "no held-out evaluation"))
            continue
        gain = paired_gain(rl[mode], warm[mode])
        accuracies[mode] = (accuracy(warm[mode]), accuracy(rl[mode]))
        lines.append(
            f"| {label} | {fmt(accuracy(warm[mode]))} | {fmt(accuracy(rl[mode]))} | {fmt(gain, True)} |"
        )
        held = gain[0] > TARGET_GAIN_SE * gain[1]
        measured = f"{fmt(gain, True)} ({accuracy(warm[mode])[0]:.3f} -> {accuracy(rl[mode])[0]:.3f})"
        verdicts.append(Verdict(f"gain_{mode}", claim, gain_target, measured, gain[0], held))
    lines.append("")
    a_claim, a_target = "(a) Delethink-RL's accuracy at B, against LongCoT-RL's", f">= {TARGET_A_RATIO}x"
    if rl["longcot"] and rl["delethink"]:
        ratio = paired_ratio(rl["delethink"], rl["longcot"])
        held = ratio[0] >= TARGET_A_RATIO
        lines.append(
            f"(a) Delethink-RL / LongCoT-RL = {ratio[0]:.3f} ± {ratio[1]:.3f} (bootstrap over problems; "
            f"target {a_target}): {verdict(held)}"
        )
        lc, dt = accuracy(rl["longcot"])[0], accuracy(rl["delethink"])[0]
        measured = f"{ratio[0]:.2f}x ± {ratio[1]:.2f} ({dt:.3f} against {lc:.3f})"
        verdicts.append(Verdict("a", a_claim, a_target, measured, ratio[0], held))
    else:
        verdicts.append(not_measured("a", a_claim, a_target, "no held-out evaluation of both RL runs"))
    # the same ratio before any RL: a warm start that resumes badly after a cut hands (a) its deficit
    probe_claim = "the warm start resumes after a cut (probe: Delethink / LongCoT inference at B)"
    if warm["longcot"] and warm["delethink"]:
        probe = paired_ratio(warm["delethink"], warm["longcot"])
        lines.append(
            f"Markovian-ness probe: the warm start with Delethink inference / with LongCoT inference = "
            f"{probe[0]:.3f} ± {probe[1]:.3f} (at the same budget, before any RL)"
        )
        held = probe[0] >= TARGET_A_RATIO
        dt, lc = accuracy(warm["delethink"])[0], accuracy(warm["longcot"])[0]
        measured = f"{probe[0]:.2f}x ± {probe[1]:.2f} ({dt:.3f} against {lc:.3f})"
        verdicts.insert(0, Verdict("probe", probe_claim, a_target, measured, probe[0], held))
    else:
        verdicts.insert(
            0, not_measured("probe", probe_claim, a_target, "no held-out evaluation of the warm start")
        )
    return lines + [""], verdicts, accuracies


# where a failed sample's trace first leaves the reference: the rows of the failure-start table, in order
FAILURE_STARTS = (
    "step 0: the question restated",
    "step 1: the first sum",
    "a later step, within one step after a Delethink cut",
    "a later step",
    "the answer, after the thinking",
    "none: the budget ran out",
)


def failure_start(sample: dict[str, Any]) -> str | None:
    """Where a sample's generation first differs from its problem's reference response (None: it does
    not); the thinking is one token per character, so chunk k's first character is its first token."""
    question = shift_register.QUESTION.search(sample["problem"])  # inside its chat prompt
    reference = shift_register.solve(question["start"], int(question["steps"])).response
    generated = "".join(chunk["response"] for chunk in sample["chunks"])
    wrong = len(os.path.commonprefix([generated, reference]))  # the first position that differs
    if wrong == len(reference):
        return None
    if wrong == len(generated):
        return FAILURE_STARTS[5]
    if wrong >= reference.index(THINK_END):
        return FAILURE_STARTS[4]
    step = wrong // shift_register.TOKENS_PER_STEP
    if step < 2:
        return FAILURE_STARTS[step]
    chunk_start = 0
    for chunk in sample["chunks"]:
        if chunk_start + len(chunk["response"]) > wrong:
            break
        chunk_start += len(chunk["response"])
    after_cut = chunk_start > 0 and wrong - chunk_start < shift_register.TOKENS_PER_STEP
    return FAILURE_STARTS[2] if after_cut else FAILURE_STARTS[3]


def failure_starts_section(root: Path, budget: int) -> list[str]:
    """The failure-start table of the held-out evaluations at B: the warm start in both inference modes,
    then each RL run; a share of the run's samples per row."""
    runs = {
        "warm start, LongCoT inference": ("heldout_sft", "longcot"),
        "warm start, Delethink inference": ("heldout_sft", "delethink"),
        "LongCoT-RL": ("heldout_longcot_rl", "longcot"),
        "Delethink-RL": ("heldout_delethink_rl", "delethink"),
    }
    counts: dict[str, Counter[str | None]] = {}
    for label, (name, mode) in runs.items():
        path = root / "eval" / name / "samples.jsonl"
        if not path.is_file():
            continue
        samples = [s for s in read_jsonl(path) if s["mode"] == mode and s["thinking_budget"] == budget]
        if samples:  # a solved sample counts as None
            counts[label] = Counter(failure_start(s) if s["score"] < 1 else None for s in samples)
    if not counts:
        return []
    lines = [
        f"## Where the failed samples first go wrong: held-out problems at B = {budget}",
        "",
        "Each failed sample against its problem's reference, at the first token that differs; a share of "
        "the run's samples (and their number). A gap between the inference modes that sits in the row "
        "after a cut is a resume the model has not learned; errors in steps 0 and 1 are the start of a "
        "trace, which only whole traces (and long starts) teach.",
        "",
        "| first wrong token | " + " | ".join(counts) + " |",
        "|---" * (len(counts) + 1) + "|",
    ]
    for row in (*FAILURE_STARTS, None):
        cells = [f"{c[row] / c.total():.3f} ({c[row]})" for c in counts.values()]
        lines.append(f"| {row or 'none: solved'} | " + " | ".join(cells) + " |")
    return lines + [""]


def verdict_table(verdicts: list[Verdict]) -> list[str]:
    lines = ["| claim | target | measured | verdict |", "|---|---|---|---|"]
    for v in verdicts:
        shown = "not measured" if v.held is None else ("held" if v.held else "**not held**")
        lines.append(f"| {v.claim} | {v.target} | {v.measured} | {shown} |")
    return lines + [""]


def run_shape(root: Path) -> tuple[int, int, int, int]:
    """B, C, m and I, as run.sh recorded them when it started `root` (a SystemExit naming what is missing)."""
    try:
        saved = run_config.saved(root, ("B", "C", "M", "I"))
    except ValueError as err:
        raise SystemExit(f"report.py: {err}") from None
    return int(saved["B"]), int(saved["C"]), int(saved["M"]), int(saved["I"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", required=True, help="the recipe's output directory")
    root = Path(parser.parse_args(argv).root)
    budget, chunk, carry, chunks = run_shape(root)
    heldout_lines, verdicts, accuracies = heldout_section(root, budget, chunks)
    verdicts.insert(0, warm_start_verdict(root))
    lc, dt = load_summary(root, "longcot_rl"), load_summary(root, "delethink_rl")
    b_lines: list[str] = []
    if lc and dt:
        b_lines, b_verdict = claim_b(lc, dt, budget)
    else:  # the demo size leaves the sweeps out: its warm start never saw a whole trace past B
        b_verdict = not_measured(
            "b", B_CLAIM, B_TARGET, "no budget sweeps here (the demo's warm start saw no whole trace past B)"
        )
    verdicts.append(b_verdict)
    run_dirs = {m: root / m for m in ENVIRONMENTS if (root / m / "metrics.jsonl").is_file()}
    timing_path = root / "eval" / "timing.json"
    timing = json.loads(timing_path.read_text()) if timing_path.is_file() else None
    cost_lines, cost, cost_verdicts = claim_c(run_dirs, timing, budget, chunk, carry)
    verdicts += cost_verdicts
    plot(root, lc, dt, budget, cost)
    picture = summary_picture(accuracies, cost["timing"], budget)
    atomic_write_text(root / "summary_picture.json", json.dumps(picture_dict(picture), indent=1) + "\n")
    save_picture(picture, root / "summary.png")
    figures = [
        f
        for f in ("summary", "accuracy_vs_budget", "crossover", "training_curves", "cost")
        if (root / f"{f}.png").is_file()
    ]
    lines = [
        "# Markovian testbed report (generated by recipes/markovian_testbed/report.py)",
        "",
        f"LongCoT budget B = {budget}; Delethink C = {chunk}, m = {carry}, I = {chunks}.",
        "",
        *verdict_table(verdicts),
        *[f"![{f}]({f}.png)" for f in figures],
        "",
        *heldout_lines,
        *failure_starts_section(root, budget),
        *b_lines,
        *cost_lines,
    ]
    atomic_write_text(root / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(root / "verdicts.json", json.dumps([asdict(v) for v in verdicts], indent=1) + "\n")
    print("\n".join(line for line in lines if not line.startswith("![")))  # pictures are for the file


if __name__ == "__main__":
    main()
