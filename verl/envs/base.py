"""What an environment and a context manager are, and how long an env lives.

An `Env` is a conversation partner for the policy (Gym style, asynchronous): `reset` opens an episode
with a system message and the first user message, `step` reads the whole conversation (its last
message is the model's reply) and answers with the next user message, a reward, whether the episode
is over, and an info dict that is logged. A `ContextManager` may rewrite the message history before
every model turn (e.g. trim old thinking, as Delethink does).

Both are chosen by a config dict `{"name": <registered name>, ...init keys}`, from a dataset row's
`env_config` / `ctx_config` column or from `actor_rollout_ref.rollout.gym`; the names are the tables
ENVS and CONTEXT_MANAGERS in verl/envs/__init__.py.

This module stays light (no torch, no transformers) so that Ray actors running episodes import it fast.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

Message = dict[str, str]  # {"role": "system" | "user" | "assistant", "content": str}
Messages = list[Message]


@dataclass
class EnvRequest:
    """What `Env.reset` gets: the dataset row that opened the episode and the episode's identity."""

    messages: Messages  # the row's prompt as chat messages
    data_source: str
    ground_truth: str  # "" when the row has none (the env is the judge)
    extra_info: dict[str, Any] = field(default_factory=dict)
    env_config: dict[str, Any] = field(default_factory=dict)  # the config this env was built from
    seed: int | None = None  # the trajectory's sampling seed; envs with randomness should use it
    trajectory_id: str = ""

    @property
    def question(self) -> str:
        """The content of the last user message of the prompt."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return message.get("content", "")
        return ""


class Env(ABC):
    """One instance runs one episode at a time; the gym loop makes a fresh one per episode."""

    def __init__(self, env_config: dict[str, Any]) -> None:
        self.env_config = env_config

    @abstractmethod
    async def reset(self, request: EnvRequest) -> tuple[str, dict[str, Any], str | None]:
        """Start an episode: (first observation = the first user message, info, system message or None)."""

    @abstractmethod
    async def step(self, messages: Messages) -> tuple[str | None, float, bool, dict[str, Any]]:
        """React to the model's reply (`messages[-1]`): (next observation, reward, done, info).
        The observation becomes the next user message; it may be None once done."""

    @abstractmethod
    async def close(self) -> None:
        """Release the episode's resources (processes, sandboxes, connections)."""


class ContextManager(ABC):
    """Rewrites the conversation the model sees before each of its turns.

    `tokenizer` is the policy's tokenizer (given by the gym loop), for managers that count tokens."""

    def __init__(self, ctx_config: dict[str, Any], tokenizer: Any = None) -> None:
        self.ctx_config = ctx_config
        self.tokenizer = tokenizer

    @abstractmethod
    def manage_context(self, history: Messages, trajectory_id: str) -> Messages:
        """The messages to template for the next model turn. `history` is the full, unmanaged conversation;
        return a new list rather than editing it."""


def config_problem(config: Any, registry: dict[str, type], kind: str) -> str | None:
    """Why `config` cannot build a registered `kind`, or None if it can."""
    if not isinstance(config, dict):
        return f"must be a dict like {{'name': <{kind} name>, ...}}, got {type(config).__name__}"
    name = config.get("name")
    if name not in registry:
        return f"unknown {kind} name {name!r}; registered: {sorted(registry)}"
    return None


# Every env built by make_env until close_env: what is still open at exit gets closed then.
_OPEN_ENVS: set[Env] = set()


def opened(env: Env) -> Env:
    """Keep `env` until close_env, so that close_open_envs closes it if its episode never did."""
    _OPEN_ENVS.add(env)
    return env


async def close_env(env: Env, timeout_s: float) -> str | None:
    """Close `env` (once); the error as text if closing raised or timed out, else None."""
    if env not in _OPEN_ENVS:
        return None
    _OPEN_ENVS.discard(env)
    try:
        await asyncio.wait_for(env.close(), timeout_s)
    except TimeoutError:
        return f"close took over {timeout_s} s"
    except Exception as e:  # a failing close must not take the run down; it is reported instead
        return f"close failed: {e!r}"
    return None


def open_env_count() -> int:
    return len(_OPEN_ENVS)


def close_open_envs(timeout_s: float = 10.0) -> int:
    """Close every env that was opened but never closed (a crashed or cancelled episode). Runs at
    interpreter exit and from worker shutdown; returns how many it closed."""
    envs = list(_OPEN_ENVS)

    async def close_all() -> list[str | None]:
        return list(await asyncio.gather(*(close_env(env, timeout_s) for env in envs)))

    if envs:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            errors = asyncio.run(close_all())
        else:  # called from inside an event loop (an async Ray actor): close on a loop of our own
            with ThreadPoolExecutor(1) as pool:
                errors = pool.submit(asyncio.run, close_all()).result()
        for env, error in zip(envs, errors, strict=True):
            if error:
                logger.warning("closing %s at shutdown: %s", type(env).__name__, error)
    return len(envs)


atexit.register(close_open_envs)
