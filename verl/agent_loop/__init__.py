"""Agent loops: how a trajectory is generated. Importing the package registers the built-in loops."""

from verl.agent_loop import delethink, gym, single_turn  # noqa: F401  (registration side effect)
from verl.agent_loop.base import AGENT_LOOPS, AgentLoop, Trajectory, Turn, register_agent_loop

__all__ = ["AGENT_LOOPS", "AgentLoop", "Trajectory", "Turn", "register_agent_loop"]
