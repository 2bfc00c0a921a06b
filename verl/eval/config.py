"""Typed evaluation config (config/eval.yaml) and every rule, checked before any model loads.

`load_eval_config(cfg)` resolves the Hydra tree, type-checks it with the training schema's
`to_dataclass`, then checks paths and value rules, raising one `ConfigError` that names each bad key.
"""

from __future__ import annotations

import dataclasses
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.config import ConfigError, TaskConfig, to_dataclass
from verl.config.checks import task_source_problem
from verl.models.model_dir import hf_engine_problem, model_dir_problems
from verl.utils.config_resolvers import register_resolvers

if TYPE_CHECKING:
    from verl.core.delethink import DelethinkParams

MODES = ("longcot", "delethink", "probe")
ENGINES = ("hf", "sglang")
RUN_HF_SUBDIR = Path("actor") / "huggingface"  # where a training checkpoint keeps its HF model


@dataclass
class LongCoTEvalConfig:
    budgets: list[int] = field(default_factory=lambda: [128])  # thinking tokens; one evaluation each


@dataclass
class DelethinkEvalConfig:
    """The fields of core.delethink.DelethinkParams, with a list of I values to sweep."""

    chunk_size: int = 32  # C: the first chunk's budget and the most tokens any chunk's context holds
    keep_head: int = 4  # carry-over: the first keep_head thinking tokens
    keep_tail: int = 12  # carry-over: the last keep_tail thinking tokens
    intermediate_max_new_tokens: int | None = None  # later chunks' budget; None: C - m, as in training
    max_chunks: list[int] = field(default_factory=lambda: [7])  # I values; one evaluation each
    trimmer: str = "progressive"  # how the carry-over is cut (core.trimmers.TRIMMERS)

    def params_fields(self, max_chunks: int) -> dict[str, Any]:
        """The DelethinkParams fields of the evaluation at one I."""
        return {**dataclasses.asdict(self), "max_chunks": max_chunks}

    def sweep(self) -> list[DelethinkParams]:
        """One DelethinkParams per I in max_chunks, in order."""
        from verl.core.delethink import DelethinkParams

        return [DelethinkParams(**self.params_fields(i)) for i in self.max_chunks]


@dataclass
class EvalSamplingConfig:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    n: int = 1  # samples per problem
    seed: int = 0  # sample j of problem p gets a seed derived from (seed, p, j), the same in every run
    # timing runs: EOS does not stop a sample, so every budget is filled (scores are then meaningless)
    ignore_eos: bool = False


@dataclass
class RewardConfig:
    path: str | None = None  # a .py file defining the reward function; null: dispatch by data_source
    name: str = "compute_score"
    # the model closes its thinking with </think> and answers after it; false: a model without thinking
    # tags, whose whole response is its answer once it ends with EOS
    thinking_tags: bool = True


@dataclass
class EvalConfig:
    model_path: str  # an HF model directory, or a training checkpoint's global_step_N/ directory
    output_dir: str
    mode: str = "longcot"  # longcot | delethink | probe
    data_files: list[str] = field(default_factory=list)
    tasks: dict[str, TaskConfig] = field(default_factory=dict)
    prompt_key: str = "prompt"
    max_prompt_length: int = 96  # question tokens + (Delethink) the carry-over; longer prompts dropped
    max_problems: int = -1  # -1: all; else the first max_problems of each data file and task
    longcot: LongCoTEvalConfig = field(default_factory=LongCoTEvalConfig)
    delethink: DelethinkEvalConfig = field(default_factory=DelethinkEvalConfig)
    sampling: EvalSamplingConfig = field(default_factory=EvalSamplingConfig)
    pass_k: list[int] = field(default_factory=lambda: [1])
    reward: RewardConfig = field(default_factory=RewardConfig)
    # hf: transformers in this process | sglang: SGLang's engine (its own processes, CPU here); both float32
    engine: str = "hf"
    max_num_seqs: int = 256  # rows the engine decodes together
    num_threads: int = 0  # torch CPU threads; 0: every core

    @property
    def uses_delethink(self) -> bool:
        return self.mode in ("delethink", "probe")

    @property
    def max_question_tokens(self) -> int:
        """A Delethink chunk prompt is question + carry-over; both must fit in max_prompt_length."""
        carry = self.delethink.sweep()[0].carry if self.uses_delethink else 0
        return self.max_prompt_length - carry


def resolve_model_dir(path: str) -> Path | None:
    """The HF model directory at `path`: the path itself, or a checkpoint's actor/huggingface/ inside it."""
    for candidate in (Path(path), Path(path) / RUN_HF_SUBDIR):
        if (candidate / "config.json").is_file():
            return candidate
    return None


def load_eval_config(cfg: DictConfig) -> EvalConfig:
    register_resolvers()
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        tree = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        raise ConfigError(f"{e.full_key}: cannot resolve the value: {str(e.msg).splitlines()[0]}") from None
    if missing:
        raise ConfigError("; ".join(f"{key}: required, set {key}=..." for key in missing))
    tree.pop("hydra", None)
    config = to_dataclass(EvalConfig, tree)
    errors = rule_errors(config)
    if errors:
        raise ConfigError(
            errors[0]
            if len(errors) == 1
            else f"{len(errors)} problems:\n" + "\n".join(f"  - {e}" for e in errors)
        )
    return config


def rule_errors(c: EvalConfig) -> list[str]:
    from verl.core.delethink import delethink_param_problems

    errors: list[str] = []

    def check(ok: bool, key: str, value: object, rule: str) -> None:
        if not ok:
            errors.append(f"{key}={value!r}: {rule}")

    check(c.mode in MODES, "mode", c.mode, f"must be one of {list(MODES)}")
    model_dir = resolve_model_dir(c.model_path)
    no_model = f"no config.json in it or in its {RUN_HF_SUBDIR}/"
    check(model_dir is not None, "model_path", c.model_path, no_model)
    if model_dir is not None:
        problems = "; ".join(model_dir_problems(model_dir))
        incomplete = f"not a complete model directory ({model_dir}): {problems}"
        check(not problems, "model_path", c.model_path, incomplete)
        engine_problem = hf_engine_problem(model_dir) if c.engine == "hf" else None
        check(engine_problem is None, "model_path", c.model_path, str(engine_problem))
    check(c.engine in ENGINES, "engine", c.engine, f"must be one of {list(ENGINES)}")
    if c.engine == "sglang":
        install = "SGLang is not installed: pip install --no-deps -r requirements-sglang-cpu.txt"
        check(importlib.util.find_spec("sglang") is not None, "engine", c.engine, install)
    check(
        bool(c.data_files or c.tasks),
        "data_files",
        c.data_files,
        "empty, and no tasks either: nothing to evaluate",
    )
    for i, path in enumerate(c.data_files):
        check(Path(path).is_file(), f"data_files[{i}]", path, "no such file")
    for name, task in c.tasks.items():
        errors += task.problems(f"tasks.{name}")
        source_problem = task_source_problem(f"tasks.{name}", name, task)
        errors += [source_problem] if source_problem else []
    check(
        c.max_problems == -1 or c.max_problems >= 1,
        "max_problems",
        c.max_problems,
        "must be -1 (all) or >= 1",
    )
    check(c.max_num_seqs >= 1, "max_num_seqs", c.max_num_seqs, "must be >= 1")
    check(c.num_threads >= 0, "num_threads", c.num_threads, "must be >= 0 (0: every core)")

    s = c.sampling
    check(s.n >= 1, "sampling.n", s.n, "must be >= 1")
    check(s.temperature >= 0, "sampling.temperature", s.temperature, "must be >= 0 (0: greedy)")
    check(0 < s.top_p <= 1, "sampling.top_p", s.top_p, "must be in (0, 1]")
    check(s.top_k == -1 or s.top_k >= 1, "sampling.top_k", s.top_k, "must be >= 1, or -1 to disable it")
    check(bool(c.pass_k), "pass_k", c.pass_k, "must list at least one k")
    for i, k in enumerate(c.pass_k):
        check(1 <= k <= s.n, f"pass_k[{i}]", k, f"must be in [1, sampling.n={s.n}]")
    if c.reward.path is not None:
        check(Path(c.reward.path).is_file(), "reward.path", c.reward.path, "no such file")

    if c.mode == "longcot":
        check(bool(c.longcot.budgets), "longcot.budgets", c.longcot.budgets, "must list at least one budget")
        for i, b in enumerate(c.longcot.budgets):
            check(b >= 1, f"longcot.budgets[{i}]", b, "must be >= 1 thinking token")
    if c.uses_delethink:
        d = c.delethink
        check(bool(d.max_chunks), "delethink.max_chunks", d.max_chunks, "must list at least one I")
        # the rules of DelethinkParams at every I; a problem of another field appears once, not per I
        problems = [p for i in d.max_chunks for p in delethink_param_problems(**d.params_fields(i))]
        errors += [f"delethink.{p}" for p in dict.fromkeys(problems)]
        if d.max_chunks and not problems:
            carry = d.sweep()[0].carry
            room = "the question needs room next to the carry-over"
            rule = f"must be > delethink.keep_head + keep_tail = {carry}: {room}"
            check(c.max_prompt_length > carry, "max_prompt_length", c.max_prompt_length, rule)
    else:
        check(c.max_prompt_length >= 1, "max_prompt_length", c.max_prompt_length, "must be >= 1")
    return errors
