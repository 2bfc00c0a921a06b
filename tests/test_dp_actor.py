"""The actor's update: micro-batching (by rows or by token budget) gives exactly the mini-batch
gradient, in every loss mode; log-probs come back in row order whatever the grouping."""

import copy
from types import SimpleNamespace

import pytest
import torch

from tests.test_log_softmax import reference_log_probs_and_entropy
from tests.tolerances import (
    assert_forward_close,
    assert_gradients_close,
    assert_same_adam_steps,
    metric_approx,
)
from verl.config import ActorConfig
from verl.core import log_softmax, names
from verl.core.batch import collate_rows, select_rows, trajectory_rows
from verl.core.trajectory import Trajectory, Turn
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.data_parallel import row_token_counts

ADVANTAGES = [1.0, -0.5, 0.25, 2.0, -1.0, 0.5, -2.0, 0.75]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    return build_model(build_tokenizer(), seed=0)


def make_batch(actor, num_trajectories=6):
    """Uneven prompt and response lengths; every other trajectory has two chunks (two rows)."""
    g = torch.Generator().manual_seed(1)
    trajs = []
    for i in range(num_trajectories):
        turns = []
        for c in range(1 + i % 2):
            prompt = torch.randint(3, 200, (3 + i + c,), generator=g).tolist()
            resp = torch.randint(3, 200, (2 + (i * 3 + c) % 5,), generator=g).tolist()
            turns.append(Turn(prompt, resp, [0.0] * len(resp), "length"))
        trajs.append(Trajectory(turns))
    return with_log_probs(actor, collate_rows(trajectory_rows(trajs, ADVANTAGES[:num_trajectories]), 0))


def make_shared_batch(actor):
    """Rows that share prompt prefixes the way the trainer's do: two GRPO groups of three samples with
    one prompt each (5 and 8 tokens), and a Delethink-like group of two trajectories of three chunks
    (prompts: the question; then question + the first 2 thinking tokens + the last 2 of the chunk)."""
    g = torch.Generator().manual_seed(2)

    def tokens(n):
        return torch.randint(3, 200, (n,), generator=g).tolist()

    def turn(prompt, response, stop="length"):
        return Turn(prompt, response, [0.0] * len(response), stop)

    trajs = []
    for prompt_length in (5, 8):
        prompt = tokens(prompt_length)
        trajs += [Trajectory([turn(prompt, tokens(2 + i))]) for i in range(3)]
    question = tokens(6)
    for i in range(2):
        chunks = [tokens(5), tokens(5), tokens(2 + i)]
        head = chunks[0][:2]
        prompts = [question, question + head + chunks[0][-2:], question + head + chunks[1][-2:]]
        trajs.append(Trajectory([turn(p, c) for p, c in zip(prompts, chunks, strict=True)]))
    return with_log_probs(actor, collate_rows(trajectory_rows(trajs, ADVANTAGES[: len(trajs)]), 0))


def with_log_probs(actor, batch):
    old = actor.compute_log_prob(batch, rows_per_micro=4, max_token_len=64)
    # every other row off-policy by a ratio of e^0.3 = 1.35 > 1 + clip_ratio_high: those tokens clip
    batch["old_log_probs"] = old - 0.3 * (torch.arange(old.shape[0])[:, None] % 2)
    batch["rollout_log_probs"] = old + 0.1
    batch["ref_log_prob"] = old + 0.2
    return batch


def actor_config(**overrides):
    # token-mean unless a test names its mode: ActorConfig's default follows the environments instead
    settings = dict(
        tis_imp_ratio_cap=2.0, use_kl_loss=True, entropy_coeff=0.01, grad_clip=1e9, loss_agg_mode="token-mean"
    )
    return ActorConfig(**{**settings, **overrides})


def update(
    model, lr=0.0, use_remove_padding=False, num_mini_batches=1, share_prompt_prefix=False, batch=make_batch,
    **overrides,
):  # fmt: skip
    """One update of a copy of `model` on the batch `batch(actor)` makes; returns (gradients, parameters
    after the step, metrics)."""
    m = copy.deepcopy(model)
    optimizer = torch.optim.SGD(m.parameters(), lr=lr)  # lr 0: keep weights, inspect gradients
    actor = DataParallelPPOActor(
        m, optimizer, actor_config(**overrides), temperature=1.0, norm_length=8,
        use_remove_padding=use_remove_padding, share_prompt_prefix=share_prompt_prefix,
    )  # fmt: skip
    batch = batch(actor)
    metrics = actor.update_policy(batch, num_mini_batches=num_mini_batches, rows_per_trajectory=1.5)
    grads = {n: p.grad.clone() for n, p in m.named_parameters()}
    return grads, {n: p.detach().clone() for n, p in m.named_parameters()}, metrics


def assert_same_update(a, b):
    """Two updates whose gradients sum the same terms in another order (tests/tolerances.py)."""
    assert_gradients_close(a[0], b[0])
    assert_gradients_close(a[1], b[1])  # plain SGD: the step is lr times the gradient
    for key in ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/entropy"):
        assert a[2][key] == metric_approx(b[2][key]), key


def adam_step(model, micro_batch_rows: int, rows: list[int] | None = None) -> dict[str, torch.Tensor]:
    """The weights after one AdamW step (lr 1e-3, as the tiny runs) of a copy of `model` on make_batch's rows
    (or those of them in `rows`)."""
    m = copy.deepcopy(model)
    optimizer = torch.optim.AdamW(m.parameters(), lr=1e-3, weight_decay=0.01)
    actor = DataParallelPPOActor(
        m,
        optimizer,
        actor_config(ppo_micro_batch_size_per_gpu=micro_batch_rows),
        temperature=1.0,
        norm_length=8,
    )
    batch = make_batch(actor)
    if rows is not None:
        batch = select_rows(batch, torch.tensor(rows))
    actor.update_policy(batch, num_mini_batches=1, rows_per_trajectory=1.5)
    return {name: p.detach().clone() for name, p in m.named_parameters()}


@pytest.mark.compares_runs
def test_adam_steps_compare_up_to_rounding_but_not_on_other_rows(model):
    """AdamW turns the rounding of a near-zero gradient into a step of either sign: micro-batches of 2 rows
    against one of all 9 pass the comparison of tests/tolerances.py (though some weights may differ by
    more than 1e-5), a step on 6 of the 9 rows fails it."""
    whole = adam_step(model, 64)
    assert_same_adam_steps(adam_step(model, 2), whole, lr=1e-3, steps=1)
    with pytest.raises(AssertionError, match="weights apart by more than lr / 10"):
        assert_same_adam_steps(adam_step(model, 64, rows=list(range(6))), whole, lr=1e-3, steps=1)


@pytest.mark.compares_runs
@pytest.mark.parametrize("mode", names.LOSS_AGG_MODES)
def test_micro_batches_sum_to_the_mini_batch_gradient(model, mode):
    whole = update(model, loss_agg_mode=mode, ppo_micro_batch_size_per_gpu=64)
    split = update(model, loss_agg_mode=mode, ppo_micro_batch_size_per_gpu=2)
    assert_same_update(split, whole)
    assert whole[2]["actor/micro_batches"] == 1 and split[2]["actor/micro_batches"] == 5  # 9 rows
    assert 0 < whole[2]["actor/pg_clipfrac"] < 1 and whole[2]["actor/grad_norm"] > 0


@pytest.mark.compares_runs
@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-norm-trace-length"])
def test_token_budget_micro_batches_give_the_one_big_batch_gradient(model, mode):
    """The issue's test: token-budget micro-batching gives the same gradients (and step) as one big
    micro-batch. The 9 rows hold 5 to 12 real tokens (87 in all): a budget of 24 needs at least 4
    micro-batches."""
    whole = update(model, lr=0.1, loss_agg_mode=mode, ppo_micro_batch_size_per_gpu=64)
    budget = update(
        model, lr=0.1, loss_agg_mode=mode, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=24,
        ppo_micro_batch_size_per_gpu=1,  # ignored with use_dynamic_bsz
    )  # fmt: skip
    assert_same_update(budget, whole)
    assert budget[2]["actor/micro_batches"] >= 4 and budget[2]["actor/rows_over_budget"] == 0


@pytest.mark.compares_runs
def test_token_budget_spans_mini_batches_and_epochs(model):
    whole = update(model, lr=0.1, num_mini_batches=3, ppo_epochs=2, ppo_micro_batch_size_per_gpu=64)
    budget = update(
        model, lr=0.1, num_mini_batches=3, ppo_epochs=2, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=20
    )
    assert_same_update(budget, whole)


def test_rows_over_the_budget_run_alone_with_a_warning(model):
    with pytest.warns(UserWarning, match="longer than actor.ppo_max_token_len_per_gpu=10"):
        _, _, metrics = update(model, use_dynamic_bsz=True, ppo_max_token_len_per_gpu=10)
    # rows of 5, 8, 8, 9, 9, 10, 11, 11, 12, 12 tokens: no two fit in 10, four are over it
    assert metrics["actor/micro_batches"] == 9
    assert metrics["actor/rows_over_budget"] == 4 and metrics["actor/zero_weight_micro_batches"] == 0


@pytest.mark.compares_runs
def test_log_probs_come_back_in_row_order(model):
    actor = DataParallelPPOActor(copy.deepcopy(model), None, actor_config(), temperature=0.7, norm_length=8)
    batch = make_batch(actor)
    by_rows = actor.compute_log_prob(batch, rows_per_micro=9)
    actor.config.use_dynamic_bsz = True
    # the balanced grouping reorders rows (largest first); the result must not be
    by_tokens = actor.compute_log_prob(batch, rows_per_micro=1, max_token_len=30)
    mask = batch["response_mask"].bool()
    assert_forward_close(by_tokens[mask], by_rows[mask])
    with pytest.raises(ValueError, match="set log_prob_max_token_len_per_gpu"):
        actor.compute_log_prob(batch, rows_per_micro=1)
    assert sorted(row_token_counts(batch)) == sorted(batch["attention_mask"].sum(-1).tolist())


def test_rows_must_split_into_mini_batches(model):
    actor = DataParallelPPOActor(copy.deepcopy(model), None, ActorConfig(), temperature=1.0, norm_length=8)
    batch = make_batch(actor)
    with pytest.raises(ValueError, match="do not split into 4 mini-batches"):
        actor.update_policy(batch, num_mini_batches=4)
    batch["mini_batch_index"] = torch.tensor([0, 1, 2, 3, 4, 0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"mini_batch_index of rows \[4\] is outside \[0, 4\)"):
        actor.update_policy(batch, num_mini_batches=4)


@pytest.mark.compares_runs
def test_mini_batch_index_groups_rows(model):
    """Rows given as interleaved mini-batches by index train like the contiguous blocks they name."""
    blocks = update(model, lr=0.1, num_mini_batches=3, ppo_micro_batch_size_per_gpu=2)
    m = copy.deepcopy(model)
    optimizer = torch.optim.SGD(m.parameters(), lr=0.1)
    actor = DataParallelPPOActor(
        m, optimizer, actor_config(ppo_micro_batch_size_per_gpu=2), temperature=1.0, norm_length=8
    )
    batch = make_batch(actor)
    order = torch.tensor([8, 0, 3, 1, 6, 4, 7, 2, 5])  # rows shuffled; index says which block each is in
    shuffled = {k: v[order] for k, v in batch.items()}
    shuffled["mini_batch_index"] = order // 3
    metrics = actor.update_policy(shuffled, num_mini_batches=3, rows_per_trajectory=1.5)
    assert_gradients_close({name: p.detach() for name, p in m.named_parameters()}, blocks[1])
    assert metrics["actor/pg_loss"] == metric_approx(blocks[2]["actor/pg_loss"])


class FullLogitsInFloat32(torch.nn.Module):
    """The model as the actor used it before: the LM head over every position, the response positions
    picked afterwards and copied to float32."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, logits_to_keep: torch.Tensor, **inputs) -> SimpleNamespace:
        return SimpleNamespace(logits=self.model(**inputs).logits[:, logits_to_keep].float())


@pytest.mark.compares_runs
@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("use_remove_padding", [False, True])
def test_log_probs_entropy_and_parameter_gradients_equal_the_float32_path(
    model, temperature, use_remove_padding
):
    """The actor's logits (the LM head on the response positions only, in the model's dtype) through
    the chunked log-prob/entropy function give the log-probs, entropies and parameter gradients of
    the float32 path it replaced."""
    m = copy.deepcopy(model)
    actor = DataParallelPPOActor(
        m, None, actor_config(), temperature, norm_length=8, use_remove_padding=use_remove_padding
    )
    batch = make_batch(actor)
    real = batch["response_mask"].bool()
    g = torch.Generator().manual_seed(2)
    weights = (
        torch.randn(2, *real.shape, generator=g) * real
    )  # packed rows hold unrelated logits past the end

    def results(logits_fn):
        log_probs, entropy = logits_fn(batch)
        loss = (weights[0] * log_probs + weights[1] * entropy).sum()
        return log_probs[real], entropy[real], torch.autograd.grad(loss, list(m.parameters()))

    new = results(
        lambda b: log_softmax.log_probs_and_entropy(actor._logits(b)[0], b["responses"], temperature)
    )
    actor.model = FullLogitsInFloat32(m)
    old = results(lambda b: reference_log_probs_and_entropy(actor._logits(b)[0], b["responses"], temperature))
    assert_forward_close(new[0], old[0])
    assert_forward_close(new[1], old[1])
    names = [name for name, _ in m.named_parameters()]
    assert_gradients_close(dict(zip(names, new[2], strict=True)), dict(zip(names, old[2], strict=True)))
