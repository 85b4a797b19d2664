"""Memory figures with a "not available" of None, never an exception (the nvitop way)."""

from __future__ import annotations

import os
import resource
from typing import Any

from specmon.telemetry.procfs import forget, kept_pread

_PAGE = os.sysconf("SC_PAGE_SIZE")  # `resource` above exists only where os.sysconf does
_nvml_state: dict[str, Any] = {}  # "module": pynvml once started; "failed": it would not start
_STATM = "/proc/self/statm"


def rss_bytes() -> int | None:
    """Resident set size of this process, read every round (telemetry.procfs keeps the file open)."""
    data = kept_pread(_STATM, 64)
    if data is not None:
        try:
            return int(data.split()[1]) * _PAGE
        except (ValueError, IndexError):
            forget(_STATM)
    usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # no /proc: the peak, not the current
    return usage * 1024 if usage else None


def vram_bytes(index: int = 0) -> tuple[int | None, int | None]:
    """(used, total) of GPU `index` from NVML, or (None, None) without a driver or the package."""
    info = _query(index, lambda nvml, handle: nvml.nvmlDeviceGetMemoryInfo(handle))
    return (None, None) if info is None else (int(info.used), int(info.total))


def gpu_other_processes(index: int = 0) -> int | None:
    """Processes other than this one running on GPU `index` (they share its compute and memory
    bandwidth), or None without NVML."""
    listed = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetGraphicsRunningProcesses")
    running = _query(index, lambda nvml, handle: [p for name in listed for p in getattr(nvml, name)(handle)])
    return None if running is None else len({p.pid for p in running} - {os.getpid()})


def _query(index: int, query):
    """query(pynvml, the handle of GPU `index`); None without NVML (started once, lazily; a failure to start
    is remembered, not retried every round), or where the query raises (its own errors for a lost GPU; a
    driver that will not list processes, as containers often cannot): N/A, never a crash."""
    if "failed" in _nvml_state:
        return None
    try:
        if "module" not in _nvml_state:
            import pynvml  # provided by nvidia-ml-py

            pynvml.nvmlInit()
            _nvml_state["module"] = pynvml
        handle = _nvml_state["module"].nvmlDeviceGetHandleByIndex(index)
    except Exception:
        _nvml_state["failed"] = True
        return None
    try:
        return query(_nvml_state["module"], handle)
    except Exception:
        return None
