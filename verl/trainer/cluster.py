"""Joining a running Ray cluster: whether its head answers, and waiting for its nodes to join.

`examples/multi_node_template.sh` runs this module on every node before Ray or the trainer starts:

    python -m verl.trainer.cluster head HOST:PORT TIMEOUT_S                    (nodes 1..N-1)
    python -m verl.trainer.cluster nodes HOST:PORT NNODES TIMEOUT_S [HEAD_PID]  (node 0)

and the launcher checks RAY_ADDRESS with `head_problem` before `ray.init()`, which waits minutes on an
address nobody answers on. Each failure is one line naming the template's variable, exit code 2.
"""

from __future__ import annotations

import math
import os
import socket
import sys
import time

POLL_S = 0.5


def split_address(address: str) -> tuple[str, int] | None:
    """'host:port' -> (host, port); None for Ray's other forms ('auto', 'ray://...')."""
    host, _, port = address.rpartition(":")
    return (host, int(port)) if host and "://" not in address and port.isdigit() else None


def head_problem(address: str, timeout_s: float, head_pid: int | None = None) -> str | None:
    """None as soon as a TCP connection to `address` (the head's GCS port) succeeds within `timeout_s`;
    else why not. With `head_pid` (the head's `ray start` on this node), a head that exited is reported
    at once instead of waited for."""
    parsed = split_address(address)
    if parsed is None:
        return None
    deadline = time.monotonic() + timeout_s
    while True:
        if head_pid is not None and not _running(head_pid):
            return f"the Ray head (ray start, pid {head_pid}) exited; its output above says why"
        try:
            with socket.create_connection(parsed, timeout=max(0.1, min(2.0, deadline - time.monotonic()))):
                return None
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            return f"nothing answered there within {timeout_s:g} s ({last})"
        time.sleep(POLL_S)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


# Ray gives up on its own start-up after a fixed 30 s without its raylet registered (not configurable),
# which a crowded machine can take (29.8 s measured at a load of 16 on 2 cores): then it starts again
LOCAL_RAY_STARTS = 3


def start_local_ray(**init_kwargs) -> None:
    """A private Ray on this machine, `ray.init(address="local", **init_kwargs)`, started from scratch
    again when Ray timed out on its own start-up. address="local": never the cluster a `ray start` on
    this machine recorded in /tmp/ray/ray_current_cluster, which a plain ray.init() would join (or hang
    on, once stopped). Its workers run at the driver's priority: Ray starts them at nice 15 by default
    (its `worker_niceness`, meant for background tasks), where the ranks that do a run's compute lost
    most of the CPU to any other busy process (a LoRA step of SmolLM2 got a sixth of a core beside one
    other Python process). RAY_worker_niceness set by the caller wins."""
    os.environ.setdefault("RAY_worker_niceness", "0")
    import ray

    for attempt in range(1, LOCAL_RAY_STARTS + 1):
        try:
            ray.init(address="local", **init_kwargs)
            return
        except Exception as error:
            if "timed out during startup" not in str(error) or attempt == LOCAL_RAY_STARTS:
                raise
            ray.shutdown()


def alive_nodes(address: str) -> int | None:
    """The alive nodes of the cluster at `address`; None while its Ray does not answer a driver yet: a
    head whose port answers can still be too slow for Ray's own connect timeout on a loaded machine."""
    import ray

    if not ray.is_initialized():
        try:
            ray.init(address=address, logging_level="WARNING", log_to_driver=False)
        except ConnectionError:
            ray.shutdown()
            return None
    return sum(node["Alive"] for node in ray.nodes())


def nodes_problem(address: str, nnodes: int, timeout_s: float, head_pid: int | None) -> str | None:
    """None once `nnodes` nodes are alive in the cluster at `address` within `timeout_s` of its head
    answering; else why not. `head_pid`: the head's `ray start --block` on this node, watched while it
    starts and while the nodes join. That head is waited for as long as it runs, not `timeout_s`: how
    long this machine takes to start Ray says nothing about the other nodes, and a head that fails exits."""
    problem = head_problem(address, math.inf if head_pid is not None else timeout_s, head_pid)
    if problem:
        return f"HEAD_ADDR:RAY_PORT={address}: {problem}"
    deadline = time.monotonic() + timeout_s
    while (alive := alive_nodes(address)) is None or alive < nnodes:
        if head_pid is not None and not _running(head_pid):
            return f"the Ray head (ray start, pid {head_pid}) exited while nodes joined"
        if time.monotonic() >= deadline and alive is None:
            return (
                f"HEAD_ADDR:RAY_PORT={address}: its port answers, but Ray there did not answer a driver "
                f"within {timeout_s:g} s (JOIN_TIMEOUT_S)"
            )
        if time.monotonic() >= deadline:
            return (
                f"NNODES={nnodes} (trainer.nnodes): {alive} of {nnodes} node(s) joined the cluster at "
                f"{address} within {timeout_s:g} s (JOIN_TIMEOUT_S); are the others started, with this "
                f"node's HEAD_ADDR and RAY_PORT?"
            )
        time.sleep(POLL_S)
    import ray

    print(f"{alive} node(s), {ray.cluster_resources().get('GPU', 0):g} GPU(s), "
          f"{ray.cluster_resources().get('CPU', 0):g} CPU(s) in the cluster at {address}")  # fmt: skip
    return None


USAGE = (
    "usage: python -m verl.trainer.cluster head HOST:PORT TIMEOUT_S"
    " | nodes HOST:PORT NNODES TIMEOUT_S [HEAD_PID]"
)


def main(argv: list[str]) -> int:
    command, args = (argv[0], argv[1:]) if argv else ("", [])
    if command == "head" and len(args) == 2:
        problem = head_problem(args[0], float(args[1]))
        if problem:
            problem = f"HEAD_ADDR:RAY_PORT={args[0]}: {problem}; start node 0 first, or check both"
    elif command == "nodes" and len(args) in (3, 4):
        head_pid = int(args[3]) if len(args) == 4 else None
        problem = nodes_problem(args[0], int(args[1]), float(args[2]), head_pid)
    else:
        problem = USAGE
    if problem:
        print(f"cluster error: {problem}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
