"""Two FSDP2 ranks (gloo, one process each) take the same PPO step as one process with all the rows.

Each case builds the 12-row batch of tests/test_dp_actor.py (5 to 15 real tokens a row), splits it
over two ranks, and compares with one unsharded process: log-probs, loss, grad norm and parameters
after one optimizer step, up to the rounding of sums taken in another order (tests/tolerances.py).
  rows      the driver's contract without balancing: each rank a contiguous block of every mini-batch
  balanced  use_dynamic_bsz: rows spread over the ranks by tokens, micro-batches by a token budget
  lopsided  use_dynamic_bsz, packing, and shards of very different sizes: the short rank runs
            zero-weight passes to match the other's forwards (and has no rows at all in one mini-batch)
  shared    share_prompt_prefix on rows that share prompts (make_shared_batch): two forward passes of
            the sharded model per micro-batch, the prefix's gradient gathered from every row
  lora      `rows` on a LoRA model (peft, rank 4 on every linear layer, A and B drawn at random so both
            get a gradient): only the adapters step, sharded alike
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from tests.test_dp_actor import actor_config, make_batch, make_shared_batch
from tests.tolerances import assert_forward_close, assert_gradients_close, metric_approx
from verl.core.batch import select_rows
from verl.models import lora
from verl.models.tiny import build_model, build_tokenizer
from verl.workers.actor.dp_actor import DataParallelPPOActor
from verl.workers.data_parallel import row_token_counts
from verl.workers.micro_batching import balanced_update_shards

WORLD_SIZE = 2
NUM_MINI_BATCHES = 2
# Plain SGD with lr 1: the parameter change IS the gradient, so comparing parameters compares the
# gradients themselves. (Adam's first step is g / (|g| + eps): for the near-zero gradients of unused
# vocabulary rows it turns float rounding of g into changes of up to lr, which says nothing about
# whether the ranks add up right.)
LR = 1.0
COMPARED_METRICS = ("actor/pg_loss", "actor/kl_loss", "actor/grad_norm", "actor/pg_clipfrac", "actor/entropy")


def new_actor(case: dict, model: torch.nn.Module) -> DataParallelPPOActor:
    return DataParallelPPOActor(
        model, torch.optim.SGD(model.parameters(), lr=LR), case["config"], temperature=1.0, norm_length=8,
        use_remove_padding=case["packed"], share_prompt_prefix=case.get("shared", False),
    )  # fmt: skip


def lora_policy(model: torch.nn.Module) -> torch.nn.Module:
    """`model` with rank-4 adapters whose A and B are drawn from a fixed seed (peft's B = 0 would leave
    A without a gradient)."""
    keys = SimpleNamespace(lora_rank=4, lora_alpha=8.0, target_modules=["all-linear"])
    model = lora.add_adapters(model, keys, lora.CAUSAL_LM)
    generator = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for p in lora.trainable_parameters(model):
            p.copy_(torch.randn(p.shape, generator=generator) * 0.1)
    return model


def run_case(case: dict, batch: dict, log_prob_rows: list[int], update_rows: list[int], mini_index):
    """compute_log_prob then update_policy on this process's rows; the model is FSDP2-sharded when
    torch.distributed is up."""
    model = build_model(build_tokenizer(), seed=0)
    if case.get("lora"):
        model = lora_policy(model)
    if dist.is_initialized():
        from verl.single_controller.fsdp_workers import shard_model

        shard_model(model, dist.device_mesh.init_device_mesh("cpu", (WORLD_SIZE,)))
    actor = new_actor(case, model)
    log_probs = actor.compute_log_prob(select_rows(batch, torch.tensor(log_prob_rows)), 2, max_token_len=24)
    shard = select_rows(batch, torch.tensor(update_rows))
    if mini_index is not None:
        shard["mini_batch_index"] = torch.tensor(mini_index)
    metrics = actor.update_policy(shard, NUM_MINI_BATCHES, rows_per_trajectory=1.5)
    # full_tensor gathers a shard from every rank: a collective, called in the same order on all
    params = {
        name: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
        for name, p in model.named_parameters()
    }
    return {"log_probs": log_probs, "metrics": metrics, "params": params}


def rank_main(rank: int, port: int, workdir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=WORLD_SIZE, init_method=f"tcp://127.0.0.1:{port}")
    try:
        inputs = torch.load(Path(workdir) / "inputs.pt", weights_only=False)
        results = {
            name: run_case(case, case["batch"], *(split[rank] for split in case["splits"]))
            for name, case in inputs["cases"].items()
        }
        torch.save(results, Path(workdir) / f"rank{rank}.pt")
    finally:
        dist.destroy_process_group()


def make_cases(batch: dict, shared_batch: dict) -> dict:
    from verl.single_controller.sharded_group import update_shard_indices

    n = batch["responses"].shape[0]
    tokens = row_token_counts(batch)
    halves = [list(range(n // 2)), list(range(n // 2, n))]
    contiguous = [idx.tolist() for idx in update_shard_indices(n, NUM_MINI_BATCHES, WORLD_SIZE)]
    balanced = balanced_update_shards(tokens, NUM_MINI_BATCHES, WORLD_SIZE)
    # mini-batch 0 = rows 0-5, mini-batch 1 = rows 6-11; rank 0: one row of the first, none of the second
    lopsided = [([0], [0]), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], [0] * 5 + [1] * 6)]
    dynamic = dict(use_dynamic_bsz=True, ppo_max_token_len_per_gpu=20)
    shared_rows = shared_batch["responses"].shape[0]
    return {
        "rows": dict(
            batch=batch,
            config=actor_config(loss_agg_mode="token-mean", ppo_micro_batch_size_per_gpu=2), packed=False,
            splits=(halves, contiguous, [None, None]),
        ),
        "balanced": dict(
            batch=batch,
            config=actor_config(loss_agg_mode="seq-mean-token-norm-trace-length", **dynamic), packed=False,
            splits=(halves, [rows for rows, _ in balanced], [index for _, index in balanced]),
        ),
        "lopsided": dict(
            batch=batch,
            config=actor_config(loss_agg_mode="seq-mean-token-mean", **dynamic), packed=True,
            splits=([[0, 1], list(range(2, n))], [rows for rows, _ in lopsided], [i for _, i in lopsided]),
        ),
        "lora": dict(
            batch=batch, lora=True,
            config=actor_config(loss_agg_mode="token-mean", ppo_micro_batch_size_per_gpu=2), packed=False,
            splits=(halves, contiguous, [None, None]),
        ),
        "shared": dict(
            batch=shared_batch, shared=True,
            config=actor_config(
                loss_agg_mode="seq-mean-token-norm-trace-length", ppo_micro_batch_size_per_gpu=3
            ),
            packed=False,
            splits=(
                [list(range(shared_rows // 2)), list(range(shared_rows // 2, shared_rows))],
                [idx.tolist() for idx in update_shard_indices(shared_rows, NUM_MINI_BATCHES, WORLD_SIZE)],
                [None, None],
            ),
        ),
    }  # fmt: skip


@pytest.mark.compares_runs
def test_two_ranks_take_the_one_process_step(tmp_path):
    from verl.single_controller.fsdp_workers import free_port

    model = build_model(build_tokenizer(), seed=0)
    actor = DataParallelPPOActor(model, None, actor_config(), 1.0, 8)
    cases = make_cases(make_batch(actor, num_trajectories=8), make_shared_batch(actor))
    torch.save({"cases": cases}, tmp_path / "inputs.pt")
    mp.spawn(rank_main, args=(free_port(), str(tmp_path)), nprocs=WORLD_SIZE, join=True)
    ranks = [torch.load(tmp_path / f"rank{r}.pt", weights_only=False) for r in range(WORLD_SIZE)]

    for name, case in cases.items():
        batch = case["batch"]
        everything = list(range(batch["responses"].shape[0]))
        single = run_case(case, batch, everything, everything, None)
        log_probs = torch.zeros_like(single["log_probs"])
        for r, rows in enumerate(case["splits"][0]):
            got = ranks[r][name]["log_probs"]
            log_probs[rows, : got.shape[1]] = got
        has_token = batch["attention_mask"][:, -batch["responses"].shape[1] :].bool()
        assert_forward_close(log_probs[has_token], single["log_probs"][has_token])
        for r in range(WORLD_SIZE):  # every rank reports the global metrics and holds the same weights
            for key in COMPARED_METRICS:
                assert ranks[r][name]["metrics"][key] == metric_approx(single["metrics"][key]), (name, r, key)
            assert_gradients_close(ranks[r][name]["params"], single["params"])
        zero_weight = ranks[0][name]["metrics"]["actor/zero_weight_micro_batches"]
        assert (zero_weight > 0) == (name == "lopsided"), (name, zero_weight)
    # LoRA: the step moved every adapter tensor and nothing else
    initial = lora_policy(build_model(build_tokenizer(), seed=0))
    moved = {
        k for k, v in initial.named_parameters() if not torch.equal(ranks[0]["lora"]["params"][k], v.detach())
    }
    assert moved == lora.trainable_names(initial)
