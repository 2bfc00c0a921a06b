"""Peak memory over a stretch of code: this process's resident set (Linux, the CPU benchmarks) and the
CUDA caching allocator's per phase of a training step (the workers' `perf/max_memory_*` metrics).

Reset the high-water mark before the stretch and read it after: without the reset, a transient of
library start-up (or of an earlier phase) larger than the stretch would hide it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

GIB = 2**30


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # "5": reset the high-water mark to the current resident set


def _status_bytes(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024  # KiB
    raise RuntimeError(f"/proc/self/status has no {field} line: the memory figures need Linux")


def peak_rss() -> int:
    """Bytes: the most resident memory since the last reset (VmHWM)."""
    return _status_bytes("VmHWM")


def current_rss() -> int:
    """Bytes: the resident memory now (VmRSS)."""
    return _status_bytes("VmRSS")


class DevicePhasePeaks:
    """The most CUDA memory each named phase held (allocated: live tensors; reserved: what the caching
    allocator kept from the driver, closer to nvidia-smi), the maximum over the phase's runs since the
    last `report`. On a CPU device there are no phases: a process's resident set mixes the trainer, the
    engine and the libraries, so the report gives the process's peak resident set since it started
    (`perf/peak_rss_gib`: a worker's under Ray, the whole run's with trainer.launcher=local)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.enabled = device.type == "cuda"
        self.peaks: dict[str, tuple[int, int]] = {}  # phase -> (allocated, reserved) bytes

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if not self.enabled:
            yield
            return
        torch.cuda.reset_peak_memory_stats(self.device)
        try:
            yield
        finally:
            allocated = torch.cuda.max_memory_allocated(self.device)
            reserved = torch.cuda.max_memory_reserved(self.device)
            before = self.peaks.get(name, (0, 0))
            self.peaks[name] = (max(before[0], allocated), max(before[1], reserved))

    def report(self) -> dict[str, float]:
        """`perf/max_memory_{allocated,reserved}_gib/<phase>` and, over all phases, without the suffix;
        then start over. On CPU: `perf/peak_rss_gib`."""
        if not self.enabled:
            return {"perf/peak_rss_gib": peak_rss() / GIB}
        metrics: dict[str, float] = {}
        for name, (allocated, reserved) in self.peaks.items():
            metrics[f"perf/max_memory_allocated_gib/{name}"] = allocated / GIB
            metrics[f"perf/max_memory_reserved_gib/{name}"] = reserved / GIB
        if self.peaks:
            metrics["perf/max_memory_allocated_gib"] = max(a for a, _ in self.peaks.values()) / GIB
            metrics["perf/max_memory_reserved_gib"] = max(r for _, r in self.peaks.values()) / GIB
        self.peaks = {}
        return metrics
