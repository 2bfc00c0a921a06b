import asyncio
import math

import pytest
import torch
import transformers

from verl.workers.rollout.base import SamplingParams
from verl.workers.rollout.hf_engine import HFRolloutEngine, sample_next_tokens

torch.set_num_threads(1)

EOS, PAD = 1, 0


def make_model(seed: int = 0, tie: bool = False, max_positions: int = 256) -> transformers.Qwen2ForCausalLM:
    torch.manual_seed(seed)
    config = transformers.Qwen2Config(
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
    return transformers.Qwen2ForCausalLM(config).eval()


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
    # vocab order [0.2, 0.5, 0.3]: sorted order is ids 1, 2, 0 with cumulative mass 0.5, 0.8, 1.0
    row = torch.tensor([0.2, 0.5, 0.3]).log()
    logits = row.repeat(7, 1)
    temperature = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0, 2.0, 1.0])
    top_p = torch.tensor([1.0, 1.0, 0.6, 0.6, 1.0, 1.0, 0.6])
    top_k = torch.tensor([-1, 1, -1, -1, -1, 2, -1])
    uniform = torch.tensor([0.6, 0.99, 0.7, 0.6, 0.99, 0.9, 1.0])
    tokens, log_probs = sample_next_tokens(logits, temperature, top_p, top_k, uniform)
    # row 0: 0.6 falls in (0.5, 0.8] -> id 2
    # row 1: top_k=1 keeps only id 1
    # row 2: top_p=0.6 keeps ids 1, 2 (mass before them 0, 0.5); 0.7 * 0.8 = 0.56 in (0.5, 0.8] -> id 2
    # row 3: same filter; 0.6 * 0.8 = 0.48 < 0.5 -> id 1
    # row 4: greedy -> id 1 whatever the draw
    # row 5: T=2 gives probs ∝ sqrt(p): 0.2628, 0.4155, 0.3218 for ids 0, 1, 2; top_k=2 keeps ids 1, 2
    #        (mass 0.7372); 0.9 * 0.7372 = 0.6635 > 0.4155 -> id 2
    # row 6: a draw that lands exactly on the kept mass (float rounding can do that) must still pick
    #        a kept token: the last one, id 2, not the filtered-out id 0
    assert tokens.tolist() == [2, 1, 2, 1, 1, 2, 2]
    sqrt_total = math.sqrt(0.2) + math.sqrt(0.5) + math.sqrt(0.3)
    expected = [
        math.log(0.3),
        math.log(0.5),
        math.log(0.3),
        math.log(0.5),
        math.log(0.5),
        math.log(math.sqrt(0.3) / sqrt_total),
        math.log(0.3),
    ]
    # the log-prob is of the unfiltered tempered distribution, not the renormalised filtered one
    assert torch.allclose(log_probs, torch.tensor(expected), atol=1e-6)


def test_greedy_batched_equals_one_at_a_time_with_mixed_lengths():
    model = make_model()
    requests = [
        (make_prompt(3 + 4 * i, offset=i), SamplingParams(max_new_tokens=4 + 3 * (i % 4), temperature=0.0))
        for i in range(8)
    ]
    batched_engine = HFRolloutEngine(model, eos_token_ids=[EOS], pad_token_id=PAD)
    batched = run(batched_engine, requests)
    alone = run_one_at_a_time(HFRolloutEngine(model, eos_token_ids=[EOS], pad_token_id=PAD), requests)
    assert batched_engine.num_waves == 1 and batched_engine.max_rows_per_forward == 8
    for b, a in zip(batched, alone, strict=True):
        assert b.token_ids == a.token_ids
        assert b.finish_reason == a.finish_reason
        assert torch.allclose(torch.tensor(b.log_probs), torch.tensor(a.log_probs), atol=1e-5)


def test_log_probs_match_full_sequence_forward():
    model = make_model()
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
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4)
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
        assert torch.allclose(
            torch.tensor(out.log_probs), full_forward_log_probs(model, prompt, tokens, 0.0)[0], atol=1e-4
        )

    lengths = [1, 5, 9]
    no_eos = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    outputs = run(no_eos, [(make_prompt(4, offset=n), SamplingParams(max_new_tokens=n)) for n in lengths])
    assert [len(o.token_ids) for o in outputs] == lengths
    assert [len(o.log_probs) for o in outputs] == lengths
    assert all(o.finish_reason == "length" for o in outputs)


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
    assert engine.num_waves == 1
    assert engine.num_forward_calls == new_tokens
    assert engine.max_rows_per_forward == 32

    capped = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, max_num_seqs=10)
    run(capped, requests)
    assert capped.num_waves == 4  # 10 + 10 + 10 + 2
    assert capped.num_forward_calls == 4 * new_tokens
    assert capped.max_rows_per_forward == 10


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
    assert in_batch.log_probs == pytest.approx(alone.log_probs, abs=1e-5)
    again = run(engine, [(prompt, seeded)])[0]
    assert again.token_ids == alone.token_ids
    other_seed = run(engine, [(prompt, SamplingParams(max_new_tokens=20, temperature=1.0, seed=124))])[0]
    assert other_seed.token_ids != alone.token_ids


def test_unseeded_requests_follow_the_engine_seed():
    model = make_model()
    unseeded = [(make_prompt(7), SamplingParams(max_new_tokens=20))] * 2
    first = run(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, seed=5), unseeded)
    second = run(HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD, seed=5), unseeded)
    assert [o.token_ids for o in first] == [o.token_ids for o in second]
    # each request draws its own seed, so identical prompts still get different samples
    assert first[0].token_ids != first[1].token_ids


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
    for a, f in zip(after, fresh, strict=True):
        assert a.token_ids == f.token_ids
        assert a.log_probs == pytest.approx(f.log_probs, abs=1e-6)


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


def test_request_submitted_mid_wave_joins_the_next_wave():
    model = make_model()
    engine = HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD)
    forwards_when_short_finished = []

    async def short_then_follow_up():
        await engine.generate(make_prompt(5), SamplingParams(max_new_tokens=2))
        forwards_when_short_finished.append(engine.num_forward_calls)
        return await engine.generate(make_prompt(8, offset=1), SamplingParams(max_new_tokens=3, seed=4))

    async def main():
        long = engine.generate(make_prompt(6, offset=2), SamplingParams(max_new_tokens=10))
        return await asyncio.gather(short_then_follow_up(), long)

    follow_up, long = asyncio.run(main())
    # the short row is resolved after prefill + 1 decode step, while the long row is still running
    assert forwards_when_short_finished == [2]
    assert len(long.token_ids) == 10
    assert engine.num_waves == 2
    assert engine.num_forward_calls == 10 + 3  # wave 1 runs to the long row's end; wave 2 is the follow-up
    alone = run(
        HFRolloutEngine(model, eos_token_ids=[], pad_token_id=PAD),
        [(make_prompt(8, offset=1), SamplingParams(max_new_tokens=3, seed=4))],
    )[0]
    assert follow_up.token_ids == alone.token_ids


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
        return await asyncio.wait_for(asyncio.gather(*coros, return_exceptions=True), timeout=20)

    results = asyncio.run(main())
    assert len(results) == 4
    assert all(isinstance(r, RuntimeError) and "injected decode failure" in str(r) for r in results)
    hook.remove()
    assert len(run(engine, requests[:1])[0].token_ids) == 6  # the engine serves again after the failure


def test_engine_recovers_after_its_event_loop_is_shut_down_mid_wave():
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
    assert engine.num_waves == 2  # the abandoned wave, then a fresh one holding only the new requests


def test_engine_refuses_a_second_event_loop_while_the_first_is_mid_wave():
    engine = HFRolloutEngine(make_model(), eos_token_ids=[], pad_token_id=PAD)
    stalled = asyncio.new_event_loop()

    async def start_a_wave():
        while engine.num_forward_calls < 2:
            await asyncio.sleep(0)

    stalled.create_task(engine.generate(make_prompt(5), SamplingParams(max_new_tokens=50)))
    stalled.run_until_complete(start_a_wave())  # the loop then stops mid-wave, its worker suspended
    second_request = engine.generate(make_prompt(5), SamplingParams(max_new_tokens=5))
    with pytest.raises(RuntimeError, match="another event loop"):  # rather than wait forever
        asyncio.run(asyncio.wait_for(second_request, timeout=10))
    leftovers = asyncio.all_tasks(stalled)
    for task in leftovers:
        task.cancel()
    stalled.run_until_complete(asyncio.gather(*leftovers, return_exceptions=True))
    stalled.close()
    assert len(run(engine, [(make_prompt(5), SamplingParams(max_new_tokens=5))])[0].token_ids) == 5
