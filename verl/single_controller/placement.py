"""Where each rank runs: one Ray placement-group bundle per rank, packed node by node.

With k = trainer.n_gpus_per_node, ranks 0..k-1 run on the first node, k..2k-1 on the second, and so on,
as verl places them: a rank's neighbours share its node, and rank 0, which hosts the process group's
rendezvous, runs on the driver's node whenever that node offers k ranks' resources. The nodes are chosen
from what the cluster reports before anything is placed, so a config the cluster cannot hold stops at
once with one line naming the key, instead of a placement group that waits for resources forever.

The choice and the tables are plain functions of the nodes' descriptions; Ray is imported only by the
functions that ask it.
"""

from __future__ import annotations

import socket
from collections import Counter
from dataclasses import dataclass
from typing import Any

# A placement group that the cluster could hold but cannot place now (other jobs hold the resources)
# fails after this long instead of waiting for them.
PLACEMENT_WAIT_S = 60.0
# How long a lost node's raylet gets to answer a connection before it counts as gone.
RAYLET_ANSWER_S = 3.0
NODE_ID_LABEL = "ray.io/node-id"  # the label Ray gives every node: its hex id


class PlacementError(Exception):
    """The cluster cannot hold the run's ranks; the message is one line naming the key."""


@dataclass(frozen=True)
class Node:
    node_id: str  # Ray's hex node id
    address: str  # the node's IP (several Ray nodes on one machine share it)
    raylet_port: int  # the raylet's port: a node whose raylet stops answering there is gone
    resources: dict[str, float]  # what the node offers in total (CPU, GPU, ...)

    @property
    def name(self) -> str:
        return f"node {self.node_id[:8]} ({self.address})"


def rank_resources(device: str) -> dict[str, float]:
    """What one rank reserves: a GPU and a CPU on cuda, a CPU on cpu."""
    return {"GPU": 1.0, "CPU": 1.0} if device == "cuda" else {"CPU": 1.0}


def _amounts(resources: dict[str, float], keys) -> str:
    return " + ".join(f"{resources.get(key, 0.0):g} {key}" for key in keys)


def choose_nodes(
    nodes: list[Node], nnodes: int, ranks_per_node: int, device: str, driver_node_id: str, cluster: str
) -> list[Node]:
    """The `nnodes` nodes that host ranks, in rank order: the driver's node first when it can hold
    `ranks_per_node` ranks, then the others by address and id. Raises PlacementError naming the key
    (trainer.nnodes or trainer.n_gpus_per_node) and what `cluster` (its description) reports."""
    need = {key: amount * ranks_per_node for key, amount in rank_resources(device).items()}
    fits = [n for n in nodes if all(n.resources.get(key, 0.0) >= amount for key, amount in need.items())]
    fits.sort(key=lambda n: (n.node_id != driver_node_id, n.address, n.node_id))
    if len(fits) >= nnodes:
        return fits[:nnodes]
    if len(nodes) < nnodes:
        raise PlacementError(f"trainer.nnodes={nnodes}, but {cluster} reports {len(nodes)} alive node(s)")
    offers = Counter(_amounts(n.resources, need) for n in nodes)
    listed = ", ".join(f"{offer} ({count} node(s))" for offer, count in sorted(offers.items()))
    raise PlacementError(
        f"trainer.n_gpus_per_node={ranks_per_node}: a node needs {_amounts(need, need)} for its "
        f"{ranks_per_node} {device} rank(s), and {len(fits)} of the {nnodes} node(s) asked for "
        f"(trainer.nnodes) offer it; {cluster} reports {listed}"
    )


def rank_ranges(ranks: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2, 5'."""
    runs: list[list[int]] = []
    for rank in sorted(ranks):
        if runs and rank == runs[-1][-1] + 1:
            runs[-1].append(rank)
        else:
            runs.append([rank])
    return ", ".join(str(run[0]) if len(run) == 1 else f"{run[0]}-{run[-1]}" for run in runs)


def _ranks(ranks: list[int]) -> str:
    return f"{'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}"


def describe_layout(nnodes: int, ranks_per_node: int, device: str) -> str:
    """The plan's placement row: which ranks each node will hold (no cluster needed)."""
    nodes = "; ".join(
        f"node {i + 1}: {_ranks(list(range(i * ranks_per_node, (i + 1) * ranks_per_node)))}"
        for i in range(nnodes)
    )
    bundle = _amounts(rank_resources(device), rank_resources(device))
    return f"{nodes} (node 1 is the driver's when it can hold them); one bundle of {bundle} per rank"


def describe_placement(rank_nodes: list[Node], driver_node_id: str) -> str:
    """The rank -> node table of a started run, one line per node, in rank order."""
    ranks: dict[str, list[int]] = {}
    nodes = {node.node_id: node for node in rank_nodes}
    for rank, node in enumerate(rank_nodes):
        ranks.setdefault(node.node_id, []).append(rank)
    lines = [f"placement: {len(rank_nodes)} rank(s) on {len(ranks)} Ray node(s)"]
    for node_id, held in ranks.items():
        driver = ", the driver's" if node_id == driver_node_id else ""
        lines.append(f"  {_ranks(held)} -> {nodes[node_id].name}{driver}")
    return "\n".join(lines)


def describe_lost(lost: list[Node], rank_nodes: list[Node]) -> str:
    """One line naming the lost nodes and the ranks they held."""
    names = []
    for node in lost:
        held = [rank for rank, n in enumerate(rank_nodes) if n.node_id == node.node_id]
        names.append(f"{node.name}, {_ranks(held)}")
    return f"lost {'; '.join(names)} during the run"


# Ray ------------------------------------------------------------------------------------------------


def cluster_nodes() -> list[Node]:
    """The cluster's alive nodes, as Ray reports them."""
    import ray

    return [
        Node(n["NodeID"], n["NodeManagerAddress"], int(n["NodeManagerPort"]), dict(n["Resources"]))
        for n in ray.nodes()
        if n["Alive"]
    ]


def place_ranks(nodes: list[Node], ranks_per_node: int, device: str):
    """A placement group with one bundle per rank, bundle r on nodes[r // ranks_per_node]; waits until it
    is placed, at most PLACEMENT_WAIT_S."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group

    world_size = len(nodes) * ranks_per_node
    bundle = rank_resources(device)
    on_node = [{NODE_ID_LABEL: nodes[r // ranks_per_node].node_id} for r in range(world_size)]
    group = placement_group([dict(bundle) for _ in range(world_size)], "PACK", bundle_label_selector=on_node)
    try:
        ray.get(group.ready(), timeout=PLACEMENT_WAIT_S)
    except ray.exceptions.GetTimeoutError:
        remove_placement_group(group)
        free = ray.available_resources()
        raise PlacementError(
            f"{world_size} rank(s) of {_amounts(bundle, bundle)} each were not placed on "
            f"{', '.join(n.name for n in nodes)} within {PLACEMENT_WAIT_S:g} s: other work holds those "
            f"resources (the cluster has {_amounts(free, bundle)} free)"
        ) from None
    return group


def rank_options(group, rank: int) -> dict[str, Any]:
    """The actor options that put `rank` in its bundle."""
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    return {"scheduling_strategy": PlacementGroupSchedulingStrategy(group, placement_group_bundle_index=rank)}


def raylet_answers(node: Node, timeout_s: float = RAYLET_ANSWER_S) -> bool:
    """Whether the node's raylet accepts a connection: a killed raylet's port refuses at once, well
    before Ray's health checks mark the node dead (about 15 s with Ray's defaults)."""
    try:
        with socket.create_connection((node.address, node.raylet_port), timeout=timeout_s):
            return True
    except OSError:
        return False


def lost_nodes(nodes: list[Node]) -> list[Node]:
    """Those of `nodes` that Ray reports dead or whose raylet does not answer."""
    alive = {node.node_id for node in cluster_nodes()}
    return [node for node in nodes if node.node_id not in alive or not raylet_answers(node)]
