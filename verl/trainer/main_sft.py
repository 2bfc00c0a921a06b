"""SFT: `python -m verl.trainer.main_sft [--config-name=sft] [key=value ...]`, or under
`torchrun --nproc_per_node=N` for N FSDP2 ranks (sft/parallel.py). Loss on the response tokens only.

Two data sources (data.source):
- `task` (config/sft_tiny.yaml, sft_testbed.yaml): the tiny model learns the reference LongCoT traces of
  a synthetic task (task.name: `running_sum`, verl/data/synthetic.py, or `shift_register`,
  verl/data/shift_register.py), drawn on the fly from `train.seed` in a stream separate from the RL
  data: prompt = chat template + generation prompt, target = `THINKING</think>\\boxed{A}<|end|>`.
  Opt-in (task.continuation.prob > 0): some examples are the chunk the Delethink loop generates after
  a cut (prompt = question + carry-over), so the model learns to continue a chunk. Training stops
  early once the model is *partly* good (train.stop_at_accuracy), so that RL has something left to
  learn, and a held-out evaluation prints accuracy by problem size (greedy and temperature 1).
- `files` (config/sft.yaml): prompt/response or chat-message rows of jsonl/parquet files, any HF
  causal LM (sft/files.py); validation loss on data.val_files; data.continuation turns a share of the
  long traces into Delethink continuation chunks (sft/continuation.py, shared with the task).
Logging (console/jsonl/wandb), checkpoints that resume (sft/checkpoint.py) and micro-batching
(sft/batches.py) are the same for both. At the end the model and tokenizer are saved with
`save_pretrained`, atomically, to `output_dir`, with the resolved config (sft_config.yaml) and the
losses, evaluation and last validation (sft_metrics.json).
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel
from transformers.utils import logging as hf_logging

from verl.config import ConfigError, FSDPConfig, lora_key_problems
from verl.core.delethink import delethink_param_problems
from verl.data.rl_dataset import DataError
from verl.data.synthetic import check_labels
from verl.models import lora
from verl.models.lora_keys import ALL_LINEAR
from verl.models.model_dir import model_dir_problems
from verl.trainer.cli_keys import exit_on_unknown_keys
from verl.trainer.sft import checkpoint as sft_checkpoint
from verl.trainer.sft import parallel
from verl.trainer.sft.batches import Batch, Pair, backward_mean_loss, local_micro_batches, mean_loss
from verl.trainer.sft.files import DataConfig, FileBatches, load_examples
from verl.trainer.sft.parallel import SINGLE, Ranks, init_ranks
from verl.trainer.sft.task import (
    TASK_MAX_SIZE,
    EvalConfig,
    TaskBatches,
    TaskConfig,
    evaluate,
    format_summary,
    held_out_problems,
    summarize,
)
from verl.utils.checkpoint import ResumeError, find_resume
from verl.utils.cleanup import closed_after
from verl.utils.fs import atomic_dir
from verl.utils.tracking import Tracking


@dataclass
class ModelConfig:
    path: str
    lora_rank: int = 0  # LoRA adapters of this rank are all SFT trains (peft); 0: full fine-tuning
    lora_alpha: float = 16.0  # LoRA scale: the adapters' update is multiplied by lora_alpha / lora_rank
    # modules that get adapters: names (q_proj, ...) or all-linear (every linear layer but the LM head)
    target_modules: list[str] = field(default_factory=lambda: [ALL_LINEAR])


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


def _model_problem(model_dir: Path) -> str | None:
    """Why the model to train cannot be loaded, or None (a local directory: SFT starts from an init)."""
    if not (model_dir / "config.json").is_file():
        make = f"python -m verl.models.tiny --out {model_dir}"
        return f"no model there (no config.json); create it with `{make}`"
    problems = model_dir_problems(model_dir)
    return f"not a complete model directory: {'; '.join(problems)}" if problems else None


def load_sft_config(cfg: DictConfig) -> SFTConfig:
    """Type-check `cfg` against SFTConfig and check the rules; a ConfigError names the key and value."""
    cfg = cfg.copy()
    for key in ("data.train_files", "data.val_files"):  # one file may be given as a plain string
        if isinstance(OmegaConf.select(cfg, key), str):
            OmegaConf.update(cfg, key, [OmegaConf.select(cfg, key)])
    try:
        config: SFTConfig = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(SFTConfig), cfg))
    except OmegaConfBaseException as e:
        raise ConfigError(f"{e.full_key}: {str(e.msg).splitlines()[0]}") from None
    t = config.train
    cont = config.task.continuation
    start = config.task.long_start
    try:
        check_labels(config.task.labels)
    except ValueError as e:
        raise ConfigError(f"task.labels={config.task.labels!r}: {e}") from None
    output_dir = Path(config.output_dir)
    model_problem = _model_problem(Path(config.model.path))
    rules = [
        (t.steps >= 1, f"train.steps={t.steps}: must be >= 1"),
        (t.batch_size >= 1, f"train.batch_size={t.batch_size}: must be >= 1"),
        (t.micro_batches >= 1, f"train.micro_batches={t.micro_batches}: must be >= 1"),
        (t.lr > 0, f"train.lr={t.lr}: must be > 0"),
        (0 <= t.warmup_steps <= t.steps, f"train.warmup_steps={t.warmup_steps}: must be in [0, train.steps]"),
        (0 <= t.min_lr_ratio <= 1, f"train.min_lr_ratio={t.min_lr_ratio}: must be in [0, 1]"),
        (t.check_every >= 1, f"train.check_every={t.check_every}: must be >= 1"),
        (
            t.stop_at_accuracy is None or config.eval.num_problems > 0,
            f"train.stop_at_accuracy={t.stop_at_accuracy} needs held-out problems: eval.num_problems="
            f"{config.eval.num_problems} must be > 0 (or set train.stop_at_accuracy=null)",
        ),
        (
            config.task.name in TASK_MAX_SIZE,
            f"task.name={config.task.name!r}: must be one of {sorted(TASK_MAX_SIZE)}",
        ),
        *[
            (
                1 <= low <= high <= TASK_MAX_SIZE.get(config.task.name, high),
                f"{name}.min_size={low}, {name}.max_size={high}: need 1 <= min_size <= max_size <= "
                f"{TASK_MAX_SIZE.get(config.task.name)} ({config.task.name})",
            )
            for name, low, high in (
                ("task", config.task.min_size, config.task.max_size),
                ("eval", config.eval.min_size, config.eval.max_size),
                ("task.continuation", config.task.min_size, config.task.continuation_max_size),
            )
        ],
        (0 <= config.task.zero_prob <= 1, f"task.zero_prob={config.task.zero_prob}: must be in [0, 1]"),
        (0 <= cont.prob <= 1, f"task.continuation.prob={cont.prob}: must be in [0, 1]"),
        (
            0 <= start.prob <= 1 - cont.prob,
            f"task.long_start.prob={start.prob}: must be in [0, 1 - task.continuation.prob]",
        ),
        (start.tokens >= 1, f"task.long_start.tokens={start.tokens}: must be >= 1"),
        (
            start.prob == 0 or config.task.continuation_max_size > config.task.max_size,
            f"task.long_start.prob={start.prob} needs sizes past task.max_size={config.task.max_size}: "
            f"set task.continuation.max_size above it (now {config.task.continuation_max_size})",
        ),
        (config.eval.num_problems >= 0, f"eval.num_problems={config.eval.num_problems}: must be >= 0"),
        (config.eval.max_new_tokens >= 1, f"eval.max_new_tokens={config.eval.max_new_tokens}: must be >= 1"),
        (config.num_threads >= 1, f"num_threads={config.num_threads}: must be >= 1"),
        (not model_problem, f"model.path={config.model.path}: {model_problem}"),
        (
            config.force or not output_dir.is_dir() or not any(output_dir.iterdir()),
            f"output_dir={config.output_dir}: exists and is not empty; set force=true to overwrite it",
        ),
    ]
    trainer, data = config.trainer, config.data
    rules += [
        (data.source in ("task", "files"), f"data.source={data.source!r}: must be task or files"),
        (
            not config.from_files or t.stop_at_accuracy is None,
            f"train.stop_at_accuracy={t.stop_at_accuracy}: the held-out accuracy is the task's; set it to "
            "null with data.source=files",
        ),
        (
            t.max_tokens_per_micro_batch is None or t.max_tokens_per_micro_batch >= 1,
            f"train.max_tokens_per_micro_batch={t.max_tokens_per_micro_batch}: must be >= 1 or null",
        ),
        *[
            (
                logger in ("console", "jsonl", "wandb"),
                f"trainer.logger: {logger!r} is not one of console, jsonl, wandb",
            )
            for logger in trainer.logger
        ],
        (trainer.test_freq >= 0, f"trainer.test_freq={trainer.test_freq}: must be >= 0"),
        (trainer.save_freq >= 0, f"trainer.save_freq={trainer.save_freq}: must be >= 0"),
        (
            trainer.resume_mode in ("auto", "disable"),
            f"trainer.resume_mode={trainer.resume_mode!r}: must be auto or disable",
        ),
        (
            trainer.default_local_dir is not None
            or (trainer.save_freq == 0 and not set(trainer.logger) & {"jsonl", "wandb"}),
            "trainer.default_local_dir=null: trainer.save_freq > 0 and the jsonl and wandb loggers write "
            "there; set it",
        ),
    ]
    errors = [message for ok, message in rules if not ok]
    errors += [f"task.continuation.{p}" for p in delethink_param_problems(**cont.params_fields())]
    errors += lora_key_problems(config.model, "model")
    if config.model.lora_rank and not model_problem and not errors:
        problems = lora.target_module_problems(config.model.path, config.model, lora.CAUSAL_LM)
        errors += [f"model.target_modules={config.model.target_modules!r}: {p}" for p in problems]
    errors += config.fsdp.problems("fsdp")
    if config.fsdp.optimizer_offload:
        errors.append("fsdp.optimizer_offload=True: not supported by main_sft; set it to false")
    if config.from_files:
        errors += data.problems()
        errors += [
            f"data.continuation.{p}" for p in delethink_param_problems(**data.continuation.params_fields())
        ]
    if errors:
        raise ConfigError("\n".join(errors))
    return config


# the held-out T = 1 accuracy of an early-stopping check, in the step's metrics and in sft_metrics.json
CHECK_METRIC = "check/accuracy_t1"


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to `min_ratio` at the last step."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_optimizer(
    model: PreTrainedModel, cfg: TrainConfig
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW over the trainable parameters (a LoRA model's adapters) and its warm-up + cosine schedule
    over `cfg.steps` steps."""
    optimizer = torch.optim.AdamW(lora.trainable_parameters(model), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    )
    return optimizer, schedule


def train(
    model: PreTrainedModel,
    next_batch: Callable[[], list[Batch | None]],
    cfg: TrainConfig,
    accuracy: Callable[[], float] | None = None,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    schedule: torch.optim.lr_scheduler.LambdaLR | None = None,
    after_step: Callable[[int, dict[str, float]], None] | None = None,
    ranks: Ranks = SINGLE,
) -> list[float]:
    """AdamW on batches (lists of micro-batches) from `next_batch` up to step `cfg.steps`, or until
    `accuracy()` (called every `cfg.check_every` steps) reaches `cfg.stop_at_accuracy`. A given
    `optimizer` and `schedule` (make_optimizer) continue from the steps the schedule has taken (a
    resumed run). `after_step(step, metrics)` follows every step (logging, validation, checkpoints).
    Returns the loss of every step taken here."""
    if optimizer is None or schedule is None:
        optimizer, schedule = make_optimizer(model, cfg)
    start = schedule.last_epoch
    model.train()
    losses = []
    progress = tqdm(
        range(start + 1, cfg.steps + 1), initial=start, total=cfg.steps, desc="sft", unit="step",
        disable=not ranks.main,
    )  # fmt: skip
    for step in progress:
        optimizer.zero_grad(set_to_none=True)
        losses.append(backward_mean_loss(model, next_batch(), ranks))
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        lr = schedule.get_last_lr()[0]  # this step's
        optimizer.step()
        schedule.step()
        progress.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{schedule.get_last_lr()[0]:.2e}")
        norm = grad_norm.full_tensor() if hasattr(grad_norm, "full_tensor") else grad_norm
        metrics = {"train/loss": losses[-1], "train/lr": lr, "train/grad_norm": float(norm)}
        stop = False
        # before after_step: a checkpoint then holds the RNG state after the check's sampling
        if accuracy is not None and cfg.stop_at_accuracy is not None and step % cfg.check_every == 0:
            model.eval()
            metrics[CHECK_METRIC] = accuracy()
            model.train()
            progress.write(f"step {step}: held-out accuracy (T=1) {metrics[CHECK_METRIC]:.3f}")
            stop = metrics[CHECK_METRIC] >= cfg.stop_at_accuracy
        if after_step is not None:
            after_step(step, metrics)
            model.train()
        if stop:
            progress.write(f"reached train.stop_at_accuracy={cfg.stop_at_accuracy}: stopping")
            break
    progress.close()
    model.eval()
    return losses


def choose_resume(run_dir: Path | None, config: SFTConfig, ranks: Ranks) -> tuple[Path | None, list[str]]:
    """The checkpoint to resume from (checkpoint.find_resume) and notes about the choice; a ResumeError
    when its saved config differs in a key that defines the run. The main rank alone decides, since it
    may move an old run aside; its choice, or its ResumeError, reaches all."""
    trainer = config.trainer
    choice: tuple[Path | None, list[str]] | ResumeError = (None, [])
    if run_dir is not None and ranks.main:
        try:
            path, notes = find_resume(run_dir, trainer.resume_mode, None, trainer.overwrite)
            if path is not None:
                notes += sft_checkpoint.check_same_run(
                    path, OmegaConf.to_container(OmegaConf.structured(config))
                )
            choice = path, notes
        except ResumeError as e:
            choice = e
    choice = parallel.from_main(choice, ranks)
    if isinstance(choice, ResumeError):
        raise choice
    return choice


def run(config: SFTConfig) -> dict[str, dict[str, float]]:
    """Train, evaluate, save; one process, or one rank of a torchrun group."""
    ranks = init_ranks(gpu_if_any=config.from_files)
    try:
        result = _run(config, ranks)
    except BaseException:
        parallel.finish(ranks)
        raise
    parallel.finish(ranks, all_done=True)
    return result


def _run(config: SFTConfig, ranks: Ranks) -> dict[str, dict[str, float]]:
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.train.seed)
    hf_logging.disable_progress_bar()  # one tqdm bar (training) is enough
    log = tqdm.write if ranks.main else lambda _: None
    tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    # file rows are read and checked before anything else, so a bad row fails fast
    train_rows = load_examples(config.data.train_files, tokenizer, config.data) if config.from_files else []
    val_rows = load_examples(config.data.val_files, tokenizer, config.data) if config.from_files else []
    trainer = config.trainer
    run_dir = Path(trainer.default_local_dir) if trainer.default_local_dir else None
    if ranks.world_size > config.train.batch_size:
        raise ConfigError(
            f"train.batch_size={config.train.batch_size}: must be >= the {ranks.world_size} ranks"
        )
    if 0 < len(val_rows) < ranks.world_size:
        raise DataError(f"data.val_files: {len(val_rows)} rows, fewer than the {ranks.world_size} ranks")
    resume_from, notes = choose_resume(run_dir, config, ranks)
    for note in notes:
        log(note)
    model = AutoModelForCausalLM.from_pretrained(config.model.path, dtype=torch.float32)
    if config.model.lora_rank:
        model = lora.add_adapters(model, config.model, lora.CAUSAL_LM, seed=config.train.seed)
    model = parallel.prepare_model(model, ranks, config.fsdp)
    optimizer, schedule = make_optimizer(model, config.train)
    train_cfg = config.train

    if config.from_files:
        batches: TaskBatches | FileBatches = FileBatches(
            train_rows, train_cfg.batch_size, train_cfg.seed, config.data
        )
    else:
        batches = TaskBatches(train_cfg.seed, tokenizer, config.task, train_cfg.batch_size)
    # the task's held-out problems: for early stopping (check) and the final evaluation
    check_problems, eval_problems = (
        ([], [])
        if config.from_files
        else (
            held_out_problems(f"sft-check-{train_cfg.seed}", config.eval, config.task),
            held_out_problems(f"sft-eval-{train_cfg.seed}", config.eval, config.task),
        )
    )

    def check_accuracy() -> float:
        outcomes = evaluate(model, tokenizer, check_problems, config.eval.max_new_tokens, do_sample=True)
        return sum(o.correct for o in outcomes) / len(outcomes)

    def micro_batches(pairs: list[Pair], count: int) -> list[Batch | None]:
        return local_micro_batches(
            pairs, ranks, tokenizer.pad_token_id, count, train_cfg.max_tokens_per_micro_batch,
            train_cfg.use_remove_padding,
        )  # fmt: skip

    def validate() -> dict[str, float]:
        model.eval()
        pairs = [(e.prompt, e.target) for e in val_rows]
        loss, tokens = mean_loss(
            model, micro_batches(pairs, math.ceil(len(pairs) / train_cfg.batch_size)), ranks
        )
        return {"val/loss": loss, "val/tokens": tokens}

    losses: list[float] = []
    checks: list[dict[str, float]] = []  # {"step", "accuracy"} of every early-stopping check
    if resume_from is not None:
        state = sft_checkpoint.load(resume_from, model, config.model, optimizer, schedule)
        losses = state["losses"]
        checks = state.get("checks", [])  # checkpoints written before checks were kept have none
        batches.load_state(state["data"])
        log(f"resumed from {resume_from} at step {state['global_step']}")
    config_yaml = OmegaConf.to_yaml(OmegaConf.structured(config))
    tracker = (
        Tracking(
            trainer.logger,
            run_dir or Path.cwd(),
            trainer.project_name,
            trainer.experiment_name,
            "sft",
            OmegaConf.to_container(OmegaConf.structured(config)),
            resume_step=len(losses) if resume_from is not None else None,
        )
        if ranks.main and trainer.logger
        else None
    )
    saved_step = len(losses) if resume_from is not None else 0
    last_val: dict[str, float] = {}

    def save_checkpoint(step: int) -> None:
        nonlocal saved_step
        state = {"losses": losses, "checks": checks, "data": batches.state()}
        sft_checkpoint.save(
            run_dir, step, model, config.model, tokenizer, optimizer, schedule, state, config_yaml, ranks
        )
        saved_step = step

    def after_step(step: int, metrics: dict[str, float]) -> None:
        losses.append(metrics["train/loss"])
        if CHECK_METRIC in metrics:
            checks.append({"step": step, "accuracy": metrics[CHECK_METRIC]})
        is_last = step == train_cfg.steps
        if val_rows and (is_last or (trainer.test_freq and step % trainer.test_freq == 0)):
            last_val.update(validate())
            metrics.update(last_val)
        if tracker is not None:
            tracker.log(metrics, step)
        if run_dir and trainer.save_freq and (is_last or step % trainer.save_freq == 0):
            save_checkpoint(step)

    start = time.perf_counter()
    with closed_after(*([tracker.finish] if tracker else [])):
        trained = train(
            model, lambda: micro_batches(batches(), train_cfg.micro_batches), train_cfg, check_accuracy,
            optimizer=optimizer, schedule=schedule, after_step=after_step, ranks=ranks,
        )  # fmt: skip
        if run_dir and trainer.save_freq and saved_step != len(losses):  # stopped early
            save_checkpoint(len(losses))
    if trained:
        log(
            f"trained {len(trained)} steps in {time.perf_counter() - start:.0f}s, final loss {losses[-1]:.4f}"
        )

    summary = {}
    if eval_problems:
        start = time.perf_counter()
        greedy = evaluate(model, tokenizer, eval_problems, config.eval.max_new_tokens, do_sample=False)
        sampled = evaluate(model, tokenizer, eval_problems, config.eval.max_new_tokens, do_sample=True)
        summary = summarize(greedy, sampled)
        log(f"evaluation on {len(eval_problems)} held-out problems ({time.perf_counter() - start:.0f}s):")
        log(format_summary(summary))

    weights = parallel.full_weights(model)
    if ranks.main:
        with atomic_dir(config.output_dir, force=config.force) as tmp:
            sft_checkpoint.save_pretrained(
                tmp, tmp / lora.ADAPTER_DIR, model, config.model, weights, tokenizer
            )
            (tmp / "sft_config.yaml").write_text(config_yaml)
            metrics = {"losses": losses, "checks": checks, "eval": summary, "val": last_val}
            (tmp / "sft_metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
        log(f"saved the SFT model to {config.output_dir}")
    return summary


@hydra.main(config_path="config", config_name="sft_tiny", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        config = load_sft_config(cfg)
        run(config)
    except (ConfigError, DataError, ResumeError) as e:
        kinds = ((ConfigError, "config"), (DataError, "data"), (ResumeError, "resume"))
        kind = next(name for cls, name in kinds if isinstance(e, cls))
        print(f"{kind} error: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    exit_on_unknown_keys(SFTConfig)
    main()
