"""SFT examples from data files: jsonl / json / parquet rows read with HF `datasets`.

A row is either `prompt` + `response` strings, or `messages` (a list of {role, content}) whose last
message is the assistant's response and whose earlier messages are the prompt; the keys are
configurable (data.prompt_key, data.response_key, data.messages_key). The prompt is tokenised exactly
as the RL data is (`rl_dataset.encode_prompt`: the chat template with the generation prompt), so a
model warm-started here sees the prompts RL and the Delethink loop will send; the target is the
response's tokens + eos. Every bad row is a DataError naming the file, the row and the key, raised
while loading, before any training.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import PreTrainedTokenizerBase

from verl.config.sft import FORMATS, DataConfig, DelethinkExamplesConfig
from verl.data.rl_dataset import DataError, DataOrder, encode_prompt
from verl.trainer.sft.batches import Pair
from verl.trainer.sft.continuation import continuation_example, delethink_cuts


@dataclass(frozen=True)
class Example:
    prompt: list[int]  # chat-templated prompt, ending in the generation prompt
    target: list[int]  # the response's tokens + eos (cut by data.truncation=right)
    thinking: int  # target tokens before </think>; 0 when the response has no </think>


def read_rows(path: str) -> list[dict[str, Any]]:
    """Every row of one data file, through HF datasets (no cache files next to the data)."""
    import datasets

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    try:
        table = datasets.load_dataset(FORMATS[Path(path).suffix], data_files=str(path), split="train")
    except (datasets.exceptions.DatasetGenerationError, ValueError) as e:
        cause = e.__cause__ or e
        raise DataError(f"{path}: not a readable {FORMATS[Path(path).suffix]} file ({cause})") from None
    if len(table) == 0:
        raise DataError(f"{path}: no rows")
    return table.to_list()


def _text(row: dict[str, Any], key: str, config_key: str, where: str) -> str:
    value = row.get(key)
    if not isinstance(value, str) or not value.strip():
        raise DataError(f"{where}: {key!r} ({config_key}) must be a non-empty string, got {value!r:.60}")
    return value


def _chat(row: dict[str, Any], cfg: DataConfig, where: str) -> tuple[list[dict[str, str]], str]:
    """(prompt messages, response text) of a row in either format."""
    if cfg.messages_key in row:
        messages = row[cfg.messages_key]
        key = f"{cfg.messages_key!r} (data.messages_key)"
        ok = isinstance(messages, list) and all(
            isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
            for m in messages
        )
        if not ok or len(messages) < 2 or messages[-1]["role"] != "assistant":
            raise DataError(
                f"{where}: {key} must be a list of {{role, content}} messages ending in the assistant's "
                f"response, with the prompt before it; got {messages!r:.80}"
            )
        if not messages[-1]["content"].strip():
            raise DataError(f"{where}: {key}: the last (assistant) message is empty")
        return messages[:-1], messages[-1]["content"]
    prompt = row.get(cfg.prompt_key)
    if isinstance(prompt, list):  # chat messages in the prompt column, as the RL data has
        if not prompt:
            raise DataError(f"{where}: {cfg.prompt_key!r} (data.prompt_key) is an empty list")
        messages = prompt
    else:
        messages = [{"role": "user", "content": _text(row, cfg.prompt_key, "data.prompt_key", where)}]
    return messages, _text(row, cfg.response_key, "data.response_key", where)


def load_examples(files: list[str], tokenizer: PreTrainedTokenizerBase, cfg: DataConfig) -> list[Example]:
    """Every row of `files` tokenised. A file that lacks the columns, an empty response or a row longer
    than data.max_length (with truncation=error) is a DataError naming file, row and key."""
    think_end = tokenizer.convert_tokens_to_ids("</think>")
    examples = []
    for path in files:
        rows = read_rows(path)
        columns = set(rows[0])
        if cfg.messages_key not in columns and not {cfg.prompt_key, cfg.response_key} <= columns:
            raise DataError(
                f"{path}: needs a {cfg.messages_key!r} column (data.messages_key) or {cfg.prompt_key!r} and "
                f"{cfg.response_key!r} columns (data.prompt_key, data.response_key); it has {sorted(columns)}"
            )
        for i, row in enumerate(rows):
            where = f"{path} row {i}"
            messages, response = _chat(row, cfg, where)
            try:
                prompt = encode_prompt(tokenizer, messages)
            except Exception as e:  # the chat template's own error (an unknown role, a bad message)
                raise DataError(f"{where}: the chat template rejects the prompt ({e})") from None
            target = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
            room = cfg.max_length - len(prompt)
            if len(target) > room:
                if cfg.truncation == "error" or room < 1:
                    raise DataError(
                        f"{where}: {len(prompt) + len(target)} tokens (prompt {len(prompt)} + response "
                        f"{len(target)} with eos), more than data.max_length={cfg.max_length}"
                        + ("; set data.truncation=right to cut the response" if room >= 1 else "")
                    )
                target = target[:room]
            thinking = target.index(think_end) if think_end in target else 0
            examples.append(Example(prompt, target, thinking))
    return examples


def training_example(
    example: Example, cfg: DelethinkExamplesConfig, seed: int, position: int
) -> tuple[list[int], list[int]]:
    """The (prompt, target) that the row at global position `position` (step * batch_size + index)
    trains on: the whole row, or with probability cfg.prob, when its thinking is longer than one chunk,
    the chunk after a cut drawn uniformly among the loop's cuts. A function of (seed, position), so a
    resumed run draws what the uninterrupted run drew."""
    if cfg.prob == 0 or example.thinking <= cfg.chunk_size:
        return example.prompt, example.target
    rng = random.Random(f"sft-continuation-{seed}-{position}")
    if rng.random() >= cfg.prob:
        return example.prompt, example.target
    cut = rng.choice(delethink_cuts(len(example.target), cfg.params))
    return continuation_example(example.prompt, example.target, cut, cfg.params)


class FileBatches:
    """Training batches of file rows: the order is a function of (seed, step) (rl_dataset.DataOrder),
    and so is each row's continuation draw, so the position is the step alone."""

    def __init__(self, examples: list[Example], batch_size: int, seed: int, data: DataConfig) -> None:
        self.examples, self.batch_size, self.seed = examples, batch_size, seed
        self.continuation = data.continuation
        self.order = DataOrder(len(examples), batch_size, seed, data.shuffle)
        self.step = 0  # batches drawn so far

    def __call__(self) -> list[Pair]:
        first = self.step * self.batch_size
        indices = self.order.batch_indices(self.step)
        self.step += 1
        return [
            training_example(self.examples[i], self.continuation, self.seed, first + j)
            for j, i in enumerate(indices)
        ]

    def state(self) -> dict[str, Any]:
        return {"step": self.step}

    def load_state(self, state: dict[str, Any]) -> None:
        self.step = state["step"]
