"""Data parallel SFT over the RL worker's FSDP2 code: `torchrun --nproc_per_node=N -m verl.trainer.main_sft`.

Without torchrun's RANK / WORLD_SIZE the trainer is one plain process and the model is not sharded
(float32, on `trainer.device`: files default to a GPU where there is one, the synthetic task to the CPU
it was tuned on). Under torchrun, with any N (1 included, for the `fsdp` mixed precision on one GPU),
every rank holds an FSDP2 shard (`fsdp_workers.shard_model`), trains on its token-balanced
share of each batch (`micro_batching.balance_rows_across_ranks`), and divides its loss by the target
tokens of the whole batch over all ranks; the gradients are summed over ranks (as the actor does), so
N ranks take the step one process takes on the whole batch.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeVar

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule
from transformers import PreTrainedModel

from verl.config import ConfigError, FSDPConfig
from verl.single_controller.fsdp_workers import shard_model

T = TypeVar("T")
FULL = StateDictOptions(full_state_dict=True, cpu_offload=True)


@dataclass(frozen=True)
class Ranks:
    rank: int
    world_size: int
    device: torch.device
    sharded: bool = False  # in a torchrun process group, the model an FSDP2 shard

    @property
    def main(self) -> bool:
        """The rank that prints, logs and writes files."""
        return self.rank == 0


SINGLE = Ranks(0, 1, torch.device("cpu"))  # one plain process


def init_ranks(device: str) -> Ranks:
    """One process, or the process group torchrun describes (gloo on CPU, nccl on GPU); `device` is
    trainer.device (cpu | cuda | auto)."""
    on_gpu = device == "cuda" or (device == "auto" and torch.cuda.is_available())
    if on_gpu and not torch.cuda.is_available():
        raise ConfigError("trainer.device=cuda: torch sees no CUDA device here; set it to cpu or auto")
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return Ranks(0, 1, torch.device("cuda")) if on_gpu else SINGLE
    if on_gpu:
        torch.cuda.set_device(local_gpu(os.environ, torch.cuda.device_count(), device))
    if not dist.is_initialized():
        dist.init_process_group("nccl" if on_gpu else "gloo")
    here = torch.device("cuda", torch.cuda.current_device()) if on_gpu else torch.device("cpu")
    return Ranks(dist.get_rank(), dist.get_world_size(), here, sharded=True)


def local_gpu(env: Mapping[str, str], gpus: int, device: str) -> int:
    """This torchrun rank's GPU: its LOCAL_RANK, when the node has a GPU for each of its ranks. Every rank
    checks the node's rank count (LOCAL_WORLD_SIZE), so all of them stop with the same line."""
    ranks_here = int(env.get("LOCAL_WORLD_SIZE", 1))
    if ranks_here > gpus:
        raise ConfigError(
            f"trainer.device={device}: torchrun starts {ranks_here} ranks on this node and torch sees "
            f"{gpus} GPU(s); use --nproc_per_node={gpus} or trainer.device=cpu"
        )
    return int(env.get("LOCAL_RANK", 0))


def prepare_model(model: PreTrainedModel, ranks: Ranks, fsdp: FSDPConfig) -> PreTrainedModel:
    """The model on its device; under torchrun sharded, with gradients summed over ranks."""
    model = model.to(ranks.device)
    if not ranks.sharded:
        return model
    mesh = dist.device_mesh.init_device_mesh(ranks.device.type, (ranks.world_size,))
    model = shard_model(model, mesh, fsdp)
    # each rank's loss is its share of the global batch loss: sum the gradients (see dp_actor)
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            module.set_force_sum_reduction_for_comms(True)
    return model


def all_sum(values: list[float], ranks: Ranks) -> list[float]:
    """Element-wise sums over ranks (the values themselves in one process)."""
    if not ranks.sharded:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=ranks.device)
    dist.all_reduce(tensor)
    return tensor.tolist()


def from_main(value: T, ranks: Ranks) -> T:
    """The main rank's `value` on every rank (for decisions with side effects only it may take)."""
    if not ranks.sharded:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def all_max(value: int, ranks: Ranks) -> int:
    if not ranks.sharded:
        return value
    tensor = torch.tensor([value], device=ranks.device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return int(tensor.item())


def full_state(
    model: PreTrainedModel, optimizer: torch.optim.Optimizer
) -> tuple[dict[str, torch.Tensor], dict]:
    """Unsharded model and optimizer state dicts on CPU (a collective when sharded)."""
    return get_model_state_dict(model, options=FULL), get_optimizer_state_dict(model, optimizer, options=FULL)


def full_weights(model: PreTrainedModel) -> dict[str, torch.Tensor]:
    """The unsharded model state dict on CPU (a collective when sharded)."""
    return get_model_state_dict(model, options=FULL)


def load_optimizer_state(model: PreTrainedModel, optimizer: torch.optim.Optimizer, optim_state: dict) -> None:
    """A full optimizer state dict into this rank's shards (any number of ranks can load one checkpoint)."""
    set_optimizer_state_dict(model, optimizer, optim_state, options=StateDictOptions(full_state_dict=True))


def finish(ranks: Ranks, all_done: bool = False) -> None:
    """Leave the process group. `all_done`: every rank finished its run, so they first wait for each other
    and no rank tears the group down while another still uses it (a 2-rank SFT run once aborted at exit,
    "terminate called without an active exception", after all its steps). After an error no barrier:
    the others may never reach it."""
    if ranks.sharded and dist.is_initialized():
        if all_done:
            dist.barrier()
        dist.destroy_process_group()
