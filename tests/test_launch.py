"""What the launcher refuses to run on this machine, with a message instead of a silent fallback."""

import importlib.util

import pytest
import torch

from verl.config import compose_config
from verl.trainer.config_loader import load_config
from verl.trainer.launch import unsupported_reason

REQUIRED = [
    "actor_rollout_ref.model.path=org/model",
    "data.train_files=[t.jsonl]",
    "data.val_files=[v.jsonl]",
]


def config(*overrides):
    return load_config(compose_config("policy_iteration", [*REQUIRED, *overrides]), check_paths=False)


def test_cpu_configs_run_with_any_number_of_ranks():
    assert unsupported_reason(config()) is None
    assert unsupported_reason(config("trainer.nnodes=2", "trainer.n_gpus_per_node=2")) is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
def test_cuda_without_a_device_is_refused():
    reason = unsupported_reason(config("trainer.device=cuda"))
    assert reason == "trainer.device=cuda, but no CUDA device is visible"


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed")
def test_sglang_without_the_package_is_refused(monkeypatch):
    monkeypatch.setattr(
        torch.cuda, "is_available", lambda: True
    )  # pretend a GPU so the engine check is reached
    reason = unsupported_reason(config("trainer.device=cuda", "actor_rollout_ref.rollout.name=sglang"))
    assert reason == "rollout.name=sglang, but sglang is not installed (pip install -e .[gpu])"
