"""Built-in context managers.

`delethink`: Markovian thinking for any multi-turn env. Before each model turn, the thinking of every
earlier assistant message (its text before `</think>`, or all of it if the thinking was never closed) is
cut to its first `keep_head` and last `keep_tail` tokens by a Delethink trimmer; the answers after
`</think>` and all user messages stay. So a turn's context holds the observations, the answers and a
bounded carry-over of each earlier turn's reasoning, instead of every thinking token ever written.

ctx_config keys: keep_head (default 100), keep_tail (default 400), trimmer (default "progressive"),
think_end (default "</think>").
"""

from __future__ import annotations

from typing import Any

from verl.envs.base import ContextManager, Messages, register_context_manager


@register_context_manager("delethink")
class DelethinkContextManager(ContextManager):
    def __init__(self, ctx_config: dict[str, Any], tokenizer: Any = None) -> None:
        from verl.agent_loop.trimmers import get_trimmer  # here: importing verl.agent_loop loads torch

        super().__init__(ctx_config, tokenizer)
        if tokenizer is None:
            raise ValueError("the delethink context manager counts tokens: it needs the policy's tokenizer")
        self.keep_head = int(ctx_config.get("keep_head", 100))
        self.keep_tail = int(ctx_config.get("keep_tail", 400))
        self.think_end = str(ctx_config.get("think_end", "</think>"))
        self.trim = get_trimmer(str(ctx_config.get("trimmer", "progressive")))
        self.trim([], self.keep_head, self.keep_tail)  # bad keep_head / keep_tail fail here, not mid-run

    def trim_thinking(self, content: str) -> str:
        thinking, sep, answer = content.partition(self.think_end)
        ids = self.tokenizer(thinking, add_special_tokens=False)["input_ids"]
        kept = self.trim(ids, self.keep_head, self.keep_tail)
        if len(kept) == len(ids):
            return content  # short enough: untouched, so the prompt can keep growing by appending tokens
        return self.tokenizer.decode(kept) + sep + answer

    def manage_context(self, history: Messages, trajectory_id: str) -> Messages:
        return [
            {**m, "content": self.trim_thinking(m["content"])} if m["role"] == "assistant" else dict(m)
            for m in history
        ]
