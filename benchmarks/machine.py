"""One line describing the machine a benchmark ran on (timings are only comparable
within one run, but a reader needs to know which CPU produced them)."""

from __future__ import annotations

import os
import platform


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else the platform's processor."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def describe() -> str:
    """``"2 cores, AMD EPYC (x86_64)"``."""
    return f"{os.cpu_count()} cores, {cpu_model()} ({platform.machine()})"
