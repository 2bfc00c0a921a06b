"""What the config sections share: the allowed names, `ConfigError`, and the helpers a section's
`problems(key)` states its rules with (`key.field=value: rule`, one line per broken rule)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from verl.models.lora_keys import ALL_LINEAR

# the YAML files stay beside the entry points that Hydra runs (verl/trainer/main_*.py)
CONFIG_DIR = Path(__file__).resolve().parent.parent / "trainer" / "config"
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
LAUNCHERS = ("ray", "local")
ATTN_IMPLEMENTATIONS = ("sdpa", "flash_attention_2")  # transformers' names
DTYPES = ("float32", "bfloat16", "float16")
GYM_TRAIN_ON = ("last", "all")
TASK_BAD_ROWS = ("filter", "error")


class ConfigError(ValueError):
    """A config value breaks a rule. The message names the key, the value and the rule."""


# ---------------------------------------------------------------------------------------------------
# Each section's own rules: a dataclass's `problems(key)` checks its fields, `key` its full key name.

# (field, whether its value is allowed, the rule a message states)
Rule = tuple[str, Callable[[Any], bool], str]


def broken(section: Any, key: str, rules: Sequence[Rule]) -> list[str]:
    """One `key.field=value: rule` line for every rule the section's value breaks."""
    lines = []
    for name, ok, rule in rules:
        value = getattr(section, name)
        if not ok(value):
            lines.append(f"{join_key(key, name)}={value!r}: {rule}")
    return lines


def positive(*names: str) -> list[Rule]:
    return [(name, lambda v: v > 0, "must be > 0") for name in names]


def non_negative(*names: str) -> list[Rule]:
    return [(name, lambda v: v >= 0, "must be >= 0") for name in names]


def at_least(minimum: int, *names: str) -> list[Rule]:
    return [(name, lambda v: v >= minimum, f"must be >= {minimum}") for name in names]


def in_unit_interval(*names: str) -> list[Rule]:
    return [(name, lambda v: 0 <= v <= 1, "must be in [0, 1]") for name in names]


def not_empty(*names: str) -> list[Rule]:
    return [(name, lambda v: v != "", "must not be empty") for name in names]


def one_of(name: str, allowed: Sequence[str]) -> Rule:
    return (name, lambda v: v in allowed, f"must be one of {list(allowed)}")


def off_or_positive(value: int) -> bool:
    return value == -1 or value > 0


# the LoRA keys of a model section (actor_rollout_ref.model, critic.model, SFT's model)
LORA_RULES: list[Rule] = [
    ("lora_rank", lambda v: v >= 0, "must be >= 0 (0: LoRA off, full fine-tuning)"),
    ("lora_alpha", lambda v: v > 0, "must be > 0 (the adapters' scale is lora_alpha / lora_rank)"),
    ("target_modules", lambda v: len(v) > 0, f"must name at least one module, or be {ALL_LINEAR}"),
    ("target_modules", lambda v: ALL_LINEAR not in v or len(v) == 1,
     f"{ALL_LINEAR} already names every linear layer; list module names or {ALL_LINEAR} alone"),
]  # fmt: skip


def lora_key_problems(section: Any, key: str) -> list[str]:
    """The LoRA key rules for a model section outside the training config (SFT's `model`)."""
    return broken(section, key, LORA_RULES)


SAMPLING_RULES: list[Rule] = [  # rollout and rollout.val_kwargs sample alike
    ("temperature", lambda v: v >= 0, "must be >= 0 (0 means greedy)"),
    ("top_p", lambda v: 0 < v <= 1, "must be in (0, 1]"),
    ("top_k", lambda v: v == -1 or v > 0, "must be -1 (off) or > 0"),
]


def join_key(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def environment_names() -> list[str]:
    return sorted(path.stem for path in ENVIRONMENT_DIR.glob("*.yaml"))
