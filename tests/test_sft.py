"""SFT warm start: batching, the lr schedule, a few real steps, early stopping, continuation examples
(checked token for token against the real Delethink agent loop), and the CLI."""

import asyncio
import dataclasses
import json
import math
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.e2e_utils import HANG_S
from tests.tolerances import FORWARD_ULPS, assert_gradients_close, metric_approx
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.config import ConfigError
from verl.config import sft as sft_config
from verl.core.delethink import DelethinkParams
from verl.core.engine import GenerateOutput, RolloutEngine, SamplingParams
from verl.core.trajectory import PromptItem
from verl.data import shift_register
from verl.data.rl_dataset import encode_prompt
from verl.data.synthetic import solve
from verl.models.tiny import build_model, build_tokenizer, save_tiny
from verl.trainer import main_sft
from verl.trainer.sft import batches
from verl.trainer.sft import loop as sft_loop
from verl.trainer.sft import task as sft_task
from verl.trainer.sft.continuation import continuation_example, delethink_cuts

CONFIG_DIR = Path(main_sft.__file__).parent / "config"


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer()


def train_config(**overrides) -> sft_config.TrainConfig:
    values = dict(
        steps=10,
        batch_size=4,
        lr=3e-3,
        warmup_steps=0,
        min_lr_ratio=1.0,
        weight_decay=0.0,
        grad_clip=1.0,
        seed=0,
        stop_at_accuracy=None,
        check_every=1,
        micro_batches=1,
    )
    return sft_config.TrainConfig(**{**values, **overrides})


def test_collate_pads_right_and_masks_prompt_and_padding():
    batch = batches.collate([([1, 2], [3, 4]), ([5], [6])], pad_id=0)
    assert batch["input_ids"].tolist() == [[1, 2, 3, 4], [5, 6, 0, 0]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, -100, 3, 4], [-100, 6, -100, -100]]


def test_encode_example_is_chat_prompt_then_reference_response_and_eos(tokenizer):
    prompt, target = sft_task.encode_example(tokenizer, solve([3, 5]))
    user, assistant, think, think_end = tokenizer.convert_tokens_to_ids(
        ["<|user|>", "<|assistant|>", "<think>", "</think>"]
    )
    assert prompt == [user, *map(ord, "a3 b5"), assistant, think]
    assert target == [*map(ord, "a3=3 b5=8"), think_end, *map(ord, "\\boxed{8}"), tokenizer.eos_token_id]


def test_training_problems_follow_the_task_config():
    task = sft_config.TaskConfig(min_size=2, max_size=3, zero_prob=1.0)
    rng = random.Random(0)
    problems = [sft_task.draw_training_problem(rng, task) for _ in range(50)]
    assert {p.num_terms for p in problems} == {p.size for p in problems} == {2, 3}
    assert all(p.answer == "0" and set(p.question) <= set("abc0 ") for p in problems)
    # the shift register: sizes are steps; a larger max_size (continuation problems) widens the range
    task = sft_config.TaskConfig(name="shift_register", min_size=4, max_size=6)
    problems = [sft_task.draw_training_problem(rng, task) for _ in range(50)]
    assert {p.num_steps for p in problems} == {4, 5, 6}
    assert all(p == shift_register.solve(*shift_register.parse_question(p.question)) for p in problems)
    assert {sft_task.draw_training_problem(rng, task, 40).size for _ in range(200)} == set(range(4, 41))


def test_delethink_cuts_fall_after_c_then_every_c_minus_m_and_never_at_the_end():
    # C = 32, m = 16: cuts after 32, 48, 64, ... tokens; a 64-token response ends (eos) inside chunk 3
    params = DelethinkParams(chunk_size=32, keep_head=4, keep_tail=12)
    assert delethink_cuts(64, params) == [32, 48]
    assert delethink_cuts(65, params) == [32, 48, 64]
    assert delethink_cuts(32, params) == []  # chunk 1 holds it all, eos included


def test_continuation_example_is_prompt_plus_head_and_tail_then_the_next_chunk():
    target = list(range(100, 160))
    params = DelethinkParams(chunk_size=32, keep_head=4, keep_tail=12)
    prompt, chunk = continuation_example([1, 2], target, cut=32, params=params)
    assert prompt == [1, 2, 100, 101, 102, 103, *range(120, 132)]
    assert chunk == list(range(132, 148))  # C - m = 16 tokens: where the loop cuts again
    _, last_chunk = continuation_example([1, 2], target, cut=48, params=params)
    assert last_chunk == list(range(148, 160))  # the response ends inside this chunk


class ReplayEngine(RolloutEngine):
    """Writes a fixed reference response, `max_new_tokens` at a time, and records every prompt it gets."""

    def __init__(self, response: list[int], eos_id: int) -> None:
        self.response, self.eos_id = response, eos_id
        self.position = 0
        self.prompts: list[list[int]] = []

    async def generate(self, prompt_ids: list[int], sampling_params: SamplingParams) -> GenerateOutput:
        self.prompts.append(list(prompt_ids))
        out = self.response[self.position : self.position + sampling_params.max_new_tokens]
        self.position += len(out)
        return GenerateOutput(out, [0.0] * len(out), "stop" if out[-1] == self.eos_id else "length")

    def update_weights(self, named_tensors) -> None:
        raise NotImplementedError


@pytest.mark.parametrize("num_terms", [7, 12, 30])
def test_continuation_prompts_are_the_prompts_the_delethink_loop_sends(tokenizer, num_terms):
    problem = solve([(3 * i + 1) % 10 for i in range(num_terms)], labels="abcdef")
    prompt, target = sft_task.encode_example(tokenizer, problem)
    chunk, head, tail = 32, 4, 12
    engine = ReplayEngine(target, tokenizer.eos_token_id)
    params = sft_config.ContinuationConfig(chunk_size=chunk, keep_head=head, keep_tail=tail).params
    loop = DelethinkAgentLoop(engine, dataclasses.replace(params, max_chunks=50))
    # the loop gets its prompt the way RL does (rl_dataset), not from main_sft
    item = PromptItem(encode_prompt(tokenizer, problem.question), "synthetic", problem.answer)
    trajectory = asyncio.run(loop.run(item, SamplingParams(max_new_tokens=chunk, seed=0)))
    assert [t for turn in trajectory.turns for t in turn.response_ids] == target  # the whole trace replayed

    cuts = delethink_cuts(len(target), params)
    assert len(cuts) == len(engine.prompts) - 1 >= 1
    assert engine.prompts[0] == prompt
    for cut, sent, turn in zip(cuts, engine.prompts[1:], trajectory.turns[1:], strict=True):
        example_prompt, chunk = continuation_example(prompt, target, cut, params)
        assert example_prompt == sent
        assert chunk == turn.response_ids  # the example's target is exactly the chunk the loop generated


def test_continuation_option_off_draws_the_same_examples_as_before(tokenizer):
    task = sft_config.TaskConfig(min_size=1, max_size=12, zero_prob=0.3)
    rng_new, rng_old = random.Random(5), random.Random(5)
    for _ in range(40):
        # the stream before the option existed: draw a problem (a..z labels) and encode it whole
        num_terms = rng_old.randint(1, 12)
        digits = [0 if rng_old.random() < 0.3 else rng_old.randrange(10) for _ in range(num_terms)]
        expected = sft_task.encode_example(tokenizer, solve(digits))
        assert sft_task.draw_training_example(rng_new, tokenizer, task) == expected


def test_continuation_option_on_mixes_in_resumed_traces(tokenizer):
    cont = sft_config.ContinuationConfig(prob=0.5, chunk_size=32, keep_head=4, keep_tail=12)
    task = sft_config.TaskConfig(min_size=8, max_size=12, zero_prob=0.0, labels="abcdef", continuation=cont)
    rng = random.Random(0)
    examples = [sft_task.draw_training_example(rng, tokenizer, task) for _ in range(200)]
    think = tokenizer.convert_tokens_to_ids("<think>")
    resumed = [(p, t) for p, t in examples if p[-1] != think]
    assert 70 <= len(resumed) <= 130  # about half (8+ terms: every trace is cut at least once)
    for p, t in resumed:
        assert len(p) - (p.index(think) + 1) == 16  # a carry-over of keep_head + keep_tail tokens
        assert len(t) == 16 or t[-1] == tokenizer.eos_token_id  # one chunk: C - m tokens, or to the end
    labels = {label for p, t in examples for label in re.findall(r"([a-z])[0-9]", tokenizer.decode(p + t))}
    assert labels == set("abcdef")


def test_answer_cuts_resume_after_think_end_where_the_loop_cuts(tokenizer):
    cont = sft_config.ContinuationConfig(prob=1.0, answer_prob=0.5, chunk_size=32, keep_head=4, keep_tail=12)
    task = sft_config.TaskConfig(name="shift_register", min_size=3, max_size=12, continuation=cont)
    think, think_end = (tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>"))
    rng = random.Random(1)
    examples = [sft_task.draw_training_example(rng, tokenizer, task) for _ in range(200)]
    answer_cut = [(p, t) for p, t in examples if think_end in p[p.index(think) :]]
    # half of them by the option; a uniform cut among a problem's cuts lands in the answer now and then too
    assert 90 <= len(answer_cut) <= 150
    for prompt, chunk in answer_cut:
        assert think_end not in chunk and chunk[-1] == tokenizer.eos_token_id  # the rest of the answer
        # the cut is one the loop makes: the carry-over's tail is the response up to a boundary
        question = tokenizer.decode(prompt).split("<|user|>")[1].split("<|")[0].strip()
        start, n = shift_register.parse_question(question)
        target = tokenizer.encode(shift_register.solve(start, n).response, add_special_tokens=False)
        cut = len(target) + 1 - len(chunk)  # the reference response + eos, less the chunk
        assert cut in delethink_cuts(len(target) + 1, cont.params) and cut > target.index(think_end)
        assert prompt[prompt.index(think) + 1 :] == target[:4] + target[cut - 12 : cut]


def test_answer_cuts_from_sizes_too_short_to_cut_name_the_key(tokenizer):
    cont = sft_config.ContinuationConfig(prob=1.0, answer_prob=1.0, chunk_size=512, keep_head=4, keep_tail=12)
    task = sft_config.TaskConfig(name="shift_register", min_size=1, max_size=3, continuation=cont)
    with pytest.raises(
        ValueError, match=r"task.continuation.answer_prob=1.0: none of 1000 problems of sizes 1..3"
    ):
        sft_task.draw_training_example(random.Random(0), tokenizer, task)


def test_long_starts_are_the_first_tokens_of_problems_past_the_whole_trace_sizes(tokenizer):
    task = sft_config.TaskConfig(
        name="shift_register",
        min_size=2,
        max_size=5,
        continuation=sft_config.ContinuationConfig(max_size=40),
        long_start=sft_config.LongStartConfig(prob=0.5, tokens=27),
    )
    rng = random.Random(3)
    examples = [sft_task.draw_training_example(rng, tokenizer, task) for _ in range(200)]
    starts = [(p, t) for p, t in examples if t[-1] != tokenizer.eos_token_id]
    assert 70 <= len(starts) <= 130  # about half; every other example is a whole trace ending in eos
    sizes = set()
    for prompt, target in starts:
        question = tokenizer.decode(prompt).split("<|user|>")[1].split("<|")[0].strip()
        start, n = shift_register.parse_question(question)
        sizes.add(n)
        # the first three steps exactly, counter starting at n: "NNN:WWWW NNN-1:WWWW NNN-2:WWWW "
        assert tokenizer.decode(target) == shift_register.solve(start, n).response[:27]
    assert min(sizes) >= 6 and max(sizes) <= 40 and len(sizes) > 15
    whole = [t for p, t in examples if t[-1] == tokenizer.eos_token_id]
    assert all(len(t) <= shift_register.thinking_tokens(5) + 20 for t in whole)  # whole traces: sizes 2..5


def test_lr_factor_warmup_then_cosine():
    factors = [sft_loop.lr_factor(step, warmup_steps=2, total_steps=6, min_ratio=0.1) for step in range(6)]
    # warm-up 1/2, 2/2; then cosine over steps 2..5 from 1 down to 0.1
    expected = [
        0.5,
        1.0,
        1.0,
        0.1 + 0.45 * (1 + math.cos(math.pi / 3)),
        0.1 + 0.45 * (1 + math.cos(2 * math.pi / 3)),
        0.1,
    ]
    assert factors == pytest.approx(expected)


@pytest.mark.compares_runs
def test_a_few_steps_lower_the_loss_on_a_fixed_batch(tokenizer):
    model = build_model(tokenizer, seed=0)
    problems = [solve([d, (d * 3) % 10, 7]) for d in range(8)]
    batch = batches.collate([sft_task.encode_example(tokenizer, p) for p in problems], tokenizer.pad_token_id)
    with torch.no_grad():
        before = batches.sft_loss(model, batch).item()
    losses = sft_loop.train(model, lambda: [batch], train_config(steps=10))
    with torch.no_grad():
        after = batches.sft_loss(model, batch).item()
    assert len(losses) == 10
    assert losses[0] == metric_approx(before, FORWARD_ULPS)  # the first step's forward
    assert after < 0.7 * before


def test_loss_ignores_prompt_tokens(tokenizer):
    model = build_model(tokenizer, seed=0)
    a = batches.collate([sft_task.encode_example(tokenizer, solve([1, 2]))], tokenizer.pad_token_id)
    b = batches.collate([sft_task.encode_example(tokenizer, solve([1, 2]))], tokenizer.pad_token_id)
    b["labels"][0, :3] = a["input_ids"][0, :3]  # supervise the first prompt tokens too
    with torch.no_grad():
        assert batches.sft_loss(model, a).item() != pytest.approx(batches.sft_loss(model, b).item())
        logits = model(input_ids=a["input_ids"]).logits[0]
    # hand-rolled: mean next-token cross-entropy over the target positions only
    targets = a["labels"][0, 1:]
    keep = targets != -100
    manual = torch.nn.functional.cross_entropy(logits[:-1][keep], targets[keep])
    with torch.no_grad():
        assert batches.sft_loss(model, a).item() == pytest.approx(manual.item(), rel=1e-5)


def test_training_stops_once_the_accuracy_target_is_reached(tokenizer):
    model = build_model(tokenizer, seed=0)
    batch = batches.collate([sft_task.encode_example(tokenizer, solve([1]))], tokenizer.pad_token_id)
    readings = iter([0.1, 0.3, 0.5, 0.9])
    cfg = train_config(steps=20, stop_at_accuracy=0.4, check_every=2)
    losses = sft_loop.train(model, lambda: [batch], cfg, lambda: {sft_loop.CHECK_METRIC: next(readings)})
    assert len(losses) == 6  # checks after steps 2 (0.1), 4 (0.3) and 6 (0.5 >= 0.4)


def test_delethink_inference_resumes_each_chunk_from_the_question_head_and_tail(tokenizer):
    """Chunk by chunk, what DelethinkAgentLoop sends: C = 8 new tokens, then the question + the first 2
    and last 2 tokens so far and 4 new ones, up to I = 3 chunks (16 tokens), generated here one prompt
    at a time from hand-cut slices."""
    model = build_model(tokenizer, seed=0).eval()
    params = DelethinkParams(chunk_size=8, keep_head=2, keep_tail=2, max_chunks=3)
    problems = [shift_register.make_problem(random.Random(i), 3) for i in range(3)]
    prompts = [sft_task.encode_example(tokenizer, p)[0] for p in problems]
    with torch.no_grad():
        responses = sft_task.sample_delethink(model, tokenizer, prompts, params, do_sample=False)

        def greedy(ids: list[int], new: int) -> list[int]:
            return sft_task.sample(model, tokenizer, [ids], new, do_sample=False)[0]

        for prompt, response in zip(prompts, responses, strict=True):
            assert tokenizer.eos_token_id not in response  # an untrained model: every chunk runs to its end
            first = greedy(prompt, 8)
            second = greedy(prompt + first[:2] + first[6:8], 4)
            third = greedy(prompt + first[:2] + second[2:4], 4)  # the last 2 of first + second
            assert response == first + second + third and len(response) == params.thinking_budget


@pytest.mark.parametrize("target", [0.0, 1.0])
def test_accuracy_checks_in_both_inference_modes_stop_on_the_lower(tmp_path, target):
    save_tiny(tmp_path / "init")
    result = run_cli(
        f"model.path={tmp_path / 'init'}", f"output_dir={tmp_path / 'sft'}", "train.steps=2",
        "train.batch_size=8", "train.warmup_steps=1", f"train.stop_at_accuracy={target}",
        "train.check_every=1",
        "eval.num_problems=6", "eval.max_new_tokens=16", "eval.delethink_chunks=2",
        "task.continuation.chunk_size=8", "task.continuation.keep_head=2", "task.continuation.keep_tail=2",
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    checks = json.loads((tmp_path / "sft" / "sft_metrics.json").read_text())["checks"]
    assert "step 1: held-out accuracy (T=1)" in result.stderr + result.stdout
    if target == 0.0:  # LongCoT's reaches it, so Delethink's is checked, and the lower stops at step 1
        assert [c["step"] for c in checks] == [1]
        assert set(checks[0]) == {"step", "accuracy", "longcot", "delethink"}
        assert checks[0]["accuracy"] == min(checks[0]["longcot"], checks[0]["delethink"])
    else:  # an untrained model's LongCoT accuracy is below 1.0: Delethink's is never checked
        assert [c["step"] for c in checks] == [1, 2]
        for c in checks:
            assert set(c) == {"step", "accuracy", "longcot"} and c["accuracy"] == c["longcot"] < 1.0


def test_summarize_counts_by_size():
    greedy = [
        sft_task.Outcome(4, True, 19, 29),
        sft_task.Outcome(4, False, 19, 29),
        sft_task.Outcome(5, True, 24, 34),
    ]
    sampled = [
        sft_task.Outcome(4, False, 30, 40),
        sft_task.Outcome(4, False, 19, 29),
        sft_task.Outcome(5, True, 24, 34),
    ]
    summary = sft_task.summarize(greedy, sampled)
    assert summary["4"]["greedy_accuracy"] == 0.5
    assert summary["4"]["sampled_accuracy"] == 0.0
    assert summary["4"]["sampled_thinking_tokens_max"] == 30
    assert summary["all"]["greedy_accuracy"] == pytest.approx(2 / 3)
    assert summary["all"]["problems"] == 3


def compose_sft(*overrides: str):
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        return compose(config_name="sft_tiny", overrides=list(overrides))


def test_config_errors_name_the_key_and_value(tmp_path):
    save_tiny(tmp_path / "init")
    model = f"model.path={tmp_path / 'init'}"
    config = main_sft.load_sft_config(compose_sft(model, f"output_dir={tmp_path / 'sft'}"))
    assert config.train.steps >= 1 and config.eval.min_size == 4

    with pytest.raises(ConfigError, match="train.lr: Value 'fast'"):
        main_sft.load_sft_config(compose_sft(model, "train.lr=fast"))
    with pytest.raises(ConfigError) as error:
        main_sft.load_sft_config(compose_sft(model, "train.steps=0", "task.max_size=30"))
    assert "train.steps=0: must be >= 1" in str(error.value)
    assert "task.min_size=1, task.max_size=30: need 1 <= min_size <= max_size <= 26 (running_sum)" in str(
        error.value
    )

    with pytest.raises(
        ConfigError, match=r"task.name='sum': must be one of \['running_sum', 'shift_register'\]"
    ):
        main_sft.load_sft_config(compose_sft(model, "task.name=sum"))
    with pytest.raises(ConfigError) as error:
        main_sft.load_sft_config(
            compose_sft(
                model, "task.name=shift_register", "task.max_size=30", "task.continuation.max_size=1000"
            )
        )
    assert (
        "task.continuation.min_size=1, task.continuation.max_size=1000: need 1 <= min_size <= max_size <= 999"
        in str(error.value)
    )
    with pytest.raises(ConfigError, match=r"eval.delethink_chunks=-1: must be >= 0"):
        main_sft.load_sft_config(compose_sft(model, "eval.delethink_chunks=-1"))
    with pytest.raises(ConfigError, match="task.labels='aa'"):
        main_sft.load_sft_config(compose_sft(model, "task.labels=aa"))
    with pytest.raises(ConfigError) as error:
        main_sft.load_sft_config(
            compose_sft(
                model,
                "task.continuation.prob=2",
                "task.continuation.keep_tail=30",
                "task.continuation.answer_prob=-0.1",
            )
        )
    assert "task.continuation.prob=2.0: must be in [0, 1]" in str(error.value)
    assert "task.continuation.answer_prob=-0.1: must be in [0, 1]" in str(error.value)
    assert "task.continuation.keep_tail=30: keep_head + keep_tail = 4 + 30 must be < chunk_size=32" in str(
        error.value
    )
    with pytest.raises(ConfigError) as error:
        main_sft.load_sft_config(
            compose_sft(
                model, "task.continuation.prob=0.5", "task.long_start.prob=0.6", "task.long_start.tokens=0"
            )
        )
    assert "task.long_start.prob=0.6: must be in [0, 1 - task.continuation.prob]" in str(error.value)
    assert "task.long_start.tokens=0: must be >= 1" in str(error.value)
    assert (
        "task.long_start.prob=0.6 needs sizes past task.max_size=12: set task.continuation.max_size above it"
        in str(error.value)
    )

    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "x").write_text("")
    with pytest.raises(ConfigError, match="set force=true"):
        main_sft.load_sft_config(compose_sft(model, f"output_dir={tmp_path / 'sft'}"))


def run_cli(*overrides: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_sft", *overrides],
        capture_output=True,
        text=True,
        timeout=HANG_S,
    )


def test_cli_missing_model_path_says_how_to_make_it(tmp_path):
    missing = tmp_path / "nowhere"
    result = run_cli(f"model.path={missing}", f"output_dir={tmp_path / 'sft'}")
    assert result.returncode != 0
    assert f"python -m verl.models.tiny --out {missing}" in result.stderr
    assert "Traceback" not in result.stderr + result.stdout
    assert not (tmp_path / "sft").exists()


@pytest.mark.slow
def test_cli_writes_a_loadable_checkpoint(tmp_path):
    save_tiny(tmp_path / "init")
    result = run_cli(
        f"model.path={tmp_path / 'init'}",
        f"output_dir={tmp_path / 'sft'}",
        "train.steps=3",
        "train.batch_size=8",
        "train.warmup_steps=1",
        "train.stop_at_accuracy=null",
        "eval.num_problems=9",
        "eval.max_new_tokens=8",
    )
    assert result.returncode == 0, result.stderr
    assert "evaluation on 9 held-out problems" in result.stdout
    out = tmp_path / "sft"
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert model.config.vocab_size == len(tokenizer)
    initial = AutoModelForCausalLM.from_pretrained(tmp_path / "init")
    name = "model.layers.0.mlp.up_proj.weight"
    assert not torch.equal(model.state_dict()[name], initial.state_dict()[name])  # it trained
    metrics = json.loads((out / "sft_metrics.json").read_text())
    assert len(metrics["losses"]) == 3
    assert set(metrics["eval"]) == {"4", "5", "6", "7", "8", "9", "10", "11", "12", "all"}
    assert "steps: 3" in (out / "sft_config.yaml").read_text()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["init", "sft"]  # no temp dirs left behind


@pytest.mark.compares_runs
def test_length_sorted_micro_batches_give_the_one_batch_gradient(tokenizer):
    # whole traces of 1..40 steps and short chunks: very different lengths, as in the testbed's SFT
    rng = random.Random(0)
    task = sft_config.TaskConfig(
        name="shift_register",
        min_size=1,
        max_size=40,
        continuation=sft_config.ContinuationConfig(
            prob=0.5, max_size=90, chunk_size=64, keep_head=9, keep_tail=23
        ),
    )
    examples = [sft_task.draw_training_example(rng, tokenizer, task) for _ in range(12)]
    pieces = batches.length_sorted_micro_batches(examples, 4, tokenizer.pad_token_id)
    assert [len(p["input_ids"]) for p in pieces] == [3, 3, 3, 3]
    widths = [p["input_ids"].shape[1] for p in pieces]
    assert widths == sorted(widths) and widths[0] < widths[-1]  # each piece pads only to its own longest
    assert sum(batches.num_targets(p) for p in pieces) == sum(len(t) for _, t in examples)
    assert len(batches.length_sorted_micro_batches(examples[:2], 4, tokenizer.pad_token_id)) == 2

    def gradient(micro_batches):
        model = build_model(tokenizer, seed=0)
        loss = batches.backward_mean_loss(model, micro_batches)
        return loss, {name: p.grad for name, p in model.named_parameters()}

    whole_loss, whole_grad = gradient([batches.collate(examples, tokenizer.pad_token_id)])
    split_loss, split_grad = gradient(pieces)
    assert split_loss == metric_approx(whole_loss)
    assert_gradients_close(split_grad, whole_grad)


def test_the_testbed_config_loads_and_its_sizes_fit_the_budgets(tmp_path):
    save_tiny(tmp_path / "init")
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose(config_name="sft_testbed", overrides=[f"model.path={tmp_path / 'init'}"])
    config = main_sft.load_sft_config(cfg)
    cont = config.task.continuation
    assert (config.task.name, cont.params.chunk_size, cont.params.carry) == ("shift_register", 128, 64)
    # whole traces fill at most B = 512 = 4 C; continuation problems reach 4B
    assert shift_register.thinking_tokens(config.task.max_size) <= 4 * cont.chunk_size
    assert shift_register.thinking_tokens(config.task.max_size + 1) > 4 * cont.chunk_size
    assert shift_register.steps_for_thinking_tokens(16 * cont.chunk_size) == config.task.continuation_max_size
    # long starts: the first three steps of problems past the whole traces (the counter starts at n)
    assert (
        config.task.long_start.prob > 0
        and config.task.long_start.tokens == 3 * shift_register.TOKENS_PER_STEP
    )
