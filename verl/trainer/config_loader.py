"""The training config as the entry points load it, and the warnings they print at start-up.

`load_config` runs verl.config's checks (types, each section's rules, the rules between sections, the
files) together with what only the floors above the config know: the plugins to import first, the names
the registries hold (agent loops, reward managers, envs, context managers), and what the chosen agent
loop and rollout source need of the rest (their `config_problems`). Every problem is reported at once,
so a run with three typos needs one retry, not three, and all before Ray or any model starts.
"""

from __future__ import annotations

from omegaconf import DictConfig, OmegaConf

from verl.agent_loop import AGENT_LOOPS, agent_loop_class
from verl.config import ENVIRONMENT_DIR, ENVIRONMENT_KEYS, PolicyIterationConfig, config_error, parse_config
from verl.config.checks import cross_section_problems, path_problems, section_problems, value_at
from verl.envs import CONTEXT_MANAGERS, ENVS
from verl.envs.base import config_problem
from verl.envs.plugins import import_plugin
from verl.trainer.ppo.rollout_source import rollout_source_class
from verl.workers.reward_manager import REWARD_MANAGERS


def load_config(cfg: DictConfig, check_paths: bool = True) -> PolicyIterationConfig:
    """Resolve and type-check `cfg`, then check every rule (and the paths); raises ConfigError."""
    config = parse_config(cfg)
    # plugins first: the names they register must validate below
    errors = plugin_problems(config) + section_problems(config, "") + registry_problems(config)
    errors += cross_section_problems(config) + component_problems(config)
    if check_paths:
        errors += path_problems(config)
    if errors:
        raise config_error(errors)
    return config


def plugin_problems(c: PolicyIterationConfig) -> list[str]:
    errors = []
    for i, entry in enumerate(c.external_plugins):
        try:
            import_plugin(entry)
        except ValueError as e:
            errors.append(f"external_plugins[{i}]: {e}")
    return errors


def registry_problems(c: PolicyIterationConfig) -> list[str]:
    """Names that must be registered: the agent loop, the reward manager, the gym loop's env and context
    manager (with their init keys)."""
    rollout = "actor_rollout_ref.rollout"
    errors = []
    for key, names in (
        (f"{rollout}.agent.default_agent_loop", AGENT_LOOPS),
        ("reward_model.reward_manager", REWARD_MANAGERS),
    ):
        value = value_at(c, key)
        if value not in names:
            errors.append(f"{key}={value!r}: must be one of {list(names)}")
    for name, registry, kind in (
        ("env_config", ENVS, "env"),
        ("ctx_config", CONTEXT_MANAGERS, "context manager"),
    ):
        value = getattr(c.actor_rollout_ref.rollout.gym, name)
        problem = None if value is None else config_problem(value, registry, kind)
        if problem:
            errors.append(f"{rollout}.gym.{name}={value!r}: {problem} (plugins come from external_plugins)")
    return errors


def component_problems(c: PolicyIterationConfig) -> list[str]:
    """What the chosen agent loop and rollout source need of the other sections."""
    errors = []
    if c.actor_rollout_ref.rollout.agent.default_agent_loop in AGENT_LOOPS:
        errors += agent_loop_class(c).config_problems(c)
    return errors + rollout_source_class(c).config_problems(c)


def config_warnings(c: PolicyIterationConfig) -> list[str]:
    """What a valid config does that is probably not meant, one line each: an ENVIRONMENT_KEYS value
    other than what the chosen environment sets (a mix runs as asked, but says so), the KL penalised
    both in the reward and in the loss, and an explicit Delethink intermediate budget other than C - m
    (it changes the total thinking budget)."""
    preset = OmegaConf.load(ENVIRONMENT_DIR / f"{c.environment}.yaml")
    warnings = []
    for key in ENVIRONMENT_KEYS:
        value, preset_value = value_at(c, key), OmegaConf.select(preset, key)
        loop_key = key == "actor_rollout_ref.rollout.agent.default_agent_loop"
        if loop_key and agent_loop_class(c).fits_any_environment:
            continue  # e.g. the gym loop runs on top of either environment (docs/ENVIRONMENTS.md): no mix
        if key == "actor_rollout_ref.actor.loss_agg_mode" and value == "seq-mean-token-sum-norm":
            continue  # Dr. GRPO: a trajectory's token sum over a constant in either environment, no mix
        if value != preset_value:
            warnings.append(
                f"{key}={value!r} mixes thinking environments: environment={c.environment} sets "
                f"{preset_value!r} (running the mix as asked)"
            )
    model = c.actor_rollout_ref.model
    if model.use_remove_padding and model.attn_implementation == "sdpa":
        warnings.append(
            "actor_rollout_ref.model.use_remove_padding=True with attn_implementation='sdpa': a packed "
            "micro-batch attends through one dense block-diagonal mask, so attention costs the square of "
            "its tokens (5-7x slower than padded rows on CPU, benchmarks/README.md); flash_attention_2 "
            "runs packed rows without it (running as asked)"
        )
    if c.algorithm.use_kl_in_reward and c.actor_rollout_ref.actor.use_kl_loss:
        warnings.append(
            "algorithm.use_kl_in_reward=True and actor_rollout_ref.actor.use_kl_loss=True: the KL to the "
            "reference policy is penalised twice, in the reward and in the loss (running both as asked)"
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
