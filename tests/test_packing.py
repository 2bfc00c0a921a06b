"""Sequence packing (`model.use_remove_padding`) computes what the padded path computes."""

import copy

import pytest
import torch

from tests.test_dp_actor import actor_config, make_batch, update
from tests.tolerances import assert_forward_close, assert_gradients_close, metric_approx
from verl.core import log_softmax
from verl.core.batch import select_rows
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.actor.dp_actor import DataParallelPPOActor, response_logits
from verl.workers.actor.packing import packed_response_logits


@pytest.fixture(scope="module")
def model():
    return build_model(build_tokenizer(), seed=0)


@pytest.mark.compares_runs
def test_packed_log_probs_and_gradients_equal_padded(model):
    actor = DataParallelPPOActor(copy.deepcopy(model), None, actor_config(), temperature=0.7, norm_length=8)
    batch = make_batch(actor)
    padded = actor.compute_log_prob(batch, rows_per_micro=9)
    actor.use_remove_padding = True
    packed = actor.compute_log_prob(batch, rows_per_micro=9)  # all 9 rows in one packed sequence
    has_token = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
    assert_forward_close(packed[has_token], padded[has_token])

    grads_padded, _, metrics_padded = update(model, ppo_micro_batch_size_per_gpu=4)
    grads_packed, _, metrics_packed = update(model, ppo_micro_batch_size_per_gpu=4, use_remove_padding=True)
    assert_gradients_close(grads_packed, grads_padded)
    assert metrics_packed["actor/pg_loss"] == metric_approx(metrics_padded["actor/pg_loss"])


@pytest.mark.compares_runs
def test_rows_do_not_see_each_other(model):
    """Without the block-diagonal mask a row would attend to the rows packed before it; changing the
    first row's tokens must leave the second row's logits as they were."""
    batch = make_batch(DataParallelPPOActor(model, None, actor_config(), 1.0, 8))
    two = select_rows(batch, slice(0, 2))
    changed = {k: v.clone() for k, v in two.items()}
    changed["input_ids"][0] = torch.where(two["attention_mask"][0].bool(), 7, two["input_ids"][0])
    with torch.no_grad():
        a, b = packed_response_logits(model, two), packed_response_logits(model, changed)
        alone = response_logits(model, select_rows(two, slice(1, 2)))
    r = int(two["attention_mask"][1, -two["responses"].shape[1] :].sum())
    assert_forward_close(a[1, :r], b[1, :r])
    assert_forward_close(a[1, :r], alone[0, :r])
    lp = log_softmax.log_probs_from_logits(a[1:, :r], two["responses"][1:, :r])
    assert torch.isfinite(lp).all()


def test_a_row_without_prompt_is_an_error(model):
    batch = make_batch(DataParallelPPOActor(model, None, actor_config(), 1.0, 8))
    bad = select_rows(batch, slice(0, 2))
    t = bad["responses"].shape[1]
    bad["attention_mask"] = bad["attention_mask"].clone()
    bad["attention_mask"][1, :-t] = 0
    with pytest.raises(ValueError, match=r"rows \[1\] have no prompt token"):
        packed_response_logits(model, bad)
