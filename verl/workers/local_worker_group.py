"""One actor/rollout worker in this process (trainer.launcher=local): the Ray group's interface on one
device, CPU or one GPU, with no Ray imported. The trainer, agent loops, reward and checkpoints run as
under Ray, so pdb and profilers see the whole step in one process.

The worker's rollout methods are coroutines: under Ray they run on the actor's event loop; here on
one event loop the group keeps for its lifetime, so state an agent loop or the engine binds to its
loop lives as long as it does under Ray.
"""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from verl.trainer.config_schema import PolicyIterationConfig
from verl.workers.fsdp_workers import ActorRolloutRefWorker
from verl.workers.sharded_group import ShardedWorkerGroup


class LocalWorkerGroup(ShardedWorkerGroup):
    def __init__(self, config: PolicyIterationConfig) -> None:
        self.world_size = 1  # load_config refuses trainer.launcher=local with more ranks
        self.dynamic_bsz = config.actor_rollout_ref.actor.use_dynamic_bsz
        self.loop = asyncio.new_event_loop()
        self.worker = ActorRolloutRefWorker(config, rank=0, world_size=1)
        self.worker.init_model()  # a one-rank process group on a free local port

    def _call_ranks(self, method: str, calls: dict[int, tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        results = []
        for args in calls.values():  # rank 0 or nobody (an empty generation shard)
            result = getattr(self.worker, method)(*args, **kwargs)
            results.append(self.loop.run_until_complete(result) if inspect.isawaitable(result) else result)
        return results

    def shutdown(self) -> None:
        try:
            self.worker.shutdown()
        finally:
            self.loop.close()
