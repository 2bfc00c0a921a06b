import asyncio
import math
import runpy
from pathlib import Path

import pytest
import torch
import transformers

from tests.e2e_utils import HANG_S
from tests.tolerances import assert_forward_close
from verl.core.engine import SamplingParams
from verl.tools.cost_model import qwen2_dims, sequence_cost
from verl.workers.rollout.hf_engine import HFRolloutEngine, prefill_groups, prefill_inputs
from verl.workers.rollout.kv_cache import SlotKVCache
from verl.workers.rollout.prefix_store import PrefixStore
from verl.workers.rollout.sampler import (
    as_int64,
    counter_uniform,
    sample_next_tokens,
    sample_unfiltered,
    splitmix64,
)

torch.set_num_threads(1)

EOS, PAD = 1, 0


# the decoder architectures of this field's models (the R1 distills are Qwen2 and Llama); Qwen2 and Qwen3
# take the engine's prepared mask by layer type, Llama as a tensor
ARCHITECTURES = ("Qwen2", "Qwen3", "Llama")


def make_model(
    seed: int = 0, tie: bool = False, max_positions: int = 256, architecture: str = "Qwen2"
) -> transformers.PreTrainedModel:
    torch.manual_seed(seed)
    config = getattr(transformers, f"{architecture}Config")(
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        max_position_embeddings=max_positions,
        tie_word_embeddings=tie,
        attn_implementation="sdpa",
    )
    return getattr(transformers, f"{architecture}ForCausalLM")(config).eval()


def make_prompt(length: int, offset: int = 0) -> list[int]:
    # ids 2..63: never the pad or eos id, so prompts cannot look finished
    return [2 + (offset + 7 * i) % 62 for i in range(length)]


def run(engine: HFRolloutEngine, requests: list[tuple[list[int], SamplingParams]]):
    """Submit all requests concurrently on one loop and return their outputs in order."""

    async def main():
        return await asyncio.gather(*(engine.generate(p, s) for p, s in requests))

    return asyncio.run(main())


def run_one_at_a_time(engine: HFRolloutEngine, requests: list[tuple[list[int], SamplingParams]]):
    return [run(engine, [request])[0] for request in requests]


def full_forward_log_probs(
    model, prompt: list[int], response: list[int], temperature: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probs of `response` (and the logits that predicted it) from one un-padded, un-cached forward
    over prompt + response."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1 : -1].float()
    scale = temperature if temperature > 0 else 1.0
    log_probs = (logits / scale).log_softmax(dim=-1)
    return log_probs.gather(-1, torch.tensor(response).unsqueeze(-1)).squeeze(-1), logits


def test_sample_next_tokens_against_hand_computed_rows():
    # probs [0.2, 0.5, 0.3, 0] for ids 0..3 (id 3 has logit -inf).
    # Vocabulary order (no filter): cumulative mass 0.2, 0.7, 1.0, 1.0.
    # Sorted order (top-k / top-p): ids 1, 2, 0 with cumulative mass 0.5, 0.8, 1.0.
    row = torch.tensor([0.2, 0.5, 0.3, 0.0]).log()
    logits = row.repeat(10, 1)
    temperature = torch.tensor([1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 1.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.6, 0.6, 1.0, 1.0, 0.6, 1.0])
    top_k = torch.tensor([-1, -1, -1, 1, -1, -1, -1, 2, -1, -1])
    uniform = torch.tensor([0.6, 0.1, 0.75, 0.99, 0.7, 0.6, 0.99, 0.9, 1.0, 1.0])
    tokens, log_probs = sample_next_tokens(logits, temperature, top_p, top_k, uniform)
    # rows 0-2, unfiltered, vocabulary order: 0.6 in (0.2, 0.7] -> id 1; 0.1 <= 0.2 -> id 0;
    #        0.75 in (0.7, 1.0] -> id 2
    # row 3: top_k=1 keeps only id 1
    # row 4: top_p=0.6 keeps ids 1, 2 (mass before them 0, 0.5); 0.7 * 0.8 = 0.56 in (0.5, 0.8] -> id 2
    # row 5: same filter; 0.6 * 0.8 = 0.48 < 0.5 -> id 1
    # row 6: greedy -> id 1 whatever the draw
    # row 7: T=2 gives probs ∝ sqrt(p): 0.2628, 0.4155, 0.3218 for ids 0, 1, 2; top_k=2 keeps ids 1, 2
    #        (mass 0.7372); 0.9 * 0.7372 = 0.6635 > 0.4155 -> id 2
    # rows 8, 9: a draw that lands exactly on the kept (row 8) or total (row 9) mass, as float rounding
    #        can make it, must still pick a token of non-zero probability: id 2, not id 0 or id 3
    assert tokens.tolist() == [1, 0, 2, 1, 2, 1, 1, 2, 2, 2]
    sqrt_total = math.sqrt(0.2) + math.sqrt(0.5) + math.sqrt(0.3)
    expected = [0.5, 0.2, 0.3, 0.5, 0.3, 0.5, 0.5, math.sqrt(0.3) / sqrt_total, 0.3, 0.3]
    # the log-prob is of the unfiltered tempered distribution, not the renormalised filtered one
    assert torch.allclose(log_probs, torch.tensor(expected).log(), atol=1e-6)


@pytest.mark.compares_runs
def test_sample_unfiltered_is_sample_next_tokens_bit_for_bit_on_its_rows():
    generator = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 263, generator=generator) * 4
    logits[:8, 7] = 30.0  # rows with one dominant token, where the cdf's rounding matters most
    temperature = torch.rand(64, generator=generator) * 2 + 0.05
    uniform = counter_uniform(torch.arange(64), torch.arange(64))
    off_p, off_k = torch.ones(64), torch.full((64,), -1)
    tokens, log_probs = sample_unfiltered(logits, temperature, uniform)
    expected_tokens, expected_log_probs = sample_next_tokens(logits, temperature, off_p, off_k, uniform)
    assert torch.equal(tokens, expected_tokens) and torch.equal(log_probs, expected_log_probs)


# The first outputs of splitmix64 seeded with 1234567, from its reference C implementation.
SPLITMIX64_1234567 = [6457827717110365317, 3203168211198807973, 9817491932198370423, 4593380528125082431]


def splitmix64_reference(seed: int, counter: int) -> int:
    """Plain-Python splitmix64 output `counter` for `seed`, on unsigned 64-bit integers."""
    mask = 2**64 - 1
    z = (seed + (counter + 1) * 0x9E3779B97F4A7C15) & mask
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
    return z ^ (z >> 31)


def test_splitmix64_matches_the_published_sequence_and_a_plain_python_reference():
    out = splitmix64(torch.full((4,), 1234567), torch.arange(4))
    assert [v & (2**64 - 1) for v in out.tolist()] == SPLITMIX64_1234567
    # Many elements take torch's vectorised int64 kernels; seeds span the whole 64-bit range, so the
    # wrap-around and the sign bit (logical vs arithmetic shift) are exercised.
    gen = torch.Generator().manual_seed(0)
    seeds = [int(s) for s in torch.randint(-(2**63), 2**63 - 1, (1000,), generator=gen)]
    counters = list(range(1000))
    out = splitmix64(torch.tensor(seeds), torch.tensor(counters))
    expected = [splitmix64_reference(s & (2**64 - 1), c) for s, c in zip(seeds, counters, strict=True)]
    assert [v & (2**64 - 1) for v in out.tolist()] == expected


def test_counter_uniform_is_the_top_24_bits_of_splitmix64():
    # 6457827717110365317 >> 40 = 5873360; 3203168211198807973 >> 40 = 2913264 (published outputs above)
    draws = counter_uniform(torch.full((2,), 1234567), torch.arange(2))
    assert draws.tolist() == [5873360 / 2**24, 2913264 / 2**24]
    # A seed past 2**63 (as Python ints allow) keeps its low 64 bits.
    assert as_int64(2**64 + 5) == 5 and as_int64(2**64 - 1) == -1 and as_int64(2**63) == -(2**63)
    # 10,000 draws of one seed fill ten equal bins evenly (binomial sd 0.003 per bin).
    many = counter_uniform(torch.full((10_000,), as_int64(2**63 + 11)), torch.arange(10_000))
    assert 0 <= float(many.min()) and float(many.max()) < 1
    bins = torch.histc(many, bins=10, min=0, max=1) / 10_000
    assert (bins - 0.1).abs().max() < 0.012


@pytest.mark.parametrize(
    ("temperature", "top_p", "top_k", "expected"),
    [
        (1.0, 1.0, -1, [0.2, 0.5, 0.3]),
        (1.0, 0.6, -1, [0.0, 0.5 / 0.8, 0.3 / 0.8]),  # top_p keeps ids 1, 2
        (2.0, 1.0, 2, [0.0, math.sqrt(0.5), math.sqrt(0.3)]),  # ∝ sqrt(p), top 2 (normalised below)
    ],
)
def test_sampled_frequencies_match_the_distribution(temperature, top_p, top_k, expected):
    draws = 4000
    expected = torch.tensor(expected) / sum(expected)
    logits = torch.tensor([0.2, 0.5, 0.3]).log().repeat(draws, 1)
    uniform = counter_uniform(torch.full((draws,), 7), torch.arange(draws))
    tokens, _ = sample_next_tokens(
        logits,
        torch.full((draws,), temperature),
        torch.full((draws,), top_p),
        torch.full((draws,), top_k),
        uniform,
    )
    frequencies = torch.bincount(tokens, minlength=3) / draws
    # binomial sd is at most 0.008 for 4000 draws: 0.025 is three of them
    assert (frequencies - expected).abs().max() < 0.025


@pytest.mark.compares_runs
def test_greedy_batched_equals_one_at_a_time_with_mixed_lengths():
    model = make_model()
    requests = [
        (make_prompt(3 + 4 * i, offset=i), SamplingParams(max_new_tokens=4 + 3 * (i % 4), temperature=0.0))
        for i in range(8)
    ]
    batched_engine = HFRolloutEngine(model, eos_token_ids=[EOS], pad_token_id=PAD)
    batched = run(batched_engine, requests)
    alone = run_one_at_a_time(HFRolloutEngine(model, eos_token_ids=[EOS], pad_token_id=PAD), requests)
    assert batched_engine.num_prefills == 1 and batched_engine.max_rows_per_forward == 8
    for b, a in zip(batched, alone, strict=True):
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        assert_forward_close(torch.tensor(b.log_probs), torch.tensor(a.log_probs))


@pytest.mark.compares_runs
def test_greedy_matches_hf_generate_token_for_token():
    model = make_model()
    prompts = [make_prompt(3 + 5 * i, offset=2 * i) for i in range(5)]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(engine, [(p, SamplingParams(max_new_tokens=24, temperature=0.0)) for p in prompts])
    config = transformers.GenerationConfig(
        do_sample=False, max_new_tokens=24, eos_token_id=None, pad_token_id=PAD
    )
    for prompt, out in zip(prompts, outputs, strict=True):
        with torch.no_grad():  # one prompt per call: HF's own left padding is not under test
            generated = model.generate(torch.tensor([prompt]), generation_config=config)
        assert out.token_ids == generated[0, len(prompt) :].tolist()


@pytest.mark.compares_runs
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_log_probs_match_full_sequence_forward(architecture):
    model = make_model(architecture=architecture)
    params = [
        SamplingParams(max_new_tokens=16, temperature=0.0),
        SamplingParams(max_new_tokens=16, temperature=1.0, seed=1),
        SamplingParams(max_new_tokens=16, temperature=0.7, top_p=0.9, seed=2),
        SamplingParams(max_new_tokens=16, temperature=1.3, top_k=5, seed=3),
    ]
    requests = [(make_prompt(5 + 9 * i, offset=3 * i), p) for i, p in enumerate(params)]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(engine, requests)
    for (prompt, p), out in zip(requests, outputs, strict=True):
        assert len(out.token_ids) == 16 and len(out.log_probs) == 16
        expected, logits = full_forward_log_probs(model, prompt, out.token_ids, p.temperature)
        assert_forward_close(torch.tensor(out.log_probs), expected)
        if p.temperature == 0:
            assert out.token_ids == logits.argmax(dim=-1).tolist()


def greedy_reference(
    model, prompt: list[int], max_new_tokens: int, eos_ids: list[int]
) -> tuple[list[int], str]:
    """Greedy decoding by re-running the whole sequence each step: no cache, no padding, no batching."""
    tokens: list[int] = []
    while len(tokens) < max_new_tokens:
        with torch.no_grad():
            tokens.append(int(model(input_ids=torch.tensor([prompt + tokens])).logits[0, -1].argmax()))
        if tokens[-1] in eos_ids:
            return tokens, "stop"
    return tokens, "length"


@pytest.mark.compares_runs
def test_finish_reasons_eos_included_and_per_row_max_new_tokens():
    model = make_model()
    prompts = [make_prompt(6), make_prompt(9, offset=5), make_prompt(4, offset=11)]
    # Make the 4th greedy token of the first prompt an eos id, so that row must stop early.
    eos_ids = [63, greedy_reference(model, prompts[0], 12, eos_ids=[])[0][3]]
    max_new = [12, 2, 7]
    engine = HFRolloutEngine(model, eos_token_ids=eos_ids, pad_token_id=PAD)
    outputs = run(
        engine,
        [
            (p, SamplingParams(max_new_tokens=n, temperature=0.0))
            for p, n in zip(prompts, max_new, strict=True)
        ],
    )
    expected = [greedy_reference(model, p, n, eos_ids) for p, n in zip(prompts, max_new, strict=True)]
    assert outputs[0].finish_reason == "stop" and len(outputs[0].token_ids) <= 4
    for out, (tokens, reason), prompt in zip(outputs, expected, prompts, strict=True):
        assert out.token_ids == tokens  # eos included when it stopped the row
        assert out.finish_reason == reason
        assert_forward_close(
            torch.tensor(out.log_probs), full_forward_log_probs(model, prompt, tokens, 0.0)[0]
        )

    lengths = [1, 5, 9]
    no_eos = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(no_eos, [(make_prompt(4, offset=n), SamplingParams(max_new_tokens=n)) for n in lengths])
    assert [len(o.token_ids) for o in outputs] == lengths
    assert [len(o.log_probs) for o in outputs] == lengths
    assert all(o.finish_reason == "length" for o in outputs)


@pytest.mark.compares_runs
def test_ignore_eos_writes_max_new_tokens_with_the_same_tokens():
    model = make_model()
    prompt = make_prompt(6)
    free_run, _ = greedy_reference(model, prompt, 12, eos_ids=[])
    eos_ids = [free_run[3]]  # greedy decoding stops at its 4th token, or earlier if the token repeats
    engine = HFRolloutEngine(model, eos_token_ids=eos_ids, pad_token_id=PAD)
    stops, ignores = run(
        engine,
        [(prompt, SamplingParams(max_new_tokens=12, temperature=0.0)),
         (prompt, SamplingParams(max_new_tokens=12, temperature=0.0, ignore_eos=True))],
    )  # fmt: skip
    assert stops.finish_reason == "stop" and stops.token_ids == free_run[: free_run.index(eos_ids[0]) + 1]
    assert ignores.finish_reason == "length" and ignores.token_ids == free_run


def test_concurrent_requests_share_batched_forwards():
    model = make_model()
    new_tokens = 8
    requests = [
        (make_prompt(4 + i % 5, offset=i), SamplingParams(max_new_tokens=new_tokens, seed=i))
        for i in range(32)
    ]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(engine, requests)
    assert all(len(o.token_ids) == new_tokens for o in outputs)
    # one prefill + 7 decode steps for all 32 rows, instead of 32 * 8 = 256 single-row forwards
    assert engine.num_prefills == 1
    assert engine.num_forward_calls == new_tokens
    assert engine.max_rows_per_forward == 32
    assert engine.num_prefill_tokens == sum(len(prompt) for prompt, _ in requests)  # padding not counted
    assert engine.prefill_seconds > 0 and engine.decode_seconds > 0

    capped = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, max_num_seqs=10)
    run(capped, requests)
    assert capped.num_prefills == 4  # 10 + 10 + 10 + 2
    assert capped.num_forward_calls == 4 * new_tokens
    assert capped.max_rows_per_forward == 10


def sampled_reference(model, prompt: list[int], params: SamplingParams) -> list[int]:
    """The tokens a seeded request must get, by re-running the whole sequence for every token (no cache,
    no padding, no batch) and drawing token i with the request's counter draw i."""
    tokens: list[int] = []
    seed = torch.tensor([as_int64(params.seed)])
    for i in range(params.max_new_tokens):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([prompt + tokens])).logits[:, -1]
        token, _ = sample_next_tokens(
            logits,
            torch.tensor([params.temperature]),
            torch.tensor([params.top_p]),
            torch.tensor([params.top_k]),
            counter_uniform(seed, torch.tensor([i])),
        )
        tokens.append(int(token))
    return tokens


@pytest.mark.compares_runs
def test_batched_cached_decoding_samples_the_tokens_of_an_uncached_reference_loop():
    # what every change to the decode step must keep: the tokens of each seed, whatever the batch
    model = make_model()
    params = [
        SamplingParams(max_new_tokens=40, temperature=1.0, seed=11),
        SamplingParams(max_new_tokens=40, temperature=0.0, seed=15),
        SamplingParams(max_new_tokens=25, temperature=0.7, top_p=0.9, seed=12),
        SamplingParams(max_new_tokens=40, temperature=1.3, top_k=5, seed=13),
        SamplingParams(max_new_tokens=33, temperature=1.0, seed=14),
    ]
    requests = [(make_prompt(4 + 11 * i, offset=5 * i), p) for i, p in enumerate(params)]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    for (prompt, p), out in zip(requests, run(engine, requests), strict=True):
        assert out.token_ids == sampled_reference(model, prompt, p)


@pytest.mark.compares_runs
def test_seeded_sampling_ignores_batch_composition():
    model = make_model()
    prompt = make_prompt(7)
    seeded = SamplingParams(max_new_tokens=20, temperature=1.0, seed=123)
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    alone = run(engine, [(prompt, seeded)])[0]
    others = [
        (make_prompt(3 + 5 * i, offset=i), SamplingParams(max_new_tokens=5 + i, seed=i)) for i in range(7)
    ]
    in_batch = run(engine, others[:3] + [(prompt, seeded)] + others[3:])[3]
    assert in_batch.token_ids == alone.token_ids
    assert_forward_close(torch.tensor(in_batch.log_probs), torch.tensor(alone.log_probs))
    again = run(engine, [(prompt, seeded)])[0]
    assert again.token_ids == alone.token_ids
    other_seed = run(engine, [(prompt, SamplingParams(max_new_tokens=20, temperature=1.0, seed=124))])[0]
    assert other_seed.token_ids != alone.token_ids


@pytest.mark.compares_runs
def test_seeded_request_joining_mid_decode_samples_as_if_alone():
    model = make_model()
    prompt, seeded = make_prompt(7), SamplingParams(max_new_tokens=20, temperature=1.0, seed=123)
    alone = run(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD), [(prompt, seeded)])[0]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)

    async def main():
        others = [
            asyncio.ensure_future(
                engine.generate(make_prompt(3 + 5 * i, offset=i), SamplingParams(max_new_tokens=30, seed=i))
            )
            for i in range(5)
        ]
        while engine.num_forward_calls < 4:  # the others are decoding
            await asyncio.sleep(0)
        joined = await engine.generate(prompt, seeded)
        await asyncio.gather(*others)
        return joined

    joined = asyncio.run(main())
    assert engine.num_prefills == 2 and engine.max_rows_per_forward == 6  # it joined the running five
    assert joined.token_ids == alone.token_ids
    assert_forward_close(torch.tensor(joined.log_probs), torch.tensor(alone.log_probs))


def test_unseeded_requests_follow_the_engine_seed():
    model = make_model()
    unseeded = [(make_prompt(7), SamplingParams(max_new_tokens=20))] * 2
    first = run(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, seed=5), unseeded)
    second = run(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, seed=5), unseeded)
    assert [o.token_ids for o in first] == [o.token_ids for o in second]
    # each request draws its own seed, so identical prompts still get different samples
    assert first[0].token_ids != first[1].token_ids


@pytest.mark.compares_runs
@pytest.mark.parametrize("tie", [False, True])
def test_update_weights_in_place_matches_a_fresh_model(tie):
    old, new = make_model(seed=0, tie=tie), make_model(seed=1, tie=tie)
    requests = [
        (make_prompt(6), SamplingParams(max_new_tokens=10, temperature=0.0)),
        (make_prompt(11, offset=2), SamplingParams(max_new_tokens=10, temperature=1.0, seed=9)),
    ]
    engine = HFRolloutEngine(old, eos_token_ids=[EOS], pad_token_id=PAD)
    before = run(engine, requests)
    storage = {name: p.data_ptr() for name, p in old.named_parameters()}

    engine.update_weights(new.state_dict().items())

    assert {name: p.data_ptr() for name, p in old.named_parameters()} == storage
    if tie:
        assert old.lm_head.weight.data_ptr() == old.model.embed_tokens.weight.data_ptr()
    after = run(engine, requests)
    fresh = run(HFRolloutEngine(new, eos_token_ids=[EOS], pad_token_id=PAD), requests)
    assert before[1].log_probs != pytest.approx(after[1].log_probs, abs=1e-3)
    for a, f in zip(after, fresh, strict=True):  # the same weights through the same code: bit for bit
        assert a.token_ids == f.token_ids
        assert a.log_probs == f.log_probs


def test_update_weights_rejects_bad_entries_without_touching_the_model():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[EOS], pad_token_id=PAD)
    norm = model.model.norm.weight.detach().clone()
    good = ("model.norm.weight", torch.full_like(norm, 3.0))
    with pytest.raises(KeyError, match="model.layers.9.mlp.up_proj.weight"):
        engine.update_weights([good, ("model.layers.9.mlp.up_proj.weight", torch.zeros(1))])
    with pytest.raises(ValueError, match=r"lm_head.weight.*\(64, 32\).*\(64, 64\)"):
        engine.update_weights([good, ("lm_head.weight", torch.zeros(64, 32))])
    assert torch.equal(model.model.norm.weight, norm)


@pytest.mark.parametrize(
    ("prompt", "params", "message"),
    [
        (make_prompt(60), SamplingParams(max_new_tokens=5), r"prompt length 60 \+ max_new_tokens 5 = 65.*64"),
        ([], SamplingParams(max_new_tokens=5), "prompt_ids is empty"),
        ([3, 64], SamplingParams(max_new_tokens=5), r"outside the vocabulary \[0, 64\): \[64\]"),
        (make_prompt(4), SamplingParams(max_new_tokens=0), "max_new_tokens=0"),
        (make_prompt(4), SamplingParams(max_new_tokens=5, top_k=0), "top_k=0"),
        (make_prompt(4), SamplingParams(max_new_tokens=5, top_p=0.0), "top_p=0.0"),
        (make_prompt(4), SamplingParams(max_new_tokens=5, temperature=-1.0), "temperature=-1.0"),
    ],
)
def test_bad_requests_are_rejected_with_a_clear_error(prompt, params, message):
    engine = HFRolloutEngine(make_model(max_positions=64), eos_token_ids=[EOS], pad_token_id=PAD)
    with pytest.raises(ValueError, match=message):
        run(engine, [(prompt, params)])
    assert engine.num_forward_calls == 0


@pytest.mark.compares_runs
def test_request_submitted_mid_decode_joins_the_running_batch():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    long_request = (make_prompt(6, offset=2), SamplingParams(max_new_tokens=30, seed=8))
    follow_up_request = (make_prompt(8, offset=1), SamplingParams(max_new_tokens=3, seed=4))

    async def main():
        long = asyncio.ensure_future(engine.generate(*long_request))
        await engine.generate(make_prompt(5), SamplingParams(max_new_tokens=2))
        forwards_at_submit = engine.num_forward_calls
        follow_up = await engine.generate(*follow_up_request)
        progress = (forwards_at_submit, engine.num_forward_calls, long.done())
        return follow_up, await long, progress

    follow_up, long, progress = asyncio.run(main())
    # The short row is resolved after prefill + 1 decode step. Its caller's follow-up is prefilled at
    # the next step and decodes beside the long row, finishing 2 steps later while the long row runs on.
    assert progress == (2, 5, False)
    assert engine.num_prefills == 2 and engine.max_rows_per_forward == 2
    assert engine.num_forward_calls == 30 + 1  # the long row's 30 forwards + the follow-up's prefill
    alone = run_one_at_a_time(
        HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD), [follow_up_request, long_request]
    )
    assert [follow_up.token_ids, long.token_ids] == [a.token_ids for a in alone]
    assert_forward_close(torch.tensor(long.log_probs), torch.tensor(alone[1].log_probs))


@pytest.mark.compares_runs
def test_queued_request_takes_a_freed_row_while_others_decode():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, max_num_seqs=2)
    requests = [
        (make_prompt(6), SamplingParams(max_new_tokens=12, seed=1)),
        (make_prompt(4, offset=1), SamplingParams(max_new_tokens=2, seed=2)),
        (make_prompt(9, offset=2), SamplingParams(max_new_tokens=3, seed=3)),
    ]
    finished_at = {}

    async def generate(name, request):
        output = await engine.generate(*request)
        finished_at[name] = engine.num_forward_calls
        return output

    async def main():
        return await asyncio.gather(*(generate(i, r) for i, r in enumerate(requests)))

    outputs = asyncio.run(main())
    # forward 1 prefills rows 0 and 1 (the cap), 2 decodes them and finishes row 1; request 2 takes the
    # freed row: prefill (3), then it decodes beside row 0 (4, 5) and is done long before row 0 (13)
    assert finished_at == {1: 2, 2: 5, 0: 13}
    assert engine.max_rows_per_forward == 2
    alone = run_one_at_a_time(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD), requests)
    assert [o.token_ids for o in outputs] == [a.token_ids for a in alone]


@pytest.mark.compares_runs
def test_finished_rows_leave_and_moved_rows_keep_their_cache():
    model = make_model()
    rows_per_forward = []
    hook = model.register_forward_pre_hook(
        lambda module, args, kwargs: rows_per_forward.append(kwargs["input_ids"].shape[0]), with_kwargs=True
    )
    max_new = [9, 2, 5, 3]
    prompts = [make_prompt(5 + 3 * i, offset=i) for i in range(4)]
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(
        engine,
        [
            (p, SamplingParams(max_new_tokens=n, temperature=0.0))
            for p, n in zip(prompts, max_new, strict=True)
        ],
    )
    hook.remove()
    # Rows finish after 2, 3, 5 and 9 tokens; each forward carries only the rows still decoding. The
    # first two to finish sit in slots 1 and 3, so later rows are moved into the freed slots.
    assert rows_per_forward == [4, 4, 3, 2, 2, 1, 1, 1, 1]
    for prompt, n, out in zip(prompts, max_new, outputs, strict=True):
        assert out.token_ids == greedy_reference(model, prompt, n, eos_ids=[])[0]
        expected, _ = full_forward_log_probs(model, prompt, out.token_ids, 0.0)
        assert_forward_close(torch.tensor(out.log_probs), expected)


def test_prefix_store_finds_the_longest_stored_prefix_and_starts_over_when_full():
    def kv(length: int, fill: float) -> list[torch.Tensor]:
        return [torch.full((1, length, 2), fill)]  # one layer, 1 kv head, head dim 2: 8 bytes a column

    store = PrefixStore(max_bytes=2 * 8 * 10)  # keys and values of 10 columns
    store.add([1, 2, 3], kv(3, 1.0), kv(3, -1.0))
    store.add([1, 2, 4, 5], kv(4, 2.0), kv(4, -2.0))
    assert store.longest([7, 1]) is None
    match = store.longest([1, 2, 3, 9])
    assert match.length == 3 and match.keys[0][0, :, 0].tolist() == [1.0] * 3
    match = store.longest([1, 2, 9])  # both entries hold [1, 2]: the latest one answers
    assert match.length == 2 and match.values[0][0, 0, 0] == -2.0
    store.add([6, 6, 6, 6], kv(4, 3.0), kv(4, -3.0))  # 7 + 4 columns > 10: the store starts over
    assert store.longest([1, 2]) is None and store.longest([6, 6]).length == 2
    store.add(list(range(11)), kv(11, 4.0), kv(11, -4.0))  # larger than the whole budget: not kept
    assert store.longest([0, 1]) is None


def test_prefix_store_answers_as_a_scan_of_every_entry_does():
    # Random entries over 3 token ids share, split and repeat prefixes at every depth; the store must
    # return what scanning every entry since the last start-over returns: the longest common prefix,
    # and among the entries that reach it the latest one.
    generator = torch.Generator().manual_seed(0)

    def tokens(low: int, high: int) -> list[int]:
        length = int(torch.randint(low, high, (), generator=generator))
        return torch.randint(3, (length,), generator=generator).tolist()

    def common(a: list[int], b: list[int]) -> int:
        pairs = enumerate(zip(a, b, strict=False))
        return next((i for i, (x, y) in pairs if x != y), min(len(a), len(b)))

    store = PrefixStore(max_bytes=2 * 4 * 120)  # keys and values of 120 one-float columns
    entries: list[tuple[list[int], float]] = []
    for step in range(300):
        entry = tokens(1, 12)
        columns = sum(len(e) for e, _ in entries) + len(entry)
        if columns > 120:
            entries = []
        keys = [torch.full((1, len(entry), 1), float(step))]
        store.add(entry, keys, [-k for k in keys])
        entries.append((entry, float(step)))
        query = tokens(0, 14)
        lengths = [common(e, query) for e, _ in entries]
        match = store.longest(query)
        if max(lengths, default=0) == 0:
            assert match is None
            continue
        expected = [tag for (_, tag), n in zip(entries, lengths, strict=True) if n == max(lengths)][-1]
        assert match.length == max(lengths) and match.keys[0][0, 0, 0] == expected


@pytest.mark.compares_runs
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_identical_prompts_prefill_once_and_sample_as_if_apart(architecture):
    model = make_model(architecture=architecture)
    prompt = make_prompt(12)
    requests = [(prompt, SamplingParams(max_new_tokens=10, seed=s)) for s in range(4)]
    requests.append((make_prompt(5, offset=3), SamplingParams(max_new_tokens=10, seed=9)))
    shared = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(shared, requests)
    assert shared.num_prefill_tokens == 12 + 5 and shared.num_reused_prompt_tokens == 3 * 12
    apart = run_one_at_a_time(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD), requests)
    for out, alone in zip(outputs, apart, strict=True):
        assert out.token_ids == alone.token_ids
        assert_forward_close(torch.tensor(out.log_probs), torch.tensor(alone.log_probs))


@pytest.mark.compares_runs
@pytest.mark.parametrize("architecture", ARCHITECTURES)
def test_delethink_chunks_reuse_the_question_and_head_and_sample_the_same_tokens(architecture):
    from verl.agent_loop.delethink import DelethinkAgentLoop
    from verl.agent_loop.manager import run_agent_loops
    from verl.core.delethink import DelethinkParams
    from verl.core.trajectory import PromptItem

    model = make_model(architecture=architecture)
    params = DelethinkParams(chunk_size=16, keep_head=4, keep_tail=4, max_chunks=4)
    items = [PromptItem(make_prompt(6 + i, offset=i), "test", "0") for i in range(3)]
    sampling = [SamplingParams(max_new_tokens=16, seed=i) for i in range(3)]

    def rollout(engine):
        return asyncio.run(run_agent_loops(DelethinkAgentLoop(engine, params), items, sampling))

    reusing = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    whole = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, prefix_store_bytes=0)
    got, expected = rollout(reusing), rollout(whole)
    for a, b in zip(got, expected, strict=True):
        assert [t.response_ids for t in a.turns] == [t.response_ids for t in b.turns]
        for ta, tb in zip(a.turns, b.turns, strict=True):
            assert_forward_close(torch.tensor(ta.rollout_log_probs), torch.tensor(tb.rollout_log_probs))
    # chunks 2..4 of every trace start with question + head, so those tokens are copied, not prefilled
    questions = sum(len(it.prompt_ids) for it in items)
    assert reusing.num_reused_prompt_tokens >= 3 * (questions + 3 * params.keep_head)
    assert reusing.num_prefill_tokens + reusing.num_reused_prompt_tokens == whole.num_prefill_tokens
    assert whole.num_reused_prompt_tokens == 0


def test_prefill_groups_keep_each_forward_at_least_half_real_by_hand():
    # longest first: 55 + 55 + 1 + 1 real in 4 x 55 = 220 <= 2 x 112; a fifth row would be 275 > 226
    assert prefill_groups([1, 55, 1, 1, 55, 1]) == [[1, 4, 0, 2], [3, 5]]
    # fresh prompts of similar lengths stay one forward (4 x 8 = 32 padded for 26 real)
    assert prefill_groups([5, 6, 7, 8]) == [[3, 2, 1, 0]]
    assert prefill_groups([30, 1, 1, 1]) == [[0, 1], [2, 3]]  # 2 x 30 <= 62; then 90 > 64
    assert prefill_groups([1, 4, 2, 1]) == [[1, 2, 0, 3]]  # exactly half: 4 x 4 = 2 x 8, still one
    assert prefill_groups([4]) == [[0]]


@pytest.mark.compares_runs
def test_rows_fed_a_few_tokens_prefill_apart_from_a_long_fresh_prompt():
    """Three prompts that continue a finished row (each feeds one token past the stored prefix) join with
    a long fresh one: two forwards, [30, 1] and [1, 1], in slots other than the order the requests
    came in, and the tokens of requests made one at a time."""
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    stored = make_prompt(40, offset=3)
    batch = [(stored + [7 + i], SamplingParams(max_new_tokens=3, seed=11 + i)) for i in range(3)]
    batch.append((make_prompt(30, offset=5), SamplingParams(max_new_tokens=3, seed=10)))  # forwarded first

    async def main():
        # a long row keeps the engine busy, so the finished row's keys stay in the prefix store
        busy = asyncio.ensure_future(engine.generate(make_prompt(5, offset=7), SamplingParams(30, seed=1)))
        await engine.generate(stored, SamplingParams(max_new_tokens=2, seed=2))
        outputs = await asyncio.gather(*(engine.generate(*request) for request in batch))
        await busy
        return outputs

    outputs = asyncio.run(main())
    # two admissions: the busy and the stored prompt (5 + 40 tokens, one forward), then the batch
    # (30 + 3 x 1 tokens, two forwards); every decode step is one of the busy row's 29
    assert engine.num_prefills == 2 and engine.num_prefill_tokens == 5 + 40 + 33
    assert engine.num_forward_calls == 1 + 2 + 29
    alone = run_one_at_a_time(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD), batch)
    for out, one in zip(outputs, alone, strict=True):
        assert out.token_ids == one.token_ids
        assert_forward_close(torch.tensor(out.log_probs), torch.tensor(one.log_probs))


def test_prefill_inputs_left_pad_and_mask_by_hand():
    input_ids, mask, position_ids = prefill_inputs([[5, 6, 7], [8]], [0, 0], pad_token_id=0)
    assert input_ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert position_ids.tolist() == [[0, 1, 2], [0, 0, 0]]
    assert mask.shape == (2, 1, 3, 3)  # keys are slot columns: column = position
    assert mask[0, 0].int().tolist() == [[1, 0, 0], [1, 1, 0], [1, 1, 1]]  # causal
    # the padded row: its one real token (position 0) sees column 0; padding queries see column 0 only
    assert mask[1, 0].int().tolist() == [[1, 0, 0], [1, 0, 0], [1, 0, 0]]
    _, no_mask, positions = prefill_inputs([[5, 6], [7, 8]], [0, 0], pad_token_id=0)
    assert no_mask is None and positions.tolist() == [[0, 1], [0, 1]]  # unpadded: sdpa's causal path


def test_prefill_inputs_feed_only_what_is_not_cached():
    # row 0: 3 of its 5 tokens cached, feeds [8, 9] at positions 3, 4; row 1: nothing cached, feeds 2
    input_ids, mask, position_ids = prefill_inputs([[5, 6, 7, 8, 9], [1, 2]], [3, 0], pad_token_id=0)
    assert input_ids.tolist() == [[8, 9], [1, 2]]
    assert position_ids.tolist() == [[3, 4], [0, 1]]
    assert mask.shape == (2, 1, 2, 5)
    assert mask[0, 0].int().tolist() == [[1, 1, 1, 1, 0], [1, 1, 1, 1, 1]]
    assert mask[1, 0].int().tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0]]


def test_slot_cache_moves_survivors_into_holes_and_writes_decode_columns():
    cache = SlotKVCache(max_rows=8, max_columns=8)
    # five left-padded prompts of lengths 1..5 (width 5); row r's keys all hold r, its values r + 10
    keys = torch.arange(5.0).view(5, 1, 1, 1).expand(5, 1, 5, 2)
    cache.begin_prefill(torch.tensor([1, 2, 3, 4, 5]), [None] * 5)
    attended, _ = cache.update(keys, keys + 10, layer_idx=0)  # a prefill attends to its slots' columns
    assert attended[:, 0, :, 0].tolist() == [[r] * (r + 1) + [0.0] * (4 - r) for r in range(5)]
    cache.end_prefill()

    # rows 1 and 2 finish: rows 3 and 4 move into slots 1 and 2 (copying only those two)
    assert cache.keep_rows([0, 3, 4]) == [0, 3, 4]
    assert cache.lengths.tolist() == [1, 4, 5]
    assert cache.values[0][1, 0, :4, 0].tolist() == [13.0] * 4

    mask = cache.begin_decode()  # width 6: the longest row (5) plus this step's token
    assert mask.shape == (3, 1, 1, 6)
    assert mask[:, 0, 0].sum(dim=-1).tolist() == [2, 5, 6]
    new = torch.full((3, 1, 1, 2), 7.0)
    attended_keys, _ = cache.update(new, new, layer_idx=0)
    cache.end_decode()
    assert attended_keys[:, 0, :, 0].tolist() == [
        [0.0, 7.0, 0.0, 0.0, 0.0, 0.0],
        [3.0, 3.0, 3.0, 3.0, 7.0, 0.0],
        [4.0, 4.0, 4.0, 4.0, 4.0, 7.0],
    ]
    assert cache.lengths.tolist() == [2, 5, 6]


def test_slot_cache_grows_as_rows_join_and_lengthen_keeping_their_contents():
    cache = SlotKVCache(max_rows=5, max_columns=10)
    first = torch.ones(2, 1, 3, 2)
    cache.begin_prefill(torch.tensor([3, 2]), [None, None])
    cache.update(first, first, layer_idx=0)
    cache.end_prefill()
    assert cache.keys[0].shape == (2, 1, 3, 2)  # just the prompts: no column reserved ahead
    second = torch.full((2, 1, 4, 2), 2.0)
    cache.begin_prefill(torch.tensor([4, 4]), [None, None])
    cache.update(second, second, layer_idx=0)
    cache.end_prefill()
    # doubling: rows min(5, max(4, 2 * 2)) = 4; columns max(4, 2 * 3) = 6
    assert cache.keys[0].shape == (4, 1, 6, 2)
    assert cache.keys[0][:, 0, :, 0].tolist() == [
        [1.0, 1.0, 1.0, 0.0, 0.0, 0.0],
        [1.0, 1.0, 0.0, 0.0, 0.0, 0.0],
        [2.0, 2.0, 2.0, 2.0, 0.0, 0.0],
        [2.0, 2.0, 2.0, 2.0, 0.0, 0.0],
    ]
    for step in range(3):  # decoding grows the columns too: widths 5, 6 fit; 7 doubles, capped at 10
        cache.begin_decode()
        new = torch.full((4, 1, 1, 2), 3.0 + step)
        cache.update(new, new, layer_idx=0)
        cache.end_decode()
    assert cache.keys[0].shape == (4, 1, 10, 2)
    assert cache.keys[0][2, 0, :, 0].tolist() == [2.0] * 4 + [3.0, 4.0, 5.0] + [0.0] * 3
    assert cache.lengths.tolist() == [6, 5, 7, 7]


def test_update_weights_refuses_while_requests_are_mid_generation():
    engine = HFRolloutEngine(make_model(), eos_token_ids=[], pad_token_id=PAD)
    new_weights = make_model(seed=1).state_dict()

    async def main():
        request = asyncio.ensure_future(engine.generate(make_prompt(5), SamplingParams(max_new_tokens=20)))
        while engine.num_forward_calls < 2:
            await asyncio.sleep(0)
        with pytest.raises(RuntimeError, match="1 requests are mid-generation"):
            engine.update_weights(new_weights.items())
        return await request

    assert len(asyncio.run(main()).token_ids) == 20
    engine.update_weights(new_weights.items())  # idle again: accepted


def test_decode_error_reaches_every_waiting_request():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    calls = []

    def fail_on_third_forward(module, args):
        calls.append(1)
        if len(calls) == 3:
            raise RuntimeError("injected decode failure")

    hook = model.register_forward_pre_hook(fail_on_third_forward)
    requests = [(make_prompt(4 + i), SamplingParams(max_new_tokens=6, seed=i)) for i in range(4)]

    async def main():
        coros = (engine.generate(p, s) for p, s in requests)
        return await asyncio.wait_for(asyncio.gather(*coros, return_exceptions=True), timeout=HANG_S)

    results = asyncio.run(main())
    assert len(results) == 4
    assert all(isinstance(r, RuntimeError) and "injected decode failure" in str(r) for r in results)
    hook.remove()
    assert len(run(engine, requests[:1])[0].token_ids) == 6  # the engine serves again after the failure


def test_engine_recovers_after_its_event_loop_is_shut_down_mid_decode():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    requests = [(make_prompt(5 + i), SamplingParams(max_new_tokens=50, seed=i)) for i in range(3)]

    async def abandon():
        for prompt, params in requests:
            asyncio.get_running_loop().create_task(engine.generate(prompt, params))
        while engine.num_forward_calls < 3:
            await asyncio.sleep(0)
        # returning now makes asyncio.run cancel the generate tasks and the engine's worker

    asyncio.run(abandon())
    engine.update_weights(make_model(seed=1).state_dict().items())  # nothing is left in flight
    outputs = run(engine, requests[:2])
    assert [len(o.token_ids) for o in outputs] == [50, 50]
    assert engine.num_prefills == 2  # the abandoned batch, then a fresh one holding only the new requests


def test_engine_refuses_a_second_event_loop_while_the_first_is_mid_decode():
    engine = HFRolloutEngine(make_model(), eos_token_ids=[], pad_token_id=PAD)
    stalled = asyncio.new_event_loop()

    async def start_decoding():
        while engine.num_forward_calls < 2:
            await asyncio.sleep(0)

    stalled.create_task(engine.generate(make_prompt(5), SamplingParams(max_new_tokens=50)))
    stalled.run_until_complete(start_decoding())  # the loop then stops mid-decode, its worker suspended
    second_request = engine.generate(make_prompt(5), SamplingParams(max_new_tokens=5))
    with pytest.raises(RuntimeError, match="another event loop"):  # rather than wait forever
        asyncio.run(asyncio.wait_for(second_request, timeout=HANG_S))
    leftovers = asyncio.all_tasks(stalled)
    for task in leftovers:
        task.cancel()
    stalled.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
    stalled.close()
    assert len(run(engine, [(make_prompt(5), SamplingParams(max_new_tokens=5))])[0].token_ids) == 5


def test_throughput_benchmark_quick_mode_runs(capsys):
    benchmark = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "hf_engine_throughput.py"))
    benchmark["main"](["--quick", "--cases", "3x5+4", "--repeats", "1"])
    row = next(line.split() for line in capsys.readouterr().out.splitlines() if line.split()[:1] == ["3x5+4"])
    ours, theirs, best_ratio, pair_ratio, floor, over_floor = row[1:]
    assert float(ours) > 0 and float(theirs) > 0
    assert float(best_ratio.rstrip("x")) == pytest.approx(float(ours) / float(theirs), rel=0.01, abs=0.01)
    assert pair_ratio.endswith("x")
    # no engine runs faster than its own matmuls run bare
    assert float(floor) > 0 and float(over_floor.rstrip("x")) >= 1


def test_decode_step_matmuls_count_the_cost_models_flops():
    benchmark = runpy.run_path(str(Path(__file__).parents[1] / "benchmarks" / "hf_engine_throughput.py"))
    config = make_model().config
    batch, context = 3, 10
    shapes = benchmark["decode_step_matmuls"](config, batch, context)
    flops = sum(2 * math.prod(left) * right[-1] for left, right in shapes)
    # the cost model's decode step at position context - 1 attends to `context` keys
    expected = batch * sequence_cost(qwen2_dims(config), context - 1, 1).decode_flops
    assert flops == expected
