"""Agent loops: how a trajectory is generated. AGENT_LOOPS names every built-in loop
(`actor_rollout_ref.rollout.agent.default_agent_loop`); a plugin adds its own with `register_agent_loop`."""

from verl.agent_loop.base import AgentLoop
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.gym import GymAgentLoop
from verl.agent_loop.single_turn import SingleTurnAgentLoop
from verl.config import PolicyIterationConfig
from verl.utils.registry import registrar

AGENT_LOOPS: dict[str, type[AgentLoop]] = {
    "single_turn": SingleTurnAgentLoop,  # LongCoT: one response
    "delethink": DelethinkAgentLoop,  # chunks with a carry-over between them
    "gym": GymAgentLoop,  # turns against an env (verl/envs)
}

register_agent_loop = registrar(AGENT_LOOPS, "agent loop")


def agent_loop_class(config: PolicyIterationConfig) -> type[AgentLoop]:
    """The loop `rollout.agent.default_agent_loop` names; its class methods are how it plugs in."""
    return AGENT_LOOPS[config.actor_rollout_ref.rollout.agent.default_agent_loop]


__all__ = ["AGENT_LOOPS", "AgentLoop", "agent_loop_class", "register_agent_loop"]
