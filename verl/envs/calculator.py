"""`calculator`: a tool env. The model may ask for arithmetic by writing `<calc>EXPRESSION</calc>`; the env
answers with `<result>VALUE</result>` as the next user message. A reply without a call is the final answer,
checked like the `math` env checks it.

env_config keys (all optional):
  max_calls: 4          calculator calls per episode; a call beyond it ends the episode with reward 0
  system_prompt: (a one-line description of the tool)
  answer: null          the correct answer; default: the row's reward_model.ground_truth

Expressions are evaluated by the config's safe arithmetic evaluator (numbers, + - * / // %, parentheses,
int/min/max): a model's text is never run as Python.
"""

from __future__ import annotations

import re
from typing import Any

from verl.envs.base import Env, EnvRequest, Messages
from verl.envs.math_env import expected_answer, judge
from verl.utils.config_resolvers import eval_arithmetic

CALL = re.compile(r"<calc>(.*?)</calc>", re.DOTALL)
DEFAULT_SYSTEM_PROMPT = "Write <calc>3+5</calc> to use a calculator. Give the final answer as \\boxed{}."


def calculator_reply(expression: str) -> str:
    """What the env says back to a call: the value, or why the expression was refused."""
    try:
        return f"<result>{eval_arithmetic(expression)}</result>"
    except ValueError as e:  # not arithmetic, or e.g. a division by zero
        return f"<result>error: {e}</result>"


class CalculatorEnv(Env):
    def __init__(self, env_config: dict[str, Any]) -> None:
        super().__init__(env_config)
        self.max_calls = int(env_config.get("max_calls", 4))
        self.calls = 0

    async def reset(self, request: EnvRequest) -> tuple[str, dict[str, Any], str | None]:
        self.answer = expected_answer(self.env_config, request)
        self.data_source = request.data_source
        self.calls = 0
        return request.question, {}, self.env_config.get("system_prompt", DEFAULT_SYSTEM_PROMPT)

    async def step(self, messages: Messages) -> tuple[str | None, float, bool, dict[str, Any]]:
        reply = messages[-1]["content"]
        calls = CALL.findall(reply)
        if calls:
            self.calls += 1
            if self.calls > self.max_calls:
                return None, 0.0, True, {"call": calls[-1], "over_call_limit": True}
            result = calculator_reply(calls[-1])  # the last call: the one the model is waiting on
            return result, 0.0, False, {"call": calls[-1], "result": result}
        score = await judge(self.data_source, reply, self.answer)
        return None, float(score), True, {"calls": self.calls, "correct": score >= 1.0}

    async def close(self) -> None:
        pass
