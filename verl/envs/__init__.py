"""Environments and context managers for the `gym` agent loop. Importing the package registers the
built-ins: envs `math` and `calculator`, context manager `delethink`."""

from verl.envs import calculator, context, math_env  # noqa: F401  (registration side effect)
from verl.envs.base import (
    CONTEXT_MANAGERS,
    ENVS,
    ContextManager,
    Env,
    EnvRequest,
    Messages,
    make_context_manager,
    make_env,
    register_context_manager,
    register_env,
)

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
