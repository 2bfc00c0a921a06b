"""What gym episodes leave behind: `completions.jsonl` (one line per episode) and `env/*` metrics. The trainer
hands every trajectory here; trajectories of other loops are no episodes and leave nothing."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from verl.utils.fs import append_jsonl, atomic_write_jsonl, read_jsonl


def is_episode(trajectory) -> bool:
    """Whether the trajectory came from the gym loop (it carries env results in its info)."""
    return "env_reward" in trajectory.info


def env_metrics(prefix: str, trajectories: Sequence) -> dict[str, float]:
    """Error, truncation and reward statistics over the gym episodes among `trajectories` (none: {})."""
    episodes = [t for t in trajectories if is_episode(t)]
    if not episodes:
        return {}
    return {
        f"{prefix}/error_rate": float(np.mean(["error" in t.info for t in episodes])),
        f"{prefix}/truncated_rate": float(np.mean([t.info["truncated"] for t in episodes])),
        f"{prefix}/reward_mean": float(np.mean([t.info["env_reward"] for t in episodes])),
        f"{prefix}/steps_mean": float(np.mean([len(t.info["step_rewards"]) for t in episodes])),
    }


def completion_record(
    step: int, index: int, item, trajectory, score: float, advantage: float
) -> dict[str, Any]:
    """One line of completions.jsonl: the opening messages, everything said after them, the rewards
    (per env step, their sum, and the final score the advantage came from), and every step's info."""
    info = trajectory.info
    messages = info["messages"]
    opening = next((i + 1 for i, m in enumerate(messages) if m["role"] == "user"), len(messages))
    return {
        "step": step,
        "index": index,
        "data_source": item.data_source,
        "env": info.get("env"),
        "ctx": info.get("ctx"),
        "prompt": messages[:opening],
        "completion": messages[opening:],
        "rewards": {"steps": info["step_rewards"], "env_total": info["env_reward"], "score": score},
        "advantage": advantage,
        "trainable_turns": [i for i, turn in enumerate(trajectory.turns) if turn.trainable],
        "truncated": info["truncated"],
        "error": info.get("error"),
        "trajectory_infos": info["trajectory_infos"],
    }


def completion_records(
    step: int, items: Sequence, trajectories: Sequence, scores: Sequence[float], advantages: Sequence[float]
) -> list[dict[str, Any]]:
    """The completions.jsonl lines of a training step: one per env episode (none for other loops)."""
    batch = zip(items, trajectories, scores, advantages, strict=True)
    return [
        completion_record(step, j, item, trajectory, score, advantage)
        for j, (item, trajectory, score, advantage) in enumerate(batch)
        if is_episode(trajectory)
    ]


class CompletionsLog:
    """`completions.jsonl` in the run directory, appended once per training step. A resumed run first
    drops the lines of steps after its checkpoint (the crash may have written some), like metrics.jsonl."""

    def __init__(self, run_dir: str | Path, resume_step: int | None) -> None:
        self.path = Path(run_dir) / "completions.jsonl"
        if self.path.exists():
            kept = [r for r in read_jsonl(self.path) if resume_step is not None and r["step"] <= resume_step]
            atomic_write_jsonl(self.path, kept)

    def append(self, records: Sequence[dict[str, Any]]) -> None:
        if not records:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        append_jsonl(self.path, records)
