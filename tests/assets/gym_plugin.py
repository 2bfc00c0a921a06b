"""Envs registered through `external_plugins` in the gym tests (loaded by file path, in the driver and the
workers alike)."""

import asyncio
from pathlib import Path

from verl.envs import Env, register_env


@register_env("digit_share")
class DigitShareEnv(Env):
    """Rewards the share of digits in each reply (dense, so GRPO advantages are non-zero even for an
    untrained model) and ends after `turns` replies, answering "more" in between."""

    async def reset(self, request):
        self.turns_left = int(self.env_config.get("turns", 2))
        return request.question, {"turns": self.turns_left}, None

    async def step(self, messages):
        reply = messages[-1]["content"]
        self.turns_left -= 1
        share = sum(c.isdigit() for c in reply) / max(len(reply), 1)
        return "more", share, self.turns_left == 0, {"digit_share": share, "turns_left": self.turns_left}

    async def close(self):
        pass


@register_env("flaky")
class FlakyEnv(Env):
    """Misbehaves as `env_config["fail"]` says, at step `fail_at` (1-based): raise | shape | reward | sleep,
    or in reset with fail=reset. Counts closes in `closed` and can leave a file behind on close."""

    def __init__(self, env_config):
        super().__init__(env_config)
        self.closed = 0

    async def reset(self, request):
        self.steps = 0
        if self.env_config.get("fail") == "reset":
            raise RuntimeError("reset exploded")
        return request.question, {}, None

    async def step(self, messages):
        self.steps += 1
        if self.steps == int(self.env_config.get("fail_at", 1)):
            fail = self.env_config.get("fail")
            if fail == "raise":
                raise RuntimeError("step exploded")
            if fail == "shape":
                return "obs", 1.0, False
            if fail == "reward":
                return "obs", "high", False, {}
            if fail == "sleep":
                await asyncio.sleep(30)
        return "again", 1.0, False, {"step": self.steps}

    async def close(self):
        self.closed += 1
        marker = self.env_config.get("close_marker")
        if marker:
            Path(marker).write_text("closed")
