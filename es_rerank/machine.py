"""A one-line description of the machine, printed with every measured figure."""

from __future__ import annotations

import os
import platform


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the OS tells it, else all of them)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def machine_description() -> str:
    """CPU model, usable cores and OS of this machine."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {usable_cores()} cores, {platform.system()} {platform.release()}"
