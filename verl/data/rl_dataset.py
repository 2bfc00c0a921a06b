"""Prompts for RL: rows from JSONL/JSON/Parquet files, chat-templated into token ids once.

A row looks like
`{"data_source": str, "prompt": [{"role": "user", "content": ...}] | str,
  "reward_model": {"ground_truth": str}, "extra_info": {...}}`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

logger = logging.getLogger(__name__)


@dataclass
class PromptItem:
    prompt_ids: list[int]
    data_source: str
    ground_truth: str
    extra_info: dict[str, Any] = field(default_factory=dict)
    val_n: int | None = None  # validation samples for this prompt; None: rollout.val_kwargs.n
    messages: list[dict[str, str]] = field(default_factory=list)  # the prompt as chat messages (gym reset)
    env_config: dict[str, Any] | None = None  # row column for the gym loop; wins over rollout.gym's
    ctx_config: dict[str, Any] | None = None  # row column for the gym loop; wins over rollout.gym's


def read_rows(path: str) -> list[dict[str, Any]]:
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    if p.suffix == ".jsonl":
        rows = []
        with p.open() as f:
            for line_no, line in enumerate(f, start=1):
                if line.strip():
                    try:
                        rows.append(json.loads(line))
                    except json.JSONDecodeError as e:
                        raise ValueError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
        return rows
    if p.suffix == ".json":
        rows = json.loads(p.read_text())
        if not isinstance(rows, list):
            raise ValueError(f"{path}: expected a JSON list of rows, got {type(rows).__name__}")
        return rows
    if p.suffix == ".parquet":
        import pyarrow.parquet as pq

        return pq.read_table(p).to_pylist()
    raise ValueError(f"{path}: unsupported file type {p.suffix!r} (use .jsonl, .json or .parquet)")


def encode_prompt(tokenizer, prompt: list[dict[str, str]] | str) -> list[int]:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def gym_column(row: dict[str, Any], column: str, where: str) -> dict[str, Any] | None:
    """A row's env_config / ctx_config: a dict (or its JSON text) naming a registered class, or None."""
    import verl.envs  # noqa: F401  (registers the built-in envs; plugins were imported at start-up)
    from verl.envs.base import CONTEXT_MANAGERS, ENVS, config_problem

    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise ValueError(f"{where}: column {column!r} is not valid JSON ({e.msg})") from None
    registry, kind = (ENVS, "env") if column == "env_config" else (CONTEXT_MANAGERS, "context manager")
    problem = config_problem(value, registry, kind)
    if problem:
        raise ValueError(f"{where}: column {column!r} {problem} (plugins come from external_plugins)")
    return value


def load_prompts(
    files: list[str], tokenizer, prompt_key: str, max_prompt_tokens: int, filter_overlong: bool
) -> list[PromptItem]:
    """Tokenise every row. A row without a prompt is an error naming file and row, and so is one
    without a ground truth unless it names its env in an `env_config` column (the env is its judge).
    A prompt longer than `max_prompt_tokens` is dropped (counted in the log) or, with
    `filter_overlong=False`, an error naming the row."""
    items: list[PromptItem] = []
    dropped = 0
    for path in files:
        for i, row in enumerate(read_rows(path)):
            where = f"{path} row {i}"
            prompt = row.get(prompt_key)
            if not prompt or not isinstance(prompt, str | list):
                raise ValueError(f"{where}: missing or empty {prompt_key!r} (data.prompt_key)")
            env_config = gym_column(row, "env_config", where)
            ctx_config = gym_column(row, "ctx_config", where)
            ground_truth = (row.get("reward_model") or {}).get("ground_truth")
            if ground_truth is None or str(ground_truth).strip() == "":
                if env_config is None:
                    raise ValueError(f"{where}: missing reward_model.ground_truth")
                ground_truth = ""
            ids = encode_prompt(tokenizer, prompt)
            if len(ids) > max_prompt_tokens:
                if not filter_overlong:
                    raise ValueError(
                        f"{where}: prompt has {len(ids)} tokens, more than the {max_prompt_tokens} allowed "
                        "(data.max_prompt_length minus any Delethink carry-over); "
                        "set data.filter_overlong_prompts=true to drop such rows"
                    )
                dropped += 1
                continue
            items.append(
                PromptItem(
                    ids,
                    str(row.get("data_source", "unknown")),
                    str(ground_truth),
                    dict(row.get("extra_info") or {}),
                    messages=[{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt,
                    env_config=env_config,
                    ctx_config=ctx_config,
                )
            )
    if dropped:
        logger.warning("dropped %d prompts longer than %d tokens from %s", dropped, max_prompt_tokens, files)
    if not items:
        raise ValueError(f"no usable prompts in {files}")
    return items


class DataOrder:
    """Which prompts each training step sees: a fresh permutation per epoch, a pure function of
    (seed, step), so a resumed run continues with exactly the data it would have seen."""

    def __init__(self, num_items: int, batch_size: int, seed: int, shuffle: bool) -> None:
        self.num_items, self.batch_size, self.seed, self.shuffle = num_items, batch_size, seed, shuffle

    def _permutation(self, epoch: int) -> np.ndarray:
        if not self.shuffle:
            return np.arange(self.num_items)
        return np.random.default_rng([self.seed, epoch]).permutation(self.num_items)

    def batch_indices(self, step: int) -> list[int]:
        permutations: dict[int, np.ndarray] = {}
        out = []
        for g in range(step * self.batch_size, (step + 1) * self.batch_size):
            epoch, pos = divmod(g, self.num_items)
            if epoch not in permutations:
                permutations[epoch] = self._permutation(epoch)
            out.append(int(permutations[epoch][pos]))
        return out
