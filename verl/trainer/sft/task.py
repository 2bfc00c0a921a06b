"""The synthetic-task data source of main_sft (data.source=task): problems drawn on the fly, Delethink
continuation chunks and long starts among them, and the held-out accuracy evaluation by problem size."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from verl.config.sft import EvalConfig, TaskConfig
from verl.core.delethink import DelethinkParams
from verl.data import shift_register
from verl.data.synthetic import make_problem, problem_sizes, solve
from verl.data.task_problem import TaskProblem
from verl.trainer.sft.batches import Pair
from verl.trainer.sft.continuation import continuation_example, delethink_cuts
from verl.utils.reward_score.synthetic import compute_score


def encode_example(tokenizer: PreTrainedTokenizerBase, problem: TaskProblem) -> tuple[list[int], list[int]]:
    """(prompt ids, target ids): the chat prompt ending in `<think>`, and the reference response + eos."""
    messages = [{"role": "user", "content": problem.question}]
    prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=False)
    target = tokenizer.encode(problem.response, add_special_tokens=False) + [tokenizer.eos_token_id]
    return prompt, target


def draw_training_problem(
    rng: random.Random, task: TaskConfig, max_size: int | None = None, min_size: int | None = None
) -> TaskProblem:
    """A problem of a size drawn uniformly from [min_size or task.min_size, max_size or task.max_size]."""
    size = rng.randint(
        task.min_size if min_size is None else min_size, task.max_size if max_size is None else max_size
    )
    if task.name == "shift_register":
        return shift_register.make_problem(rng, size, task.zero_prob)
    digits = [0 if rng.random() < task.zero_prob else rng.randrange(10) for _ in range(size)]
    return solve(digits, task.labels)


def draw_training_example(
    rng: random.Random, tokenizer: PreTrainedTokenizerBase, task: TaskConfig
) -> tuple[list[int], list[int]]:
    """A whole reference trace; or with probability task.continuation.prob the chunk after a cut drawn
    uniformly among the cuts of a problem up to task.continuation_max_size (a trace too short to be cut
    stays whole), of which task.continuation.answer_prob are cut after `</think>`; or with probability
    task.long_start.prob the start of a problem past task.max_size.
    The first chunk of a long problem is not drawn: with it, one testbed warm start learned far slower
    (recipes/markovian_testbed/README.md); a long start is much shorter."""
    cont, start = task.continuation, task.long_start
    # both options at prob 0 draw nothing more from rng: the default stream is the one without them
    if cont.prob == 0 and start.prob == 0:
        return encode_example(tokenizer, draw_training_problem(rng, task))
    draw = rng.random()
    if draw < cont.prob:
        if cont.answer_prob and rng.random() < cont.answer_prob:
            return draw_answer_cut_example(rng, tokenizer, task)
        prompt, target = encode_example(
            tokenizer, draw_training_problem(rng, task, task.continuation_max_size)
        )
        cuts = delethink_cuts(len(target), cont.params)
        if cuts:
            return continuation_example(prompt, target, rng.choice(cuts), cont.params)
        return prompt, target
    if draw < cont.prob + start.prob:
        problem = draw_training_problem(rng, task, task.continuation_max_size, task.max_size + 1)
        prompt, target = encode_example(tokenizer, problem)
        return prompt, target[: start.tokens]
    return encode_example(tokenizer, draw_training_problem(rng, task))


ANSWER_CUT_DRAWS = 1000  # problems tried for a cut after `</think>` before the sizes are called unfit


def draw_answer_cut_example(
    rng: random.Random, tokenizer: PreTrainedTokenizerBase, task: TaskConfig
) -> tuple[list[int], list[int]]:
    """The chunk after a cut that falls after `</think>`, from the first drawn problem (continuation
    sizes) whose cuts reach its answer; about 2 in 5 do at the demo testbed's RL sizes."""
    params = task.continuation.params
    think_end_id = tokenizer.convert_tokens_to_ids("</think>")
    for _ in range(ANSWER_CUT_DRAWS):
        prompt, target = encode_example(
            tokenizer, draw_training_problem(rng, task, task.continuation_max_size)
        )
        thinking_len = target.index(think_end_id) + 1
        answer_cuts = [cut for cut in delethink_cuts(len(target), params) if cut >= thinking_len]
        if answer_cuts:
            return continuation_example(prompt, target, rng.choice(answer_cuts), params)
    raise ValueError(
        f"task.continuation.answer_prob={task.continuation.answer_prob}: none of {ANSWER_CUT_DRAWS} "
        f"problems of sizes {task.min_size}..{task.continuation_max_size} has a cut after `</think>` "
        f"(chunk_size={params.chunk_size}); raise task.continuation.max_size or lower chunk_size"
    )


@dataclass
class Outcome:
    size: int
    correct: bool
    thinking_tokens: int  # tokens before `</think>` (all of them if the thinking never closed)
    response_tokens: int  # every generated token up to and including eos


def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    max_new_tokens: int,
    do_sample: bool,
) -> list[list[int]]:
    """One response per prompt (all of one length, so no padding), cut after its eos."""
    # top_k=0 and top_p=1 switch off truncation: plain temperature-1 sampling, as RL rollouts use
    sampling = (
        dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0) if do_sample else {"do_sample": False}
    )
    ids = torch.tensor(prompts, device=model.device)
    generated = model.generate(
        input_ids=ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=max_new_tokens,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **sampling,
    )[:, ids.shape[1] :].tolist()
    eos = tokenizer.eos_token_id
    return [response[: response.index(eos) + 1] if eos in response else response for response in generated]


def sample_delethink(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: list[list[int]],
    params: DelethinkParams,
    do_sample: bool,
) -> list[list[int]]:
    """Delethink inference, as DelethinkAgentLoop runs it: up to params.max_chunks chunks, each prompted
    with the question + the carry-over of the response so far and filling the chunk to C; a response
    that wrote eos stops. Every running response has the same carry-over length, so every chunk's
    prompts are of one length as well."""
    responses: list[list[int]] = [[] for _ in prompts]
    for chunk in range(params.max_chunks):
        running = [i for i, r in enumerate(responses) if tokenizer.eos_token_id not in r]
        if not running:
            break
        carried = [params.carry_over(responses[i]) if chunk else [] for i in running]
        new_tokens = params.chunk_size if chunk == 0 else params.intermediate_budget
        chunks = sample(
            model, tokenizer, [prompts[i] + c for i, c in zip(running, carried, strict=True)], new_tokens,
            do_sample,
        )  # fmt: skip
        for i, ids in zip(running, chunks, strict=True):
            responses[i] += ids
    return responses


@torch.no_grad()
def evaluate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    problems: list[TaskProblem],
    max_new_tokens: int,
    do_sample: bool,
    delethink: DelethinkParams | None = None,
) -> list[Outcome]:
    """Generate a response per problem (greedy, or sampled at temperature 1) and score it: in one
    response of at most `max_new_tokens`, or with `delethink` given, by Delethink inference."""
    think_end_id = tokenizer.convert_tokens_to_ids("</think>")
    outcomes = []
    # problems of one size have prompts of one length, so each size is a batch that needs no padding
    for size in sorted({p.size for p in problems}):
        group = [p for p in problems if p.size == size]
        prompts = [encode_example(tokenizer, p)[0] for p in group]
        responses = (
            sample(model, tokenizer, prompts, max_new_tokens, do_sample)
            if delethink is None
            else sample_delethink(model, tokenizer, prompts, delethink, do_sample)
        )
        for problem, ids in zip(group, responses, strict=True):
            thinking = ids.index(think_end_id) if think_end_id in ids else len(ids)
            text = tokenizer.decode(ids, skip_special_tokens=True)
            outcomes.append(Outcome(size, compute_score(text, problem.answer) == 1.0, thinking, len(ids)))
    return outcomes


def summarize(greedy: list[Outcome], sampled: list[Outcome]) -> dict[str, dict[str, float]]:
    """Accuracy and thinking length by problem size ("all" for every size together)."""
    sizes = sorted({o.size for o in greedy})
    summary = {}
    for key, keep in [(str(n), lambda o, n=n: o.size == n) for n in sizes] + [("all", lambda o: True)]:
        g, s = [o for o in greedy if keep(o)], [o for o in sampled if keep(o)]
        summary[key] = {
            "problems": len(g),
            "greedy_accuracy": sum(o.correct for o in g) / len(g),
            "sampled_accuracy": sum(o.correct for o in s) / len(s),
            "greedy_thinking_tokens_mean": sum(o.thinking_tokens for o in g) / len(g),
            "sampled_thinking_tokens_max": max(o.thinking_tokens for o in s),
            "sampled_response_tokens_max": max(o.response_tokens for o in s),
        }
    return summary


def format_summary(summary: dict[str, dict[str, float]]) -> str:
    lines = [" size  problems  greedy_acc  sampled_acc(T=1)  thinking_tokens(greedy_mean,sampled_max)"]
    for key, row in summary.items():
        lines.append(
            f"{key:>5}  {row['problems']:>8}  {row['greedy_accuracy']:>10.2f}"
            f"  {row['sampled_accuracy']:>16.2f}"
            f"  {row['greedy_thinking_tokens_mean']:>8.1f} {row['sampled_thinking_tokens_max']:>5}"
        )
    return "\n".join(lines)


def held_out_problems(seed: str, cfg: EvalConfig, task: TaskConfig) -> list[TaskProblem]:
    """`cfg.num_problems` problems like the RL data (running sum: uniform digits), sizes spread evenly."""
    rng = random.Random(seed)
    sizes = problem_sizes(cfg.num_problems, cfg.min_size, cfg.max_size)
    if task.name == "shift_register":
        return [shift_register.make_problem(rng, n) for n in sizes]
    return [make_problem(rng, n, task.labels) for n in sizes]


class TaskBatches:
    """Training batches of the synthetic task, drawn on the fly from one random stream."""

    def __init__(
        self, seed: int, tokenizer: PreTrainedTokenizerBase, task: TaskConfig, batch_size: int
    ) -> None:
        # a string seed keeps this stream apart from the RL data's (integer seeds)
        self.rng = random.Random(f"sft-train-{seed}")
        self.tokenizer, self.task, self.batch_size = tokenizer, task, batch_size

    def __call__(self) -> list[Pair]:
        return [draw_training_example(self.rng, self.tokenizer, self.task) for _ in range(self.batch_size)]

    def state(self) -> dict[str, Any]:
        return {"rng": self.rng.getstate()}

    def load_state(self, state: dict[str, Any]) -> None:
        version, internal, gauss = state["rng"]
        self.rng.setstate((version, tuple(internal), gauss))
