"""Math tasks: a problem set in its own columns (problem, answer), turned into chat prompts.

A task (`TaskConfig`, config groups `train_tasks/` and `val_tasks/`) names a .jsonl/.json/.parquet file
(or, for a set too large to store, a Hugging Face dataset and split), the columns holding the problem
and the answer, a prompt template and an optional system prompt.
Answers come in whatever type the file uses (AIME's zero-padded strings, ints, floats such as 27.0,
LaTeX) and leave here as strings that mean the same number or expression (`normalise_answer`).
Rows that cannot become a prompt (missing or empty answer, wrong types, overlong prompt) are dropped
with a count per reason in the log, or, with `bad_rows: error`, fail naming the file, row and reason.
"""

from __future__ import annotations

import json
import logging
import math
import re
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from verl.config import ConfigError, PolicyIterationConfig, TaskConfig
from verl.config.rules import join_key
from verl.core.trajectory import PromptItem
from verl.data.rl_dataset import DataError, encode_prompt, load_prompts, read_rows
from verl.utils.math_data import save_command

logger = logging.getLogger(__name__)

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # HF datasets' packaged loaders
_INTEGER = re.compile(r"[+-]?[0-9]+")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}(,[0-9]{3})+(\.[0-9]+)?")  # GSM8K writes 1,450,000


class BadRow(ValueError):
    """A row that cannot become a prompt; `kind` groups rows in the filter log, `detail` says why."""

    def __init__(self, kind: str, detail: str) -> None:
        super().__init__(detail)
        self.kind, self.detail = kind, detail


def read_task_rows(path: str) -> list[dict[str, Any]]:
    """Every row of a .jsonl/.json/.parquet file as a dict, read with HF `datasets`.

    The arrow files `datasets` writes go to a temporary directory removed on return (the rows are
    kept in memory), so nothing lands in ~/.cache or the repo and no stale cache can be read back.
    """
    p = Path(path)
    if not p.is_file():
        raise FileNotFoundError(f"task file {path} does not exist")
    # datasets' own errors name neither line nor row (a bare UnicodeDecodeError, a StopIteration for an
    # empty file): read_rows raises a DataError naming them, and an unsupported file type, first
    read_rows(path)
    import datasets

    # A column whose rows mix types (answers "025" and 25) becomes a `datasets.Json` column, which reads
    # back a string that parses as JSON as that value: "025" -> 25 and "1.50" -> 1.5 keep their meaning,
    # but "[1, 2]" comes back a list, and such a row is then rejected as an answer of the wrong type.
    with tempfile.TemporaryDirectory(prefix="verl_task_cache_") as cache_dir:
        ds = datasets.load_dataset(
            _BUILDERS[p.suffix], data_files=str(p), split="train", cache_dir=cache_dir, keep_in_memory=True
        )
        return ds.to_list()


def normalise_answer(value: Any, marker: str | None = None) -> str:
    """The answer as a string with the same meaning: ints and integral floats print as integers
    (27.0 -> "27"), integer strings lose leading zeros ("025" -> "25", so AIME 2024's strings match
    AIME 2025's ints), any other string (LaTeX, decimals, intervals) is kept, stripped of outer spaces.
    With `marker`, `value` is a worked solution and the answer is what follows its last marker, with
    thousands separators dropped (GSM8K: "... #### 1,450,000" -> "1450000")."""
    if value is None:
        raise BadRow("missing answer", "the answer is missing (null or no such key)")
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise BadRow(
            "answer of wrong type", f"the answer has type {type(value).__name__}, not str, int or float"
        )
    if marker:
        if not isinstance(value, str):
            raise BadRow("answer of wrong type", f"expected a solution ending in {marker!r}, got a number")
        _, found, value = value.rpartition(marker)
        if not found:
            raise BadRow("no answer marker", f"the solution has no {marker!r} before its answer")
        value = value.strip()
        if _THOUSANDS.fullmatch(value):
            value = value.replace(",", "")
    if isinstance(value, float):
        if not math.isfinite(value):
            raise BadRow("answer of wrong type", f"the answer is {value}, not a finite number")
        return str(int(value)) if value.is_integer() else repr(value)
    if isinstance(value, int):
        return str(value)
    text = value.strip()
    if not text:
        raise BadRow("empty answer", "the answer is an empty string")
    return str(int(text)) if _INTEGER.fullmatch(text) else text


def _prompt_messages(task: TaskConfig, row: dict[str, Any]) -> list[dict[str, str]]:
    problem = row.get(task.problem_key)
    if problem is None:
        raise BadRow("missing problem", f"the problem ({task.problem_key!r}) is missing")
    if not isinstance(problem, str):
        raise BadRow("problem of wrong type", f"the problem has type {type(problem).__name__}, not str")
    if not problem.strip():
        raise BadRow("empty problem", "the problem is an empty string")
    messages = [{"role": "system", "content": task.system_prompt}] if task.system_prompt else []
    return messages + [{"role": "user", "content": task.prompt_template.format(**row)}]


def _check_columns(name: str, task: TaskConfig, rows: list[dict[str, Any]]) -> None:
    """Config mistakes fail at once, whatever bad_rows says: they would reject every row."""
    columns = list(rows[0])  # `datasets` gives every row the same columns (None where a row lacks one)
    for key in ("problem_key", "answer_key"):
        column = getattr(task, key)
        if column not in columns:
            raise ConfigError(
                f"task {name}: {task.source} has no column {column!r} ({key}); columns: {columns}"
            )
    try:
        task.prompt_template.format(**rows[0])
    except KeyError as e:
        raise ConfigError(
            f"task {name}: prompt_template names column {e.args[0]!r}, which {task.source} does not have; "
            f"columns: {columns}"
        ) from None
    except (IndexError, ValueError) as e:
        raise ConfigError(
            f"task {name}: prompt_template {task.prompt_template!r} is not a valid format string ({e}); "
            "name columns as {problem} and write literal braces doubled, as in \\boxed{{}}"
        ) from None


def _hub_rows(name: str, task: TaskConfig) -> list[dict[str, Any]]:
    """Every row of the task's Hugging Face dataset split, downloaded into (or read back from) the
    `datasets` cache (~/.cache/huggingface unless HF_HOME says otherwise)."""
    import datasets

    logger.info("task %s: loading %s from the Hugging Face hub", name, task.source)
    try:
        ds = datasets.load_dataset(task.hf_dataset, split=task.hf_split)
    except Exception as e:  # the start-up check saw the hub answer; anything now (network, split) stops here
        detail = (str(e).strip().splitlines() or [""])[0]
        save = save_command(task.hf_dataset, task.hf_split, f"{name}.jsonl")
        raise DataError(
            f"task {name}: cannot load {task.source} from the Hugging Face hub ({type(e).__name__}: "
            f"{detail}); save it where there is network access, {save}, and give that file as the task's path"
        ) from None
    return ds.to_list()


def _task_rows(name: str, task: TaskConfig) -> list[dict[str, Any]]:
    """The task's rows: from its file if it names one, else from the Hugging Face hub."""
    if task.path is None:
        return _hub_rows(name, task)
    if not Path(task.path).is_file():
        raise FileNotFoundError(f"task {name}: task file {task.path} does not exist")
    try:
        return read_task_rows(task.path)
    except DataError as e:
        raise DataError(f"task {name}: {e}") from None


def load_task(
    name: str, task: TaskConfig, tokenizer, max_prompt_tokens: int, section: str = "data"
) -> list[PromptItem]:
    """Prompts of one task: rows in file order from `skip_rows` on, or those shuffled with `shuffle_seed`;
    the first `max_samples` usable rows (-1: all). Bad rows are dropped and counted, or raise (`bad_rows:
    error`). `section` is where the calling entry point keeps max_prompt_length ("data" in training, "" in
    main_eval), so that a message names that entry point's key."""
    length_key = join_key(section, "max_prompt_length")
    rows = _task_rows(name, task)
    _check_columns(name, task, rows)
    if task.skip_rows >= len(rows):
        raise DataError(
            f"task {name}: skip_rows={task.skip_rows} leaves none of the {len(rows)} rows of {task.source}"
        )
    kept = np.arange(task.skip_rows, len(rows))
    order = kept if task.shuffle_seed is None else np.random.default_rng(task.shuffle_seed).permutation(kept)
    items: list[PromptItem] = []
    dropped: Counter[str] = Counter()
    shortest = math.inf  # of the overlong prompts: the limit that would let the first of them in
    for i in tqdm(order, desc=f"task {name}", unit="row", leave=False, disable=len(rows) < 1000):
        if len(items) == task.max_samples:
            break
        i = int(i)
        try:
            answer = normalise_answer(rows[i].get(task.answer_key), task.answer_marker)
            messages = _prompt_messages(task, rows[i])
            ids = encode_prompt(tokenizer, messages)
            if len(ids) > max_prompt_tokens:
                shortest = min(shortest, len(ids))
                raise BadRow(
                    "overlong prompt",
                    f"the prompt has {len(ids)} tokens, more than the {max_prompt_tokens} allowed "
                    f"({length_key} less any Delethink carry-over)",
                )
        except BadRow as bad:
            if task.bad_rows == "error":
                raise DataError(
                    f"task {name}: {task.source} row {i}: {bad.detail} (bad_rows: error; "
                    "bad_rows: filter drops such rows)"
                ) from None
            dropped[bad.kind] += 1
            continue
        extra = {"task": name, "index": i}
        items.append(PromptItem(ids, task.data_source, answer, extra, val_n=task.n, messages=messages))
    reasons = ", ".join(f"{count} {kind}" for kind, count in sorted(dropped.items()))
    if not items:
        if set(dropped) == {"overlong prompt"}:
            raise ConfigError(
                f"{length_key}: all {len(rows)} prompts of task {name} ({task.source}) are longer than the "
                f"{max_prompt_tokens} tokens allowed ({length_key} less any Delethink carry-over); the "
                f"shortest has {shortest}"
            )
        raise DataError(f"task {name}: no usable rows in {task.source} ({len(rows)} rows: {reasons})")
    if dropped:
        total = sum(dropped.values())
        logger.warning("task %s: dropped %d rows of %s: %s", name, total, task.source, reasons)
    return items


def load_split(
    config: PolicyIterationConfig, split: str, tokenizer, max_prompt_tokens: int
) -> list[PromptItem]:
    """All prompts of a split: the rows of data.{split}_files, then every task of {split}_tasks in order.
    Prompts that repeat an earlier one are counted in the log, and dropped with data.drop_duplicates."""
    if split not in ("train", "val"):
        raise ValueError(f"split must be 'train' or 'val', got {split!r}")
    data = config.data
    files = getattr(data, f"{split}_files")
    items = []
    if files:
        items = load_prompts(
            files, tokenizer, data.prompt_key, max_prompt_tokens, data.filter_overlong_prompts
        )
    for name, task in getattr(config, f"{split}_tasks").items():
        items += load_task(name, task, tokenizer, max_prompt_tokens)
    if not items:
        raise ValueError(f"no {split} prompts: data.{split}_files and {split}_tasks are both empty")
    return without_duplicates(items, split, data.drop_duplicates)


def _identity(item: PromptItem) -> tuple:
    """What makes two prompts the same problem: what the model sees and what judges it."""
    gym = json.dumps([item.env_config, item.ctx_config], sort_keys=True, default=str)
    return item.data_source, tuple(item.prompt_ids), item.ground_truth, item.val_n, gym


def without_duplicates(items: list[PromptItem], split: str, drop: bool) -> list[PromptItem]:
    """`items` less the repeats of an earlier item if `drop`; either way their count is logged (a repeated
    validation problem weighs more in the accuracy, a repeated training one is seen more often)."""
    seen: set[tuple] = set()
    kept = []
    for item in items:
        key = _identity(item)
        if key not in seen or not drop:
            kept.append(item)
        seen.add(key)
    repeats = len(items) - len(seen)
    if repeats:
        action = "dropped" if drop else "kept (data.drop_duplicates=true drops them)"
        logger.warning(
            "%s: %d of %d prompts repeat an earlier one (same prompt, answer and data_source); %s",
            split,
            repeats,
            len(items),
            action,
        )
    return kept
