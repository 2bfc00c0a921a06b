"""N actor/rollout workers as Ray actors (trainer.launcher=ray), one process per device.

Each rank is an `ActorRolloutRefWorker` Ray actor holding one FSDP2 shard of the policy and a full
copy of the weights in its rollout engine, placed in its bundle of a placement group node by node
(`verl/single_controller/placement.py`). How the work is split across ranks and joined is
`verl/single_controller/sharded_group.py`; here, only how a call reaches the ranks. On CPU the ranks talk over
gloo, on GPU over NCCL; the code is the same.
"""

from __future__ import annotations

import os
from typing import Any

import ray
from ray.util import remove_placement_group

from verl.config import PolicyIterationConfig
from verl.single_controller import placement
from verl.single_controller.fsdp_workers import ActorRolloutRefWorker
from verl.single_controller.sharded_group import ShardedWorkerGroup


def cpu_threads_per_rank(world_size: int) -> int:
    """Torch threads of one CPU rank: an equal share of this machine's cores, at most the OMP_NUM_THREADS
    this process was given (on a machine shared with other jobs, more threads than free cores spin while
    they wait for each other: a Ray test run under two pytest-xdist workers took 1.6x as long)."""
    threads = max(1, (os.cpu_count() or 1) // world_size)
    if os.environ.get("OMP_NUM_THREADS"):
        threads = min(threads, int(os.environ["OMP_NUM_THREADS"]))
    return threads


def cluster_description() -> str:
    """The cluster the driver joined, as error messages name it."""
    address = os.environ.get("RAY_ADDRESS")
    return f"the Ray cluster at {address}" if address else "this machine's private Ray (RAY_ADDRESS unset)"


class ActorRolloutWorkerGroup(ShardedWorkerGroup):
    def __init__(self, config: PolicyIterationConfig) -> None:
        trainer = config.trainer
        self.world_size = trainer.world_size
        self.dynamic_bsz = config.actor_rollout_ref.actor.use_dynamic_bsz
        self.driver_node_id = ray.get_runtime_context().get_node_id()
        # raises PlacementError before any actor starts when the cluster cannot hold the ranks
        self.nodes = placement.choose_nodes(
            placement.cluster_nodes(), trainer.nnodes, trainer.n_gpus_per_node, trainer.device,
            self.driver_node_id, cluster_description(),
        )  # fmt: skip
        self.placement_group = placement.place_ranks(self.nodes, trainer.n_gpus_per_node, trainer.device)
        self.lost: list[placement.Node] = []  # nodes found gone after an error (lost_node_report)
        on_gpu = trainer.device == "cuda"
        # a GPU rank needs little CPU
        threads = cpu_threads_per_rank(self.world_size)
        options: dict[str, Any] = {"num_gpus": 1, "num_cpus": 1} if on_gpu else {"num_cpus": 1}
        options["runtime_env"] = {"env_vars": {"OMP_NUM_THREADS": str(threads)}}
        actor_cls = ray.remote(ActorRolloutRefWorker)
        self.workers = [
            actor_cls.options(**options, **placement.rank_options(self.placement_group, r)).remote(
                config, r, self.world_size
            )
            for r in range(self.world_size)
        ]
        # the table is what the ranks report, not what was asked
        by_id = {node.node_id: node for node in self.nodes}
        self.rank_nodes = [by_id[node_id] for node_id in ray.get([w.node_id.remote() for w in self.workers])]
        # rank 0's node hosts the process-group rendezvous
        address, port = ray.get(self.workers[0].rendezvous_address.remote())
        ray.get([w.init_model.remote(address, port) for w in self.workers])

    def describe_placement(self) -> str:
        return placement.describe_placement(self.rank_nodes, self.driver_node_id)

    def _call_ranks(self, method: str, calls: dict[int, tuple[Any, ...]], **kwargs: Any) -> list[Any]:
        return ray.get(
            [getattr(self.workers[r], method).remote(*args, **kwargs) for r, args in sorted(calls.items())]
        )

    def engine_handles(self) -> list[ray.actor.ActorHandle]:
        """For rollout workers that call the engines directly (`generate_one`)."""
        return list(self.workers)

    def lost_node_report(self) -> str | None:
        """Which of the ranks' nodes are gone, remembered so that the shutdown leaves their ranks out."""
        self.lost = placement.lost_nodes(self.nodes)
        return placement.describe_lost(self.lost, self.rank_nodes) if self.lost else None

    def shutdown(self) -> None:
        """Let every rank close what it holds (open envs, the engine, the process group), then end it.
        The ranks of a lost node are not asked: they are gone, and their calls would only fail."""
        lost = {node.node_id for node in self.lost}
        ranks = zip(self.workers, self.rank_nodes, strict=True)
        reachable = [worker for worker, node in ranks if node.node_id not in lost]
        try:
            ray.get([w.shutdown.remote() for w in reachable], timeout=60)
        finally:
            for w in self.workers:
                ray.kill(w)
            remove_placement_group(self.placement_group)
