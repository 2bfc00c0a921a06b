"""`math`: a question with one answer, checked by the project's scorers; optionally "wrong, try again".

env_config keys (all optional):
  max_attempts: 1        answers the model may give; after a wrong one the env replies `retry_message`
  retry_message: "Wrong, try again."
  attempt_discount: 0.5  a correct answer at attempt k earns attempt_discount ** (k - 1)
  system_prompt: null    the episode's system message
  answer: null           the correct answer; default: the row's reward_model.ground_truth

The answer is judged like the reward function judges it (`default_compute_score`: the synthetic tasks by
their own rule, everything else by math-verify), on the reply's text after its thinking.
"""

from __future__ import annotations

import asyncio
from typing import Any

from verl.envs.base import Env, EnvRequest, Messages
from verl.utils.reward_score import default_compute_score


def expected_answer(env_config: dict[str, Any], request: EnvRequest) -> str:
    answer = str(env_config.get("answer") or request.ground_truth)
    if not answer.strip():
        raise ValueError(
            f"{env_config.get('name')} env: no answer (set env_config.answer or reward_model.ground_truth)"
        )
    return answer


async def judge(data_source: str, reply: str, answer: str) -> float:
    # scoring may block (math-verify runs in a child process): keep the event loop free for other episodes
    return await asyncio.to_thread(default_compute_score, data_source, reply, answer)


class MathEnv(Env):
    def __init__(self, env_config: dict[str, Any]) -> None:
        super().__init__(env_config)
        self.max_attempts = int(env_config.get("max_attempts", 1))
        if self.max_attempts < 1:
            raise ValueError(f"math env: max_attempts must be >= 1, got {self.max_attempts}")
        self.retry_message = str(env_config.get("retry_message", "Wrong, try again."))
        self.attempt_discount = float(env_config.get("attempt_discount", 0.5))
        self.attempts = 0

    async def reset(self, request: EnvRequest) -> tuple[str, dict[str, Any], str | None]:
        self.answer = expected_answer(self.env_config, request)
        self.data_source = request.data_source
        self.attempts = 0
        return request.question, {"max_attempts": self.max_attempts}, self.env_config.get("system_prompt")

    async def step(self, messages: Messages) -> tuple[str | None, float, bool, dict[str, Any]]:
        self.attempts += 1
        reply = messages[-1]["content"]
        correct = await judge(self.data_source, reply, self.answer) >= 1.0
        info = {"attempt": self.attempts, "correct": correct}
        if correct:
            return None, self.attempt_discount ** (self.attempts - 1), True, info
        if self.attempts < self.max_attempts:
            return self.retry_message, 0.0, False, info
        return None, 0.0, True, info

    async def close(self) -> None:
        pass
