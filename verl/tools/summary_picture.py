"""The Markovian testbed's summary picture: held-out accuracy at B before and after RL in each environment,
and the whole RL step per trajectory against the budget.

It is drawn from a `SummaryPicture`, a handful of numbers, so that the testbed's report draws a run's
(ROOT/summary.png, beside its numbers in ROOT/summary_picture.json) and `make results` draws the README's
(docs/demo_summary.png) from the record that holds the same numbers (verl/tools/results.py). The PNG
carries a fingerprint of the numbers it was drawn from: `make results --check` reads it back to tell a
picture of the record from a stale one without comparing pixels, which differ between matplotlib builds.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from verl.utils.fs import atomic_write_bytes

ENVIRONMENTS = {"longcot": "LongCoT", "delethink": "Delethink"}  # in the picture's order
FINGERPRINT_KEY = "Source"  # the PNG text chunk that holds the fingerprint
KEYS = ("budget", "accuracy", "budgets", "step_ms")


@dataclass(frozen=True)
class SummaryPicture:
    budget: int  # B: the RL runs' thinking budget, where the accuracies are measured
    # environment -> [warm start, its standard error, after RL, its standard error] on held-out problems at B
    accuracy: dict[str, list[float]]
    budgets: list[int] = field(default_factory=list)  # the timed budgets; empty: no timing stage
    # environment -> the whole RL step per trajectory (ms) at each timed budget
    step_ms: dict[str, list[float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for key, by_env in (("accuracy", self.accuracy), ("step_ms", self.step_ms)):
            unknown = sorted(set(by_env) - set(ENVIRONMENTS))
            if unknown:
                raise ValueError(f"{key}: unknown environment {unknown[0]!r}; one of {list(ENVIRONMENTS)}")
        for env, values in self.accuracy.items():
            if len(values) != 4:
                raise ValueError(f"accuracy.{env}: [warm start, error, after RL, error], not {values}")
        for env, values in self.step_ms.items():
            if len(values) != len(self.budgets):
                raise ValueError(f"step_ms.{env}: {len(values)} values for {len(self.budgets)} budgets")


def picture_from_dict(raw: Any, where: str) -> SummaryPicture:
    """The numbers from their JSON/YAML form; a ValueError naming `where` and the key when they are not."""
    if not isinstance(raw, dict) or "budget" not in raw or "accuracy" not in raw:
        raise ValueError(f"{where}: a mapping of {', '.join(KEYS)} (the last two optional), got {raw!r:.80}")
    unknown = sorted(set(raw) - set(KEYS))
    if unknown:
        raise ValueError(f"{where}: unknown key {unknown[0]!r}; one of {', '.join(KEYS)}")
    try:
        return SummaryPicture(
            budget=int(raw["budget"]),
            accuracy={env: [float(v) for v in values] for env, values in raw["accuracy"].items()},
            budgets=[int(b) for b in raw.get("budgets") or []],
            step_ms={env: [float(v) for v in values] for env, values in (raw.get("step_ms") or {}).items()},
        )
    except (TypeError, ValueError, AttributeError) as err:
        raise ValueError(f"{where}: {err}") from None


def picture_dict(picture: SummaryPicture) -> dict[str, Any]:
    return asdict(picture)


def fingerprint(picture: SummaryPicture) -> str:
    """A short hash of the numbers: the same numbers, the same fingerprint."""
    text = json.dumps(picture_dict(picture), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def draw(picture: SummaryPicture):
    """The picture as a matplotlib Figure (small on purpose: the README shows it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(8, 3.2))
    for i, env in enumerate(ENVIRONMENTS):
        if env not in picture.accuracy:
            continue
        warm, warm_se, rl, rl_se = picture.accuracy[env]
        left.bar([3 * i, 3 * i + 1], [warm, rl], yerr=[warm_se, rl_se], color=["#bbbbbb", f"C{i}"], capsize=3)
    left.set_xticks([0, 1, 3, 4], ["warm\nstart", "LongCoT\n-RL", "warm\nstart", "Delethink\n-RL"])
    left.set_ylabel(f"held-out accuracy at B = {picture.budget}")
    left.set_ylim(0, 1)
    left.grid(axis="y", alpha=0.3)
    if picture.step_ms:
        for env, label in ENVIRONMENTS.items():
            if env in picture.step_ms:
                right.plot(picture.budgets, picture.step_ms[env], marker="o", label=label)
        right.set_xscale("log", base=2)
        right.set_xticks(picture.budgets, [f"{b // picture.budget}B" for b in picture.budgets])
        right.set_ylim(bottom=0)
        right.legend(fontsize=8)
    right.set_xlabel("thinking budget")
    right.set_ylabel("RL step per trajectory (ms)")
    right.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def save(picture: SummaryPicture, path: Path) -> None:
    """Draw `picture` to the PNG `path` (atomically), its fingerprint in the file."""
    import matplotlib.pyplot as plt

    fig = draw(picture)
    png = io.BytesIO()
    # no Software label: the same numbers give the same file on one matplotlib build
    metadata = {"Software": None, FINGERPRINT_KEY: fingerprint(picture)}
    try:
        fig.savefig(png, format="png", dpi=80, metadata=metadata)
    finally:
        plt.close(fig)
    atomic_write_bytes(path, png.getvalue())


def drawn_from(path: Path) -> str | None:
    """The fingerprint of a PNG that `save` wrote (None: no such file, or a picture drawn otherwise)."""
    from PIL import Image

    if not path.is_file():
        return None
    with Image.open(path) as image:
        return image.text.get(FINGERPRINT_KEY)
