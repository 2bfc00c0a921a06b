"""What an SFT run of the synthetic task reached: its held-out accuracy checks (main_sft's early stopping,
kept in sft_metrics.json) against its target, `train.stop_at_accuracy`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf


@dataclass(frozen=True)
class SFTOutcome:
    seed: int
    target: float | None  # train.stop_at_accuracy; None: no target, nothing to reach
    checks: list[tuple[int, float]]  # (step, held-out T = 1 accuracy) of every check, in order
    steps: int  # SFT steps taken
    # what a check measured: LongCoT inference, or (eval.delethink_chunks) the lower of both inference modes
    measure: str = "held-out T = 1 accuracy"

    @property
    def reached(self) -> bool:
        return self.target is None or any(acc >= self.target for _, acc in self.checks)

    @property
    def best(self) -> float:
        return max((acc for _, acc in self.checks), default=float("nan"))

    def curve(self) -> str:
        return ", ".join(f"{acc:.3f}@{step}" for step, acc in self.checks) or "no checks"

    def verdict(self, diagnosis: str = "") -> str:
        """One line: the curve and whether the target was reached; a missed target with `diagnosis` (what
        the model gets wrong) too."""
        head = f"warm start (seed {self.seed}): {self.measure} {self.curve()}"
        if self.target is None:
            return f"{head}; {self.steps} steps, no target"
        if self.reached:
            return f"{head}; reached its target {self.target} in {self.steps} steps"
        return (
            f"{head}; it reached {self.best:.3f} in {self.steps} steps, below its target {self.target} "
            f"(train.stop_at_accuracy){'; ' + diagnosis if diagnosis else ''}: RL from it would have "
            "nothing to learn, stopping here"
        )


def read(sft_dir: Path) -> SFTOutcome:
    metrics = json.loads((sft_dir / "sft_metrics.json").read_text())
    config = OmegaConf.load(sft_dir / "sft_config.yaml")
    checks = metrics.get("checks", [])
    measure = SFTOutcome.measure
    if OmegaConf.select(config, "eval.delethink_chunks", default=0):
        measure += ", the lower of LongCoT and Delethink inference"
        if any("delethink" not in c for c in checks):  # main_sft skips Delethink below the target
            measure += " (LongCoT's alone while it was below the target)"
    return SFTOutcome(
        seed=config.train.seed,
        target=config.train.stop_at_accuracy,
        checks=[(c["step"], c["accuracy"]) for c in checks],
        steps=len(metrics["losses"]),
        measure=measure,
    )
