"""examples/multi_node_template.sh on a real two-node Ray cluster on this machine: node 0 (the head and the
driver) and node 1 (a second raylet), one CPU each, CPU ranks talking over gloo across the nodes. Rank 0
runs on the driver's node and rank 1 on the other; losing node 1 mid-run stops the driver with one line
and loses nothing, and the same commands then resume it to the result of the one-node two-rank run; what
the cluster cannot hold is refused with one line each, fast.

Each test's Ray lives under a RAY_TMPDIR of its own (so its `ray start` does not record itself in
/tmp/ray, where a plain ray.init() elsewhere on the machine would look) and on a free port; every
process that carries that RAY_TMPDIR is stopped when the test ends, passed or failed."""

import contextlib
import math
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.e2e_utils import DELETHINK, HANG_S, tiny_overrides, varies_between_runs
from verl.config import compose_config
from verl.trainer.config_loader import load_config
from verl.trainer.launch import run
from verl.utils import checkpoint
from verl.utils.fs import read_jsonl

pytestmark = [pytest.mark.slow, pytest.mark.multinode]

REPO = Path(__file__).resolve().parents[1]
TEMPLATE = REPO / "examples" / "multi_node_template.sh"
CONFIG = "tiny_delethink"
STEPS = ("trainer.total_training_steps=3", "trainer.save_freq=1")
# Which limit stopped a process is told by its message (ours name JOIN_TIMEOUT_S or the seconds they
# waited), not by the clock: a wait on a node or a driver is a safety net against a hang (HANG_S).


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


class Machine:
    """This machine as a cluster of template nodes: starts `multi_node_template.sh` processes with one
    Ray temp dir and port, and stops every process that carries that temp dir."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.ray_tmpdir = tempfile.mkdtemp(prefix="r", dir="/tmp")  # short: Ray's socket paths live in it
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"  # node 0's Ray head, as the nodes and drivers reach it
        self.env = {
            **os.environ, "PYTHON": sys.executable, "RAY_TMPDIR": self.ray_tmpdir, "HEAD_ADDR": "127.0.0.1",
            "RAY_PORT": str(self.port), "NNODES": "2", "GPUS_PER_NODE": "1", "CPUS_PER_NODE": "1",
            "CONFIG": CONFIG, "JOIN_TIMEOUT_S": str(HANG_S),
        }  # fmt: skip
        self.started = 0

    def start(self, node_rank: int, *overrides: str, **env: str) -> tuple[subprocess.Popen, Path]:
        self.started += 1
        log = self.logs / f"{self.started}_node{node_rank}.log"  # a file: a full pipe would block the node
        with log.open("w") as out:
            proc = subprocess.Popen(
                ["bash", str(TEMPLATE), *overrides], env={**self.env, "NODE_RANK": str(node_rank), **env},
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip
        return proc, log

    def processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if proc.environ().get("RAY_TMPDIR") == self.ray_tmpdir:
                    found.append(proc)
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                continue
        return found

    def stop(self) -> None:
        """SIGKILL: a node whose head is gone drains for up to a minute on SIGTERM, not in a test. In
        rounds, for what a process started while the previous round was killing."""
        for _ in range(5):
            procs = self.processes()
            if not procs:
                break
            for proc in procs:
                try:
                    proc.kill()
                except psutil.NoSuchProcess:
                    continue
            psutil.wait_procs(procs, timeout=10)
        shutil.rmtree(self.ray_tmpdir, ignore_errors=True)


@pytest.fixture
def machine(tmp_path):
    machine = Machine(tmp_path)
    yield machine
    machine.stop()
    assert machine.processes() == []


def run_overrides(assets, run_dir) -> list[str]:
    return [*tiny_overrides(assets, run_dir), *DELETHINK, *STEPS]


@pytest.fixture(scope="module")
def one_node_run(tiny_assets, ray_session, tmp_path_factory):
    """The same config as one node with two ranks, uninterrupted, in this process's Ray."""
    run_dir = tmp_path_factory.mktemp("one_node") / "run"
    overrides = [*run_overrides(tiny_assets, run_dir), "trainer.nnodes=1", "trainer.n_gpus_per_node=2"]
    run(load_config(compose_config(CONFIG, overrides)))
    return run_dir


PRIVATE_RAY = """
import sys
from pathlib import Path
import ray
from tests.e2e_utils import tiny_config
from verl.trainer.launch import start_ray
start_ray(tiny_config("tiny_longcot", Path(sys.argv[1]), sys.argv[2]))
print("gcs", ray.get_runtime_context().gcs_address)
"""


def assert_same_run(run_dir: Path, reference: Path) -> None:
    """Equal metrics (but wall-clock times) and final checkpoint within 1e-5."""
    got, want = read_jsonl(run_dir / "metrics.jsonl"), read_jsonl(reference / "metrics.jsonl")
    assert [m["step"] for m in got] == [m["step"] for m in want] == [1, 2, 3]
    for a, b in zip(got, want, strict=True):
        assert set(a) == set(b)
        for key in (k for k in a if not varies_between_runs(k)):
            assert math.isclose(a[key], b[key], rel_tol=0, abs_tol=1e-5), (a["step"], key, a[key], b[key])
    assert want[0]["actor/grad_norm"] > 0  # the steps trained
    final = Path("global_step_3") / "actor" / "huggingface"
    got_weights = AutoModelForCausalLM.from_pretrained(run_dir / final).state_dict()
    want_weights = AutoModelForCausalLM.from_pretrained(reference / final).state_dict()
    assert got_weights.keys() == want_weights.keys()
    for key, value in want_weights.items():
        torch.testing.assert_close(got_weights[key], value, atol=1e-5, rtol=0, msg=key)


def placement_table(log: str) -> dict[int, str]:
    """rank -> 'node <id> (<address>)' from the driver's placement lines."""
    table = {}
    for line in log.splitlines():
        if line.startswith("  rank ") and " -> node " in line:
            rank, node = line.strip().removeprefix("rank ").split(" -> ")
            table[int(rank)] = node.removesuffix(", the driver's")
    return table


def wait_for(condition, procs: list[tuple[subprocess.Popen, Path]], timeout_s: float) -> None:
    """Until `condition()`, while every one of `procs` runs (a node whose Ray failed to start ends the wait
    with its log, not after timeout_s)."""
    deadline = time.monotonic() + timeout_s
    log = procs[0][1]
    while not condition():
        for proc, proc_log in procs:
            assert proc.poll() is None, proc_log.read_text()[-3000:]
        assert time.monotonic() < deadline, log.read_text()[-3000:]
        time.sleep(0.1)


def test_a_lost_node_stops_the_run_cleanly_and_the_same_commands_resume(
    machine, tiny_assets, one_node_run, tmp_path
):
    run_dir = tmp_path / "run"
    overrides = run_overrides(tiny_assets, run_dir)
    node1, log1 = machine.start(1)
    node0, log = machine.start(0, *overrides)
    wait_for(lambda: (run_dir / "global_step_1").is_dir(), [(node0, log), (node1, log1)], timeout_s=HANG_S)
    (raylet,) = [p for p in psutil.Process(node1.pid).children(recursive=True) if p.name() == "raylet"]
    # The raylet and the workers it started go down together, as on a machine that dies: a raylet
    # killed alone leaves rank 1 computing until Ray notices, time enough on a fast machine for the
    # run's last two steps to finish. Frozen first, so that none of them answers between the kills.
    node_processes = [raylet, *raylet.children(recursive=True)]
    for signal_process in (psutil.Process.suspend, psutil.Process.kill):
        for process in node_processes:
            with contextlib.suppress(psutil.NoSuchProcess):  # a worker that ended on its own
                signal_process(process)
    killed = time.monotonic()
    returncode = node0.wait(timeout=HANG_S)
    print(f"driver stopped {time.monotonic() - killed:.1f} s after node 1's raylet and workers were killed")
    out = log.read_text()
    assert returncode == 1, out[-3000:]
    # both nodes joined, rank 0 ran on the driver's node and rank 1 on the other
    assert "2 node(s), 2 GPU(s), 2 CPU(s) in the cluster" in out
    table = placement_table(out)
    assert set(table) == {0, 1} and table[0] != table[1], out[-3000:]
    assert f"  rank 0 -> {table[0]}, the driver's" in out

    newest = checkpoint.step_dirs(run_dir)[0]
    assert checkpoint.checkpoint_problem(newest) is None
    assert newest.name != "global_step_3"  # stopped mid-run
    lost = table[1]
    stop_line = f"lost {lost}, rank 1 during the run (start it again, or another in its place); rerun"
    assert f"{stop_line} the same command to resume from {newest}\n" in out, out[-3000:]
    assert all(checkpoint.checkpoint_problem(step) is None for step in checkpoint.step_dirs(run_dir))
    steps = [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")]  # every line whole
    assert steps == list(range(1, len(steps) + 1)) and len(steps) >= checkpoint.step_of(newest)
    for step in steps:
        assert read_jsonl(run_dir / "rollouts" / f"step_{step}.jsonl")
    assert node1.wait(timeout=HANG_S) != 0  # its Ray went down with the raylet
    assert not answers(machine.port)

    node1, _ = machine.start(1)
    node0, log = machine.start(0, *overrides)
    assert node0.wait(timeout=HANG_S) == 0, log.read_text()[-3000:]
    assert f"resumed from {newest}" in log.read_text()
    assert not answers(machine.port)  # node 0 stopped its Ray at the end
    # the two-node run, cut and resumed, is the one-node two-rank run
    assert_same_run(run_dir, one_node_run)


def test_an_address_nobody_answers_on_is_reported_in_the_join_timeout(machine, tiny_assets, tmp_path):
    # a node and the launcher, each waiting on an address nobody answers on: side by side, as the waits
    # are idle
    node1, log = machine.start(1, JOIN_TIMEOUT_S="3")
    # the launcher, given a RAY_ADDRESS nobody answers on (ray.init() would wait minutes, then say otherwise)
    driver = subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", f"--config-name={CONFIG}",
         *run_overrides(tiny_assets, tmp_path / "run")],
        env={**machine.env, "RAY_ADDRESS": machine.address}, capture_output=True, text=True,
        timeout=HANG_S, cwd=REPO,
    )  # fmt: skip
    assert driver.returncode == 2
    refused = f"cluster error: RAY_ADDRESS={machine.address}: nothing answered there within 10 s ("
    assert driver.stderr.strip().splitlines()[-1].startswith(refused), driver.stderr[-3000:]
    assert "Traceback" not in driver.stderr

    assert node1.wait(timeout=HANG_S) == 2
    lines = log.read_text().strip().splitlines()
    refused = f"cluster error: HEAD_ADDR:RAY_PORT={machine.address}: nothing answered there within 3 s ("
    assert lines[-1].startswith(refused), lines
    assert lines[-1].endswith("; start node 0 first, or check both")
    assert not any("ray start" in line for line in lines)  # Ray never started


def test_nodes_that_never_join_are_reported_and_node_0_stops_its_ray(machine, tiny_assets, tmp_path):
    # the join timeout counts from the head answering (load cannot eat it), so it can be short
    node0, log = machine.start(0, *run_overrides(tiny_assets, tmp_path / "run"), JOIN_TIMEOUT_S="2")
    assert node0.wait(timeout=HANG_S) == 2
    refused = (
        f"cluster error: NNODES=2 (trainer.nnodes): 1 of 2 node(s) joined the cluster at {machine.address} "
        "within 2 s (JOIN_TIMEOUT_S); are the others started, with this node's HEAD_ADDR and RAY_PORT?"
    )
    assert refused in log.read_text().splitlines()  # the head's own lines as it stops may follow
    assert not answers(machine.port)
    assert not (tmp_path / "run").exists()  # the driver never started


def test_what_the_cluster_cannot_hold_is_refused_with_one_line(machine, tiny_assets, tmp_path):
    """A one-node cluster with one CPU (KEEP_RAY=1 keeps its head after the template's run)."""
    overrides = run_overrides(tiny_assets, tmp_path / "run")
    node0, log = machine.start(0, *overrides, NNODES="1", GPUS_PER_NODE="2", KEEP_RAY="1")
    assert node0.wait(timeout=HANG_S) == 2
    assert log.read_text().strip().splitlines()[-1] == (
        f"cluster error: trainer.n_gpus_per_node=2: a node needs 2 CPU for its 2 cpu rank(s), and 0 of the 1 "
        f"node(s) asked for (trainer.nnodes) offer it; the Ray cluster at {machine.address} reports "
        f"1 CPU (1 node(s))"
    ), log.read_text()[-3000:]

    def driver(*more: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "verl.trainer.main_policy_iteration", f"--config-name={CONFIG}",
             *overrides, *more],
            env={**machine.env, **env}, capture_output=True, text=True, timeout=HANG_S, cwd=REPO,
        )  # fmt: skip

    refused = driver("trainer.nnodes=2", RAY_ADDRESS=machine.address)
    # (a placement group that waits for resources would take PLACEMENT_WAIT_S and say something else)
    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        f"cluster error: trainer.nnodes=2, but the Ray cluster at {machine.address} reports 1 alive node(s)"
    ), refused.stderr[-3000:]
    assert "Traceback" not in refused.stderr

    # the head recorded itself in RAY_TMPDIR/ray/ray_current_cluster, where a plain ray.init() would join
    # it; a run without RAY_ADDRESS starts its own Ray all the same
    recorded = Path(machine.ray_tmpdir) / "ray" / "ray_current_cluster"
    assert recorded.read_text().strip().endswith(f":{machine.port}")
    private = subprocess.run(
        [sys.executable, "-c", PRIVATE_RAY, str(tiny_assets), str(tmp_path / "private")],
        env=machine.env, capture_output=True, text=True, timeout=HANG_S, cwd=REPO,
    )  # fmt: skip
    assert private.returncode == 0, private.stderr[-3000:]
    (gcs,) = [line for line in private.stdout.splitlines() if line.startswith("gcs ")]
    assert not gcs.endswith(f":{machine.port}")
