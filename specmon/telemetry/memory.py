"""Memory figures with a "not available" of None, never an exception (the nvitop way)."""

from __future__ import annotations

import os
import resource

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_nvml_state: dict[str, object] = {}


def rss_bytes() -> int | None:
    """Resident set size of this process."""
    try:
        with open("/proc/self/statm", "rb") as fh:
            return int(fh.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        usage = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return usage * 1024 if usage else None


def vram_bytes(index: int = 0) -> tuple[int | None, int | None]:
    """(used, total) of GPU `index` from NVML, or (None, None) without a driver or the package."""
    handle = _nvml_handle(index)
    if handle is None:
        return None, None
    try:
        info = _nvml_state["module"].nvmlDeviceGetMemoryInfo(handle)  # type: ignore[attr-defined]
        return int(info.used), int(info.total)
    except Exception:  # NVML raises its own error types for a lost GPU; show N/A instead
        return None, None


def _nvml_handle(index: int):
    """Start NVML once, lazily; remember a failure so we do not retry every round."""
    if "failed" in _nvml_state:
        return None
    try:
        import pynvml  # provided by nvidia-ml-py

        if "module" not in _nvml_state:
            pynvml.nvmlInit()
            _nvml_state["module"] = pynvml
        return pynvml.nvmlDeviceGetHandleByIndex(index)
    except Exception:
        _nvml_state["failed"] = True
        return None
