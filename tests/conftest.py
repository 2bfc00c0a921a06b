"""Shared fixtures: one Ray instance per test session, and tiny model + data built once. And a check that
the session leaves the repository as it found it: a test that writes inside the checkout (a log, an
output directory) fails the run, naming what it left."""

import os
import threading
from pathlib import Path

import pytest
import tqdm

from tests.clean_tree import leftovers, snapshot

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# math scoring's limits are wall-clock (math-verify's 1 s parse, 2 s verify; 5 s an item): a crowded machine
# can slow a well-formed answer past them, and a test would see 0 where it checks 1. Thirty times them, for
# this process and every process it starts. Tests of the limits pass their own timeout_s, counted from an
# item's hand-off to a started scoring process, on an answer that outlasts it (math-verify gives up on it
# only at the scaled verify limit, 60 s). Not scaled: a scoring process's start-up limit (120 s).
os.environ.setdefault("VERL_SCORING_TIME_SCALE", "30")
# Under pytest-xdist (`make test`) every worker gets its share of the cores for torch's threads, and so do
# the processes its tests start: two workers with a thread per core each would make four on two cores.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))
# `make mutants` forks this process once per mutant. tqdm's default write lock holds a multiprocessing
# semaphore that every forked child shares: a child that dies holding it (a mutant that makes a bar raise,
# or one killed for its time) leaves it taken, and every later child hangs on it without using CPU, which
# mutmut then counts as a kill. A thread lock is copied by a fork instead, and without tqdm's monitor thread
# (its documented switch) no thread can hold it at the moment of a fork. Set before any bar exists, so that
# the libraries' tqdm subclasses (datasets', transformers') inherit it.
tqdm.tqdm.set_lock(threading.RLock())
tqdm.tqdm.monitor_interval = 0


@pytest.fixture(scope="session")
def ray_session():
    import ray

    from verl.trainer.cluster import start_local_ray

    if not ray.is_initialized():
        start_local_ray(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray


@pytest.fixture(scope="session")
def tiny_assets(tmp_path_factory):
    """A freshly initialised tiny model (no SFT: tests must not depend on a long training run) and a
    small synthetic dataset."""
    from verl.data.synthetic import write_dataset
    from verl.models.tiny import save_tiny

    root = tmp_path_factory.mktemp("tiny")
    save_tiny(root / "model", seed=0)
    write_dataset(root / "data", train_size=64, val_size=8, min_terms=2, max_terms=4, seed=0)
    return root


REPO = Path(__file__).resolve().parents[1]
_BEFORE = pytest.StashKey[object]()


def _controls_the_session(config: pytest.Config) -> bool:
    """True in the process that reports the session: pytest itself, or pytest-xdist's controller (its
    workers each run a share of the tests and end before the controller does). A worker is told by its
    config, not by PYTEST_XDIST_WORKER: a pytest that a test starts inherits that variable."""
    return not hasattr(config, "workerinput")


def pytest_sessionstart(session: pytest.Session) -> None:
    if _controls_the_session(session.config):
        session.config.stash[_BEFORE] = snapshot(REPO)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if not _controls_the_session(session.config):
        return
    before = session.config.stash.get(_BEFORE, None)
    if before is None:
        message = f"repository left as found: not checked ({REPO} is not a git checkout)"
    else:
        left = leftovers(before, snapshot(REPO) or {})
        if not left:
            return
        shown = ", ".join(left[:10]) + (f" and {len(left) - 10} more" if len(left) > 10 else "")
        message = f"tests wrote inside the repository ({REPO}): {shown}; write to tmp_path instead"
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter:
        reporter.write_line("")  # under pytest-xdist the progress line is still open
        reporter.write_line(message, red=before is not None)
