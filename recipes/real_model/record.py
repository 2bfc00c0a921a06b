"""The record of examples/real_model_rl.sh: its two runs (OUT/longcot, OUT/delethink) read back from their
metrics.jsonl into docs/results/real_model_rl.yaml (then `python -m verl.tools.results`).

Per environment: the steps trained, a step's mean wall time and its phases, the rollout worker's peak
resident memory, the training reward, the KL to the base model, the engine's log-probs against the
actor's, and the held-out GSM8K accuracy (greedy, the first 16 test problems) before the first step and
after the last.

  python recipes/real_model/record.py outputs/real_model [--out docs/results/real_model_rl.yaml]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from verl.config import PolicyIterationConfig, to_dataclass
from verl.tools.results import Record, Table, provenance, write_record
from verl.trainer.resume import CONFIG_FILE
from verl.utils.fs import read_jsonl

REPO = Path(__file__).resolve().parents[2]
ENVIRONMENTS = ("longcot", "delethink")
ACCURACY = "val/gsm8k/mean@1"
PHASES = ("gen", "old_log_prob", "update")  # timing/<phase>_s: sampling, the log-prob passes, the update
NO_SIGNAL = """\
No training sample earned the math reward (SmolLM2-135M-Instruct solves almost no GSM8K problem at 135 M
parameters: docs/results/pretrained.md), so every GRPO group scored alike, its advantages were 0 and the
policy-gradient term had nothing to follow: these runs show the machinery on a real model, not learning.
"""
MACHINERY = """\
What they exercise: LoRA adapters under FSDP2, the KL to the base model (the actor with its adapters off),
the HF engine's copy against the actor (the log-perplexity gap), checkpoints with the merged export, and the
model's own text in wandb's table and the viewer. tests/test_real_model_rl.py trains the same configs at a
small size with a dense reward and checks the reward, the KL, a resume, the merged export and the adapters
moving."""


def notes(figures: dict[str, dict[str, float]]) -> str:
    """What the figures say: whether the runs had anything to learn from, then what they exercise."""
    no_signal = all(f["score"] == 0 for f in figures.values())
    return (NO_SIGNAL if no_signal else "") + MACHINERY


def run_config(run_dir: Path) -> PolicyIterationConfig:
    """The config a run saved with its last checkpoint."""
    step = (run_dir / "latest_checkpointed_iteration.txt").read_text().strip()
    saved = json.loads((run_dir / f"global_step_{step}" / CONFIG_FILE).read_text())
    return to_dataclass(PolicyIterationConfig, saved)


def setting(config: PolicyIterationConfig) -> str:
    ref = config.actor_rollout_ref
    prompts = config.data.train_batch_size
    return (
        f"GRPO with LoRA (rank {ref.model.lora_rank}) on GSM8K, {prompts} prompt{'s' * (prompts != 1)} x "
        f"{ref.rollout.n} samples a step, thinking budget {config.thinking_budget} in both"
    )


def mean_of(rows: list[dict], key: str) -> float:
    return statistics.fmean(r[key] for r in rows)


def summarise(run_dir: Path) -> dict[str, float]:
    """One run's figures from its metrics.jsonl (validation rows at step 0 and after the last step)."""
    metrics = read_jsonl(run_dir / "metrics.jsonl")
    trained = [m for m in metrics if m["step"] >= 1]
    if not trained:
        raise SystemExit(f"{run_dir}/metrics.jsonl: no training step logged")
    validated = [m for m in metrics if ACCURACY in m]
    return {
        "steps": len(trained),
        "step_s": mean_of(trained, "timing/step_s"),
        **{f"{phase}_s": mean_of(trained, f"timing/{phase}_s") for phase in PHASES},
        "peak_rss_gib": max(m["perf/peak_rss_gib"] for m in trained),
        "score": mean_of(trained, "train/score_mean"),
        "kl": trained[-1]["actor/kl_loss"],
        "log_ppl_diff": max(
            max(abs(m["rollout_corr/log_ppl_diff_max"]), abs(m["rollout_corr/log_ppl_diff_min"]))
            for m in trained
        ),
        "before": validated[0][ACCURACY],
        "after": validated[-1][ACCURACY],
        "eos": mean_of(trained, "train/has_eos_rate"),
    }


def table(figures: dict[str, dict[str, float]], caption: str, wall_s: float | None) -> Table:
    rows = [
        ["steps trained", lambda f: f"{f['steps']:.0f}"],
        ["time per step (s)", lambda f: f"{f['step_s']:.0f}"],
        [
            "of which sampling / log-probs / update (s)",
            lambda f: " / ".join(f"{f[p + '_s']:.0f}" for p in PHASES),
        ],
        ["peak resident memory of the worker (GiB)", lambda f: f"{f['peak_rss_gib']:.2f}"],
        ["training reward (mean over steps)", lambda f: f"{f['score']:.3f}"],
        ["samples ending with EOS (mean over steps)", lambda f: f"{f['eos']:.2f}"],
        ["KL to the base model, last step", lambda f: f"{f['kl']:.2e}"],
        ["largest log-perplexity gap, engine vs actor", lambda f: f"{f['log_ppl_diff']:.1e}"],
        [
            "GSM8K accuracy before -> after (16 held-out, greedy)",
            lambda f: f"{f['before']:.3f} -> {f['after']:.3f}",
        ],
    ]
    cells = [[name, *(cell(figures[e]) for e in ENVIRONMENTS)] for name, cell in rows]
    if wall_s is not None:  # one figure for the whole script, both runs together
        cells.append(["the whole example, both runs (min)", f"{wall_s / 60:.1f}", ""])
    return Table(["figure", *ENVIRONMENTS], cells, caption)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "out", type=Path, help="examples/real_model_rl.sh's OUT (holding longcot/ and delethink/)"
    )
    parser.add_argument(
        "--out", dest="record", type=Path, default=REPO / "docs" / "results" / "real_model_rl.yaml"
    )
    parser.add_argument("--wall-s", type=float, help="the example's wall time, start to end (its SECONDS)")
    args = parser.parse_args(argv)
    figures = {e: summarise(args.out / e) for e in ENVIRONMENTS}
    captions = {setting(run_config(args.out / e)) for e in ENVIRONMENTS}
    if len(captions) != 1:
        raise SystemExit(f"{args.out}: the two runs differ in their setting: {sorted(captions)}")
    record = Record(
        name=args.record.stem,
        title="RL from SmolLM2-135M-Instruct on CPU: LoRA, GSM8K, LongCoT and Delethink",
        section="pretrained",
        command="bash examples/real_model_rl.sh",
        tables=[table(figures, captions.pop(), args.wall_s)],
        notes=notes(figures),
        **provenance(),
    )
    write_record(args.record, record)
    print(f"wrote {args.record}")


if __name__ == "__main__":
    main()
