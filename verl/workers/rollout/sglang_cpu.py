"""What SGLang's CPU engine needs from a machine with only packages from the index, in every process.

SGLang runs on a CPU (SGLANG_USE_CPU_ENGINE=1: torch-native attention, the pytorch sampler) once two
imports succeed that the index cannot satisfy as published:

- `sgl_kernel`: SGLang imports a few of its CPU operators at module level, and no wheel on the index
  carries them. `verl.workers.rollout.sgl_kernel_cpu` stands in for them (`sys.modules["sgl_kernel"]`)
  when no sgl_kernel is installed.
- `torchvision`: SGLang's model configs import it. The index's wheels link CUDA libraries, so beside a
  CPU torch their compiled operators do not load, and torchvision then fails at import on the two
  operator schemas it registers fake kernels for unconditionally (`torchvision::nms`, `qnms`). Those
  schemas are defined here (where torchvision's version names a CUDA build and torch is a CPU one);
  torchvision's other operators already check for the library and raise their own error if called
  (images are not on the LLM path).

Both are needed at import, in fresh interpreters: SGLang spawns its scheduler and detokenizer, which
import torch and torchvision before any SGLang hook runs, and transformers imports torchvision on every
model load wherever it is installed. So this module is torch's device-backend autoload entry point
(`torch.backends` in setup.py): `import torch` calls `torch_autoload`, which defines the torchvision
schemas in any process where they are missing (only where the index's torchvision sits beside a CPU
torch, i.e. an install with requirements-sglang-cpu.txt) and brings in the sgl_kernel stand-in only in
processes with SGLANG_USE_CPU_ENGINE=1 (the engine's own, and the one that started it).
TORCH_DEVICE_BACKEND_AUTOLOAD=0 turns this off, and with it transformers' model loading in such an install.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import os
import re
import sys

CPU_ENGINE_ENV = "SGLANG_USE_CPU_ENGINE"  # SGLang's own switch for its CPU path
_prepared = False
_torchvision_schemas = None  # the torch.library.Library holding them, kept alive with the process


def torch_autoload() -> None:
    """torch's `torch.backends` entry point, run at the end of every `import torch`."""
    _define_torchvision_schemas()
    if os.environ.get(CPU_ENGINE_ENV) == "1":
        prepare_process()


def check_sglang_version() -> None:
    """The stand-in serves one SGLang release: its imports and semantics were read from that one."""
    from verl.workers.rollout.sgl_kernel_cpu import SGLANG_VERSION

    try:
        installed = importlib.metadata.version("sglang")
    except importlib.metadata.PackageNotFoundError:
        raise ImportError(
            f"SGLang is not installed: `pip install --no-deps -r requirements-sglang-cpu.txt` installs "
            f"sglang=={SGLANG_VERSION} for CPU (README)"
        ) from None
    if installed != SGLANG_VERSION:
        raise RuntimeError(
            f"verl's CPU stand-in for sgl-kernel serves sglang=={SGLANG_VERSION}, but sglang {installed} is "
            f"installed: install sglang=={SGLANG_VERSION} (requirements-sglang-cpu.txt) for the CPU engine"
        )


def prepare_process() -> None:
    """Make `import sgl_kernel` and `import torchvision` work for SGLang's CPU path in this process."""
    global _prepared
    if _prepared:
        return
    check_sglang_version()
    _define_torchvision_schemas()
    if "sgl_kernel" not in sys.modules and importlib.util.find_spec("sgl_kernel") is None:
        from verl.workers.rollout import sgl_kernel_cpu

        sys.modules["sgl_kernel"] = sgl_kernel_cpu
    _prepared = True


def _define_torchvision_schemas() -> None:
    """Where torchvision is a CUDA build (its version label `+cu...`) beside a CPU torch, its compiled
    operators cannot load: define the two schemas its import needs. Read from its version.py, not by
    trying the library: loading it would start loading the CUDA runtime in every process."""
    global _torchvision_schemas
    import torch

    if _torchvision_schemas is not None or torch.version.cuda is not None:
        return
    spec = importlib.util.find_spec("torchvision")
    if spec is None or spec.origin is None:
        return
    version_file = os.path.join(os.path.dirname(spec.origin), "version.py")
    try:
        with open(version_file, encoding="utf-8") as file:
            built_for_cuda = re.search(r"__version__ = '[^'+]*\+cu\d+'", file.read()) is not None
    except OSError:
        return
    if not built_for_cuda:
        return
    library = torch.library.Library("torchvision", "DEF")
    for name in ("nms", "qnms"):
        library.define(f"{name}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _torchvision_schemas = library
