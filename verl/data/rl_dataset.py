"""Prompts for RL: rows from JSONL/JSON/Parquet files, chat-templated into token ids once.

A row looks like
`{"data_source": str, "prompt": [{"role": "user", "content": ...}] | str,
  "reward_model": {"ground_truth": str}, "extra_info": {...}}`.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

import numpy as np

from verl.config import ConfigError
from verl.config.rules import join_key
from verl.core.trajectory import PromptItem

logger = logging.getLogger(__name__)


class DataError(ValueError):
    """A data file or row that cannot become prompts; the message names the file and the line or row."""


def _utf8(data: bytes, path: Path, first_line: int = 1) -> str:
    """`data` decoded, or a DataError naming the line and byte that are not UTF-8."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = first_line + data.count(b"\n", 0, e.start)
        column = e.start - data.rfind(b"\n", 0, e.start)  # 1-based, in bytes
        raise DataError(
            f"{path}:{line}: not valid UTF-8 (byte 0x{data[e.start]:02x} at byte {column} of the line)"
        ) from None


def _clip(value: Any) -> str:
    """`value` for an error message: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _object(row: Any, where: str) -> dict[str, Any]:
    if not isinstance(row, dict):
        raise DataError(f"{where}: a row must be a JSON object, got {type(row).__name__} {_clip(row)}")
    return row


def _jsonl_rows(path: Path) -> list[dict[str, Any]]:
    rows = []
    with path.open("rb") as f:
        for line_no, raw in enumerate(f, start=1):
            line = _utf8(raw, path, line_no)
            if line.strip():
                try:
                    row = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataError(f"{path}:{line_no}: not valid JSON ({e.msg})") from None
                rows.append(_object(row, f"{path}:{line_no}"))
    return rows


def _json_rows(path: Path) -> list[dict[str, Any]]:
    try:
        rows = json.loads(_utf8(path.read_bytes(), path))
    except json.JSONDecodeError as e:
        raise DataError(f"{path}:{e.lineno}: not valid JSON ({e.msg})") from None
    if not isinstance(rows, list):
        raise DataError(f"{path}: expected a JSON list of rows, got {type(rows).__name__}")
    return [_object(row, f"{path} row {i}") for i, row in enumerate(rows)]


def _parquet_rows(path: Path) -> list[dict[str, Any]]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        return pq.read_table(path).to_pylist()
    except pa.ArrowException as e:
        raise DataError(f"{path}: not a readable parquet file ({e})") from None


_READERS = {".jsonl": _jsonl_rows, ".json": _json_rows, ".parquet": _parquet_rows}


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every row of a .jsonl/.json/.parquet file, each a dict. Text that is not UTF-8 or not JSON, a row
    that is not a JSON object and a file without rows are DataErrors naming the file (and line)."""
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"data file {path} does not exist")
    reader = _READERS.get(p.suffix)
    if reader is None:
        raise DataError(f"{path}: unsupported file type {p.suffix!r} (use .jsonl, .json or .parquet)")
    rows = reader(p)
    if not rows:
        raise DataError(f"{path}: no rows (the file is empty)")
    return rows


def encode_prompt(tokenizer, prompt: list[dict[str, str]] | str) -> list[int]:
    messages = [{"role": "user", "content": prompt}] if isinstance(prompt, str) else prompt
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def gym_column(row: dict[str, Any], column: str, where: str) -> dict[str, Any] | None:
    """A row's env_config / ctx_config: a dict (or its JSON text) naming a registered class, or None."""
    from verl.envs import CONTEXT_MANAGERS, ENVS  # the built-ins; plugins were imported at start-up
    from verl.envs.base import config_problem

    value = row.get(column)
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as e:
            raise DataError(f"{where}: column {column!r} is not valid JSON ({e.msg})") from None
    registry, kind = (ENVS, "env") if column == "env_config" else (CONTEXT_MANAGERS, "context manager")
    problem = config_problem(value, registry, kind)
    if problem:
        raise DataError(f"{where}: column {column!r} {problem} (plugins come from external_plugins)")
    return value


def _is_message(value: Any) -> bool:
    return isinstance(value, dict) and isinstance(value.get("role"), str) and "content" in value


def _messages(row: dict[str, Any], prompt_key: str, where: str, key: str) -> list[dict[str, str]]:
    """The row's prompt as chat messages: a string is one user message. `key` names the config key that
    set `prompt_key`."""
    prompt = row.get(prompt_key)
    if isinstance(prompt, str) and prompt.strip():
        return [{"role": "user", "content": prompt}]
    if isinstance(prompt, list) and prompt and all(_is_message(m) for m in prompt):
        return prompt
    raise DataError(
        f"{where}: {prompt_key!r} ({key}) must be a non-empty string or a list of "
        f"{{role, content}} messages, got {_clip(prompt)}"
    )


def _ground_truth(row: dict[str, Any], where: str) -> str | None:
    """reward_model.ground_truth as a string, None when missing or empty. Only strings and finite
    numbers are answers: a list, dict, bool or NaN would otherwise be scored as its repr ("[1, 2]")."""
    reward_model = row.get("reward_model")
    if reward_model is None:
        return None
    if not isinstance(reward_model, dict):
        raise DataError(
            f"{where}: reward_model must be a JSON object with a ground_truth, got {_clip(reward_model)}"
        )
    answer = reward_model.get("ground_truth")
    if answer is None or (isinstance(answer, str) and not answer.strip()):
        return None
    is_number = isinstance(answer, int | float) and not isinstance(answer, bool)
    if not (isinstance(answer, str) or (is_number and math.isfinite(answer))):
        raise DataError(
            f"{where}: reward_model.ground_truth must be a string or a finite number, "
            f"got {type(answer).__name__} {_clip(answer)}"
        )
    return str(answer)


def _extra_info(row: dict[str, Any], where: str) -> dict[str, Any]:
    extra = row.get("extra_info")
    if extra is None:
        return {}
    if not isinstance(extra, dict):
        raise DataError(
            f"{where}: extra_info must be a JSON object, got {type(extra).__name__} {_clip(extra)}"
        )
    return dict(extra)


def _row_item(row: dict[str, Any], where: str, tokenizer, prompt_key: str, key: str) -> PromptItem:
    messages = _messages(row, prompt_key, where, key)
    env_config = gym_column(row, "env_config", where)
    ground_truth = _ground_truth(row, where)
    if ground_truth is None and env_config is None:  # a row naming its env has the env as its judge
        raise DataError(f"{where}: missing reward_model.ground_truth")
    return PromptItem(
        encode_prompt(tokenizer, messages),
        str(row.get("data_source", "unknown")),
        ground_truth or "",
        _extra_info(row, where),
        messages=messages,
        env_config=env_config,
        ctx_config=gym_column(row, "ctx_config", where),
    )


def load_prompts(
    files: list[str],
    tokenizer,
    prompt_key: str,
    max_prompt_tokens: int,
    filter_overlong: bool,
    section: str = "data",
) -> list[PromptItem]:
    """Tokenise every row. A row without a prompt is an error naming file and row, and so is one
    without a ground truth unless it names its env in an `env_config` column (the env is its judge).
    A prompt longer than `max_prompt_tokens` is dropped (counted in the log) or, with
    `filter_overlong=False`, an error naming the row. A file whose first row has no `prompt_key` column,
    or a limit that drops every prompt, is a ConfigError naming the key: the key of the calling entry
    point, whose `section` holds prompt_key, max_prompt_length and filter_overlong_prompts ("data" in
    training, "" in main_eval)."""
    prompt_key_key, length_key = join_key(section, "prompt_key"), join_key(section, "max_prompt_length")
    items: list[PromptItem] = []
    dropped_lengths: list[int] = []
    for path in files:
        rows = read_rows(path)
        if prompt_key not in rows[0]:
            raise ConfigError(
                f"{prompt_key_key}={prompt_key!r}: {path} has no such column (row 0 has {sorted(rows[0])})"
            )
        for i, row in enumerate(rows):
            where = f"{path} row {i}"
            item = _row_item(row, where, tokenizer, prompt_key, prompt_key_key)
            if len(item.prompt_ids) > max_prompt_tokens:
                if not filter_overlong:
                    raise DataError(
                        f"{where}: prompt has {len(item.prompt_ids)} tokens, more than the "
                        f"{max_prompt_tokens} allowed ({length_key} minus any Delethink carry-over); set "
                        f"{join_key(section, 'filter_overlong_prompts')}=true to drop such rows"
                    )
                dropped_lengths.append(len(item.prompt_ids))
                continue
            items.append(item)
    if not items:  # every other bad row raised above
        raise ConfigError(
            f"{length_key}: all {len(dropped_lengths)} prompts of {files} are longer than the "
            f"{max_prompt_tokens} tokens allowed ({length_key} minus any Delethink carry-over); "
            f"the shortest has {min(dropped_lengths)}"
        )
    if dropped_lengths:
        logger.warning(
            "dropped %d prompts longer than %d tokens from %s", len(dropped_lengths), max_prompt_tokens, files
        )
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
