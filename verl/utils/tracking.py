"""Metrics go to the console, to `metrics.jsonl` in the run directory, and to wandb.

metrics.jsonl is the project's own record (one JSON object per step, with a `step` key): tests and
plots read it. Validation generations (trainer.log_val_generations) go next to it, to
val_generations.jsonl (the rows the rollout viewer reads), and to wandb as a Table. wandb runs
offline when no API key is configured, and LongCoT and Delethink runs of one study share a wandb
group so they sit side by side.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from tqdm import tqdm

from verl.utils.fs import append_jsonl, atomic_write_jsonl, read_jsonl

CONSOLE_KEYS = (
    "train/score_mean",
    "train/thinking_tokens_mean",
    "train/num_turns_mean",
    "actor/pg_loss",
    # how far the engine's log-probs are from the trainer's (core/rollout_correction.py)
    "train/rollout_prob_diff_mean",
    "train/rollout_prob_diff_max",
    "rollout_corr/k3_kl",
    "rollout_corr/ppl_ratio",
    "val/score_mean",
    "timing/step_s",
    "train/loss",  # SFT (main_sft)
    "val/loss",
)


def _jsonable(value: Any) -> Any:
    value = float(value) if hasattr(value, "__float__") and not isinstance(value, int | bool) else value
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN/inf; None keeps the line parseable
    return value


class Tracking:
    def __init__(
        self,
        loggers: list[str],
        run_dir: str | Path,
        project: str,
        experiment: str,
        group: str,
        config: dict[str, Any],
        resume_step: int | None = None,
    ) -> None:
        self.loggers = loggers
        self.run_dir = Path(run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self.metrics_path = self.run_dir / "metrics.jsonl"
        self.generations_path = self.run_dir / "val_generations.jsonl"
        for path in (self.metrics_path, self.generations_path):
            if "jsonl" in loggers and path.exists():
                # a resumed run rewrites history from its checkpoint on: drop steps the crash left behind
                kept = [r for r in read_jsonl(path) if resume_step is not None and r["step"] <= resume_step]
                atomic_write_jsonl(path, kept)
        self.wandb_run = None
        if "wandb" in loggers:
            import wandb

            mode = os.environ.get("WANDB_MODE") or (
                "online" if os.environ.get("WANDB_API_KEY") else "offline"
            )
            self.wandb_run = wandb.init(
                project=project, name=experiment, group=group, config=config, dir=str(self.run_dir), mode=mode
            )

    def log(self, metrics: dict[str, Any], step: int) -> None:
        record = {"step": step, **{k: _jsonable(v) for k, v in metrics.items()}}
        if "jsonl" in self.loggers:
            append_jsonl(self.metrics_path, [record])
        if "console" in self.loggers:
            shown = " ".join(f"{k}={metrics[k]:.4g}" for k in CONSOLE_KEYS if k in metrics)
            tqdm.write(f"step {step}: {shown}")
        if self.wandb_run is not None:
            self.wandb_run.log(metrics, step=step)

    def log_generations(self, rows: list[dict[str, Any]], step: int) -> None:
        """Validation generation rows (trainer/ppo/rollout_records.py: trajectory rows with `chunks`)."""
        if not rows:
            return
        if "jsonl" in self.loggers:
            append_jsonl(self.generations_path, rows)
        if self.wandb_run is not None:
            import wandb

            columns, data = generation_table(rows)
            self.wandb_run.log({"val/generations": wandb.Table(columns=columns, data=data)}, step=step)

    def finish(self) -> None:
        if self.wandb_run is not None:
            self.wandb_run.finish()
            self.wandb_run = None


def generation_table(rows: list[dict[str, Any]]) -> tuple[list[str], list[list[Any]]]:
    """Generation rows as table columns and data: one text cell holds every chunk's response, each
    under a `--- chunk k ---` line, so a reader sees where the context was reset."""
    columns = ["step", "index", "data_source", "question", "chunks", "num_chunks", "answer", "score"]
    data = [
        [
            r["step"],
            r["index"],
            r["data_source"],
            r["prompt"],
            "\n".join(f"--- chunk {c['chunk'] + 1} ---\n{c['response']}" for c in r["chunks"]),
            len(r["chunks"]),
            r["answer"],
            r["score"],
        ]
        for r in rows
    ]
    return columns, data
