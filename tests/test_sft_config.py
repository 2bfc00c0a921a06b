"""SFT's config sections (verl/config/sft.py) state their rules in `problems(key)`, one `key=value: rule`
line per broken rule, with the messages main_sft has always printed; the CLI's own tests
(tests/test_sft.py, tests/test_sft_files.py, tests/test_input_errors.py) run them through the YAML."""

import dataclasses

from verl.config.sft import (
    ContinuationConfig,
    DataConfig,
    EvalConfig,
    LongStartConfig,
    ModelConfig,
    SFTConfig,
    TaskConfig,
    TrainConfig,
    TrainerConfig,
)
from verl.data import synthetic
from verl.models.tiny import save_tiny

MAX_SIZE = {"running_sum": 26, "shift_register": 999}
# DelethinkParams' own message (verl/core/delethink.py), under the section's key
KEEP_TAIL = (
    "task.continuation.keep_tail=30: keep_head + keep_tail = 4 + 30 must be < chunk_size=32 (the chunk size "
    "C): the carry-over must leave room to think"
)
TRAIN = TrainConfig(
    steps=10, batch_size=4, lr=1e-3, warmup_steps=2, min_lr_ratio=0.1, weight_decay=0.0, grad_clip=1.0,
    micro_batches=1, seed=0, stop_at_accuracy=None, check_every=5,
)  # fmt: skip


def test_train_rules():
    assert TRAIN.problems("train") == []
    bad = dataclasses.replace(
        TRAIN, steps=0, lr=0.0, warmup_steps=3, min_lr_ratio=1.5, max_tokens_per_micro_batch=0
    )
    assert bad.problems("train") == [
        "train.steps=0: must be >= 1",
        "train.lr=0.0: must be > 0",
        "train.warmup_steps=3: must be in [0, train.steps]",
        "train.min_lr_ratio=1.5: must be in [0, 1]",
        "train.max_tokens_per_micro_batch=0: must be >= 1 or null",
    ]


def test_trainer_rules():
    assert TrainerConfig().problems("trainer") == []
    bad = TrainerConfig(logger=["console", "tb"], save_freq=-1, resume_mode="path", device="gpu")
    assert bad.problems("trainer") == [
        "trainer.logger: 'tb' is not one of console, jsonl, wandb",
        "trainer.save_freq=-1: must be >= 0",
        "trainer.resume_mode='path': must be auto or disable",
        "trainer.device='gpu': must be one of ['cpu', 'cuda', 'auto']",
        # -1 is not 0: a checkpoint directory is asked for, as before the rule moved here
        "trainer.default_local_dir=null: trainer.save_freq > 0 and the jsonl and wandb loggers write there; "
        "set it",
    ]
    assert TrainerConfig(logger=["jsonl"], default_local_dir="run").problems("trainer") == []


def test_task_rules_take_the_tasks_largest_sizes_as_an_argument():
    task = TaskConfig(
        name="running_sum", min_size=1, max_size=30, zero_prob=1.5,
        continuation=ContinuationConfig(prob=0.5, keep_tail=30),
        long_start=LongStartConfig(prob=0.6, tokens=0),
    )  # fmt: skip
    assert task.problems("task", MAX_SIZE) == [
        "task.zero_prob=1.5: must be in [0, 1]",
        "task.min_size=1, task.max_size=30: need 1 <= min_size <= max_size <= 26 (running_sum)",
        "task.continuation.min_size=1, task.continuation.max_size=30: need 1 <= min_size <= max_size <= 26 "
        "(running_sum)",
        KEEP_TAIL,
        "task.long_start.prob=0.6: must be in [0, 1 - task.continuation.prob]",
        "task.long_start.tokens=0: must be >= 1",
        "task.long_start.prob=0.6 needs sizes past task.max_size=30: set task.continuation.max_size above it "
        "(now 30)",
    ]
    # the same sizes fit the shift register; an unknown task is named with the known ones
    assert dataclasses.replace(task, name="shift_register", zero_prob=0.0).problems("task", MAX_SIZE)[:1] == [
        KEEP_TAIL
    ]
    assert TaskConfig(name="sum").problems("task", MAX_SIZE) == [
        "task.name='sum': must be one of ['running_sum', 'shift_register']"
    ]


def test_the_default_labels_are_the_running_sum_tasks():
    assert TaskConfig().labels == synthetic.LABELS


def test_data_rules_check_the_files_only_for_source_files(tmp_path):
    (tmp_path / "rows.txt").write_text("")
    assert DataConfig(source="task", train_files=["nowhere.jsonl"]).problems("data") == []
    assert DataConfig(source="web").problems("data") == ["data.source='web': must be task or files"]
    files = DataConfig(
        source="files", val_files=[str(tmp_path / "v.jsonl"), str(tmp_path), str(tmp_path / "rows.txt")],
        max_length=1, truncation="left",
    )  # fmt: skip
    assert files.problems("data") == [
        "data.train_files=[]: data.source=files needs at least one training file",
        f"data.val_files[0]='{tmp_path / 'v.jsonl'}': no such file",
        f"data.val_files[1]='{tmp_path}': a directory",
        f"data.val_files[2]='{tmp_path / 'rows.txt'}': unsupported file type (use .jsonl, .json, .parquet)",
        "data.max_length=1: must be >= 2",
        "data.truncation='left': must be one of ['error', 'right']",
    ]


def test_the_rules_between_sections_and_the_paths(tmp_path):
    save_tiny(tmp_path / "init")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "x").write_text("")
    config = SFTConfig(
        model=ModelConfig(path=str(tmp_path / "init")), output_dir=str(tmp_path / "out"), force=False,
        num_threads=-1, task=TaskConfig(), train=dataclasses.replace(TRAIN, stop_at_accuracy=0.4),
        eval=EvalConfig(num_problems=0, min_size=4, max_size=40, max_new_tokens=96),
    )  # fmt: skip
    assert config.problems(MAX_SIZE) == [
        "num_threads=-1: must be >= 0",
        "train.stop_at_accuracy=0.4 needs held-out problems: eval.num_problems=0 must be > 0 (or set "
        "train.stop_at_accuracy=null)",
        "eval.min_size=4, eval.max_size=40: need 1 <= min_size <= max_size <= 26 (running_sum)",
        f"output_dir={tmp_path / 'out'}: exists and is not empty; set force=true to overwrite it",
    ]
    missing = dataclasses.replace(config, model=ModelConfig(path=str(tmp_path / "none")), num_threads=1)
    assert missing.problems(MAX_SIZE)[0] == (
        f"model.path={tmp_path / 'none'}: no model there (no config.json); create it with "
        f"`python -m verl.models.tiny --out {tmp_path / 'none'}`"
    )
    # the LoRA target modules are checked against the model once its section holds
    lora = ModelConfig(path=str(tmp_path / "init"), lora_rank=4, target_modules=["q_proj", "qkv"])
    problems = dataclasses.replace(config, model=lora).problems(MAX_SIZE)
    assert problems[-1].startswith(
        "model.target_modules=['q_proj', 'qkv']: 'qkv' is not a module of this model"
    )
