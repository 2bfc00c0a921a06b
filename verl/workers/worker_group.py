"""N actor/rollout workers as Ray actors (trainer.launcher=ray), one process per device.

Each rank is an `ActorRolloutRefWorker` Ray actor holding one FSDP2 shard of the policy and a full
copy of the weights in its rollout engine. How the work is split across ranks and joined is
`verl/workers/sharded_group.py`; here, only how a call reaches the ranks. On CPU the ranks talk over
gloo, on GPU over NCCL; the code is the same.
"""

from __future__ import annotations

import os
from typing import Any

import ray

from verl.config import PolicyIterationConfig
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from verl.workers.sharded_group import ShardedWorkerGroup


def cpu_threads_per_rank(world_size: int) -> int:
    """Torch threads of one CPU rank: an equal share of this machine's cores, at most the OMP_NUM_THREADS
    this process was given (on a machine shared with other jobs, more threads than free cores spin while
    they wait for each other: a Ray test run under two pytest-xdist workers took 1.6x as long)."""
    threads = max(1, (os.cpu_count() or 1) // world_size)
    if os.environ.get("OMP_NUM_THREADS"):
        threads = min(threads, int(os.environ["OMP_NUM_THREADS"]))
    return threads


class ActorRolloutWorkerGroup(ShardedWorkerGroup):
    def __init__(self, config: PolicyIterationConfig) -> None:
        trainer = config.trainer
        self.world_size = trainer.world_size
        self.dynamic_bsz = config.actor_rollout_ref.actor.use_dynamic_bsz
        on_gpu = trainer.device == "cuda"
        # a GPU rank needs little CPU
        threads = cpu_threads_per_rank(self.world_size)
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1} if on_gpu else {"num_cpus": 1}
        options["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(threads)}}
        actor_cls = ray.remote(ActorRolloutRefWorker)
        self.workers = [
            actor_cls.options(**options).remote(config, r, self.world_size) for r in range(self.world_size)
        ]
        # rank 0's node hosts the process-group rendezvous, wherever Ray placed it
        address, port = ray.get(self.workers[0].rendezvous_address.remote())
        ray.get([w.init_model.remote(address, port) for w in self.workers])

    def _call_ranks(self, method: str, calls: dict[int, tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        return ray.get(
            [getattr(self.workers[r], method).remote(*args, **kwargs) for r, args in sorted(calls.items())]
        )

    def engine_handles(self) -> list[ray.actor.ActorHandle]:
        """For rollout workers that call the engines directly (`generate_one`)."""
        return list(self.workers)

    def shutdown(self) -> None:
        """Let every rank close what it holds (open envs, the engine, the process group), then end it."""
        try:
            ray.get([w.shutdown.remote() for w in self.workers], timeout=60)
        finally:
            for w in self.workers:
                ray.kill(w)
