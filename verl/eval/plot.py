"""Accuracy vs thinking budget, one line per environment, to a PNG."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from verl.eval.summary import ALL_SOURCES


def save_figure(fig, path: str | Path, dpi: int = 120) -> None:
    """Write a matplotlib figure atomically (temp file, then rename) and close it."""
    import matplotlib.pyplot as plt

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        Path(tmp).unlink(missing_ok=True)


def plot_accuracy_vs_budget(runs: list[dict[str, Any]], metric: str, path: str | Path) -> None:
    """`runs` are summary.json run entries: x = thinking budget, y = `metric` over all problems."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for mode in sorted({r["mode"] for r in runs}):
        points = sorted(
            (r["thinking_budget"], r["metrics"][ALL_SOURCES][metric]) for r in runs if r["mode"] == mode
        )
        ax.plot([b for b, _ in points], [a for _, a in points], marker="o", label=mode)
    ax.set_xlabel("thinking budget (tokens)")
    ax.set_ylabel(metric)
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path)
