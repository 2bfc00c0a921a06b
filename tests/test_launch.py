"""What the launcher refuses to run on this machine, with a message instead of a silent fallback, and what
it warns about before a run starts."""

import importlib.util

import pytest
import torch

from tests.e2e_utils import ONE_PROCESS, tiny_config
from verl.config import compose_config
from verl.trainer import disk_check
from verl.trainer.config_loader import load_config
from verl.trainer.disk_check import checkpoint_size
from verl.trainer.launch import run, unsupported_reason
from verl.utils.fs import read_jsonl

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


def test_sglang_without_the_package_is_refused(monkeypatch):
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "sglang" else find_spec(name, *a)
    )
    sglang_on_cpu = config(
        "actor_rollout_ref.rollout.name=sglang", "actor_rollout_ref.rollout.free_cache_engine=false"
    )
    assert unsupported_reason(sglang_on_cpu) == (
        "rollout.name=sglang, but sglang is not installed (GPU: pip install -e .[gpu]; CPU: pip install "
        "--no-deps -r requirements-sglang-cpu.txt)"
    )
    monkeypatch.undo()
    assert unsupported_reason(sglang_on_cpu) is None  # installed here, and it runs on this CPU


@pytest.mark.slow
def test_a_run_whose_retained_checkpoints_may_not_fit_starts_with_a_warning(
    tiny_assets, tmp_path, monkeypatch, capsys
):
    """Two saves and room for one and a half checkpoints: the first fits, the second may not (one kept
    while the next is written is two), so the run warns and goes on. The free space is set rather than
    read: the disk's changes while other processes write, which would decide whether the warning comes."""
    run_dir = tmp_path / "run"
    config = tiny_config(
        "tiny_longcot", tiny_assets, run_dir, "data.max_response_length=8", ONE_PROCESS,
        "trainer.save_freq=1", "trainer.total_training_steps=2",
    )  # fmt: skip
    size = checkpoint_size(config)[0].total
    free = size * 3 // 2
    monkeypatch.setattr(disk_check, "free_bytes", lambda directory: (free, tmp_path))
    run(config)
    out, err = capsys.readouterr()
    assert f"free at {tmp_path}: the first checkpoint fits, the retained ones may NOT\n" in out
    assert err.count("disk warning: ") == 1
    assert (
        f"disk warning: the run may hold 2 checkpoints ({2 * size:,} bytes) at once in "
        f"trainer.default_local_dir='{run_dir}', which has {free:,} bytes free; not even "
        "trainer.max_actor_ckpt_to_keep=1 fits (one kept while the next is written): free space there\n"
    ) in err
    assert [m["step"] for m in read_jsonl(run_dir / "metrics.jsonl")] == [1, 2]  # a warning, not a refusal
