"""A one-line description of the machine, printed with every measured figure."""

from __future__ import annotations

import os
import platform


def machine_description() -> str:
    """CPU model, usable cores and OS of this machine."""
    model = platform.processor() or "unknown CPU"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores, {platform.system()} {platform.release()}"
