"""Peak resident memory of this process over a stretch of code (Linux), for the benchmarks.

Reset the kernel's high-water mark before the stretch and read it after: without the reset, a
transient of library start-up larger than the stretch would hide it.
"""

from __future__ import annotations


def reset_peak_rss() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # "5": reset the high-water mark to the current resident set


def peak_rss() -> int:
    """Bytes: the most resident memory since the last reset (VmHWM)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024  # KiB
    raise RuntimeError("/proc/self/status has no VmHWM line: the memory figures need Linux")
