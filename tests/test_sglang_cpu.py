"""What makes SGLang's CPU engine importable here: the sgl-kernel stand-in's operators against the semantics
SGLang's GPU kernels give them (hand-computed tables), its version check, and the process hook that torch's
autoload runs in every fresh interpreter."""

import importlib.metadata
import subprocess
import sys

import pytest
import torch

from verl.workers.rollout import sgl_kernel_cpu, sglang_cpu
from verl.workers.rollout.sgl_kernel_cpu import assign_req_to_token_pool_cpu, copy_all_layer_kv_cache_cpu


def test_each_request_writes_its_slots_into_its_own_row():
    table = torch.zeros(4, 8, dtype=torch.int32)
    # request 0 owns row 2 and takes positions 1..2; request 1 owns row 0 and takes positions 3..5
    assign_req_to_token_pool_cpu(
        torch.tensor([2, 0]),
        table,
        torch.tensor([1, 3]),
        torch.tensor([3, 6]),
        torch.tensor([10, 11, 20, 21, 22]),
        8,
    )
    want = torch.zeros(4, 8, dtype=torch.int32)
    want[2, 1:3] = torch.tensor([10, 11])
    want[0, 3:6] = torch.tensor([20, 21, 22])
    assert torch.equal(table, want)


def test_a_request_with_no_new_slots_takes_none_from_the_shared_list():
    table = torch.full((2, 4), -1, dtype=torch.int64)
    assign_req_to_token_pool_cpu(
        torch.tensor([0, 1]), table, torch.tensor([2, 0]), torch.tensor([2, 2]), torch.tensor([7, 8]), 4
    )
    assert table.tolist() == [[-1, -1, -1, -1], [7, 8, -1, -1]]


@pytest.mark.parametrize(
    "start, end, pool_len, message",
    [([0], [5], 4, "positions 0:5 outside 0:4"), ([2], [1], 4, "positions 2:1"), ([0], [1], 3, "pool_len=3")],
)
def test_assignments_outside_the_table_are_refused(start, end, pool_len, message):
    table = torch.zeros(1, 4, dtype=torch.int32)
    with pytest.raises(ValueError, match=message):
        assign_req_to_token_pool_cpu(
            torch.tensor([0]), table, torch.tensor(start), torch.tensor(end), torch.arange(5), pool_len
        )


def kv_pool():
    """Two layers' K and V buffers of a token-slot pool, described as SGLang's memory pool describes them:
    a uint64 tensor of base addresses and one of row strides in bytes."""
    buffers = [torch.arange(6 * 4, dtype=torch.float32).reshape(6, 4) + 100 * i for i in range(3)]
    buffers.append(torch.arange(6 * 2, dtype=torch.bfloat16).reshape(6, 2))  # another row size and dtype
    pointers = torch.tensor([b.data_ptr() for b in buffers], dtype=torch.uint64)
    strides = torch.tensor([b.stride(0) * b.dtype.itemsize for b in buffers])
    return buffers, pointers, strides


def test_kv_rows_move_in_every_buffer_and_a_swap_is_safe():
    buffers, pointers, strides = kv_pool()
    before = [b.clone() for b in buffers]
    # rows 0 and 1 swap places (sources and targets overlap) and row 2 is copied to row 5
    copy_all_layer_kv_cache_cpu(pointers, strides, torch.tensor([1, 0, 5]), torch.tensor([0, 1, 2]))
    for got, old in zip(buffers, before, strict=True):
        want = old.clone()
        want[1], want[0], want[5] = old[0], old[1], old[2]
        assert torch.equal(got, want)


def test_kv_moves_need_as_many_sources_as_targets():
    _, pointers, strides = kv_pool()
    with pytest.raises(ValueError, match="2 target rows but 1 source rows"):
        copy_all_layer_kv_cache_cpu(pointers, strides, torch.tensor([1, 2]), torch.tensor([0]))


def test_the_speculative_decoding_operators_say_they_are_not_served():
    with pytest.raises(
        NotImplementedError, match="verify_tree_greedy_cpu serves SGLang's speculative decoding"
    ):
        sgl_kernel_cpu.verify_tree_greedy_cpu(torch.zeros(1))


def test_another_sglang_version_is_refused_with_one_line(monkeypatch):
    version = importlib.metadata.version
    monkeypatch.setattr(
        importlib.metadata, "version", lambda name: "0.5.24" if name == "sglang" else version(name)
    )
    with pytest.raises(RuntimeError, match=r"serves sglang==0\.5\.23, but sglang 0\.5\.24 is installed"):
        sglang_cpu.check_sglang_version()

    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(importlib.metadata, "version", missing)
    with pytest.raises(ImportError, match="requirements-sglang-cpu.txt"):
        sglang_cpu.check_sglang_version()


def test_torch_autoloads_the_hook_from_this_package():
    entry = [
        e for e in importlib.metadata.entry_points(group="torch.backends") if e.name == "verl_sglang_cpu"
    ]
    assert [e.value for e in entry] == ["verl.workers.rollout.sglang_cpu:torch_autoload"]


def fresh_interpreter(code: str, **env: str) -> subprocess.CompletedProcess:
    import os

    return subprocess.run(
        [sys.executable, "-c", code], env={**os.environ, **env}, capture_output=True, text=True, timeout=300
    )


def test_a_fresh_sglang_process_imports_the_stand_in_and_torchvision():
    code = "import torch, sgl_kernel, torchvision.transforms\n"
    code += "print(sgl_kernel.__name__, sgl_kernel.SGLANG_VERSION)"
    out = fresh_interpreter(code, SGLANG_USE_CPU_ENGINE="1")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["verl.workers.rollout.sgl_kernel_cpu", "0.5.23"]


def test_other_processes_get_torchvision_and_no_stand_in():
    # transformers imports torchvision on every model load where it is installed
    code = "\n".join(
        [
            "import torchvision, transformers.modeling_utils",
            "try:",
            " import sgl_kernel",
            "except ImportError:",
            " print(0)",
        ]
    )
    out = fresh_interpreter(code, SGLANG_USE_CPU_ENGINE="0")
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "0"
