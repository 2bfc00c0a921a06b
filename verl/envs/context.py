"""Built-in context managers.

`delethink`: Markovian thinking for any multi-turn env. Before each model turn, the thinking of every
earlier assistant message (its text before `</think>`, or all of it if the thinking was never closed) is
cut to its first `keep_head` and last `keep_tail` tokens by a Delethink trimmer; the answers after
`</think>` and all user messages stay. So a turn's context holds the observations, the answers and a
bounded carry-over of each earlier turn's reasoning, instead of every thinking token ever written.

ctx_config keys: think_end (default "</think>") and the fields of DelethinkParams under training's names
(algorithm.delethink), with the same defaults: keep_head (100), keep_tail (3996), trimmer ("progressive").
Only these three act here; chunk_size, intermediate_max_new_tokens and max_chunks are accepted and
checked like training's (keep_head + keep_tail < chunk_size), as turns are bounded by the gym loop
(data.max_response_length, multi_turn.max_assistant_turns).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from verl.envs.base import ContextManager, Messages


class DelethinkContextManager(ContextManager):
    def __init__(self, ctx_config: dict[str, Any], tokenizer: Any = None) -> None:
        # here: importing verl.agent_loop loads torch
        from verl.core.delethink import DelethinkParams

        super().__init__(ctx_config, tokenizer)
        if tokenizer is None:
            raise ValueError("the delethink context manager counts tokens: it needs the policy's tokenizer")
        self.think_end = str(ctx_config.get("think_end", "</think>"))
        fields = {k: v for k, v in ctx_config.items() if k not in ("name", "think_end")}
        unknown = sorted(fields.keys() - {f.name for f in dataclasses.fields(DelethinkParams)})
        if unknown:
            raise ValueError(f"delethink context manager: unknown ctx_config keys {unknown}")
        # bad values fail here, naming the key, not mid-run
        self.params = DelethinkParams(**fields)

    def trim_thinking(self, content: str) -> str:
        thinking, sep, answer = content.partition(self.think_end)
        ids = self.tokenizer(thinking, add_special_tokens=False)["input_ids"]
        kept = self.params.carry_over(ids)
        if len(kept) == len(ids):
            return content  # short enough: untouched, so the prompt can keep growing by appending tokens
        return self.tokenizer.decode(kept) + sep + answer

    def manage_context(self, history: Messages, trajectory_id: str) -> Messages:
        return [
            {**m, "content": self.trim_thinking(m["content"])} if m["role"] == "assistant" else dict(m)
            for m in history
        ]
