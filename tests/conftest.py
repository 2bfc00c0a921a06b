"""Shared fixtures: one Ray instance per test session, and tiny model + data built once."""

import os

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")
os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Under pytest-xdist (`make test`) every worker gets its share of the cores for torch's threads, and so do
# the processes its tests start: two workers with a thread per core each would make four on two cores.
if "PYTEST_XDIST_WORKER_COUNT" in os.environ:
    workers = int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    os.environ.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // workers)))


@pytest.fixture(scope="session")
def ray_session():
    import ray

    if not ray.is_initialized():
        # address="local": never the cluster a `ray start` on this machine recorded (launch.start_ray)
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
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
