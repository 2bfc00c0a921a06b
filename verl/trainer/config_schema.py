"""Typed view of the Hydra config: one dataclass per section.

Every key the code reads is a field here. `load_config(cfg)` turns the composed OmegaConf tree into
`PolicyIterationConfig` and checks types and rules, raising `ConfigError` with a message that names
the key, its value and the rule, before Ray or any model starts. It reports every problem it finds at
once, so a run with three typos needs one retry, not three. What is valid but probably not meant (a
key that mixes the two thinking environments) `config_warnings` lists, for the entry point to print.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import math
import types
import typing
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from verl.utils.config_resolvers import register_resolvers

if TYPE_CHECKING:
    from verl.agent_loop.delethink_params import DelethinkParams

CONFIG_DIR = Path(__file__).resolve().parent / "config"
ENVIRONMENT_DIR = CONFIG_DIR / "environment"  # the thinking environments, one switch each: environment=NAME
# The keys an environment file sets together. Overriding one runs (a deliberate mix) but is warned about.
ENVIRONMENT_KEYS = (
    "actor_rollout_ref.rollout.agent.default_agent_loop",
    "trainer.name",
    "reward_model.reward_manager",
    "actor_rollout_ref.actor.loss_agg_mode",
)
TINY_DIR = Path("outputs/tiny")  # where examples/prepare_tiny.sh writes the tiny model and data
MAKE_TINY = "`bash examples/prepare_tiny.sh` (or `make tiny`)"

ROLLOUT_NAMES = ("hf", "sglang")
ROLLOUT_MODES = ("async",)
ACTOR_STRATEGIES = ("fsdp2",)
TRAINER_NAMES = ("ppo", "delethink")
LOGGERS = ("console", "jsonl", "wandb")
RESUME_MODES = ("auto", "disable", "path")
DEVICES = ("cpu", "cuda")
DTYPES = ("float32", "bfloat16", "float16")
GYM_TRAIN_ON = ("last", "all")
TASK_BAD_ROWS = ("filter", "error")


class ConfigError(ValueError):
    """A config value breaks a rule. The message names the key, the value and the rule."""


@dataclass
class DataConfig:
    train_files: list[str] = field(default_factory=list)  # prompt rows; or use train_tasks
    val_files: list[str] = field(default_factory=list)  # prompt rows; or use val_tasks
    prompt_key: str = "prompt"
    max_prompt_length: int = 512  # tokens; Delethink: question + carry-over must fit
    max_response_length: int = 256  # tokens; LongCoT: the budget B; Delethink: algorithm.delethink.chunk_size
    train_batch_size: int = 8  # prompts per step (each repeated rollout.n times)
    val_batch_size: int = -1  # -1: the whole set in one batch; env_manager: only the first N prompts
    shuffle: bool = True
    seed: int = 1
    filter_overlong_prompts: bool = True  # False: an overlong prompt is an error naming its row


@dataclass
class ModelConfig:
    path: str  # a local HF model directory or a hub id (org/name)
    enable_gradient_checkpointing: bool = False
    use_remove_padding: bool = False  # pack rows into one sequence (varlen attention) instead of padding


@dataclass
class FSDPConfig:
    param_offload: bool = False  # keep sharded parameters on CPU between uses (GPU only)
    optimizer_offload: bool = False  # keep optimizer state on CPU between steps (GPU only)
    param_dtype: str = "float32"  # compute dtype of the mixed-precision policy
    reduce_dtype: str = "float32"  # dtype of gradient reduction


@dataclass
class OptimConfig:
    lr: float = 1e-6
    weight_decay: float = 0.01
    betas: tuple[float, float] = (0.9, 0.999)
    lr_warmup_steps: int = 0


@dataclass
class ActorConfig:
    strategy: str = "fsdp2"
    ppo_mini_batch_size: int = 8  # in prompts; rows = ppo_mini_batch_size * rollout.n
    ppo_micro_batch_size_per_gpu: int = 8  # rows per forward/backward
    ppo_epochs: int = 1
    fixed_num_optim_steps: int | None = None  # set: split each batch into exactly this many mini-batches
    clip_ratio_low: float = 0.2
    clip_ratio_high: float = 0.2
    clip_ratio_c: float = 3.0  # dual-clip bound for negative advantages
    tis_imp_ratio_cap: float = -1.0  # <= 0 disables truncated importance sampling
    loss_agg_mode: str = "seq-mean-token-norm-trace-length"  # set by the environment
    entropy_coeff: float = 0.0
    use_kl_loss: bool = False
    kl_loss_coef: float = 0.001
    kl_loss_type: str = "low_var_kl"
    grad_clip: float = 1.0
    use_dynamic_bsz: bool = False  # micro-batches by token budget instead of row count
    ppo_max_token_len_per_gpu: int = 16384  # tokens per micro-batch with use_dynamic_bsz
    optim: OptimConfig = field(default_factory=OptimConfig)
    fsdp_config: FSDPConfig = field(default_factory=FSDPConfig)


@dataclass
class SamplingConfig:
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 1
    do_sample: bool = True


@dataclass
class MultiTurnConfig:
    max_assistant_turns: int = 1  # gym: the most model turns (Delethink's I: algorithm.delethink.max_chunks)


@dataclass
class AgentConfig:
    default_agent_loop: str = "single_turn"  # single_turn | delethink | gym; set by the environment


@dataclass
class GymConfig:
    """Defaults for the `gym` agent loop; a dataset row's env_config / ctx_config column wins."""

    env_config: dict[str, Any] | None = None  # {"name": registered Env, other init keys}
    ctx_config: dict[str, Any] | None = None  # {"name": registered ContextManager, other init keys}
    train_on: str = "last"  # last: only the last assistant turn trains | all: every assistant turn
    step_timeout_s: float = 30.0  # a reset/step that takes longer ends the episode with an error
    max_prompt_tokens: int | None = None  # a longer next prompt ends the episode (truncated); null: no cap


@dataclass
class EnvManagerConfig:
    """Rollouts through environment-manager workers (verl/env_manager) instead of the agent-loop batch."""

    enable: bool = False
    num_workers: int = 1  # rollout worker actors; env managers are dealt to them round-robin
    num_groups: int = -1  # training groups of rollout.n env managers; -1: data.train_batch_size
    num_val_groups: int = -1  # validation groups of val_kwargs.n env managers; -1: num_groups


@dataclass
class RolloutConfig:
    name: str = "hf"  # hf (CPU) | sglang (GPU)
    mode: str = "async"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    n: int = 8
    max_num_seqs: int = 256  # engine batch cap
    log_prob_max_token_len_per_gpu: int = 16384  # tokens per old-log-prob micro-batch (dynamic bsz)
    tensor_model_parallel_size: int = 1  # SGLang: GPUs per engine
    gpu_memory_utilization: float = 0.5  # SGLang: fraction of GPU memory for weights + KV cache
    free_cache_engine: bool = True  # SGLang: release engine memory while the actor trains
    gym: GymConfig = field(default_factory=GymConfig)
    env_manager: EnvManagerConfig = field(default_factory=EnvManagerConfig)
    agent: AgentConfig = field(default_factory=AgentConfig)
    multi_turn: MultiTurnConfig = field(default_factory=MultiTurnConfig)
    val_kwargs: SamplingConfig = field(default_factory=SamplingConfig)


@dataclass
class RefConfig:
    log_prob_micro_batch_size_per_gpu: int = 8
    log_prob_max_token_len_per_gpu: int = 16384  # tokens per micro-batch with actor.use_dynamic_bsz


@dataclass
class ActorRolloutRefConfig:
    model: ModelConfig
    actor: ActorConfig = field(default_factory=ActorConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    ref: RefConfig = field(default_factory=RefConfig)


@dataclass
class DelethinkConfig:
    """algorithm.delethink: the fields of agent_loop.delethink_params.DelethinkParams, which checks them."""

    chunk_size: int = 8192  # C: the first chunk's budget, and the most tokens any chunk holds
    keep_head: int = 100  # carry-over: the first keep_head thinking tokens
    keep_tail: int = 3996  # carry-over: the last keep_tail thinking tokens
    intermediate_max_new_tokens: int | None = None  # budget of every chunk after the first; None: C - m
    max_chunks: int = 5  # I: the most chunks per trajectory
    trimmer: str = "progressive"  # how the carry-over is cut (agent_loop.trimmers.TRIMMERS)


@dataclass
class FilterGroupsConfig:
    """algorithm.filter_groups: dynamic sampling (drop groups whose samples all scored the same)."""

    enable: bool = False  # keep only groups whose scores differ; refill with new prompts up to the batch
    max_num_gen_batches: int = 10  # the most batches one step generates; then it trains on what it has


@dataclass
class AlgorithmConfig:
    adv_estimator: str = "grpo"  # grpo | rloo
    norm_adv_by_std_in_grpo: bool = True
    filter_groups: FilterGroupsConfig = field(default_factory=FilterGroupsConfig)
    filter_overlong_trajectories: bool = False  # train only on trajectories that ended with EOS
    delethink: DelethinkConfig = field(default_factory=DelethinkConfig)


@dataclass
class RewardModelConfig:
    reward_manager: str = "naive"  # naive | delethink; set by the environment
    # math-verify processes scoring at once, per driver / rollout worker: an answer stuck until its time
    # limit holds up only its own process; None: one per CPU plus 4, at most 32
    scoring_processes: int | None = None


@dataclass
class CustomRewardFunctionConfig:
    path: str | None = None  # a .py file defining `name`; None: the built-in dispatch by data_source
    name: str = "compute_score"


@dataclass
class TrainerConfig:
    name: str = "ppo"  # ppo (a row per trajectory) | delethink (a row per chunk); set by the environment
    project_name: str = "delethink"
    experiment_name: str = "run"
    group: str = "default"  # wandb group: LongCoT and Delethink runs of one study share it
    logger: list[str] = field(default_factory=lambda: ["console", "jsonl"])
    total_training_steps: int = 10
    val_before_train: bool = True
    test_freq: int = -1  # validate every N steps (and after the last); -1: never during training
    save_freq: int = -1  # checkpoint every N steps (and after the last); -1: only after the last
    resume_mode: str = "auto"  # auto | disable | path
    resume_from_path: str | None = None
    overwrite: bool = False  # resume_mode=disable in a directory holding a run: move that run aside first
    default_local_dir: str = "outputs/run"
    log_rollouts: bool = True  # JSONL dumps under default_local_dir/rollouts/
    log_val_generations: int = 0  # first N validation trajectories: wandb Table + val_generations.jsonl
    nnodes: int = 1
    n_gpus_per_node: int = 1
    device: str = "cpu"
    gpu_memory_gib: float = 80.0  # memory of one GPU; a cuda run whose estimated peak exceeds it is refused
    seed: int = 1


@dataclass
class TaskConfig:
    """A problem set in its original columns (problem / answer), turned into prompts by a template."""

    path: str  # .jsonl, .json or .parquet
    data_source: str  # names the task in metrics and picks the scorer
    problem_key: str = "problem"
    answer_key: str = "answer"
    answer_marker: str | None = None  # GSM8K "####": the answer column is a solution, the answer follows this
    prompt_template: str = "{problem}"  # str.format with the row's columns
    system_prompt: str | None = None
    max_samples: int = -1  # -1: every row
    shuffle_seed: int | None = None  # set: shuffle rows with this seed before max_samples
    n: int | None = None  # validation samples per problem; None: rollout.val_kwargs.n
    bad_rows: str = "filter"  # filter: drop bad rows and log the count | error: fail naming the row
    how_to_get: str | None = None  # for a file not stored here: how to obtain it, said when it is missing


@dataclass
class PolicyIterationConfig:
    data: DataConfig
    actor_rollout_ref: ActorRolloutRefConfig
    algorithm: AlgorithmConfig
    reward_model: RewardModelConfig
    custom_reward_function: CustomRewardFunctionConfig
    trainer: TrainerConfig
    environment: str = "longcot"  # the thinking environment chosen (config group environment/)
    train_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    val_tasks: dict[str, TaskConfig] = field(default_factory=dict)
    external_plugins: list[str] = field(default_factory=list)  # modules or .py files imported at start-up

    @property
    def is_delethink(self) -> bool:
        """Whether trajectories are generated in Delethink's chunked environment."""
        return self.actor_rollout_ref.rollout.agent.default_agent_loop == "delethink"

    @functools.cached_property
    def delethink_params(self) -> DelethinkParams:
        """algorithm.delethink as the one Delethink parameter object (load_config has checked it)."""
        from verl.agent_loop.delethink_params import DelethinkParams

        return DelethinkParams(**dataclasses.asdict(self.algorithm.delethink))

    @property
    def thinking_budget(self) -> int:
        """Most thinking tokens one trajectory can hold: LongCoT's B, or Delethink's C + (I-1)(C-m)."""
        if not self.is_delethink:
            return self.data.max_response_length
        return self.delethink_params.thinking_budget

    def to_dict(self) -> dict[str, Any]:
        """Plain nested dict of every value, for logging the run's config."""
        return dataclasses.asdict(self)


def compose_config(config_name: str, overrides: Sequence[str] = ()) -> DictConfig:
    """The config that `main_policy_iteration --config-name=NAME OVERRIDES...` gets, composed in-process."""
    from hydra import compose, initialize_config_dir

    register_resolvers()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name=config_name, overrides=list(overrides))


def load_config(cfg: DictConfig, check_paths: bool = True) -> PolicyIterationConfig:
    """Resolve `cfg`, convert it into dataclasses with type checks, then check the rules (and paths)."""
    register_resolvers()
    try:
        missing = sorted(OmegaConf.missing_keys(cfg))
        tree = OmegaConf.to_container(cfg, resolve=True)
    except OmegaConfBaseException as e:
        reason = str(e.msg).splitlines()[0]  # the rest repeats the key and OmegaConf's node type
        raise ConfigError(f"{e.full_key}: cannot resolve the value: {reason}") from None
    if missing:
        raise _error([f"{key}: required, has no default (??? in the YAML); set {key}=..." for key in missing])

    errors: list[str] = []
    config = _build(PolicyIterationConfig, tree, "", errors)
    if errors:
        raise _error(errors)
    errors = _rule_errors(config) + (_path_errors(config) if check_paths else [])
    if errors:
        raise _error(errors)
    return config


def to_dataclass(cls: type, tree: dict[str, Any], path: str = "") -> Any:
    """Type-check a plain dict into dataclass `cls` (for configs other than the training one)."""
    errors: list[str] = []
    out = _build(cls, tree, path, errors)
    if errors:
        raise _error(errors)
    return out


def _error(errors: list[str]) -> ConfigError:
    if len(errors) == 1:
        return ConfigError(errors[0])
    return ConfigError(f"{len(errors)} problems:\n" + "\n".join(f"  - {e}" for e in errors))


# ---------------------------------------------------------------------------------------------------
# Type checking: OmegaConf tree -> dataclasses

_INVALID = object()  # stands in for a value that failed its check; the error is already recorded
_TYPE_NAMES = {bool: "true or false", int: "an integer", float: "a finite number", str: "a string"}


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def _build(cls: type, node: Any, path: str, errors: list[str]) -> Any:
    if not isinstance(node, dict):
        errors.append(f"{path}={node!r}: must be a section of keys")
        return _INVALID
    num_errors = len(errors)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name in node:
        if name not in fields:
            close = difflib.get_close_matches(str(name), fields, n=1)
            hint = f"did you mean {_join(path, close[0])}?" if close else f"known keys: {list(fields)}"
            errors.append(f"{_join(path, str(name))}: unknown key; {hint}")
    hints = typing.get_type_hints(cls)
    kwargs = {}
    for name, f in fields.items():
        if name in node:
            kwargs[name] = _convert(hints[name], node[name], _join(path, name), errors)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            errors.append(f"{_join(path, name)}: required key is missing")
    return cls(**kwargs) if len(errors) == num_errors else _INVALID


def _convert(tp: Any, value: Any, key: str, errors: list[str]) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (tp,) = (a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if dataclasses.is_dataclass(tp):
        return _build(tp, value, key, errors)
    if origin is dict:
        if not isinstance(value, dict):
            errors.append(f"{key}={value!r}: must be a section of keys")
            return _INVALID
        return {str(k): _convert(args[1], v, _join(key, str(k)), errors) for k, v in value.items()}
    if origin is list:
        if isinstance(value, str):  # a single file or logger needs no brackets on the command line
            value = [value]
        if not isinstance(value, list):
            errors.append(f"{key}={value!r}: must be a list")
            return _INVALID
        return [_convert(args[0], v, f"{key}[{i}]", errors) for i, v in enumerate(value)]
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            errors.append(f"{key}={value!r}: must be a list of {len(args)} values")
            return _INVALID
        items = enumerate(zip(args, value, strict=True))
        return tuple(_convert(a, v, f"{key}[{i}]", errors) for i, (a, v) in items)
    if tp not in _TYPE_NAMES:
        raise TypeError(f"{key}: config_schema has no type check for annotation {tp!r}")
    is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is float and is_number and math.isfinite(value):
        return float(value)
    if (tp is int and is_number and isinstance(value, int)) or (tp in (bool, str) and isinstance(value, tp)):
        return value
    errors.append(f"{key}={value!r}: must be {_TYPE_NAMES[tp]}")
    return _INVALID


# ---------------------------------------------------------------------------------------------------
# Rules between values


def _field(node: Any, name: str) -> Any:
    return node[name] if isinstance(node, dict) else getattr(node, name)


def _value(c: PolicyIterationConfig, key: str) -> Any:
    return functools.reduce(_field, key.split("."), c)


def environment_names() -> list[str]:
    return sorted(path.stem for path in ENVIRONMENT_DIR.glob("*.yaml"))


def _rule_errors(c: PolicyIterationConfig) -> list[str]:
    # registries live next to the code they name; imported here so that the schema module stays light
    import verl.agent_loop  # noqa: F401  (registers the agent loops)
    import verl.envs  # noqa: F401  (registers the built-in envs and context managers)
    from verl.agent_loop.base import AGENT_LOOPS
    from verl.agent_loop.delethink_params import delethink_param_problems
    from verl.envs.base import CONTEXT_MANAGERS, ENVS, config_problem
    from verl.envs.plugins import import_plugin
    from verl.trainer.ppo import core_algos
    from verl.workers.reward_manager import REWARD_MANAGERS

    errors: list[str] = []
    # plugins first: the names they register must validate below
    for i, entry in enumerate(c.external_plugins):
        try:
            import_plugin(entry)
        except ValueError as e:
            errors.append(f"external_plugins[{i}]: {e}")

    def check(key: str, ok: Callable[[Any], bool], rule: str) -> None:
        value = _value(c, key)
        if not ok(value):
            errors.append(f"{key}={value!r}: {rule}")

    def one_of(key: str, allowed: Sequence[str]) -> None:
        check(key, lambda v: v in allowed, f"must be one of {list(allowed)}")

    actor = "actor_rollout_ref.actor"
    rollout = "actor_rollout_ref.rollout"
    delethink = "algorithm.delethink"

    for key in (
        "data.max_prompt_length",
        "data.max_response_length",
        "data.train_batch_size",
        f"{actor}.ppo_mini_batch_size",
        f"{actor}.ppo_micro_batch_size_per_gpu",
        f"{actor}.ppo_epochs",
        f"{actor}.clip_ratio_high",
        f"{actor}.grad_clip",
        f"{actor}.optim.lr",
        f"{rollout}.n",
        f"{rollout}.max_num_seqs",
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu",
        "trainer.total_training_steps",
        "trainer.nnodes",
        "trainer.n_gpus_per_node",
    ):
        check(key, lambda v: v > 0, "must be > 0")
    for key in (f"{actor}.optim.weight_decay", f"{actor}.optim.lr_warmup_steps", f"{actor}.kl_loss_coef"):
        check(key, lambda v: v >= 0, "must be >= 0")
    check("trainer.log_val_generations", lambda v: v >= 0, "must be >= 0 (0: log none)")
    check("trainer.gpu_memory_gib", lambda v: v > 0, "must be > 0 (GiB of one GPU)")
    for key in ("data.val_batch_size", "trainer.test_freq", "trainer.save_freq"):
        check(key, lambda v: v == -1 or v > 0, "must be -1 (off / all at once) or > 0")
    for split in ("train", "val"):
        tasks = getattr(c, f"{split}_tasks")
        check(
            f"data.{split}_files",
            lambda v, tasks=tasks: len(v) > 0 or len(tasks) > 0,
            f"must list at least one file, or name tasks in {split}_tasks",
        )
        for name in tasks:
            key = f"{split}_tasks.{name}"
            check(f"{key}.max_samples", lambda v: v == -1 or v > 0, "must be -1 (every row) or > 0")
            check(f"{key}.n", lambda v: v is None or v >= 1, "must be null or >= 1")
            check(f"{key}.bad_rows", lambda v: v in TASK_BAD_ROWS, f"must be one of {list(TASK_BAD_ROWS)}")
            for field_key in ("path", "data_source", "problem_key", "answer_key", "prompt_template"):
                check(f"{key}.{field_key}", lambda v: v != "", "must not be empty")
    for key in (
        f"{actor}.ppo_max_token_len_per_gpu",
        f"{rollout}.log_prob_max_token_len_per_gpu",
        "actor_rollout_ref.ref.log_prob_max_token_len_per_gpu",
        f"{rollout}.tensor_model_parallel_size",
        f"{rollout}.gym.step_timeout_s",
    ):
        check(key, lambda v: v > 0, "must be > 0")
    check(f"{rollout}.gym.max_prompt_tokens", lambda v: v is None or v > 0, "must be null (no cap) or > 0")
    check(f"{rollout}.gpu_memory_utilization", lambda v: 0 < v <= 1, "must be in (0, 1]")
    em = f"{rollout}.env_manager"
    check(f"{em}.num_workers", lambda v: v >= 1, "must be >= 1")
    batch = c.data.train_batch_size
    check(
        f"{em}.num_groups",
        lambda v: v == -1 or (v >= 1 and batch % v == 0),
        f"must be -1 or divide data.train_batch_size={batch} (each group runs an equal share of episodes)",
    )
    check(f"{em}.num_val_groups", lambda v: v == -1 or v >= 1, "must be -1 (num_groups) or >= 1")
    if c.actor_rollout_ref.rollout.env_manager.enable:
        val_n = c.actor_rollout_ref.rollout.val_kwargs.n
        for name in c.val_tasks:
            check(
                f"val_tasks.{name}.n",
                lambda v: v is None or v == val_n,
                f"must be null or equal {rollout}.val_kwargs.n={val_n} with {em}.enable=true "
                "(a validation group of env managers has one size)",
            )
    one_of(f"{rollout}.gym.train_on", GYM_TRAIN_ON)
    gym = c.actor_rollout_ref.rollout.gym
    for name, registry, kind in (
        ("env_config", ENVS, "env"),
        ("ctx_config", CONTEXT_MANAGERS, "context manager"),
    ):
        value = getattr(gym, name)
        problem = None if value is None else config_problem(value, registry, kind)
        if problem:
            errors.append(f"{rollout}.gym.{name}={value!r}: {problem} (plugins come from external_plugins)")
    for key in ("param_dtype", "reduce_dtype"):
        one_of(f"{actor}.fsdp_config.{key}", DTYPES)
    for key in (
        "data.prompt_key",
        "actor_rollout_ref.model.path",
        "custom_reward_function.name",
        "trainer.project_name",
        "trainer.experiment_name",
        "trainer.default_local_dir",
    ):
        check(key, lambda v: v != "", "must not be empty")

    mini_batch = c.actor_rollout_ref.actor.ppo_mini_batch_size
    check(
        "data.train_batch_size",
        lambda v: mini_batch <= 0 or v % mini_batch == 0,
        f"must be divisible by {actor}.ppo_mini_batch_size={mini_batch} (both count prompts)",
    )
    check(f"{actor}.fixed_num_optim_steps", lambda v: v is None or v >= 1, "must be null or >= 1")
    check(f"{actor}.clip_ratio_low", lambda v: 0 < v < 1, "must be in (0, 1): the lower clip bound is 1 - it")
    check(f"{actor}.clip_ratio_c", lambda v: v > 1, "must be > 1 (the dual-clip bound is above the clip)")
    check(f"{actor}.optim.betas", lambda v: all(0 <= b < 1 for b in v), "each beta must be in [0, 1)")
    for sampling in (rollout, f"{rollout}.val_kwargs"):
        check(f"{sampling}.temperature", lambda v: v >= 0, "must be >= 0 (0 means greedy)")
        check(f"{sampling}.top_p", lambda v: 0 < v <= 1, "must be in (0, 1]")
        check(f"{sampling}.top_k", lambda v: v == -1 or v > 0, "must be -1 (off) or > 0")
    check(f"{rollout}.val_kwargs.n", lambda v: v >= 1, "must be >= 1")

    one_of("algorithm.adv_estimator", core_algos.ADV_ESTIMATORS)
    check("algorithm.filter_groups.max_num_gen_batches", lambda v: v >= 1, "must be >= 1")
    check(
        "algorithm.filter_groups.enable",
        lambda v: not (v and c.actor_rollout_ref.rollout.env_manager.enable),
        f"is not supported with {rollout}.env_manager.enable=true (episodes come from the env managers' "
        "own dataset, which the refill cannot draw from)",
    )
    one_of(f"{actor}.loss_agg_mode", core_algos.LOSS_AGG_MODES)
    one_of(f"{actor}.kl_loss_type", core_algos.KL_PENALTY_TYPES)
    # checked whatever the loop, like every other key; the rules tying it to other sections come below
    params_problems = delethink_param_problems(**dataclasses.asdict(c.algorithm.delethink))
    errors += [f"{delethink}.{problem}" for problem in params_problems]
    one_of("environment", environment_names())
    one_of("reward_model.reward_manager", list(REWARD_MANAGERS))
    check(
        "reward_model.scoring_processes",
        lambda v: v is None or v >= 1,
        "must be null (one per CPU plus 4, at most 32) or >= 1",
    )
    one_of(f"{rollout}.agent.default_agent_loop", list(AGENT_LOOPS))
    one_of(f"{rollout}.name", ROLLOUT_NAMES)
    one_of(f"{rollout}.mode", ROLLOUT_MODES)
    one_of(f"{actor}.strategy", ACTOR_STRATEGIES)
    one_of("trainer.name", TRAINER_NAMES)
    one_of("trainer.resume_mode", RESUME_MODES)
    one_of("trainer.device", DEVICES)
    check("trainer.logger", lambda v: set(v) <= set(LOGGERS), f"every entry must be one of {list(LOGGERS)}")

    estimator = c.algorithm.adv_estimator
    check(
        f"{rollout}.n",
        lambda v: estimator not in ("grpo", "rloo") or v >= 2,
        f"must be >= 2 with algorithm.adv_estimator={estimator!r}: a group of one has zero advantage",
    )
    resume_mode = c.trainer.resume_mode
    check(
        "trainer.resume_from_path",
        lambda v: resume_mode != "path" or bool(v),
        "must be set when trainer.resume_mode='path'",
    )
    device = c.trainer.device
    check(
        f"{rollout}.name",
        lambda v: v != "sglang" or device == "cuda",
        f"sglang runs on GPU only, but trainer.device={device!r}; use {rollout}.name=hf on CPU",
    )

    check(f"{rollout}.multi_turn.max_assistant_turns", lambda v: v >= 1, "must be >= 1")
    world_size = c.trainer.nnodes * c.trainer.n_gpus_per_node
    mini_rows = c.actor_rollout_ref.actor.ppo_mini_batch_size * c.actor_rollout_ref.rollout.n
    even_split = c.trainer.name == "ppo" and not c.actor_rollout_ref.actor.use_dynamic_bsz  # else rows vary
    check(
        f"{actor}.ppo_mini_batch_size",
        lambda v: not even_split or world_size <= 0 or mini_rows % world_size == 0,
        f"times {rollout}.n = {mini_rows} rows per mini-batch must split evenly over "
        f"trainer.nnodes x trainer.n_gpus_per_node = {world_size} ranks",
    )
    for key in ("param_offload", "optimizer_offload"):
        check(
            f"{actor}.fsdp_config.{key}",
            lambda v: not v or device == "cuda",
            "offloading moves GPU memory to the CPU; with trainer.device=cpu there is nothing to offload",
        )
    if c.trainer.name == "ppo":
        use_delethink_trainer = "trainer.name=ppo trains one row per trajectory; use trainer.name=delethink"
        check(f"{rollout}.agent.default_agent_loop", lambda v: v != "delethink", use_delethink_trainer)
        loop = c.actor_rollout_ref.rollout.agent.default_agent_loop
        check(
            f"{rollout}.multi_turn.max_assistant_turns",
            lambda v: v <= 1 or (loop == "gym" and gym.train_on == "last"),
            f"{use_delethink_trainer} (or the gym loop with gym.train_on=last: it trains the last turn only)",
        )
        check(
            f"{rollout}.gym.train_on",
            lambda v: loop != "gym" or v == "last",
            "train_on=all trains every assistant turn as its own row; use trainer.name=delethink (one row "
            "per turn, padded to the mini-batches, loss rescaled to a mean over trajectories)",
        )

    if c.is_delethink:
        check(
            "reward_model.reward_manager",
            lambda v: v != "naive",
            "scores only the last chunk of a Delethink trajectory; use reward_model.reward_manager=delethink "
            "(all chunks joined, as environment=delethink sets)",
        )
        chunk = c.algorithm.delethink.chunk_size
        check(
            "data.max_response_length",
            lambda v: v == chunk,
            f"must equal {delethink}.chunk_size={chunk}: with the delethink loop C is set there alone "
            "(environment=delethink links the two; leave data.max_response_length unset)",
        )
        check(
            f"{rollout}.multi_turn.max_assistant_turns",
            lambda v: v == 1,
            f"is the gym loop's turn limit and the delethink loop does not read it; set I with "
            f"{delethink}.max_chunks",
        )
        if not params_problems:
            carry = c.delethink_params.carry
            check(
                "data.max_prompt_length",
                lambda v: v > carry,
                f"must be > {delethink}.keep_head + keep_tail = {carry}: a chunk's prompt is the "
                f"question plus the carry-over, so the question needs room too",
            )
    return errors


def config_warnings(c: PolicyIterationConfig) -> list[str]:
    """What a valid config does that is probably not meant, one line each: an ENVIRONMENT_KEYS value
    other than what the chosen environment sets (a mix runs as asked, but says so), and an explicit
    Delethink intermediate budget other than C - m (it changes the total thinking budget)."""
    preset = OmegaConf.load(ENVIRONMENT_DIR / f"{c.environment}.yaml")
    warnings = []
    for key in ENVIRONMENT_KEYS:
        value, preset_value = _value(c, key), OmegaConf.select(preset, key)
        if key == "actor_rollout_ref.rollout.agent.default_agent_loop" and value == "gym":
            continue  # the gym loop runs on top of either environment (docs/ENVIRONMENTS.md): no mix
        if value != preset_value:
            warnings.append(
                f"{key}={value!r} mixes thinking environments: environment={c.environment} sets "
                f"{preset_value!r} (running the mix as asked)"
            )
    if c.is_delethink:
        p = c.delethink_params
        if p.intermediate_budget != p.derived_intermediate:
            warnings.append(
                f"algorithm.delethink.intermediate_max_new_tokens={p.intermediate_budget} is not "
                f"C - keep_head - keep_tail = {p.derived_intermediate}: total thinking budget "
                f"C + (I-1)*{p.intermediate_budget} = {p.chunk_size} + {p.max_chunks - 1}*"
                f"{p.intermediate_budget} = {p.thinking_budget} tokens"
            )
    return warnings


# ---------------------------------------------------------------------------------------------------
# Paths (relative to the working directory; Hydra does not chdir, see hydra.job.chdir)


def _looks_like_hub_id(path: str) -> bool:
    parts = path.split("/")
    return len(parts) == 2 and all(parts) and not path.startswith((".", "/", "~")) and not Path(path).exists()


def _path_errors(c: PolicyIterationConfig) -> list[str]:
    errors: list[str] = []

    def missing(key: str, path: str, problem: str) -> None:
        hint = ""
        if Path(path).resolve().is_relative_to(TINY_DIR.resolve()):
            hint = f"; make the tiny model and data first: {MAKE_TINY}"
        errors.append(f"{key}={path!r}: {problem}{hint}")

    model_path = c.actor_rollout_ref.model.path
    if not _looks_like_hub_id(model_path) and not (Path(model_path) / "config.json").is_file():
        missing(
            "actor_rollout_ref.model.path",
            model_path,
            "is neither a model directory with config.json nor a hub id like org/name",
        )
    for key in ("train_files", "val_files"):
        for i, path in enumerate(getattr(c.data, key)):
            if not Path(path).exists():
                missing(f"data.{key}[{i}]", path, "no such file")
    for split in ("train", "val"):
        for name, task in getattr(c, f"{split}_tasks").items():
            if not Path(task.path).is_file():
                how = f"; {task.how_to_get}" if task.how_to_get else ""
                missing(f"{split}_tasks.{name}.path", task.path, f"no such file{how}")
    reward_path = c.custom_reward_function.path
    if reward_path is not None and not Path(reward_path).is_file():
        missing("custom_reward_function.path", reward_path, "no such file")
    resume_path = c.trainer.resume_from_path
    if c.trainer.resume_mode == "path" and resume_path and not Path(resume_path).exists():
        missing("trainer.resume_from_path", resume_path, "no such checkpoint")
    return errors
