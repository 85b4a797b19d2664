"""Process memory as each round records it: the kept /proc descriptor reads what the kernel says now."""

import mmap
import os

from specmon.telemetry.memory import rss_bytes


def _statm_rss() -> int:
    with open("/proc/self/statm", "rb") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _resident_block(size: int) -> mmap.mmap:
    """Fresh anonymous pages, each touched: malloc may hand back freed heap that is already resident."""
    block = mmap.mmap(-1, size)
    for offset in range(0, size, mmap.PAGESIZE):
        block[offset] = 1
    return block


def test_rss_follows_the_process_as_it_grows():
    before = rss_bytes()
    block = _resident_block(64 << 20)
    after = rss_bytes()
    assert before is not None and after is not None
    assert after - before >= 60 << 20
    assert abs(after - _statm_rss()) < 4 << 20
    block.close()


def test_a_forked_child_reads_its_own_memory_not_its_parents():
    rss_bytes()  # the parent's descriptor is open before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.close(read)
            before = rss_bytes()
            block = _resident_block(96 << 20)  # noqa: F841 (held until the figures are read)
            os.write(write, f"{rss_bytes() - before} {rss_bytes()} {_statm_rss()}".encode())
            code = 0
        finally:
            os._exit(code)  # never back into the test run
    os.close(write)
    answer = os.read(read, 64)
    os.close(read)
    assert os.waitpid(pid, 0)[1] == 0
    grown, child, truth = map(int, answer.split())
    assert grown >= 80 << 20  # the child's own 96 MiB: the parent's figure would not move
    assert abs(child - truth) < 4 << 20


def test_other_processes_on_the_gpu_are_counted_without_this_one(monkeypatch):
    """NVML as a GPU host answers (a fake module: this machine has no GPU)."""
    import os
    import types

    from specmon.telemetry import memory

    proc = types.SimpleNamespace
    fake = types.SimpleNamespace(
        nvmlDeviceGetComputeRunningProcesses=lambda h: [proc(pid=os.getpid()), proc(pid=101), proc(pid=102)],
        nvmlDeviceGetGraphicsRunningProcesses=lambda h: [proc(pid=102), proc(pid=103)],
        nvmlDeviceGetHandleByIndex=lambda index: "gpu0",
    )
    monkeypatch.setattr(memory, "_nvml_state", {"module": fake})
    assert memory.gpu_other_processes() == 3  # 101, 102 (listed twice) and 103; not this process
    monkeypatch.setattr(memory, "_nvml_state", {"failed": True})
    assert memory.gpu_other_processes() is None  # no GPU, no NVML: not known, not zero
