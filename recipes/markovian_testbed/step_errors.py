"""Where a warm start's thinking goes wrong: the accuracy of each kind of token, step by step.

    python recipes/markovian_testbed/step_errors.py OUT/sft [--problems 200] [--min-steps 6] [--max-steps 27]

Feeds the reference traces of held-out shift-register problems (uniform registers, as RL and the
evaluations draw them) and counts where the model's most likely next token is the reference's. Each
9-token step ` RRR:WWWW` holds three kinds of token: the counter (copied from the question at step 0, then
one less), three register digits copied from the step before, and the new digit (a + b) mod 10 of the two
digits it drops and keeps first. The new digit is split by whether a or b is 0, since a step that adds 0
only copies; zero-rich training registers (task.zero_prob) make those common, and a model that answers
`a` there is right whenever b = 0. One wrong token derails every later step, so a column far below 1.00
at one step caps the whole-trace accuracy on its own.

A model can be right on every token and still miss at T = 1: sampling leaves the reference wherever a
token is not certain, and a trace has hundreds. So it also sums, per kind of token (the fixed `:` and
spaces and the answer included), the probability the model puts off the reference, and gives the chance
that a sample follows the whole reference trace (the product of the reference tokens' probabilities):
about the T = 1 accuracy, since one wrong token is one wrong answer here.
"""

from __future__ import annotations

import argparse
import math
import random
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from verl.data.shift_register import (
    COUNTER_DIGITS,
    REGISTER_OFFSET,
    TOKENS_PER_STEP,
    WIDTH,
    Problem,
    make_problem,
)
from verl.trainer.sft.task import encode_example

KINDS = ("counter", "copy", "new digit, a or b is 0", "new digit, neither is 0")  # in a step's order
# the other response tokens, for what sampling draws off the reference: the `:` and spaces of the
# thinking, and everything after it (`</think>`, the answer, end of sequence)
FIXED, ANSWER = "fixed", "answer"
RESPONSE_KINDS = (*KINDS, FIXED, ANSWER)
NEW_DIGIT = REGISTER_OFFSET + WIDTH - 1  # offset of the new digit within a step
# teacher-forced accuracy below which a kind of token at one step is a rule the model lacks, not a slip:
# a warm start at its target (0.8 of whole traces of hundreds of tokens at T = 1) is right at every
# (step, kind) far more often than this
WEAK = 0.9


def token_kinds(problem: Problem) -> list[tuple[int, str] | None]:
    """(step, kind) of every thinking character in order, None for the fixed ones (':' and the spaces
    between steps)."""
    thinking = problem.thinking
    kinds: list[tuple[int, str] | None] = []
    for pos in range(len(thinking)):
        step, offset = divmod(pos, TOKENS_PER_STEP)
        if 1 <= offset <= COUNTER_DIGITS:  # after the space a step opens with
            kinds.append((step, KINDS[0]))
        elif offset == NEW_DIGIT and step > 0:
            before = (step - 1) * TOKENS_PER_STEP + REGISTER_OFFSET  # the step before's register
            dropped, kept = thinking[before], thinking[before + 1]
            kinds.append((step, KINDS[2] if "0" in (dropped, kept) else KINDS[3]))
        elif REGISTER_OFFSET <= offset < REGISTER_OFFSET + WIDTH:
            kinds.append((step, KINDS[1]))  # step 0's register digits are copied from the question
        else:
            kinds.append(None)
    return kinds


def tally(
    kinds: list[tuple[int, str] | None], hits: list[bool], counts: dict[tuple[int, str], list[int]]
) -> None:
    """Add one trace to counts[(step, kind)] = [right, total]; hits[i]: thinking character i predicted."""
    for kind, hit in zip(kinds, hits, strict=True):
        if kind is not None:
            right_total = counts.setdefault(kind, [0, 0])
            right_total[0] += hit
            right_total[1] += 1


@dataclass
class Errors:
    """What count_errors measures on held-out reference traces."""

    # (step, kind) -> [tokens the model's most likely next token got right, tokens]
    counts: dict[tuple[int, str], list[int]] = field(default_factory=dict)
    # each of RESPONSE_KINDS -> the probability the model puts off the reference token, summed over traces
    off_reference: dict[str, float] = field(default_factory=lambda: dict.fromkeys(RESPONSE_KINDS, 0.0))
    # per trace, the probability that a T = 1 sample follows it to the end
    followed: list[float] = field(default_factory=list)

    def add_sampled(self, kinds: list[tuple[int, str] | None], p_reference: list[float]) -> None:
        """One trace's reference-token probabilities, its thinking's (with `kinds`) then the rest."""
        for i, p in enumerate(p_reference):
            kind = (kinds[i][1] if kinds[i] else FIXED) if i < len(kinds) else ANSWER
            self.off_reference[kind] += 1 - p
        self.followed.append(math.prod(p_reference))

    def sampling(self) -> str:
        """One sentence: how likely a T = 1 sample follows the reference, and where it leaves it."""
        traces = len(self.followed)
        wrong = sum(self.off_reference.values()) / traces
        parts = "; ".join(f"{kind}: {mass / traces:.3f}" for kind, mass in self.off_reference.items())
        return (
            f"a T = 1 sample follows the whole reference trace with probability "
            f"{sum(self.followed) / traces:.3f}; it draws {wrong:.3f} tokens off it per trace ({parts})"
        )


def table(counts: dict[tuple[int, str], list[int]], show: int) -> str:
    """One row per step below `show`, then every later step pooled; accuracy (and count) per kind."""

    def cell(cells: list[list[int]]) -> str:
        right, total = sum(c[0] for c in cells), sum(c[1] for c in cells)
        return f"{right / total:.2f} ({total})" if total else "-"

    steps = sorted({step for step, _ in counts})
    rows = [(str(s), [s]) for s in steps if s < show]
    if steps and steps[-1] >= show:
        rows.append((f"{show}+", [s for s in steps if s >= show]))
    lines = ["| step | " + " | ".join(KINDS) + " |", "|---" * (len(KINDS) + 1) + "|"]
    for label, members in rows:
        cells = [cell([counts[(s, k)] for s in members if (s, k) in counts]) for k in KINDS]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def first_weak(counts: dict[tuple[int, str], list[int]], weak: float = WEAK) -> tuple[int, str, float] | None:
    """(step, kind, accuracy) of the earliest token kind, in trace order, right less often than `weak`."""
    for step, kind in sorted(counts, key=lambda sk: (sk[0], KINDS.index(sk[1]))):
        right, total = counts[(step, kind)]
        if right < weak * total:
            return step, kind, right / total
    return None


def where_it_goes_wrong(errors: Errors) -> str:
    """One phrase: the first weak (step, kind) with its accuracy; where no kind at any step is weak, what
    T = 1 sampling makes of the model's uncertainty."""
    weak = first_weak(errors.counts)
    if weak is None:
        return (
            f"under teacher forcing every kind of token at every step is right at least {WEAK} of the time, "
            f"but {errors.sampling()}"
        )
    step, kind, accuracy = weak
    return f"its trace first goes wrong at step {step}'s {kind} (teacher-forced accuracy {accuracy:.2f})"


@torch.no_grad()
def count_errors(model_dir: Path, num_problems: int, min_steps: int, max_steps: int, seed: int) -> Errors:
    """Errors of the model in `model_dir` on `num_problems` held-out problems of min..max steps."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    rng = random.Random(seed)
    errors = Errors()
    for _ in range(num_problems):
        problem = make_problem(rng, rng.randint(min_steps, max_steps))
        prompt, target = encode_example(tokenizer, problem)
        length = len(problem.thinking)
        if tokenizer.decode(target[:length]) != problem.thinking:
            raise ValueError(f"{model_dir}: its tokenizer does not give one token per thinking character")
        ids = torch.tensor([prompt + target])
        logits = model(ids).logits[0, len(prompt) - 1 : -1]  # the predictions of the response's tokens
        reference = torch.tensor(target)
        hits = (logits[:length].argmax(-1) == reference[:length]).tolist()
        kinds = token_kinds(problem)
        tally(kinds, hits, errors.counts)
        p_reference = logits.softmax(-1).gather(1, reference[:, None])[:, 0]
        errors.add_sampled(kinds, p_reference.tolist())
    return errors


# tokens whose heads --heads reports, by their offset in the thinking: the first step (a copy of the
# question) against the first sum and two later sums, which every other step resembles
HEAD_TOKENS = {
    "step 0's counter, last digit": COUNTER_DIGITS,
    "step 1's new digit": TOKENS_PER_STEP + NEW_DIGIT,
    "step 2's new digit": 2 * TOKENS_PER_STEP + NEW_DIGIT,
    "step 5's new digit": 5 * TOKENS_PER_STEP + NEW_DIGIT,
}


@torch.no_grad()
def head_offsets(model_dir: Path, num_problems: int, min_steps: int, max_steps: int, seed: int) -> str:
    """Where each attention head looks when the model predicts each of HEAD_TOKENS: the offset (from the
    predicted token) that gets the most attention weight, and that weight averaged over the problems.
    A head that reads a digit at one offset at every step but another at step 1 shows here."""
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    rng = random.Random(seed)
    heads = [(layer, head) for layer in range(model.config.num_hidden_layers)
             for head in range(model.config.num_attention_heads)]  # fmt: skip
    weight: dict[tuple[str, int, int], Counter[int]] = defaultdict(Counter)
    for _ in range(num_problems):
        problem = make_problem(rng, rng.randint(max(min_steps, 5), max(max_steps, 5)))
        prompt, target = encode_example(tokenizer, problem)
        attentions = model(torch.tensor([prompt + target]), output_attentions=True).attentions
        for label, offset in HEAD_TOKENS.items():
            predicted = len(prompt) + offset  # its logits come from the position before it
            for layer, head in heads:
                for source, w in enumerate(attentions[layer][0, head, predicted - 1].tolist()):
                    weight[(label, layer, head)][source - predicted] += w / num_problems
    lines = [
        "| token | " + " | ".join(f"L{layer}H{head}" for layer, head in heads) + " |",
        "|---" * (len(heads) + 1) + "|",
    ]
    for label in HEAD_TOKENS:
        tops = [weight[(label, *lh)].most_common(1)[0] for lh in heads]
        lines.append(f"| {label} | " + " | ".join(f"{o:+d} ({w:.2f})" for o, w in tops) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path, help="a saved model, e.g. OUT/sft")
    parser.add_argument("--problems", type=int, default=200, help="held-out problems (uniform registers)")
    parser.add_argument(
        "--min-steps", type=int, default=6, help="fewest steps n (6..27: the demo's RL sizes)"
    )
    parser.add_argument("--max-steps", type=int, default=27, help="most steps n")
    parser.add_argument("--show", type=int, default=6, help="steps shown one per row; later ones pooled")
    parser.add_argument("--seed", type=int, default=4321, help="draws the problems")
    parser.add_argument(
        "--heads", action="store_true", help="also where each attention head looks at the first steps"
    )
    args = parser.parse_args(argv)
    if args.problems < 1 or args.show < 1 or not 1 <= args.min_steps <= args.max_steps:
        parser.error("need --problems >= 1, --show >= 1 and 1 <= --min-steps <= --max-steps")
    torch.set_num_threads(2)
    errors = count_errors(args.model_dir, args.problems, args.min_steps, args.max_steps, args.seed)
    print(
        f"{args.model_dir}: teacher-forced accuracy of each token kind, {args.problems} problems of "
        f"{args.min_steps}..{args.max_steps} steps"
    )
    print(table(errors.counts, args.show))
    print(where_it_goes_wrong(errors))
    if first_weak(errors.counts) is not None:  # otherwise the line above says it
        sampling = errors.sampling()
        print(sampling[0].upper() + sampling[1:])
    if args.heads:
        print("\nThe offset each head gives the most weight to, and that weight (mean over the problems):")
        print(head_offsets(args.model_dir, args.problems, args.min_steps, args.max_steps, args.seed))


if __name__ == "__main__":
    main()
