"""The real SGLang engine on CPU (SGLang 0.5.23's own CPU path, with verl's sgl-kernel stand-in), against
the HF engine and the actor's recomputation on one tiny model.

One engine serves the module (it starts in 20-50 s). The model is the tiny Qwen2 that writes varied
tokens and ends on its own (tests/engine_agreement.py, `save_ending_policy`).
"""

import asyncio
import logging
from types import SimpleNamespace

import pytest
import torch
import transformers

from tests.engine_agreement import assert_greedy_agree, assert_log_probs_close, recompute, save_ending_policy
from tests.tolerances import FORWARD_ULPS, reordered_atol
from verl.agent_loop.delethink import DelethinkAgentLoop
from verl.agent_loop.manager import run_agent_loops
from verl.core.delethink import DelethinkParams
from verl.core.engine import SamplingParams
from verl.core.trajectory import PromptItem
from verl.single_controller.fsdp_workers import eos_token_ids
from verl.workers.rollout.hf_engine import HFRolloutEngine
from verl.workers.rollout.sglang_engine import SGLangRolloutEngine

pytestmark = pytest.mark.compares_runs

TEXTS = ["12+7=", "hello world", "abc", "3*4-5=", "the sum of 8 and 9 is", "x", "2+2+2+2=", "why?"]


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return save_ending_policy(tmp_path_factory.mktemp("sglang_policy"))


@pytest.fixture(scope="module")
def tokenizer(policy_dir):
    return transformers.AutoTokenizer.from_pretrained(policy_dir)


@pytest.fixture(scope="module")
def actor(policy_dir):
    """The policy as the actor computes it: the HF model in float32."""
    return transformers.AutoModelForCausalLM.from_pretrained(policy_dir, dtype=torch.float32).eval()


@pytest.fixture(scope="module")
def eos(actor, tokenizer):
    return eos_token_ids(actor.generation_config, tokenizer)


@pytest.fixture(scope="module")
def host_logging():
    """The root logger as this process had it before the engine started."""
    root = logging.getLogger()
    return root.level, root.handlers[:]


@pytest.fixture(scope="module")
def engine(policy_dir, eos, host_logging):
    engine = SGLangRolloutEngine(
        str(policy_dir), eos, device="cpu", dtype="float32", seed=0, max_num_seqs=16,
        enable_memory_saver=False, mem_fraction_static=0.05, max_total_tokens=16384, log_level="error",
    )  # fmt: skip
    yield engine
    engine.shutdown()


@pytest.fixture(scope="module")
def hf_engine(actor, eos, tokenizer):
    return HFRolloutEngine(actor, eos, tokenizer.pad_token_id, max_num_seqs=16)


@pytest.fixture
def restore_weights(engine, actor):
    """A test that changes the engine's weights puts the policy's back."""
    yield
    engine.update_weights((name, p.detach()) for name, p in actor.named_parameters())


def on_engine(engine, coroutine):
    return engine.event_loop.run_until_complete(coroutine)


def generate_all(engine, prompts, params):
    async def all_of_them():
        return await asyncio.gather(*(engine.generate(p, params) for p in prompts))

    if isinstance(engine, SGLangRolloutEngine):
        return on_engine(engine, all_of_them())
    return asyncio.run(all_of_them())


def prompts_of(tokenizer, texts=TEXTS):
    return [tokenizer(text)["input_ids"] for text in texts]


# the engine contract ---------------------------------------------------------------------------------
def test_sampled_outputs_keep_the_contract_and_match_the_actors_log_probs(engine, actor, tokenizer, eos):
    prompts = prompts_of(tokenizer)
    temperature = 0.7  # not 1: SGLang must report log_softmax(logits / T)
    outputs = generate_all(engine, prompts, SamplingParams(max_new_tokens=48, temperature=temperature))
    reasons = set()
    for prompt, out in zip(prompts, outputs, strict=True):
        assert 1 <= len(out.token_ids) == len(out.log_probs) <= 48
        assert all(0 <= t < len(tokenizer) for t in out.token_ids)
        if out.finish_reason == "stop":
            assert out.token_ids[-1] in eos and not set(out.token_ids[:-1]) & set(eos)
        else:
            assert out.finish_reason == "length" and len(out.token_ids) == 48
            assert not set(out.token_ids) & set(eos)
        reasons.add(out.finish_reason)
        want, logits = recompute(actor, prompt, out.token_ids, temperature)
        assert_log_probs_close(out.log_probs, want, logits, temperature)
    assert reasons == {"stop", "length"}  # both ends exercised (this model ends 1 in ~30 tokens)


def test_greedy_tokens_equal_the_hf_engines(engine, hf_engine, actor, tokenizer):
    prompts = prompts_of(tokenizer)
    greedy = SamplingParams(max_new_tokens=40, temperature=0.0)
    ours = generate_all(engine, prompts, greedy)
    theirs = generate_all(hf_engine, prompts, greedy)
    for prompt, a, b in zip(prompts, ours, theirs, strict=True):
        assert_greedy_agree(actor, prompt, a.token_ids, b.token_ids)
        if a.token_ids == b.token_ids:
            assert a.finish_reason == b.finish_reason
            _, logits = recompute(actor, prompt, a.token_ids)
            assert_log_probs_close(a.log_probs, torch.tensor(b.log_probs), logits)
    assert sum(o.finish_reason == "stop" for o in ours) >= 1


def test_max_tokens_and_the_eos_in_the_middle(engine, actor, tokenizer, eos):
    prompt = tokenizer("12+7=")["input_ids"]
    whole = on_engine(engine, engine.generate(prompt, SamplingParams(max_new_tokens=100, temperature=0.0)))
    assert whole.finish_reason == "stop" and whole.token_ids[-1] in eos
    cut = len(whole.token_ids) - 1  # one short of the EOS: the budget ends it
    short = on_engine(engine, engine.generate(prompt, SamplingParams(max_new_tokens=cut, temperature=0.0)))
    assert short.finish_reason == "length" and short.token_ids == whole.token_ids[:cut]
    # the second request finds its prompt in the radix cache: the same numbers, computed in another order
    _, logits = recompute(actor, prompt, short.token_ids)
    assert_log_probs_close(short.log_probs, torch.tensor(whole.log_probs[:cut]), logits)
    ignoring = on_engine(
        engine,
        engine.generate(
            prompt, SamplingParams(max_new_tokens=len(whole.token_ids) + 5, temperature=0.0, ignore_eos=True)
        ),  # fmt: skip
    )
    assert ignoring.finish_reason == "length" and len(ignoring.token_ids) == len(whole.token_ids) + 5


def test_bad_requests_are_refused_before_they_reach_sglang(engine, tokenizer):
    with pytest.raises(ValueError, match="outside the vocabulary"):
        on_engine(engine, engine.generate([len(tokenizer) + 5], SamplingParams(max_new_tokens=2)))
    with pytest.raises(ValueError, match="exceeds the model's max_position_embeddings"):
        on_engine(engine, engine.generate([5] * 1000, SamplingParams(max_new_tokens=30)))
    with pytest.raises(RuntimeError, match="must run on engine.event_loop"):
        asyncio.run(engine.generate([5, 6], SamplingParams(max_new_tokens=2)))


# Delethink through SGLang ------------------------------------------------------------------------------
def delethink_run(engine, tokenizer, params, texts):
    items = [PromptItem(p, "test", "0") for p in prompts_of(tokenizer, texts)]
    greedy = [SamplingParams(params.chunk_size, temperature=0.0, seed=i) for i in range(len(items))]
    loop = DelethinkAgentLoop(engine, params)
    if isinstance(engine, SGLangRolloutEngine):
        return on_engine(engine, run_agent_loops(loop, items, greedy))
    return asyncio.run(run_agent_loops(loop, items, greedy))


def test_the_delethink_loop_through_sglang_equals_the_hf_engines(engine, hf_engine, actor, tokenizer):
    params = DelethinkParams(chunk_size=24, keep_head=4, keep_tail=6, max_chunks=5)
    ours = delethink_run(engine, tokenizer, params, TEXTS)
    theirs = delethink_run(hf_engine, tokenizer, params, TEXTS)
    chunks = 0
    for a, b in zip(ours, theirs, strict=True):
        for turn_a, turn_b in zip(a.turns, b.turns, strict=False):
            assert turn_a.prompt_ids == turn_b.prompt_ids  # every chunk prompt: question + carry-over
            assert_greedy_agree(actor, turn_a.prompt_ids, turn_a.response_ids, turn_b.response_ids)
            if turn_a.response_ids != turn_b.response_ids:
                break  # a near tie: the two traces part here
            assert turn_a.finish_reason == turn_b.finish_reason
            chunks += 1
        else:
            assert len(a.turns) == len(b.turns)
        # budgets: C for the first chunk, C - m after it
        for i, turn in enumerate(a.turns):
            budget = params.chunk_size if i == 0 else params.intermediate_budget
            assert len(turn.response_ids) <= budget
            assert turn.finish_reason == "stop" or len(turn.response_ids) == budget
    assert chunks > len(TEXTS)  # traces of more than one chunk were compared


def test_the_radix_cache_holds_the_question_and_head_across_chunks(engine, tokenizer):
    params = DelethinkParams(chunk_size=24, keep_head=4, keep_tail=6, max_chunks=4)
    question = tokenizer("a question never asked before: 41+17=")["input_ids"]
    loop = DelethinkAgentLoop(engine, params)
    reused = []

    async def one_chunk_at_a_time():
        # the loop's own requests, counted one by one through the engine's running totals
        original = engine.generate

        async def counted(prompt_ids, sampling_params):
            before = engine.num_reused_prompt_tokens
            out = await original(prompt_ids, sampling_params)
            reused.append((len(prompt_ids), engine.num_reused_prompt_tokens - before))
            return out

        engine.generate = counted
        try:
            item = PromptItem(question, "test", "0")
            return await loop.run(item, SamplingParams(24, temperature=0.0, seed=0, ignore_eos=True))
        finally:
            del engine.generate

    trajectory = on_engine(engine, one_chunk_at_a_time())
    assert len(trajectory.turns) == params.max_chunks  # EOS ignored: every chunk is written
    assert reused[0][1] < len(question)  # the question is new (only a prefix of it, if any, is shared)
    for prompt_length, cached in reused[1:]:
        # the previous chunk wrote question + head first: all of it is in the radix tree
        assert len(question) + params.keep_head <= cached < prompt_length


# weights: an actor update, and a LoRA policy --------------------------------------------------------------
def test_weight_sync_after_an_actor_update(engine, actor, tokenizer, restore_weights):
    prompt = tokenizer("hello world")["input_ids"]
    greedy = SamplingParams(max_new_tokens=24, temperature=0.0)
    before = on_engine(engine, engine.generate(prompt, greedy))

    updated = transformers.AutoModelForCausalLM.from_config(actor.config)
    updated.load_state_dict(actor.state_dict())
    optimizer = torch.optim.AdamW(updated.parameters(), lr=1e-2)
    ids = torch.tensor([prompt + before.token_ids])
    loss = updated(ids, labels=ids).loss  # make the engine's own greedy text more likely
    loss.backward()
    optimizer.step()
    updated.eval()

    engine.update_weights((name, p.detach()) for name, p in updated.named_parameters())
    after = on_engine(engine, engine.generate(prompt, greedy))
    want, logits = recompute(updated, prompt, after.token_ids)
    assert_log_probs_close(after.log_probs, want, logits)
    old, _ = recompute(actor, prompt, after.token_ids)
    assert (want - old).abs().max() > 100 * reordered_atol(logits, FORWARD_ULPS)  # the update moved them


# what the CPU cannot do ---------------------------------------------------------------------------------
def test_update_weights_refuses_mid_generation(engine, actor, tokenizer):
    loop = engine.event_loop
    task = loop.create_task(engine.generate(tokenizer("x")["input_ids"], SamplingParams(max_new_tokens=8)))
    loop.run_until_complete(asyncio.sleep(0))  # the request is in flight
    with pytest.raises(RuntimeError, match="mid-generation"):
        engine.update_weights((name, p.detach()) for name, p in actor.named_parameters())
    assert len(loop.run_until_complete(task).token_ids) >= 1


def test_release_and_resume_are_refused_on_cpu_with_one_line(engine, policy_dir, eos):
    with pytest.raises(RuntimeError, match=r"needs a GPU \(torch_memory_saver\).*free_cache_engine=false"):
        engine.release_memory()
    with pytest.raises(ValueError, match="enable_memory_saver=True needs a GPU"):
        SGLangRolloutEngine(str(policy_dir), eos, device="cpu", enable_memory_saver=True)


def test_a_lora_policy_is_refused_on_cpu_with_one_line(policy_dir, eos):
    keys = SimpleNamespace(lora_rank=4, lora_alpha=8, target_modules=["all-linear"])
    with pytest.raises(ValueError, match="LoRA policy needs a GPU with SGLang.*rollout.name=hf") as error:
        SGLangRolloutEngine(str(policy_dir), eos, device="cpu", enable_memory_saver=False, lora=keys)
    assert str(error.value).count("; ") == 0  # that one problem alone


def test_the_host_process_keeps_its_logging(engine, host_logging, caplog):
    """SGLang sets up logging for the process it starts in (root handlers replaced, root level = its
    log_level, "error" here); the engine puts the host's back, so the host's warnings still reach it."""
    root = logging.getLogger()
    assert (root.level, root.handlers[: len(host_logging[1])]) == host_logging
    with caplog.at_level(logging.WARNING, logger="verl.data.tasks"):
        logging.getLogger("verl.data.tasks").warning("still heard")
    assert "still heard" in caplog.text
