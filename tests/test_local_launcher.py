"""trainer.launcher=local: the same run as under Ray, in one process that never imports Ray; and what the
entry point refuses before any model is built (one line naming the keys, exit code 2)."""

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.e2e_utils import DELETHINK, HANG_S, asset_paths, tiny_config, varies_between_runs
from verl.single_controller.worker_group import cpu_threads_per_rank
from verl.trainer.launch import run
from verl.trainer.resume import config_differences
from verl.utils.fs import read_jsonl

REPO = Path(__file__).parents[1]
MODES = {"tiny_longcot": ("data.max_response_length=24",), "tiny_delethink": DELETHINK}
STEPS = ("trainer.total_training_steps=3",)

# The local run goes through the same code as the parity run's Ray half, in a fresh interpreter, which
# then reports whether anything imported Ray.
LOCAL_RUN = """
import json, sys
from pathlib import Path
from tests.e2e_utils import tiny_config
from verl.trainer.launch import run
from verl.trainer.resume import config_differences
name, assets, run_dir, overrides = json.loads(sys.argv[1])
run(tiny_config(name, Path(assets), Path(run_dir), *overrides))
print("ray imported:", "ray" in sys.modules)
"""


def weights(path: Path) -> dict[str, torch.Tensor]:
    return AutoModelForCausalLM.from_pretrained(path).state_dict()


@pytest.mark.slow
@pytest.mark.parametrize("name", list(MODES))
def test_local_run_equals_the_ray_run_and_imports_no_ray(name, tiny_assets, ray_session, tmp_path):
    overrides = [*MODES[name], *STEPS]
    run(tiny_config(name, tiny_assets, tmp_path / "ray", *overrides))
    local = subprocess.run(
        [sys.executable, "-c", LOCAL_RUN, json.dumps(
            [name, str(tiny_assets), str(tmp_path / "local"), [*overrides, "trainer.launcher=local"]]
        )],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_S,
        # the threads Ray gives the one rank: CPU kernels may split sums by thread
        env={**os.environ, "OMP_NUM_THREADS": str(cpu_threads_per_rank(1))},
    )  # fmt: skip
    assert local.returncode == 0, local.stderr[-3000:]
    assert "ray imported: False" in local.stdout

    on_ray, on_local = (read_jsonl(tmp_path / d / "metrics.jsonl") for d in ("ray", "local"))
    assert [m["step"] for m in on_local] == [m["step"] for m in on_ray] == [1, 2, 3]
    for a, b in zip(on_ray, on_local, strict=True):
        assert set(a) == set(b)
        compared = [k for k in a if not varies_between_runs(k)]
        assert "actor/pg_loss" in compared and "train/score_mean" in compared
        assert not any(k.startswith("perf/max_memory") for k in a)  # device peaks are CUDA-only
        assert a["perf/peak_rss_gib"] > 0 and b["perf/peak_rss_gib"] > 0  # on CPU, the process's peak
        # the same code on the same threads: the same float operations in the same order, bit for bit
        for key in compared:
            assert a[key] == b[key], (a["step"], key, a[key], b[key])
    assert on_ray[0]["actor/grad_norm"] > 0  # the steps trained: equal weights are not the initial ones

    checkpoint = Path("global_step_3") / "actor" / "huggingface"
    ray_weights = weights(tmp_path / "ray" / checkpoint)
    local_weights = weights(tmp_path / "local" / checkpoint)
    initial = weights(tiny_assets / "model")
    assert any(not torch.equal(initial[k], ray_weights[k]) for k in initial)
    assert ray_weights.keys() == local_weights.keys()
    for key in ray_weights:
        assert torch.equal(ray_weights[key], local_weights[key]), key


def test_a_run_may_resume_under_the_other_launcher(tiny_assets, tmp_path):
    saved = tiny_config("tiny_longcot", tiny_assets, tmp_path).to_dict()
    current = tiny_config("tiny_longcot", tiny_assets, tmp_path, "trainer.launcher=local").to_dict()
    refused, applied = config_differences(saved, current)
    assert refused == [] and applied == ["trainer.launcher: 'ray' -> 'local'"]
    changed = tiny_config("tiny_longcot", tiny_assets, tmp_path, "trainer.launcher=local", "trainer.seed=2")
    assert config_differences(saved, changed.to_dict())[0] == ["trainer.seed: 1 -> 2"]  # others still refused


def entry_point(assets, tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    """`python -m verl.trainer.main_policy_iteration --config-name=tiny_longcot` on the test assets, its run
    directory tmp_path/run and Hydra's (its log file) tmp_path/hydra."""
    return subprocess.run(
        [sys.executable, "-m", "verl.trainer.main_policy_iteration", "--config-name=tiny_longcot",
         *asset_paths(assets), f"hydra.run.dir={tmp_path / 'hydra'}", "hydra.output_subdir=null",
         f"trainer.default_local_dir={tmp_path / 'run'}", *overrides],
        cwd=REPO, capture_output=True, text=True, timeout=HANG_S,
    )  # fmt: skip


def assert_refused(proc: subprocess.CompletedProcess, *keys: str) -> str:
    """Exit code 2, before any model: one error line that names every key in `keys`."""
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if " error: " in line or "cannot run here" in line]
    assert len(errors) == 1, proc.stderr[-3000:]
    for key in keys:
        assert key in errors[0], errors[0]
    assert "Loading weights" not in proc.stderr  # nothing was built
    return errors[0]


def test_local_launcher_with_more_than_one_rank_is_refused(tiny_assets, tmp_path):
    proc = entry_point(tiny_assets, tmp_path, "trainer.launcher=local", "trainer.n_gpus_per_node=2")
    line = assert_refused(proc, "trainer.launcher", "trainer.nnodes", "trainer.n_gpus_per_node")
    assert "1 x 2" in line


def test_local_launcher_with_the_environment_manager_is_refused(tiny_assets, tmp_path):
    proc = entry_point(
        tiny_assets, tmp_path, "trainer.launcher=local", "actor_rollout_ref.rollout.env_manager.enable=true"
    )
    assert_refused(proc, "actor_rollout_ref.rollout.env_manager.enable", "trainer.launcher")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without CUDA")
@pytest.mark.parametrize("launcher", ["ray", "local"])
def test_cuda_on_a_machine_without_cuda_is_refused(launcher, tiny_assets, tmp_path):
    proc = entry_point(tiny_assets, tmp_path, "trainer.device=cuda", f"trainer.launcher={launcher}")
    line = assert_refused(proc, "trainer.device=cuda")
    assert "no CUDA device is visible" in line
    assert not (tmp_path / "run").exists()  # refused before the run directory was written


@pytest.mark.skipif(importlib.util.find_spec("flash_attn") is not None, reason="flash-attn is installed")
def test_flash_attention_without_the_package_is_refused(tiny_assets, tmp_path):
    proc = entry_point(
        tiny_assets, tmp_path, "trainer.device=cuda",
        "actor_rollout_ref.model.attn_implementation=flash_attention_2",
    )  # fmt: skip
    line = assert_refused(proc, "actor_rollout_ref.model.attn_implementation")
    assert "flash_attn package is not installed" in line
