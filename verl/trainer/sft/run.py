"""One SFT run, in the order it needs its parts: the model and its optimizer, the batches, the held-out
problems, a resumed checkpoint's state, then the logger (`SFTRun`); the training loop (loop.py) calls its
`check_accuracy` and `after_step`, and `finish` evaluates and writes the model. verl/trainer/main_sft.py
checks the config, then calls `run`: torch and transformers load only for a good config."""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch
from omegaconf import OmegaConf
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from verl.config import ConfigError
from verl.config.sft import SFTConfig
from verl.core.delethink import DelethinkParams
from verl.data.rl_dataset import DataError
from verl.models import lora
from verl.trainer.sft import checkpoint as sft_checkpoint
from verl.trainer.sft import parallel
from verl.trainer.sft.batches import Batch, Pair, local_micro_batches, mean_loss
from verl.trainer.sft.files import Example, FileBatches, load_examples
from verl.trainer.sft.loop import CHECK_METRIC, CHECK_MODES, make_optimizer, train
from verl.trainer.sft.parallel import Ranks, init_ranks
from verl.trainer.sft.task import TaskBatches, evaluate, format_summary, held_out_problems, summarize
from verl.utils.checkpoint import ResumeError, find_resume
from verl.utils.cleanup import closed_after
from verl.utils.fs import atomic_dir
from verl.utils.tracking import Tracking


def choose_resume(config: SFTConfig, ranks: Ranks) -> tuple[Path | None, list[str]]:
    """The checkpoint in trainer.default_local_dir to resume from (checkpoint.find_resume) and notes about
    the choice; a ResumeError when its saved config differs in a key that defines the run. The main rank
    alone decides, since it may move an old run aside; its choice, or its ResumeError, reaches all."""
    trainer = config.trainer
    choice: tuple[Path | None, list[str]] | ResumeError = (None, [])
    if trainer.run_dir is not None and ranks.main:
        try:
            path, notes = find_resume(trainer.run_dir, trainer.resume_mode, None, trainer.overwrite)
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


class SFTRun:
    """One run's model, data and record, built in the order the run needs them: the model and its
    optimizer, the batches, the held-out problems, a resumed checkpoint's state, then the logger. `train`
    calls `check_accuracy` and `after_step`; `finish` evaluates and saves the model."""

    def __init__(
        self,
        config: SFTConfig,
        ranks: Ranks,
        tokenizer: PreTrainedTokenizerBase,
        train_rows: list[Example],
        val_rows: list[Example],
        resume_from: Path | None,
    ) -> None:
        self.config, self.ranks, self.tokenizer, self.val_rows = config, ranks, tokenizer, val_rows
        self.log = tqdm.write if ranks.main else lambda _: None
        trainer, train_cfg = config.trainer, config.train
        self.run_dir = trainer.run_dir
        model = AutoModelForCausalLM.from_pretrained(config.model.path, dtype=torch.float32)
        if config.model.lora_rank:
            model = lora.add_adapters(model, config.model, lora.CAUSAL_LM, seed=train_cfg.seed)
        self.model = parallel.prepare_model(model, ranks, config.fsdp)
        self.optimizer, self.schedule = make_optimizer(self.model, train_cfg)
        self.batches: TaskBatches | FileBatches = (
            FileBatches(train_rows, train_cfg.batch_size, train_cfg.seed, config.data)
            if config.from_files
            else TaskBatches(train_cfg.seed, tokenizer, config.task, train_cfg.batch_size)
        )
        # the task's held-out problems: for early stopping (check) and the final evaluation
        self.check_problems, self.eval_problems = (
            ([], [])
            if config.from_files
            else (
                held_out_problems(f"sft-check-{train_cfg.seed}", config.eval, config.task),
                held_out_problems(f"sft-eval-{train_cfg.seed}", config.eval, config.task),
            )
        )
        self.losses: list[float] = []  # every step's, from the first (a resumed run's included)
        self.checks: list[dict[str, float]] = []  # {"step", "accuracy"} of every early-stopping check
        if resume_from is not None:
            state = sft_checkpoint.load(resume_from, self.model, config.model, self.optimizer, self.schedule)
            self.losses = state["losses"]
            self.checks = state.get("checks", [])  # checkpoints written before checks were kept have none
            self.batches.load_state(state["data"])
            self.log(f"resumed from {resume_from} at step {state['global_step']}")
        self.saved_step = len(self.losses)  # the step of the newest checkpoint (0: none yet)
        self.last_val: dict[str, float] = {}
        self.config_yaml = OmegaConf.to_yaml(OmegaConf.structured(config))
        self.tracker = (
            Tracking(
                trainer.logger, self.run_dir or Path.cwd(), trainer.project_name, trainer.experiment_name,
                "sft", OmegaConf.to_container(OmegaConf.structured(config)),
                resume_step=len(self.losses) if resume_from is not None else None,
            )
            if ranks.main and trainer.logger
            else None
        )  # fmt: skip

    def micro_batches(self, pairs: list[Pair], count: int) -> list[Batch | None]:
        """This rank's share of `pairs` in `count` micro-batches (or by train.max_tokens_per_micro_batch)."""
        train_cfg = self.config.train
        return local_micro_batches(
            pairs, self.ranks, self.tokenizer.pad_token_id, count, train_cfg.max_tokens_per_micro_batch,
            train_cfg.use_remove_padding,
        )  # fmt: skip

    def next_batch(self) -> list[Batch | None]:
        return self.micro_batches(self.batches(), self.config.train.micro_batches)

    def check_accuracy(self) -> dict[str, float]:
        """The temperature-1 accuracy on the held-out check problems with LongCoT inference and, with
        eval.delethink_chunks, with Delethink inference; CHECK_METRIC, the lower, is what
        train.stop_at_accuracy asks of: a warm start that resumes badly after a cut would hand RL's
        Delethink-LongCoT comparison its deficit. Delethink inference, the costlier check (up to I
        chunks a problem), runs only once LongCoT's reaches the target: below it, the lower of the two
        is below it too, so until then CHECK_METRIC is LongCoT's."""
        cfg = self.config
        modes: dict[str, DelethinkParams | None] = {"longcot": None}
        if cfg.eval.delethink_chunks:
            fields = cfg.task.continuation.params_fields()
            modes["delethink"] = DelethinkParams(**fields, max_chunks=cfg.eval.delethink_chunks)
        checked = {}
        for mode, delethink in modes.items():
            outcomes = evaluate(
                self.model, self.tokenizer, self.check_problems, cfg.eval.max_new_tokens, True, delethink
            )
            checked[CHECK_MODES[mode]] = sum(o.correct for o in outcomes) / len(outcomes)
            if checked[CHECK_MODES[mode]] < cfg.train.stop_at_accuracy:
                break
        checked[CHECK_METRIC] = min(checked.values())
        return checked

    def validate(self) -> dict[str, float]:
        self.model.eval()
        pairs = [(e.prompt, e.target) for e in self.val_rows]
        count = math.ceil(len(pairs) / self.config.train.batch_size)
        loss, tokens = mean_loss(self.model, self.micro_batches(pairs, count), self.ranks)
        return {"val/loss": loss, "val/tokens": tokens}

    def after_step(self, step: int, metrics: dict[str, float]) -> None:
        """Record the step; validation, logging and a checkpoint when their turn comes."""
        trainer = self.config.trainer
        self.losses.append(metrics["train/loss"])
        if CHECK_METRIC in metrics:
            by_mode = {mode: metrics[key] for mode, key in CHECK_MODES.items() if key in metrics}
            self.checks.append({"step": step, "accuracy": metrics[CHECK_METRIC], **by_mode})
        is_last = step == self.config.train.steps
        if self.val_rows and (is_last or (trainer.test_freq and step % trainer.test_freq == 0)):
            self.last_val.update(self.validate())
            metrics.update(self.last_val)
        if self.tracker is not None:
            self.tracker.log(metrics, step)
        if self.run_dir and trainer.save_freq and (is_last or step % trainer.save_freq == 0):
            self.save_checkpoint(step)

    def save_checkpoint(self, step: int) -> None:
        state = {"losses": self.losses, "checks": self.checks, "data": self.batches.state()}
        sft_checkpoint.save(
            self.run_dir, step, self.model, self.config.model, self.tokenizer, self.optimizer, self.schedule,
            state, self.config_yaml, self.ranks,
        )  # fmt: skip
        self.saved_step = step

    def train(self) -> list[float]:
        """Train to train.steps or the early stop, with a checkpoint of the last step taken; its losses."""
        with closed_after(*([self.tracker.finish] if self.tracker else [])):
            trained = train(
                self.model, self.next_batch, self.config.train, self.check_accuracy, optimizer=self.optimizer,
                schedule=self.schedule, after_step=self.after_step, ranks=self.ranks,
            )  # fmt: skip
            stopped_early = self.saved_step != len(self.losses)
            if self.run_dir and self.config.trainer.save_freq and stopped_early:
                self.save_checkpoint(len(self.losses))
        return trained

    def finish(self) -> dict[str, dict[str, float]]:
        """The held-out evaluation (the task's), then the model, tokenizer, config and metrics written to
        output_dir at once (atomic_dir); the evaluation's summary."""
        config = self.config
        summary = {}
        if self.eval_problems:
            start = time.perf_counter()
            max_new = config.eval.max_new_tokens
            greedy = evaluate(self.model, self.tokenizer, self.eval_problems, max_new, do_sample=False)
            sampled = evaluate(self.model, self.tokenizer, self.eval_problems, max_new, do_sample=True)
            summary = summarize(greedy, sampled)
            seconds = time.perf_counter() - start
            self.log(f"evaluation on {len(self.eval_problems)} held-out problems ({seconds:.0f}s):")
            self.log(format_summary(summary))
        weights = parallel.full_weights(self.model)
        if self.ranks.main:
            with atomic_dir(config.output_dir, force=config.force) as tmp:
                sft_checkpoint.save_pretrained(
                    tmp, tmp / lora.ADAPTER_DIR, self.model, config.model, weights, self.tokenizer
                )
                (tmp / "sft_config.yaml").write_text(self.config_yaml)
                metrics = {
                    "losses": self.losses,
                    "checks": self.checks,
                    "eval": summary,
                    "val": self.last_val,
                }
                (tmp / "sft_metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
            self.log(f"saved the SFT model to {config.output_dir}")
        return summary


def run(config: SFTConfig) -> dict[str, dict[str, float]]:
    """Train, evaluate, save; one process, or one rank of a torchrun group."""
    ranks = init_ranks(config.trainer.device)
    try:
        result = _run(config, ranks)
    except BaseException:
        parallel.finish(ranks)
        raise
    parallel.finish(ranks, all_done=True)
    return result


def _run(config: SFTConfig, ranks: Ranks) -> dict[str, dict[str, float]]:
    if config.num_threads:  # 0: torch's default, which OMP_NUM_THREADS sets (a share of a shared machine)
        torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.train.seed)
    hf_logging.disable_progress_bar()  # one tqdm bar (training) is enough
    log = tqdm.write if ranks.main else lambda _: None
    tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    # file rows are read and checked before anything else, so a bad row fails fast
    train_rows = load_examples(config.data.train_files, tokenizer, config.data) if config.from_files else []
    val_rows = load_examples(config.data.val_files, tokenizer, config.data) if config.from_files else []
    if ranks.world_size > config.train.batch_size:
        raise ConfigError(
            f"train.batch_size={config.train.batch_size}: must be >= the {ranks.world_size} ranks"
        )
    if 0 < len(val_rows) < ranks.world_size:
        raise DataError(f"data.val_files: {len(val_rows)} rows, fewer than the {ranks.world_size} ranks")
    resume_from, notes = choose_resume(config, ranks)
    for note in notes:
        log(note)
    sft = SFTRun(config, ranks, tokenizer, train_rows, val_rows, resume_from)
    start = time.perf_counter()
    trained = sft.train()
    if trained:
        seconds = time.perf_counter() - start
        log(f"trained {len(trained)} steps in {seconds:.0f}s, final loss {sft.losses[-1]:.4f}")
    return sft.finish()
