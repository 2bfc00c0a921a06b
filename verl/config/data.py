"""`data.*` (the prompt files and lengths) and a named problem set (`train_tasks.NAME`, `val_tasks.NAME`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from verl.config.rules import TASK_BAD_ROWS, broken, not_empty, off_or_positive, one_of, positive


@dataclass
class DataConfig:
    # prompt-row files (jsonl/json/parquet); or name train_tasks
    train_files: list[str] = field(default_factory=list)
    val_files: list[str] = field(default_factory=list)  # prompt-row files; or name val_tasks
    prompt_key: str = "prompt"  # field of a row that holds the prompt
    max_prompt_length: int = 512  # tokens; Delethink: a chunk's prompt (question + carry-over) must fit
    # tokens; LongCoT: the thinking budget B; Delethink: = algorithm.delethink.chunk_size
    max_response_length: int = 256
    train_batch_size: int = 8  # prompts per training step
    # prompts per validation batch (-1: all at once); with env_manager: validate the first N only
    val_batch_size: int = -1
    shuffle: bool = True  # shuffle training prompts every epoch
    seed: int = 1  # seed of the training-prompt order
    # drop prompts longer than max_prompt_length; false: error naming the row
    filter_overlong_prompts: bool = True
    # true: drop repeats of an earlier prompt (same prompt and answer); repeats are logged anyway
    drop_duplicates: bool = False

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            *positive("max_prompt_length", "max_response_length", "train_batch_size"),
            ("val_batch_size", off_or_positive, "must be -1 (off / all at once) or > 0"),
            *not_empty("prompt_key"),
        ])  # fmt: skip


@dataclass
class TaskConfig:
    """A problem set in its original columns (problem / answer), turned into prompts by a template. Its rows
    come from a local file (`path`) or, for a set too large to store here, from the Hugging Face hub."""

    data_source: str  # names the task in metrics and picks the scorer
    path: str | None = None  # .jsonl, .json or .parquet; null: load hf_dataset from the hub instead
    hf_dataset: str | None = None  # Hugging Face dataset id, read when path is null (needs network)
    hf_split: str = "train"  # the split of hf_dataset
    problem_key: str = "problem"
    answer_key: str = "answer"
    answer_marker: str | None = None  # GSM8K "####": the answer column is a solution, the answer follows this
    prompt_template: str = "{problem}"  # str.format with the row's columns
    system_prompt: str | None = None
    max_samples: int = -1  # -1: every row
    skip_rows: int = 0  # the first skip_rows rows of the file are left out (held out for evaluation, say)
    shuffle_seed: int | None = None  # set: shuffle rows with this seed before max_samples
    n: int | None = None  # validation samples per problem; None: rollout.val_kwargs.n
    bad_rows: str = "filter"  # filter: drop bad rows and log the count | error: fail naming the row

    @property
    def source(self) -> str:
        """Where the rows come from, for messages: the file, or the hub dataset and split."""
        return self.path if self.path is not None else f"{self.hf_dataset} (split {self.hf_split})"

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            ("max_samples", off_or_positive, "must be -1 (every row) or > 0"),
            ("skip_rows", lambda v: v >= 0, "must be >= 0"),
            ("n", lambda v: v is None or v >= 1, "must be null or >= 1"),
            one_of("bad_rows", TASK_BAD_ROWS),
            ("path", lambda v: v is not None or self.hf_dataset,
             "is null and so is hf_dataset: name a file, or a Hugging Face dataset to load"),
            ("path", lambda v: v != "", "must not be empty (null loads hf_dataset from the hub)"),
            ("hf_dataset", lambda v: v != "", "must not be empty (null: none)"),
            *not_empty("hf_split", "data_source", "problem_key", "answer_key", "prompt_template"),
        ])  # fmt: skip
