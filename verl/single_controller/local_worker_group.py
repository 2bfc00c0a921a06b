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

from verl.config import PolicyIterationConfig
from verl.single_controller.fsdp_workers import ActorRolloutRefWorker
from verl.single_controller.sharded_group import ShardedWorkerGroup


def _quiet_about_stops(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    """Ctrl-C and SIGTERM raise KeyboardInterrupt in whatever code runs (`launch.SignalStop`), here often
    the engine's task, which then ends holding it; the launcher reports the stop, so that task's
    "exception was never retrieved" would only add a traceback. Everything else is reported as usual."""
    if isinstance(context.get("exception"), (KeyboardInterrupt, SystemExit)):
        return
    loop.default_exception_handler(context)


async def _cancelled(tasks: set[asyncio.Task]) -> None:
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


class LocalWorkerGroup(ShardedWorkerGroup):
    def __init__(self, config: PolicyIterationConfig) -> None:
        self.world_size = 1  # load_config refuses trainer.launcher=local with more ranks
        self.dynamic_bsz = config.actor_rollout_ref.actor.use_dynamic_bsz
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_quiet_about_stops)
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
            # a run stopped mid-generation (Ctrl-C, SIGTERM) leaves the engine's task pending: end it
            # here, where Ray would have ended the actor's process
            pending = asyncio.all_tasks(self.loop)
            if pending:
                self.loop.run_until_complete(_cancelled(pending))
            self.loop.close()
