"""Where ranks run (verl/single_controller/placement.py) and how a run finds its cluster
(verl/trainer/cluster.py): the node choice, its refusals and tables, by hand; the cluster checks against
real sockets. The Ray side runs in tests/test_multi_node.py."""

import os
import socket

import pytest

from verl.single_controller.placement import (
    Node,
    PlacementError,
    choose_nodes,
    describe_layout,
    describe_lost,
    describe_placement,
    rank_ranges,
)
from verl.trainer import cluster

CLUSTER = "the Ray cluster at 10.0.0.1:6379"


def node(node_id: str, address: str, **resources: float) -> Node:
    return Node(node_id * 8, address, 40000, resources)


HEAD = node("a", "10.0.0.1", CPU=16)  # a CPU-only head, as many GPU clusters have
GPU_B = node("b", "10.0.0.3", CPU=32, GPU=8)
GPU_C = node("c", "10.0.0.2", CPU=32, GPU=8)
SMALL = node("d", "10.0.0.4", CPU=4, GPU=4)


def test_the_driver_node_comes_first_when_it_holds_a_node_of_ranks():
    chosen = choose_nodes([GPU_B, GPU_C], 2, 8, "cuda", driver_node_id=GPU_B.node_id, cluster=CLUSTER)
    assert chosen == [GPU_B, GPU_C]
    # otherwise the nodes that fit, by address
    chosen = choose_nodes([HEAD, GPU_B, SMALL, GPU_C], 2, 8, "cuda", HEAD.node_id, CLUSTER)
    assert chosen == [GPU_C, GPU_B]
    # CPU ranks take a CPU each: the head holds 16
    assert choose_nodes([GPU_B, HEAD], 1, 16, "cpu", HEAD.node_id, CLUSTER) == [HEAD]


def test_more_nodes_than_the_cluster_has_are_refused():
    with pytest.raises(PlacementError) as refused:
        choose_nodes([HEAD, GPU_B], 3, 8, "cuda", HEAD.node_id, CLUSTER)
    assert str(refused.value) == f"trainer.nnodes=3, but {CLUSTER} reports 2 alive node(s)"


def test_more_ranks_per_node_than_nodes_offer_are_refused():
    with pytest.raises(PlacementError) as refused:
        choose_nodes([HEAD, GPU_B, SMALL], 2, 8, "cuda", HEAD.node_id, CLUSTER)
    assert str(refused.value) == (
        "trainer.n_gpus_per_node=8: a node needs 8 GPU + 8 CPU for its 8 cuda rank(s), and 1 of the 2 "
        "node(s) asked for (trainer.nnodes) offer it; the Ray cluster at 10.0.0.1:6379 reports "
        "0 GPU + 16 CPU (1 node(s)), 4 GPU + 4 CPU (1 node(s)), 8 GPU + 32 CPU (1 node(s))"
    )
    one_cpu = [node("e", "127.0.0.1", CPU=1, GPU=1), node("f", "127.0.0.1", CPU=1, GPU=1)]
    with pytest.raises(PlacementError) as refused:
        choose_nodes(one_cpu, 1, 2, "cpu", "e" * 8, CLUSTER)
    assert str(refused.value) == (
        f"trainer.n_gpus_per_node=2: a node needs 2 CPU for its 2 cpu rank(s), and 0 of the 1 node(s) asked "
        f"for (trainer.nnodes) offer it; {CLUSTER} reports 1 CPU (2 node(s))"
    )


def test_rank_ranges():
    assert rank_ranges([5, 0, 1, 2, 7, 8]) == "0-2, 5, 7-8"
    assert rank_ranges([3]) == "3"


def test_the_plan_and_the_tables_name_ranks_and_nodes():
    assert describe_layout(2, 8, "cuda") == (
        "node 1: ranks 0-7; node 2: ranks 8-15 (node 1 is the driver's when it can hold them); "
        "one bundle of 1 GPU + 1 CPU per rank"
    )
    assert describe_layout(1, 1, "cpu") == (
        "node 1: rank 0 (node 1 is the driver's when it can hold them); one bundle of 1 CPU per rank"
    )
    rank_nodes = [GPU_C, GPU_C, GPU_B, GPU_B]
    assert describe_placement(rank_nodes, driver_node_id=GPU_C.node_id) == (
        "placement: 4 rank(s) on 2 Ray node(s)\n"
        "  ranks 0-1 -> node cccccccc (10.0.0.2), the driver's\n"
        "  ranks 2-3 -> node bbbbbbbb (10.0.0.3)"
    )
    assert describe_lost([GPU_B], rank_nodes) == "lost node bbbbbbbb (10.0.0.3), ranks 2-3 during the run"
    assert describe_lost([node("x", "10.0.0.9")], [node("x", "10.0.0.9")]) == (
        "lost node xxxxxxxx (10.0.0.9), rank 0 during the run"
    )


def test_split_address():
    assert cluster.split_address("10.0.0.1:6379") == ("10.0.0.1", 6379)
    assert cluster.split_address("auto") is None and cluster.split_address("ray://h:10001") is None


class SteppedClock:
    """time.monotonic and time.sleep for cluster.py: a sleep moves the clock on, and nothing waits."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds
        assert self.now < 60, "still waiting a minute on: a deadline was missed"


def test_a_head_that_listens_answers_and_a_closed_port_is_reported_after_the_timeout(monkeypatch):
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert cluster.head_problem(address, 5.0) is None
    clock = SteppedClock()
    monkeypatch.setattr(cluster, "time", clock)
    problem = cluster.head_problem(address, 3.0)  # closed now
    # it tried again every POLL_S until the deadline, and gave up at the first try past it
    assert clock.sleeps == [cluster.POLL_S] * len(clock.sleeps)
    assert clock.now >= 3.0 > clock.now - cluster.POLL_S
    assert problem.startswith("nothing answered there within 3 s (") and "refused" in problem


def test_node_0_waits_for_its_own_head_however_slow_and_then_gives_the_others_the_join_timeout(monkeypatch):
    """Node 0's head answers 30 s after it started (a loaded machine), past a 5 s JOIN_TIMEOUT_S; the
    join timeout counts from then, and the one node never joined is what is reported."""
    clock = SteppedClock()
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{listening.getsockname()[1]}"
    sleep = clock.sleep

    def sleep_then_start_the_head(seconds: float) -> None:
        sleep(seconds)
        if clock.now >= 30 and not starts:
            starts.append(clock.now)
            listening.listen()

    starts: list[float] = []
    clock.sleep = sleep_then_start_the_head
    monkeypatch.setattr(cluster, "time", clock)
    monkeypatch.setattr(cluster, "alive_nodes", lambda address: 1)  # Ray's answer; the deadline is ours
    with listening:
        problem = cluster.nodes_problem(address, 2, 5.0, head_pid=os.getpid())
    assert problem == (
        f"NNODES=2 (trainer.nnodes): 1 of 2 node(s) joined the cluster at {address} within 5 s "
        "(JOIN_TIMEOUT_S); are the others started, with this node's HEAD_ADDR and RAY_PORT?"
    )
    assert 35 <= clock.now < 35 + cluster.POLL_S + 1e-9  # the join deadline ran from the head's answer

    # without a head of its own to watch (KEEP_RAY=1 started it and returned), the head gets the timeout
    clock.now = 0.0
    closed = cluster.nodes_problem(address, 2, 5.0, head_pid=None)  # the listener is closed now
    assert closed.startswith(f"HEAD_ADDR:RAY_PORT={address}: nothing answered there within 5 s (")


def test_the_cluster_command_says_how_to_call_it(capsys):
    assert cluster.main(["nodes", "127.0.0.1:1"]) == 2
    assert capsys.readouterr().err.startswith("cluster error: usage: python -m verl.trainer.cluster head ")


def test_a_local_ray_that_timed_out_starting_is_started_again_and_other_errors_are_not(monkeypatch):
    """Ray's own start-up limit (30 s for the raylet to register) cannot be tripped on purpose here, so a
    stand-in for ray.init raises what Ray raises then; the retry decision is ours."""
    import ray

    timed_out = Exception("The current node timed out during startup. This could happen because ...")
    calls, shutdowns = [], []
    outcomes = [timed_out, timed_out, None]

    def init(**kwargs):
        calls.append(kwargs)
        if (outcome := outcomes.pop(0)) is not None:
            raise outcome

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "shutdown", lambda: shutdowns.append(1))
    cluster.start_local_ray(num_cpus=2)
    assert calls == [{"address": "local", "num_cpus": 2}] * 3 and len(shutdowns) == 2

    outcomes[:] = [timed_out] * cluster.LOCAL_RAY_STARTS
    with pytest.raises(Exception, match="timed out during startup"):  # given up after the last start
        cluster.start_local_ray()
    outcomes[:] = [RuntimeError("port 6379 is taken"), None]
    with pytest.raises(RuntimeError, match="taken"):  # any other failure is not waited out again
        cluster.start_local_ray()
    assert outcomes == [None]


def test_a_head_whose_ray_is_slow_to_answer_a_driver_is_asked_again_until_the_join_timeout(monkeypatch):
    """Ray's connect timeout cannot be tripped on purpose here: a stand-in for ray.init raises what Ray
    raises when the head's GCS does not answer (ConnectionError), twice, then the cluster answers."""
    import ray

    clock = SteppedClock()
    monkeypatch.setattr(cluster, "time", clock)
    connects = [ConnectionError("Failed to connect to Ray cluster")] * 2 + [None]
    initialized = []

    def init(**kwargs):
        if (outcome := connects.pop(0)) is not None:
            raise outcome
        initialized.append(kwargs["address"])

    monkeypatch.setattr(ray, "init", init)
    monkeypatch.setattr(ray, "is_initialized", lambda: bool(initialized))
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    monkeypatch.setattr(ray, "cluster_resources", lambda: {"CPU": 2.0})
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        address = f"127.0.0.1:{listening.getsockname()[1]}"
        assert cluster.nodes_problem(address, 2, 5.0, head_pid=None) is None
        assert initialized == [address] and clock.sleeps == [cluster.POLL_S] * 2

        # a Ray that never answers is named as such at the join timeout, not counted as nodes missing
        initialized.clear()
        connects[:] = [ConnectionError("Failed to connect to Ray cluster")] * 100
        problem = cluster.nodes_problem(address, 2, 5.0, head_pid=None)
    assert problem == (
        f"HEAD_ADDR:RAY_PORT={address}: its port answers, but Ray there did not answer a driver within 5 s "
        "(JOIN_TIMEOUT_S)"
    )
