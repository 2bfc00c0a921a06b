"""Read a run directory's trajectories into one shape, grouped the way the viewer's picker lists them.

Three files hold trajectories (rows built by verl/trainer/ppo/rollout_records.py and
verl/eval/evaluate.py):
  rollouts/step_N.jsonl + step_N_chunks.jsonl   training, a row per trajectory and one per chunk
  val_generations.jsonl                          validation (trainer.log_val_generations), chunks nested
  samples.jsonl                                  main_eval, one group per evaluated budget, chunks nested
A missing or malformed field raises ValueError naming the file and the row.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from verl.utils.fs import iter_jsonl
from verl.utils.reward_score.boxed import extract_final_answer

STEP_FILE = re.compile(r"step_(\d+)\.jsonl")


@dataclass(frozen=True)
class Chunk:
    response: str
    response_ids: list[int] | None  # None in files written before chunk rows kept their ids
    prompt_tokens: int
    finish_reason: str


@dataclass(frozen=True)
class Trace:
    index: int  # position in its group
    pair_key: str  # the same problem and sample in another run (same seed): what side-by-side matches
    question: str
    data_source: str
    ground_truth: str
    score: float
    answer: str | None
    has_eos: bool
    thinking_tokens: int
    keep_head: int | None  # Delethink's carry-over sizes; None: no carry-over (LongCoT, gym)
    keep_tail: int | None
    chunks: list[Chunk]


class Row:
    """One JSON line and where it came from, so a bad field names its file and line."""

    def __init__(self, where: str, data: Any) -> None:
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a JSON object, got {type(data).__name__}")
        self.where = where
        self.data = data

    def __getitem__(self, key: str) -> Any:
        if key not in self.data:
            raise ValueError(f"{self.where}: missing key {key!r}")
        return self.data[key]

    def get(self, key: str) -> Any:
        return self.data.get(key)


def read_rows(path: Path) -> list[Row]:
    return [Row(f"{path} line {line}", data) for line, data in iter_jsonl(path)]


def _chunk(r: Row) -> Chunk:
    ids = r.get("response_ids")
    if ids is not None and len(ids) != r["response_tokens"]:
        raise ValueError(f"{r.where}: {len(ids)} response_ids but response_tokens={r['response_tokens']}")
    return Chunk(r["response"], ids, r["prompt_tokens"], r["finish_reason"])


def nested_chunks(row: Row) -> list[Chunk]:
    return [_chunk(Row(f"{row.where} chunk {i}", c)) for i, c in enumerate(row["chunks"])]


def _trace(row: Row, index: int, pair_key: str, question: str, response: str, chunks: list[Chunk]) -> Trace:
    if not chunks:
        raise ValueError(f"{row.where}: a trajectory with no chunks")
    answer = row.get("answer") if "answer" in row.data else extract_final_answer(response)
    return Trace(
        index, pair_key, question, row["data_source"], str(row["ground_truth"]), float(row["score"]), answer,
        bool(row["has_eos"]), int(row["thinking_tokens"]), row.get("keep_head"), row.get("keep_tail"), chunks,
    )  # fmt: skip


def _trainer_trace(row: Row, chunks: list[Chunk]) -> Trace:
    if len(chunks) != row["num_turns"]:
        raise ValueError(f"{row.where}: num_turns={row['num_turns']} but {len(chunks)} chunk rows")
    # validation and training seeds depend only on the position in the batch (and the step)
    key = f"{row['prompt']}\x00{row['index']}"
    return _trace(row, row["index"], key, row["prompt"], row["response"], chunks)


def read_rollout_step(path: Path) -> list[Trace]:
    """rollouts/step_N.jsonl with its step_N_chunks.jsonl."""
    chunk_path = path.with_name(path.stem + "_chunks.jsonl")
    if not chunk_path.exists():
        raise ValueError(f"{path}: its chunk file {chunk_path.name} is missing")
    by_index: dict[int, list[tuple[int, Chunk]]] = defaultdict(list)
    for r in read_rows(chunk_path):
        by_index[r["index"]].append((r["chunk"], _chunk(r)))
    return [
        _trainer_trace(row, [c for _, c in sorted(by_index.get(row["index"], []))]) for row in read_rows(path)
    ]


def read_val_generations(path: Path) -> dict[int, list[Trace]]:
    """val_generations.jsonl by validation step."""
    steps: dict[int, list[Trace]] = defaultdict(list)
    for row in read_rows(path):
        chunks = nested_chunks(row)
        steps[row["step"]].append(_trainer_trace(row, chunks))
    return dict(steps)


def read_samples(path: Path) -> dict[str, list[Trace]]:
    """main_eval's samples.jsonl by run label (e.g. longcot_B8192, delethink_I5)."""
    runs: dict[str, list[Trace]] = defaultdict(list)
    for row in read_rows(path):
        chunks = nested_chunks(row)
        group = runs[row["run"]]
        key = f"{row['problem']}\x00{row['seed']}"
        group.append(_trace(row, len(group), key, row["problem"], row["trace"], chunks))
    return dict(runs)


def read_run(run_dir: Path, step: int | None = None) -> dict[str, list[Trace]]:
    """Every group of trajectories in `run_dir` (only training/validation step `step` when given),
    named for the picker: `train step N`, `val step N`, or main_eval's run labels."""
    if not run_dir.is_dir():
        raise ValueError(f"{run_dir}: not a directory")
    groups: dict[str, list[Trace]] = {}
    matches = [STEP_FILE.fullmatch(p.name) for p in (run_dir / "rollouts").glob("step_*.jsonl")]
    step_files = [(int(m.group(1)), run_dir / "rollouts" / m.group(0)) for m in matches if m]
    for n, path in sorted(step_files):
        if step is None or n == step:
            groups[f"train step {n}"] = read_rollout_step(path)
    if (run_dir / "val_generations.jsonl").exists():
        for n, traces in sorted(read_val_generations(run_dir / "val_generations.jsonl").items()):
            if step is None or n == step:
                groups[f"val step {n}"] = traces
    if (run_dir / "samples.jsonl").exists():
        groups.update(read_samples(run_dir / "samples.jsonl"))
    if not groups:
        wanted = "" if step is None else f" for step {step}"
        raise ValueError(
            f"{run_dir}: no trajectories{wanted} (looked for rollouts/step_N.jsonl, val_generations.jsonl, "
            "samples.jsonl)"
        )
    return groups
