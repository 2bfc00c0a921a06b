"""Compare runs side by side from their metrics.jsonl: a printed table and a PNG of the curves.

python -m verl.tools.compare outputs/tiny_longcot outputs/tiny_delethink --out outputs/compare.png
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from verl.utils.fs import read_jsonl

# (metric, axis label); a run that lacks a metric simply has no line in that panel
PANELS = (
    ("train/score_mean", "train reward"),
    ("val/score_mean", "validation accuracy"),
    ("train/thinking_tokens_mean", "thinking tokens / trace"),
    ("train/num_turns_mean", "chunks / trace"),
    ("timing/step_s", "step time (s)"),
    ("perf/cum_context_token_steps", "cumulative attention cost\n(context tokens x decode steps)"),
)


def load_run(run_dir: str | Path) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: is {run_dir} a run directory (trainer.default_local_dir)?"
        )
    return read_jsonl(path)


def series(records: list[dict], key: str) -> tuple[list[int], list[float]]:
    pairs = [(r["step"], r[key]) for r in records if r.get(key) is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def summary(records: list[dict]) -> dict[str, float]:
    """Validation accuracy before (step 0) and after (last validated step), mean thinking length and
    total wall time of training."""
    val_steps, val = series(records, "val/score_mean")
    _, thinking = series(records, "train/thinking_tokens_mean")
    _, time_s = series(records, "perf/cum_time_s")
    nan = math.nan
    return {
        "val_before": val[0] if val and val_steps[0] == 0 else nan,
        "val_after": val[-1] if val and val_steps[-1] > 0 else nan,
        "thinking_tokens": sum(thinking) / len(thinking) if thinking else nan,
        "train_time_s": time_s[-1] if time_s else nan,
        "steps": max((r["step"] for r in records), default=0),
    }


def format_table(runs: dict[str, list[dict]]) -> str:
    header = (
        f"{'run':<24}{'steps':>6}{'val acc before':>16}{'val acc after':>15}"
        f"{'thinking tok':>14}{'train time s':>14}"
    )
    lines = [header, "-" * len(header)]
    for name, records in runs.items():
        s = summary(records)
        lines.append(
            f"{name:<24}{s['steps']:>6}{s['val_before']:>16.3f}{s['val_after']:>15.3f}"
            f"{s['thinking_tokens']:>14.1f}{s['train_time_s']:>14.1f}"
        )
    return "\n".join(lines)


def plot(runs: dict[str, list[dict]], out: str | Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7.5))
    for ax, (key, label) in zip(axes.flat, PANELS, strict=True):
        for name, records in runs.items():
            steps, values = series(records, key)
            if steps:
                ax.plot(steps, values, marker="o" if len(steps) < 30 else None, ms=3, label=name)
        ax.set_title(label, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes.flat[0].legend()
    fig.tight_layout()
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("runs", nargs="+", help="run directories holding metrics.jsonl")
    parser.add_argument("--out", default="outputs/compare.png", help="where to write the PNG")
    args = parser.parse_args(argv)
    try:
        runs = {Path(r).name: load_run(r) for r in args.runs}
    except FileNotFoundError as e:
        raise SystemExit(f"error: {e}") from None
    print(format_table(runs))
    plot(runs, args.out)
    print(f"plot: {args.out}")


if __name__ == "__main__":
    main()
