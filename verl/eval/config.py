"""Typed evaluation config (config/eval.yaml) and every rule, checked before any model loads.

`load_eval_config(cfg)` resolves the Hydra tree, type-checks it with the training schema's
`to_dataclass`, then checks paths and value rules, raising one `ConfigError` that names each bad key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.trainer.config_schema import ConfigError, TaskConfig, to_dataclass
from verl.utils.config_resolvers import register_resolvers

MODES = ("longcot", "delethink", "probe")
RUN_HF_SUBDIR = Path("actor") / "huggingface"  # where a training checkpoint keeps its HF model


@dataclass
class LongCoTEvalConfig:
    budgets: list[int] = field(default_factory=lambda: [128])  # thinking tokens; one evaluation each


@dataclass
class DelethinkEvalConfig:
    chunk_size: int = 32  # C: the first chunk's budget and the most tokens any chunk's context holds
    keep_head: int = 4
    keep_tail: int = 12
    max_chunks: list[int] = field(default_factory=lambda: [7])  # I values; one evaluation each
    trimmer_name: str = "progressive"

    @property
    def carry(self) -> int:
        return self.keep_head + self.keep_tail

    @property
    def intermediate_max_new_tokens(self) -> int:
        """New tokens a later chunk may add: C - m, as in training."""
        return self.chunk_size - self.carry

    def thinking_budget(self, max_chunks: int) -> int:
        from verl.agent_loop.trimmers import delethink_thinking_budget

        return delethink_thinking_budget(self.chunk_size, self.intermediate_max_new_tokens, max_chunks)


@dataclass
class EvalSamplingConfig:
    temperature: float = 1.0  # 0: greedy
    top_p: float = 1.0
    top_k: int = -1  # -1: off
    n: int = 1  # samples per problem
    seed: int = 0  # sample j of problem p gets a seed derived from (seed, p, j), the same in every run


@dataclass
class RewardConfig:
    path: str | None = None  # a .py file defining the reward function; null: dispatch by data_source
    name: str = "compute_score"


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
    max_num_seqs: int = 256  # rows the engine decodes together
    num_threads: int = 0  # torch CPU threads; 0: every core

    @property
    def uses_delethink(self) -> bool:
        return self.mode in ("delethink", "probe")

    @property
    def max_question_tokens(self) -> int:
        """A Delethink chunk prompt is question + carry-over; both must fit in max_prompt_length."""
        return self.max_prompt_length - (self.delethink.carry if self.uses_delethink else 0)


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
    from verl.agent_loop.trimmers import TRIMMERS

    errors: list[str] = []

    def check(ok: bool, key: str, value: object, rule: str) -> None:
        if not ok:
            errors.append(f"{key}={value!r}: {rule}")

    check(c.mode in MODES, "mode", c.mode, f"must be one of {list(MODES)}")
    no_model = f"no config.json in it or in its {RUN_HF_SUBDIR}/"
    check(resolve_model_dir(c.model_path) is not None, "model_path", c.model_path, no_model)
    check(
        bool(c.data_files or c.tasks),
        "data_files",
        c.data_files,
        "empty, and no tasks either: nothing to evaluate",
    )
    for i, path in enumerate(c.data_files):
        check(Path(path).is_file(), f"data_files[{i}]", path, "no such file")
    for name, task in c.tasks.items():
        check(Path(task.path).is_file(), f"tasks.{name}.path", task.path, "no such file")
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
        check(d.keep_head >= 0, "delethink.keep_head", d.keep_head, "must be >= 0")
        check(
            d.keep_tail >= 1,
            "delethink.keep_tail",
            d.keep_tail,
            "must be >= 1: the carry-over needs recent thinking",
        )
        room = "a later chunk needs room for new tokens"
        check(
            d.chunk_size > d.carry,
            "delethink.chunk_size",
            d.chunk_size,
            f"must be > keep_head + keep_tail = {d.carry}: {room}",
        )
        check(bool(d.max_chunks), "delethink.max_chunks", d.max_chunks, "must list at least one I")
        for i, n in enumerate(d.max_chunks):
            check(n >= 1, f"delethink.max_chunks[{i}]", n, "must be >= 1 chunk")
        check(
            d.trimmer_name in TRIMMERS,
            "delethink.trimmer_name",
            d.trimmer_name,
            f"must be one of {sorted(TRIMMERS)}",
        )
        room = "the question needs room next to the carry-over"
        rule = f"must be > delethink.keep_head + keep_tail = {d.carry}: {room}"
        check(c.max_prompt_length > d.carry, "max_prompt_length", c.max_prompt_length, rule)
    else:
        check(c.max_prompt_length >= 1, "max_prompt_length", c.max_prompt_length, "must be >= 1")
    return errors
