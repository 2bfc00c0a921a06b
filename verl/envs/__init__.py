"""Environments and context managers for the `gym` agent loop. ENVS and CONTEXT_MANAGERS name every
built-in; a plugin (`external_plugins`) adds its own with `register_env` / `register_context_manager`."""

from typing import Any

from verl.envs.base import ContextManager, Env, EnvRequest, Messages, config_problem, opened
from verl.envs.calculator import CalculatorEnv
from verl.envs.context import DelethinkContextManager
from verl.envs.math_env import MathEnv
from verl.utils.registry import registrar

ENVS: dict[str, type[Env]] = {
    "math": MathEnv,  # answer a math question; the verifier judges each reply
    "calculator": CalculatorEnv,  # math with a calculator the model may call between answers
}
CONTEXT_MANAGERS: dict[str, type[ContextManager]] = {
    "delethink": DelethinkContextManager,  # cut earlier turns' thinking to a Delethink carry-over
}

register_env = registrar(ENVS, "env")
register_context_manager = registrar(CONTEXT_MANAGERS, "context manager")


def _registered(config: Any, registry: dict[str, type], kind: str) -> type:
    problem = config_problem(config, registry, kind)
    if problem:
        raise ValueError(f"{kind} config {config!r}: {problem}")
    return registry[config["name"]]


def make_env(env_config: dict[str, Any]) -> Env:
    return opened(_registered(env_config, ENVS, "env")(dict(env_config)))


def make_context_manager(ctx_config: dict[str, Any], tokenizer: Any = None) -> ContextManager:
    return _registered(ctx_config, CONTEXT_MANAGERS, "context manager")(dict(ctx_config), tokenizer)


__all__ = [
    "CONTEXT_MANAGERS",
    "ENVS",
    "ContextManager",
    "Env",
    "EnvRequest",
    "Messages",
    "make_context_manager",
    "make_env",
    "register_context_manager",
    "register_env",
]
