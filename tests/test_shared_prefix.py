"""Shared prompt prefixes (`model.share_prompt_prefix`): the plan, and a forward that computes each
prefix once yet gives the padded path's log-probs and gradients."""

import copy

import pytest
import torch

from tests.test_dp_actor import actor_config, make_batch, make_shared_batch, update
from tests.tolerances import FORWARD_ULPS, assert_forward_close, assert_gradients_close, metric_approx
from verl.core import log_softmax
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.actor.dp_actor import DataParallelPPOActor, response_logits
from verl.workers.actor.shared_prefix import (
    SHARED_PREFIX_ATTENTION,
    PrefixPlan,
    plan_shared_prefixes,
    prompt_ids,
    shared_prefix_response_logits,
)
from verl.workers.micro_batching import consecutive_groups, prompt_sorted_groups


@pytest.fixture
def model():
    """A fresh model per test: an actor with share_prompt_prefix switches its model's attention, which a
    shared one would carry into whichever test runs next (the worker's order varies with worksteal)."""
    return build_model(build_tokenizer(), seed=0)


def test_the_plan_shares_the_prefix_that_saves_most():
    # sorted: 0, 1 (same 4 tokens), 2 (shares 2 with them), 3 (shares nothing). Rows 0-2 together share
    # min(4 - 1, 4, 2) = 2 tokens and save 2 * 2 = 4; rows 0-1 alone would save 1 * 3 = 3.
    plan = plan_shared_prefixes([[1, 2, 3, 4], [1, 2, 3, 4], [1, 2, 9, 9, 9], [5, 6]])
    assert plan == PrefixPlan(group=[0, 0, 0, 1], lengths=[2, 1], source=[0, 3])
    # 15 real tokens; rows 0-2 skip their 2 shared tokens, row 3 its 1, and the two prefixes run once
    assert plan.tokens_computed(15) == 15 - (2 + 2 + 2 + 1) + (2 + 1)


def test_a_long_chunk_prefix_beats_the_question_alone():
    """Delethink's shape: a chunk-1 row (the question) and two later chunks of one trajectory that also
    share its head. All three share min(3 - 1, 3, 7) = 2 and save 4; the later chunks alone share 7."""
    question = [1, 2, 3]
    plan = plan_shared_prefixes([question, [*question, 4, 5, 6, 7, 8], [*question, 4, 5, 6, 7, 9]])
    assert plan == PrefixPlan(group=[0, 1, 1], lengths=[2, 7], source=[0, 1])
    assert plan.tokens_computed(3 + 8 + 8) == 3 + 8 + 8 - (2 + 7 + 7) + (2 + 7)


def test_a_prompt_too_short_to_share_is_an_error():
    with pytest.raises(ValueError, match=r"rows \[1\] have fewer than 2 prompt tokens"):
        plan_shared_prefixes([[1, 2], [1]])


def test_micro_batches_in_prompt_order_keep_shared_prompts_together():
    prompts = [[5, 1], [1, 2], [5, 1], [1, 2, 3]]
    assert prompt_sorted_groups(prompts, [4, 4, 4, 4], max_rows=2) == [[1, 3], [0, 2]]
    # a budget of 9 tokens: 1 and 3 (8), then 0 and 2 (8); a row over the budget runs alone
    assert prompt_sorted_groups(prompts, [4, 4, 4, 5], max_tokens=9) == [[1, 3], [0, 2]]
    assert consecutive_groups([2, 0, 1], [3, 3, 10], max_tokens=6) == [[2], [0, 1]]
    with pytest.raises(ValueError, match="token budget must be >= 1"):
        consecutive_groups([0], [1], max_tokens=0)


@pytest.mark.compares_runs
def test_shared_forward_gives_the_padded_logits(model):
    batch = make_shared_batch(DataParallelPPOActor(model, None, actor_config(), 1.0, 8))
    plan = plan_shared_prefixes(prompt_ids(batch))
    assert len(plan.lengths) < batch["responses"].shape[0], "the batch is meant to share prefixes"
    sharing = copy.deepcopy(model)
    with torch.no_grad():
        padded = response_logits(model, batch)
        with pytest.raises(ValueError, match="attention implementation is 'sdpa'"):
            shared_prefix_response_logits(sharing, batch, plan)
        sharing.set_attn_implementation(SHARED_PREFIX_ATTENTION)
        shared = shared_prefix_response_logits(sharing, batch, plan)
    has_token = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
    assert_forward_close(shared[has_token], padded[has_token])


@pytest.mark.compares_runs
@pytest.mark.parametrize("make", [make_shared_batch, make_batch], ids=["shared", "distinct"])
def test_log_probs_and_gradients_equal_padded(model, make):
    actor = DataParallelPPOActor(copy.deepcopy(model), None, actor_config(), temperature=0.7, norm_length=8)
    batch = make(actor)
    padded = actor.compute_log_prob(batch, rows_per_micro=4)
    sharing = DataParallelPPOActor(actor.model, None, actor_config(), 0.7, 8, share_prompt_prefix=True)
    shared = sharing.compute_log_prob(batch, rows_per_micro=4)
    has_token = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
    assert_forward_close(shared[has_token], padded[has_token])

    grads_padded, _, metrics_padded = update(model, ppo_micro_batch_size_per_gpu=6, batch=make)
    grads_shared, _, metrics_shared = update(
        model, ppo_micro_batch_size_per_gpu=6, batch=make, share_prompt_prefix=True
    )
    assert_gradients_close(grads_shared, grads_padded)
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/entropy"):
        assert metrics_shared[key] == metric_approx(metrics_padded[key]), key


@pytest.mark.compares_runs
def test_gradient_checkpointing_keeps_the_shared_gradients(model):
    """Checkpointed layers recompute their forward in backward; the views travel with the call."""
    checkpointed = copy.deepcopy(model)
    checkpointed.gradient_checkpointing_enable()
    plain, _, _ = update(model, ppo_micro_batch_size_per_gpu=6, batch=make_shared_batch)
    recomputed, _, _ = update(
        checkpointed, ppo_micro_batch_size_per_gpu=6, batch=make_shared_batch, share_prompt_prefix=True
    )
    assert_gradients_close(recomputed, plain)


def test_forward_tokens_count_each_shared_prefix_once(model):
    actor = DataParallelPPOActor(model, None, actor_config(), 1.0, 8)
    batch = make_shared_batch(actor)
    real = int(batch["attention_mask"].sum())
    # one micro-batch of all 12 rows: the tokens the plan computes
    plan = plan_shared_prefixes(prompt_ids(batch))
    _, _, padded = update(model, ppo_micro_batch_size_per_gpu=12, batch=make_shared_batch)
    _, _, shared = update(
        model, ppo_micro_batch_size_per_gpu=12, batch=make_shared_batch, share_prompt_prefix=True
    )
    assert padded["actor/forward_tokens"] == real
    assert shared["actor/forward_tokens"] == plan.tokens_computed(real)
    # the two 3-sample groups save 2 * (5 - 1) + 2 * (8 - 1); the Delethink group saves more still
    assert shared["actor/forward_tokens"] <= real - 2 * 4 - 2 * 7


def test_packing_and_sharing_are_exclusive(model):
    with pytest.raises(ValueError, match="use_remove_padding and share_prompt_prefix"):
        DataParallelPPOActor(
            model, None, actor_config(), 1.0, 8, use_remove_padding=True, share_prompt_prefix=True
        )


@pytest.mark.compares_runs
def test_log_probs_are_finite_for_rows_alone(model):
    """A micro-batch of one row still runs both passes (its prefix, then its last prompt token)."""
    actor = DataParallelPPOActor(model, None, actor_config(), 1.0, 8, share_prompt_prefix=True)
    batch = make_batch(actor)
    log_probs = actor.compute_log_prob(batch, rows_per_micro=1)
    reference = log_softmax.log_probs_from_logits(response_logits(model, batch), batch["responses"])
    mask = batch["response_mask"].bool()
    assert_forward_close(log_probs[mask], reference[mask])


@pytest.mark.slow
@pytest.mark.compares_runs
def test_a_delethink_step_trains_the_same_with_shared_prefixes(tiny_assets, tmp_path):
    """A whole run (FSDP2, the real agent loop, in one process): sharing changes the forward's token count
    only."""
    from tests.e2e_utils import DELETHINK, ONE_PROCESS, tiny_config
    from verl.trainer.launch import run
    from verl.utils.fs import read_jsonl

    metrics = {}
    for share in (False, True):
        run_dir = tmp_path / f"share_{share}"
        keys = ("trainer.total_training_steps=1", f"actor_rollout_ref.model.share_prompt_prefix={share}")
        run(tiny_config("tiny_delethink", tiny_assets, run_dir, *DELETHINK, ONE_PROCESS, *keys))
        metrics[share] = read_jsonl(run_dir / "metrics.jsonl")[0]
    plain, shared = metrics[False], metrics[True]
    assert plain["delethink/num_turns_max"] > 1  # chunk rows that share the question
    # old log-probs (before the update) against the engine's, and the loss: the same numbers, summed in
    # another order
    for key in ("train/rollout_prob_diff_mean", "train/rollout_prob_diff_max"):
        assert shared[key] == metric_approx(plain[key], FORWARD_ULPS), key
    assert shared["actor/pg_loss"] == metric_approx(plain["actor/pg_loss"])
    assert shared["actor/forward_tokens"] < plain["actor/forward_tokens"]
