"""SFT's config (`python -m verl.trainer.main_sft`, config/sft*.yaml): one dataclass per section, each
section's rules beside its fields in its `problems(key)`, with the helpers of the RL config (rules.py).

`SFTConfig.problems` adds the rules between sections and the paths a run reads and writes. What only the
floors above know arrives as an argument: the tasks' names and largest sizes (verl/data/generated_tasks.py
`TASK_MAX_SIZE`); main_sft's `load_sft_config` types the YAML, checks the label alphabet with the running-sum
task, then asks for these problems.
"""

from __future__ import annotations

import string
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from verl.config.actor_rollout_ref import FSDPConfig
from verl.config.rules import (
    LOGGERS,
    LORA_RULES,
    at_least,
    broken,
    in_unit_interval,
    join_key,
    non_negative,
    one_of,
    positive,
)
from verl.core.delethink import DelethinkParams, delethink_param_problems
from verl.models.lora_keys import ALL_LINEAR
from verl.models.model_dir import model_dir_problems

DATA_SOURCES = ("task", "files")
FORMATS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}  # file suffix -> datasets builder
TRUNCATION = ("error", "right")
SFT_RESUME_MODES = ("auto", "disable")
SFT_DEVICES = ("cpu", "cuda", "auto")


@dataclass
class ModelConfig:
    path: str
    lora_rank: int = 0  # LoRA adapters of this rank are all SFT trains (peft); 0: full fine-tuning
    lora_alpha: float = 16.0  # LoRA scale: the adapters' update is multiplied by lora_alpha / lora_rank
    # modules that get adapters: names (q_proj, ...) or all-linear (every linear layer but the LM head)
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR])

    def problems(self, key: str) -> list[str]:
        return broken(self, key, LORA_RULES)


@dataclass
class TrainConfig:
    steps: int
    batch_size: int
    lr: float
    warmup_steps: int
    min_lr_ratio: float  # the cosine decay ends at lr * min_lr_ratio
    weight_decay: float
    grad_clip: float
    # each batch is sorted by length and split into this many forwards whose losses add up to the batch's
    # (same gradient, less padding: whole traces and short continuation chunks stop padding each other)
    micro_batches: int
    seed: int
    # Early stop once the temperature-1 accuracy on held-out check problems reaches this (None: train all
    # steps). The lookup and the addition are each learned in a sudden jump whose timing varies with the
    # seed and the machine's float rounding, so a fixed step count would give anything from 10% to 90%.
    stop_at_accuracy: float | None
    check_every: int  # steps between accuracy checks
    # a token budget per forward instead (prompt + target tokens, padding excluded): each rank's rows are
    # split into as few balanced micro-batches as fit it (micro_batching.partition_by_token_budget);
    # null: train.micro_batches
    max_tokens_per_micro_batch: int | None = None
    # pack each micro-batch's rows into one unpadded sequence (position ids restart per row; see
    # workers/actor/packing.py): no compute on padding with flash-attention, the same loss
    use_remove_padding: bool = False

    def problems(self, key: str) -> list[str]:
        return broken(self, key, [
            *at_least(1, "steps", "batch_size", "micro_batches"),
            *positive("lr"),
            ("warmup_steps", lambda v: 0 <= v <= self.steps, f"must be in [0, {join_key(key, 'steps')}]"),
            *in_unit_interval("min_lr_ratio"),
            *at_least(1, "check_every"),
            ("max_tokens_per_micro_batch", lambda v: v is None or v >= 1, "must be >= 1 or null"),
        ])  # fmt: skip


@dataclass
class TrainerConfig:
    """Logging, validation and checkpoints (the RL trainer's key names)."""

    logger: list[str] = field(default_factory=list)  # console | jsonl | wandb (offline without a key)
    project_name: str = "verl_sft"  # wandb project
    experiment_name: str = "sft"  # wandb run name
    # run directory: metrics.jsonl, wandb files and global_step_N checkpoints; null: none of them
    default_local_dir: str | None = None
    test_freq: int = 0  # steps between validation losses on data.val_files (and at the end); 0: the end only
    save_freq: int = 0  # steps between checkpoints (and at the end) in default_local_dir; 0: none
    resume_mode: str = "auto"  # auto: from the newest complete checkpoint in default_local_dir | disable
    overwrite: bool = False  # with resume_mode=disable: move a previous run in default_local_dir aside
    device: str = "cpu"  # cpu | cuda | auto: cuda where torch sees a GPU, else cpu

    @property
    def run_dir(self) -> Path | None:
        return Path(self.default_local_dir) if self.default_local_dir else None

    def problems(self, key: str) -> list[str]:
        loggers = [
            f"{join_key(key, 'logger')}: {logger!r} is not one of {', '.join(LOGGERS)}"
            for logger in self.logger
            if logger not in LOGGERS
        ]
        writes_there = self.save_freq != 0 or set(self.logger) & {"jsonl", "wandb"}
        run_dir = (
            [f"{join_key(key, 'default_local_dir')}=null: {join_key(key, 'save_freq')} > 0 and the jsonl and "
             "wandb loggers write there; set it"]
            if self.default_local_dir is None and writes_there
            else []
        )  # fmt: skip
        return loggers + broken(self, key, [
            *non_negative("test_freq", "save_freq"),
            ("resume_mode", lambda v: v in SFT_RESUME_MODES, f"must be {' or '.join(SFT_RESUME_MODES)}"),
            one_of("device", SFT_DEVICES),
        ]) + run_dir  # fmt: skip


@dataclass
class DelethinkExamplesConfig:
    """Which examples become continuation chunks (off at prob 0; verl/trainer/sft/continuation.py). The
    Delethink fields have training's names (algorithm.delethink) and build the same DelethinkParams."""

    prob: float = 0.0  # share of (long enough) examples that become one continuation chunk
    chunk_size: int = 32  # C
    keep_head: int = 4  # carry-over: the first keep_head response tokens
    keep_tail: int = 12  # carry-over: the last keep_tail response tokens

    def params_fields(self) -> dict[str, int]:
        """The DelethinkParams fields set here (I does not matter: examples resume from every boundary)."""
        return {"chunk_size": self.chunk_size, "keep_head": self.keep_head, "keep_tail": self.keep_tail}

    @cached_property
    def params(self) -> DelethinkParams:
        """The Delethink parameters whose loop these examples imitate (the config loader checked them)."""
        return DelethinkParams(**self.params_fields())

    def problems(self, key: str) -> list[str]:
        delethink = [join_key(key, p) for p in delethink_param_problems(**self.params_fields())]
        return broken(self, key, in_unit_interval("prob")) + delethink


@dataclass
class DataConfig:
    """Where the training examples come from (data.*). The file keys are ignored for source=task."""

    source: str = "task"  # task: synthetic problems drawn on the fly (the task section) | files
    train_files: list[str] = field(default_factory=list)  # .jsonl/.json/.parquet; one path or a list
    val_files: list[str] = field(default_factory=list)  # validation loss on these; [] for none
    prompt_key: str = "prompt"  # column of the prompt (a string, or a list of chat messages)
    response_key: str = "response"  # column of the response string (with prompt_key)
    messages_key: str = "messages"  # column of a whole chat, used when a file has it
    max_length: int = 2048  # most prompt + response tokens (eos included) per example
    # a longer row: error (names the file and row) | right (drop the response's last tokens, and the eos)
    truncation: str = "error"
    shuffle: bool = True  # a fresh order every epoch (a function of train.seed and the epoch)
    # a share of the rows whose thinking (the response before </think>) is longer than chunk_size
    # become the Delethink chunk after a cut instead: the prompt exactly as DelethinkAgentLoop builds it
    continuation: DelethinkExamplesConfig = field(default_factory=DelethinkExamplesConfig)

    def problems(self, key: str) -> list[str]:
        """The source, and with source=files the file keys (the files must exist, in a known format)."""
        out = broken(
            self, key, [("source", lambda v: v in DATA_SOURCES, f"must be {' or '.join(DATA_SOURCES)}")]
        )
        if self.source != "files":
            return out
        if not self.train_files:
            source = join_key(key, "source")
            out.append(f"{join_key(key, 'train_files')}=[]: {source}=files needs at least one training file")
        for name in ("train_files", "val_files"):
            for i, path in enumerate(getattr(self, name)):
                p = Path(path)
                where = f"{join_key(key, name)}[{i}]={path!r}"
                if not p.is_file():
                    out.append(f"{where}: {'a directory' if p.is_dir() else 'no such file'}")
                elif p.suffix not in FORMATS:
                    out.append(f"{where}: unsupported file type (use {', '.join(FORMATS)})")
        out += broken(self, key, [*at_least(2, "max_length"), one_of("truncation", TRUNCATION)])
        return out + self.continuation.problems(join_key(key, "continuation"))


@dataclass
class ContinuationConfig(DelethinkExamplesConfig):
    """Continuation examples of the task (sft/continuation.py): with probability `prob` an example is the
    chunk after a cut, drawn uniformly among the cuts of a problem of size up to `max_size` (a problem
    too short to be cut stays whole); or, with probability `answer_prob` of a continuation example, the
    chunk after a cut that falls in the answer, after `</think>`."""

    # continuation problems are drawn from sizes [task.min_size, max_size]; null: task.max_size. Larger
    # shows the model chunks from deep inside problems longer than any of its whole traces, at the
    # positions a Delethink chunk has, while its whole traces stay within the training budget
    max_size: int | None = None
    # share of continuation examples cut after `</think>`, from problems whose cuts reach the answer. The
    # loop cuts inside the answer of about 2 traces in 5 at the demo testbed's RL sizes, but a cut drawn
    # uniformly among a long problem's many cuts lands there in about 1 example in 20, and a model that
    # never learned to copy its answer after a cut fails those traces with the thinking right
    answer_prob: float = 0.0

    def problems(self, key: str) -> list[str]:
        return super().problems(key) + broken(self, key, in_unit_interval("answer_prob"))


@dataclass
class LongStartConfig:
    """The first tokens of problems longer than any whole trace (off at prob 0).

    A whole trace's first step can depend on the question's size (the shift register's counter starts
    at n), and whole traces show only sizes up to task.max_size, so a model trained on them can misread
    a larger n at the start; continuation chunks never show a start. These examples do: a problem of a
    size drawn from (task.max_size, task.continuation_max_size], its chat prompt, and only the first
    `tokens` response tokens as the target (no eos, so nothing teaches stopping there).
    """

    prob: float = 0.0  # share of training examples that are such a start
    tokens: int = 27  # response tokens per start (27: three shift-register steps)


def size_range_problems(
    key: str, low: int, high: int, task: str, task_max_size: Mapping[str, int]
) -> list[str]:
    """`key`'s sizes [low, high] against the largest size the task can write."""
    if 1 <= low <= high <= task_max_size.get(task, high):
        return []
    return [
        f"{key}.min_size={low}, {key}.max_size={high}: need 1 <= min_size <= max_size <= "
        f"{task_max_size.get(task)} ({task})"
    ]


@dataclass
class TaskConfig:
    """The training problems. They may differ from the RL data on purpose, to get past plateaus fast:

    - short problems (from 1 size) teach the lookup that copies a digit into the thinking;
    - extra zero digits. Both tasks' new digit is a sum mod 10 of two digits it must read (the running sum:
      the previous sum and the term; the shift register: the register's first two digits). With uniform
      digits the sum is independent of either digit alone, so nothing rewards reading one until both are
      read together: the loss sits on a plateau (the digit at chance) until the weights drift into reading
      both, and when that happens depends on the seed. With zeros, a step that adds 0 copies the other
      digit, which rewards reading each one on its own (recipes/markovian_testbed/README.md measures it).
    """

    name: str = "running_sum"  # running_sum (size: terms) | shift_register (size: steps)
    min_size: int = 1  # whole-trace problem sizes are drawn uniformly from [min_size, max_size]
    max_size: int = 12
    # each digit is 0 with this probability, else uniform over 0..9 (running_sum: every term; shift_register:
    # the start register's digits, which keeps the register rich in zeros for many steps)
    zero_prob: float = 0.0
    # running_sum: term i is labelled labels[i % len(labels)], also when held out (default a..z, the
    # running-sum task's own, verl/data/synthetic.py LABELS)
    labels: str = string.ascii_lowercase
    continuation: ContinuationConfig = field(default_factory=ContinuationConfig)
    long_start: LongStartConfig = field(default_factory=LongStartConfig)

    @property
    def continuation_max_size(self) -> int:
        return self.max_size if self.continuation.max_size is None else self.continuation.max_size

    def problems(self, key: str, task_max_size: Mapping[str, int]) -> list[str]:
        """`task_max_size`: each task's name and the largest problem size it writes."""
        cont, start = join_key(key, "continuation"), join_key(key, "long_start")
        sizes = [(key, self.max_size), (cont, self.continuation_max_size)]
        return [
            *broken(self, key, [one_of("name", sorted(task_max_size)), *in_unit_interval("zero_prob")]),
            *[line for k, high in sizes
              for line in size_range_problems(k, self.min_size, high, self.name, task_max_size)],
            *self.continuation.problems(cont),
            *broken(self.long_start, start, [
                ("prob", lambda v: 0 <= v <= 1 - self.continuation.prob, f"must be in [0, 1 - {cont}.prob]"),
                *at_least(1, "tokens"),
            ]),
            *([f"{start}.prob={self.long_start.prob} needs sizes past {join_key(key, 'max_size')}="
               f"{self.max_size}: set {cont}.max_size above it (now {self.continuation_max_size})"]
              if self.long_start.prob != 0 and self.continuation_max_size <= self.max_size else []),
        ]  # fmt: skip


@dataclass
class EvalConfig:
    num_problems: int  # held-out problems (running sum: uniform digits), spread evenly over the sizes
    min_size: int  # the sizes of the RL data
    max_size: int
    max_new_tokens: int
    # > 0: the accuracy checks also run Delethink inference with I = this many chunks (task.continuation's
    # C, keep_head, keep_tail) and stop on the lower of the two accuracies; 0: LongCoT inference only
    delethink_chunks: int = 0

    def problems(self, key: str) -> list[str]:
        return broken(
            self, key, [*non_negative("num_problems", "delethink_chunks"), *at_least(1, "max_new_tokens")]
        )


@dataclass
class SFTConfig:
    """Typed view of config/sft_tiny.yaml, which holds every value (and explains it)."""

    model: ModelConfig
    output_dir: str
    force: bool  # overwrite a non-empty output_dir
    num_threads: int
    task: TaskConfig
    train: TrainConfig
    eval: EvalConfig
    data: DataConfig = field(default_factory=DataConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    fsdp: FSDPConfig = field(default_factory=FSDPConfig)  # under torchrun: the actor's FSDP2 settings

    @property
    def from_files(self) -> bool:
        return self.data.source == "files"

    def problems(self, task_max_size: Mapping[str, int]) -> list[str]:
        """Every broken rule, one `key=value: rule` line each: the sections', then the rules between
        sections and the paths; the LoRA target modules against the model once the model section holds."""
        model = self.model.problems("model") + self._model_path_problems()
        errors = [
            *model,
            *self.train.problems("train"),
            *self.task.problems("task", task_max_size),
            *self.eval.problems("eval"),
            *self.data.problems("data"),
            *self.trainer.problems("trainer"),
            *self.fsdp.problems("fsdp"),
            *broken(self.fsdp, "fsdp", [
                ("optimizer_offload", lambda v: not v, "not supported by main_sft; set it to false"),
            ]),
            *broken(self, "", at_least(0, "num_threads")),
            *self._between_sections(task_max_size),
            *self._output_dir_problems(),
        ]  # fmt: skip
        if self.model.lora_rank and not model:
            from verl.models import lora  # peft and torch: only when needed

            problems = lora.target_module_problems(self.model.path, self.model, lora.CAUSAL_LM)
            errors += [f"model.target_modules={self.model.target_modules!r}: {p}" for p in problems]
        return errors

    def _between_sections(self, task_max_size: Mapping[str, int]) -> list[str]:
        stop, problems = self.train.stop_at_accuracy, []
        if stop is not None and self.eval.num_problems <= 0:
            problems.append(
                f"train.stop_at_accuracy={stop} needs held-out problems: eval.num_problems="
                f"{self.eval.num_problems} must be > 0 (or set train.stop_at_accuracy=null)"
            )
        if stop is not None and self.from_files:
            problems.append(
                f"train.stop_at_accuracy={stop}: the held-out accuracy is the task's; set it to null with "
                "data.source=files"
            )
        eval_sizes = (self.eval.min_size, self.eval.max_size)
        return problems + size_range_problems("eval", *eval_sizes, self.task.name, task_max_size)

    def _model_path_problems(self) -> list[str]:
        """Why the model to train cannot be loaded (a local directory: SFT starts from an init)."""
        model_dir = Path(self.model.path)
        if not (model_dir / "config.json").is_file():
            make = f"python -m verl.models.tiny --out {model_dir}"
            return [f"model.path={self.model.path}: no model there (no config.json); create it with `{make}`"]
        incomplete = model_dir_problems(model_dir)
        if incomplete:
            return [f"model.path={self.model.path}: not a complete model directory: {'; '.join(incomplete)}"]
        return []

    def _output_dir_problems(self) -> list[str]:
        output_dir = Path(self.output_dir)
        if self.force or not output_dir.is_dir() or not any(output_dir.iterdir()):
            return []
        return [f"output_dir={self.output_dir}: exists and is not empty; set force=true to overwrite it"]
