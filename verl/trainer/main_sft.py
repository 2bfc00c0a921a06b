"""SFT warm start: `python -m verl.trainer.main_sft [key=value ...]` (config: config/sft_tiny.yaml).

Teaches the tiny model the reference LongCoT traces of a synthetic task (task.name: `running_sum`,
verl/data/synthetic.py, or `shift_register`, verl/data/shift_register.py): prompt = chat template +
generation prompt, target = `THINKING</think>\\boxed{A}<|end|>`, loss on the target tokens only. Opt-in
(task.continuation.prob > 0): some examples are the chunk the Delethink loop generates after a cut
(prompt = question + carry-over), so the model learns to continue a chunk. Problems are drawn on the fly
from `train.seed`, in a stream separate from the RL data files. Training stops early once the model is
*partly* good
(train.stop_at_accuracy), so that RL has something left to learn. At the end a held-out evaluation prints
accuracy by problem size (greedy and temperature 1), then the model and tokenizer are saved with
`save_pretrained`, atomically, to `output_dir`, with the resolved config (sft_config.yaml) and the losses
and evaluation (sft_metrics.json).
"""

from __future__ import annotations

import json
import math
import random
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import hydra
import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException
from tqdm import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase
from transformers.utils import logging as hf_logging

from verl.agent_loop.delethink_params import DelethinkParams, delethink_param_problems
from verl.data import shift_register
from verl.data.synthetic import (
    LABELS,
    Problem,
    check_labels,
    compute_score,
    make_problem,
    problem_sizes,
    solve,
)
from verl.models.model_dir import model_dir_problems
from verl.trainer.cli_keys import exit_on_unknown_keys
from verl.trainer.config_schema import ConfigError
from verl.utils.fs import atomic_dir

IGNORE_INDEX = -100  # label of a token that carries no loss (prompt and padding)


@dataclass
class ModelConfig:
    path: str


@dataclass
class ContinuationConfig:
    """Delethink-style examples (off at prob 0): the reference trace resumed from a chunk boundary.

    A model trained only on whole traces has never seen thinking that starts from a carry-over, so it
    cannot continue a Delethink chunk; these examples show it. The prompt is exactly what
    DelethinkAgentLoop sends for the chunk after a cut: the question's chat prompt + the carry-over of
    the reference thinking so far. Cuts fall where the loop cuts: after chunk_size, then every
    chunk_size - keep_head - keep_tail (the tiny_delethink config's C and C - m). The Delethink fields
    have training's names (algorithm.delethink) and build the same DelethinkParams.
    """

    prob: float = (
        0.0  # share of training examples that are a continuation chunk (if the problem is cut at all)
    )
    # continuation problems are drawn from sizes [task.min_size, max_size]; null: task.max_size. Larger
    # shows the model chunks from deep inside problems longer than any of its whole traces, at the
    # positions a Delethink chunk has, while its whole traces stay within the training budget
    max_size: int | None = None
    chunk_size: int = 32  # C
    keep_head: int = 4  # carry-over: the first keep_head thinking tokens
    keep_tail: int = 12  # carry-over: the last keep_tail thinking tokens

    def params_fields(self) -> dict[str, int]:
        """The DelethinkParams fields set here (I does not matter: examples resume from every boundary)."""
        return {"chunk_size": self.chunk_size, "keep_head": self.keep_head, "keep_tail": self.keep_tail}

    @cached_property
    def params(self) -> DelethinkParams:
        """The Delethink parameters whose loop these examples imitate (load_sft_config has checked them)."""
        return DelethinkParams(**self.params_fields())


TaskProblem = (
    Problem | shift_register.Problem
)  # what every task's generator returns: question, response, size
TASK_MAX_SIZE = {"running_sum": len(LABELS), "shift_register": shift_register.MAX_STEPS}


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


@dataclass
class TaskConfig:
    """The training problems. For the running sum they differ from the RL data on purpose, to get past
    two plateaus fast:

    - short problems (from 1 term) teach the label lookup that copies a term's digit into the thinking;
    - extra zero digits: with uniform digits the next running sum is independent of the previous sum alone
      (and of the digit alone), so nothing rewards reading either until both are read together; a step that
      adds 0 copies the previous sum, which starts the model reading it.
    """

    name: str = "running_sum"  # running_sum (size: terms) | shift_register (size: steps)
    min_size: int = 1  # whole-trace problem sizes are drawn uniformly from [min_size, max_size]
    max_size: int = 12
    zero_prob: float = 0.0  # running_sum: each digit is 0 with this probability, else uniform over 0..9
    labels: str = LABELS  # running_sum: term i is labelled labels[i % len(labels)], also when held out
    continuation: ContinuationConfig = field(default_factory=ContinuationConfig)
    long_start: LongStartConfig = field(default_factory=LongStartConfig)

    @property
    def continuation_max_size(self) -> int:
        return self.max_size if self.continuation.max_size is None else self.continuation.max_size


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


@dataclass
class EvalConfig:
    num_problems: int  # held-out problems (running sum: uniform digits), spread evenly over the sizes
    min_size: int  # the sizes of the RL data
    max_size: int
    max_new_tokens: int


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


def _model_problem(model_dir: Path) -> str | None:
    """Why the model to train cannot be loaded, or None (a local directory: SFT starts from an init)."""
    if not (model_dir / "config.json").is_file():
        make = f"python -m verl.models.tiny --out {model_dir}"
        return f"no model there (no config.json); create it with `{make}`"
    problems = model_dir_problems(model_dir)
    return f"not a complete model directory: {'; '.join(problems)}" if problems else None


def load_sft_config(cfg: DictConfig) -> SFTConfig:
    """Type-check `cfg` against SFTConfig and check the rules; a ConfigError names the key and value."""
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
    errors = [message for ok, message in rules if not ok]
    errors += [f"task.continuation.{p}" for p in delethink_param_problems(**cont.params_fields())]
    if errors:
        raise ConfigError("\n".join(errors))
    return config


def encode_example(tokenizer: PreTrainedTokenizerBase, problem: TaskProblem) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids): the chat prompt ending in `<think>`, and the reference response + eos."""
    messages = [{"role": "user", "content": problem.question}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    target = tokenizer.encode(problem.response, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt, target


def collate(examples: list[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask and labels (IGNORE_INDEX on prompt and padding)."""
    width = max(len(p) + len(t) for p, t in examples)
    input_ids = torch.full((len(examples), width), pad_id)
    attention_mask = torch.zeros((len(examples), width), dtype=torch.long)
    labels = torch.full((len(examples), width), IGNORE_INDEX)
    for row, (prompt, target) in enumerate(examples):
        ids = prompt + target
        input_ids[row, : len(ids)] = torch.tensor(ids)
        attention_mask[row, : len(ids)] = 1
        labels[row, len(prompt) : len(ids)] = torch.tensor(target)
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def delethink_cuts(target_len: int, params: DelethinkParams) -> list[int]:
    """The token counts after which the Delethink loop cuts a `target_len`-token response: C, C + (C - m),
    ... A chunk that ends in the response's last token (eos) stops the loop, so no cut is at target_len.
    (Cuts past I chunks are kept: the examples teach continuing from any boundary.)"""
    return list(range(params.chunk_size, target_len, params.intermediate_budget))


def continuation_example(
    prompt: list[int], target: list[int], cut: int, params: DelethinkParams
) -> tuple[list[int], list[int]]:
    """(question prompt + carry-over of target[:cut], the tokens the loop generates next): the chunk after
    a cut, which ends at the next cut or at the response's end. Only that chunk is a target, so no
    example puts a token further from its prompt than a Delethink chunk does."""
    return prompt + params.carry_over(target[:cut]), target[cut : cut + params.intermediate_budget]


def draw_training_problem(
    rng: random.Random, task: TaskConfig, max_size: int | None = None, min_size: int | None = None
) -> TaskProblem:
    """A problem of a size drawn uniformly from [min_size or task.min_size, max_size or task.max_size]."""
    size = rng.randint(
        task.min_size if min_size is None else min_size, task.max_size if max_size is None else max_size
    )
    if task.name == "shift_register":
        return shift_register.make_problem(rng, size)
    digits = [0 if rng.random() < task.zero_prob else rng.randrange(10) for _ in range(size)]
    return solve(digits, task.labels)


def draw_training_example(
    rng: random.Random, tokenizer: PreTrainedTokenizerBase, task: TaskConfig
) -> tuple[list[int], list[int]]:
    """A whole reference trace; or with probability task.continuation.prob the chunk after a cut drawn
    uniformly among the cuts of a problem up to task.continuation_max_size (a trace too short to be cut
    stays whole); or with probability task.long_start.prob the start of a problem past task.max_size.
    The first chunk of a long problem is not drawn: with it, one testbed warm start learned far slower
    (recipes/markovian_testbed/README.md); a long start is much shorter."""
    cont, start = task.continuation, task.long_start
    # both options at prob 0 draw nothing more from rng: the default stream is the one without them
    if cont.prob == 0 and start.prob == 0:
        return encode_example(tokenizer, draw_training_problem(rng, task))
    draw = rng.random()
    if draw < cont.prob:
        prompt, target = encode_example(
            tokenizer, draw_training_problem(rng, task, task.continuation_max_size)
        )
        cuts = delethink_cuts(len(target), cont.params)
        if cuts:
            return continuation_example(prompt, target, rng.choice(cuts), cont.params)
        return prompt, target
    if draw < cont.prob + start.prob:
        problem = draw_training_problem(rng, task, task.continuation_max_size, task.max_size + 1)
        prompt, target = encode_example(tokenizer, problem)
        return prompt, target[: start.tokens]
    return encode_example(tokenizer, draw_training_problem(rng, task))


def length_sorted_micro_batches(
    examples: list[tuple[list[int], list[int]]], num_micro_batches: int, pad_id: int
) -> list[dict[str, torch.Tensor]]:
    """The examples sorted by length and cut into up to `num_micro_batches` collated pieces of near-equal
    row counts, so that each piece pads only to its own longest example."""
    ordered = sorted(examples, key=lambda e: len(e[0]) + len(e[1]))
    bounds = np.linspace(0, len(ordered), min(num_micro_batches, len(ordered)) + 1).round().astype(int)
    return [collate(ordered[a:b], pad_id) for a, b in zip(bounds, bounds[1:], strict=False)]


def sample_batch(
    rng: random.Random, tokenizer: PreTrainedTokenizerBase, train: TrainConfig, task: TaskConfig
) -> list[dict[str, torch.Tensor]]:
    examples = [draw_training_example(rng, tokenizer, task) for _ in range(train.batch_size)]
    return length_sorted_micro_batches(examples, train.micro_batches, tokenizer.pad_token_id)


def sft_loss(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean next-token cross-entropy over the target tokens of the batch."""
    return model(**batch).loss


def num_targets(batch: dict[str, torch.Tensor]) -> int:
    """Tokens the loss is taken over (the causal LM predicts labels[1:] from the tokens before them)."""
    return int((batch["labels"][:, 1:] != IGNORE_INDEX).sum())


def backward_mean_loss(model: PreTrainedModel, micro_batches: list[dict[str, torch.Tensor]]) -> float:
    """Backpropagate the mean loss over every target token of all micro-batches, one forward each; return
    that mean. Each piece's mean is weighted by its share of the target tokens, so the gradient is the one
    of a single forward over the whole batch."""
    total = sum(num_targets(b) for b in micro_batches)
    mean = 0.0
    for batch in micro_batches:
        loss = sft_loss(model, batch) * (num_targets(batch) / total)
        loss.backward()
        mean += loss.item()
    return mean


def lr_factor(step: int, warmup_steps: int, total_steps: int, min_ratio: float) -> float:
    """Linear warm-up to 1, then cosine decay to `min_ratio` at the last step."""
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = (step - warmup_steps) / max(1, total_steps - 1 - warmup_steps)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def train(
    model: PreTrainedModel,
    next_batch: Callable[[], list[dict[str, torch.Tensor]]],
    cfg: TrainConfig,
    accuracy: Callable[[], float] | None = None,
) -> list[float]:
    """AdamW on batches (lists of micro-batches) from `next_batch` for `cfg.steps` steps, or until
    `accuracy()` (called every `cfg.check_every` steps) reaches `cfg.stop_at_accuracy`. Returns the loss
    of every step taken."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, cfg.warmup_steps, cfg.steps, cfg.min_lr_ratio)
    )
    model.train()
    losses = []
    progress = tqdm(range(1, cfg.steps + 1), desc="sft", unit="step")
    for step in progress:
        optimizer.zero_grad(set_to_none=True)
        losses.append(backward_mean_loss(model, next_batch()))
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        optimizer.step()
        schedule.step()
        progress.set_postfix(loss=f"{losses[-1]:.4f}", lr=f"{schedule.get_last_lr()[0]:.2e}")
        if accuracy is not None and cfg.stop_at_accuracy is not None and step % cfg.check_every == 0:
            model.eval()
            value = accuracy()
            model.train()
            progress.write(f"step {step}: held-out accuracy (T=1) {value:.3f}")
            if value >= cfg.stop_at_accuracy:
                progress.write(f"reached train.stop_at_accuracy={cfg.stop_at_accuracy}: stopping")
                break
    progress.close()
    model.eval()
    return losses


@dataclass
class Outcome:
    size: int
    correct: bool
    thinking_tokens: int  # tokens before `</think>` (all of them if the thinking never closed)
    response_tokens: int  # every generated token up to and including eos


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[TaskProblem],
    max_new_tokens: int,
    do_sample: bool,
) -> list[Outcome]:
    """Generate a response per problem (greedy, or sampled at temperature 1) and score it."""
    think_end_id = tokenizer.convert_tokens_to_ids("</think>")
    # top_k=0 and top_p=1 switch off truncation: plain temperature-1 sampling, as RL rollouts use
    sampling = (
        dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if do_sample else {"do_sample": False}
    )
    outcomes = []
    # problems of one size have prompts of one length, so each size is a batch that needs no padding
    for size in sorted({p.size for p in problems}):
        group = [p for p in problems if p.size == size]
        prompts = torch.tensor([encode_example(tokenizer, p)[0] for p in group])
        generated = model.generate(
            input_ids=prompts,
            attention_mask=torch.ones_like(prompts),
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
            **sampling,
        )[:, prompts.shape[1] :].tolist()
        for problem, ids in zip(group, generated, strict=True):
            if tokenizer.eos_token_id in ids:
                ids = ids[: ids.index(tokenizer.eos_token_id) + 1]
            thinking = ids.index(think_end_id) if think_end_id in ids else len(ids)
            text = tokenizer.decode(ids, skip_special_tokens=True)
            outcomes.append(Outcome(size, compute_score(text, problem.answer) == 1.0, thinking, len(ids)))
    return outcomes


def summarize(greedy: list[Outcome], sampled: list[Outcome]) -> dict[str, dict[str, float]]:
    """Accuracy and thinking length by problem size ("all" for every size together)."""
    sizes = sorted({o.size for o in greedy})
    summary = {}
    for key, keep in [(str(n), lambda o, n=n: o.size == n) for n in sizes] + [("all", lambda o: True)]:
        g, s = [o for o in greedy if keep(o)], [o for o in sampled if keep(o)]
        summary[key] = {
            "problems": len(g),
            "greedy_accuracy": sum(o.correct for o in g) / len(g),
            "sampled_accuracy": sum(o.correct for o in s) / len(s),
            "greedy_thinking_tokens_mean": sum(o.thinking_tokens for o in g) / len(g),
            "sampled_thinking_tokens_max": max(o.thinking_tokens for o in s),
            "sampled_response_tokens_max": max(o.response_tokens for o in s),
        }
    return summary


def format_summary(summary: dict[str, dict[str, float]]) -> str:
    lines = [" size  problems  greedy_acc  sampled_acc(T=1)  thinking_tokens(greedy_mean,sampled_max)"]
    for key, row in summary.items():
        lines.append(
            f"{key:>5}  {row['problems']:>8}  {row['greedy_accuracy']:>10.2f}"
            f"  {row['sampled_accuracy']:>16.2f}"
            f"  {row['greedy_thinking_tokens_mean']:>8.1f} {row['sampled_thinking_tokens_max']:>5}"
        )
    return "\n".join(lines)


def held_out_problems(seed: str, cfg: EvalConfig, task: TaskConfig) -> list[TaskProblem]:
    """`cfg.num_problems` problems like the RL data (running sum: uniform digits), sizes spread evenly."""
    rng = random.Random(seed)
    sizes = problem_sizes(cfg.num_problems, cfg.min_size, cfg.max_size)
    if task.name == "shift_register":
        return [shift_register.make_problem(rng, n) for n in sizes]
    return [make_problem(rng, n, task.labels) for n in sizes]


def run(config: SFTConfig) -> dict[str, dict[str, float]]:
    torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.train.seed)
    hf_logging.disable_progress_bar()  # one tqdm bar (training) is enough
    tokenizer = AutoTokenizer.from_pretrained(config.model.path)
    model = AutoModelForCausalLM.from_pretrained(config.model.path, dtype=torch.float32)

    # string seeds keep these streams apart from each other and from the RL data (integer seeds)
    train_rng = random.Random(f"sft-train-{config.train.seed}")
    check_problems = held_out_problems(f"sft-check-{config.train.seed}", config.eval, config.task)
    eval_problems = held_out_problems(f"sft-eval-{config.train.seed}", config.eval, config.task)

    def check_accuracy() -> float:
        outcomes = evaluate(model, tokenizer, check_problems, config.eval.max_new_tokens, do_sample=True)
        return sum(o.correct for o in outcomes) / len(outcomes)

    start = time.perf_counter()
    losses = train(
        model,
        lambda: sample_batch(train_rng, tokenizer, config.train, config.task),
        config.train,
        check_accuracy,
    )
    print(f"trained {len(losses)} steps in {time.perf_counter() - start:.0f}s, final loss {losses[-1]:.4f}")

    summary = {}
    if eval_problems:
        start = time.perf_counter()
        greedy = evaluate(model, tokenizer, eval_problems, config.eval.max_new_tokens, do_sample=False)
        sampled = evaluate(model, tokenizer, eval_problems, config.eval.max_new_tokens, do_sample=True)
        summary = summarize(greedy, sampled)
        print(f"evaluation on {len(eval_problems)} held-out problems ({time.perf_counter() - start:.0f}s):")
        print(format_summary(summary))

    with atomic_dir(config.output_dir, force=config.force) as tmp:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "sft_config.yaml").write_text(OmegaConf.to_yaml(OmegaConf.structured(config)))
        metrics = {"losses": losses, "eval": summary}
        (tmp / "sft_metrics.json").write_text(json.dumps(metrics, indent=1) + "\n")
    print(f"saved the SFT model to {config.output_dir}")
    return summary


@hydra.main(config_path="config", config_name="sft_tiny", version_base="1.3")
def main(cfg: DictConfig) -> None:
    try:
        config = load_sft_config(cfg)
    except ConfigError as e:
        print(f"config error: {e}", file=sys.stderr)
        sys.exit(2)
    run(config)


if __name__ == "__main__":
    exit_on_unknown_keys(SFTConfig)
    main()
