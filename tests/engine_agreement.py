"""Two engines' outputs compared on one policy: greedy tokens up to a near tie, log-probs within the
rounding of a reordered float32 sum (tests/tolerances.py)."""

import torch

from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.eval.config import EvalConfig, load_eval_config
from verl.models.tiny import build_model, build_tokenizer


def save_ending_policy(path):
    """The tiny Qwen2 with weights drawn at a larger scale than its initialisation, saved at `path`:
    greedy decoding then writes varied tokens and ends on its own (the freshly initialised model repeats
    one token and never writes EOS)."""
    tokenizer = build_tokenizer()
    model = build_model(tokenizer, seed=0)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.dim() == 2:
                parameter.normal_(0.0, 0.3, generator=generator)
    tokenizer.save_pretrained(path)
    model.save_pretrained(path)
    return path


def recompute(model, prompt, tokens, temperature=1.0):
    """The actor's log-probs of `tokens` after `prompt`, at `temperature`, and its logits there."""
    ids = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model(ids).logits[0, len(prompt) - 1 : -1].float()
    log_probs = (logits / temperature).log_softmax(-1).gather(-1, ids[0, len(prompt) :, None])[:, 0]
    return log_probs, logits


def assert_log_probs_close(got: list[float], want: torch.Tensor, logits: torch.Tensor, temperature=1.0):
    """An engine's log-probs against the actor's: log p = z - logsumexp(z) of the scaled logits z, so
    their rounding is in ulps of the largest |z|, not of |log p| (large logits, a small log-prob)."""
    atol = reordered_atol(logits / temperature, FORWARD_ULPS)
    torch.testing.assert_close(torch.tensor(got), want, atol=atol, rtol=0)


def assert_greedy_agree(model, prompt, got, want):
    """Greedy tokens of two engines agree, or part at a near tie of the top two logits: a reordered sum
    may flip an argmax whose margin is within rounding, and after that the two continue different texts."""
    common = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), None)
    if common is None:
        assert len(got) == len(want), (got, want)
        return
    _, logits = recompute(model, prompt, want[: common + 1])
    top2 = logits[common].topk(2).values
    margin = (top2[0] - top2[1]).item()
    assert margin <= 2 * reordered_atol(logits[common], FORWARD_ULPS), (common, margin, got, want)


def chunk_prompt_ids(config, question_ids: list[int], chunks: list[dict], k: int) -> list[int]:
    """Chunk k's prompt, rebuilt exactly: the question, then (Delethink, after a boundary) the carry-over
    of the thinking so far (a record holds the prompt as text, which need not encode back to its ids)."""
    if k == 0:
        return question_ids
    thinking = [t for chunk in chunks[:k] for t in chunk["response_ids"]]
    return question_ids + config.delethink.sweep()[0].carry_over(thinking)


def assert_samples_agree(model, config, questions, ours: list[dict], theirs: list[dict]) -> tuple[int, int]:
    """Two evaluations' samples.jsonl records (the same config but its engine), run by run and problem by
    problem: each chunk's prompt and greedy response agree up to a near tie, after which the traces part;
    traces that agree whole have the same answer and score. Returns (traces equal whole, chunks equal)."""
    whole_traces_equal, chunks_compared = 0, 0
    for a, b in zip(ours, theirs, strict=True):
        assert (a["run"], a["problem_index"]) == (b["run"], b["problem_index"])
        for k, (chunk_a, chunk_b) in enumerate(zip(a["chunks"], b["chunks"], strict=False)):
            assert chunk_a["prompt"] == chunk_b["prompt"]  # the question, then the same carry-over
            prompt_ids = chunk_prompt_ids(config, questions[a["problem_index"]], a["chunks"], k)
            assert chunk_a["prompt_tokens"] == len(prompt_ids)
            assert_greedy_agree(model, prompt_ids, chunk_a["response_ids"], chunk_b["response_ids"])
            if chunk_a["response_ids"] != chunk_b["response_ids"]:
                break  # a near tie: the traces part here
            chunks_compared += 1
        else:
            assert len(a["chunks"]) == len(b["chunks"])
            assert (a["trace"], a["score"], a["has_eos"]) == (b["trace"], b["score"], b["has_eos"])
            whole_traces_equal += 1
    return whole_traces_equal, chunks_compared


ENGINE_CLASSES = {"hf": "HFRolloutEngine", "sglang": "SGLangRolloutEngine"}


def evaluate_on_both_engines(overrides: list[str], out_dir) -> tuple[dict[str, list[dict]], EvalConfig]:
    """main_eval's evaluation with `overrides` through each engine (into out_dir/<engine>): the samples
    each wrote, and the config they share but for the engine."""
    from tests.test_eval import compose, read_samples, run_eval

    samples = {}
    for engine, engine_class in ENGINE_CLASSES.items():
        summary = run_eval([*overrides, f"output_dir={out_dir / engine}", f"engine={engine}"])
        assert summary["engine"] == engine_class  # the engine asked for wrote the traces
        samples[engine] = read_samples(out_dir / engine)
    return samples, load_eval_config(compose([*overrides, f"output_dir={out_dir}"]))
