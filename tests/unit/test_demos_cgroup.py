"""The demo's real memory limit: a memory cgroup found for this process, made under it with its
limit, read back (peak, OOM kills); said plainly where there is none."""
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from trident.demos.cgroup import KillClock, Layout, MemoryCgroup, find_layout


def _proc(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "proc-cgroup"
    p.write_text(text)
    return p


def test_v1_memory_cgroup_is_found_under_its_controller(tmp_path):
    (tmp_path / "memory").mkdir()
    layout = find_layout(tmp_path, _proc(tmp_path, "5:devices:/\n4:memory:/jobs/a1\n0::/\n"))
    assert layout == Layout(1, tmp_path / "memory" / "jobs" / "a1")
    assert layout.limit_file == "memory.limit_in_bytes"


def test_v2_needs_the_memory_controller(tmp_path):
    (tmp_path / "cgroup.controllers").write_text("cpu io memory pids\n")
    assert find_layout(tmp_path, _proc(tmp_path, "0::/user.slice/x\n")) == Layout(2, tmp_path / "user.slice" / "x")
    (tmp_path / "cgroup.controllers").write_text("cpu io pids\n")
    assert find_layout(tmp_path, _proc(tmp_path, "0::/user.slice/x\n")) == "cgroup v2 without the memory controller"


def test_no_cgroup_is_a_reason_not_an_error(tmp_path):
    assert "no cgroups here" in find_layout(tmp_path, tmp_path / "missing")
    assert find_layout(tmp_path, _proc(tmp_path, "4:memory:/a\n")) == "no memory cgroup for this process"


def test_a_cgroup_gets_its_limit_and_reads_its_counters(tmp_path):
    own = tmp_path / "memory" / "jobs"
    own.mkdir(parents=True)
    cg = MemoryCgroup(3 * 2**30, layout=Layout(1, own), name="demo")
    assert (own / "demo" / "memory.limit_in_bytes").read_text() == str(3 * 2**30)
    (own / "demo" / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n")
    (own / "demo" / "memory.max_usage_in_bytes").write_text("123456\n")
    assert cg.oom_kills() == 7 and cg.peak_bytes() == 123456
    with pytest.raises(ValueError, match="positive"):
        MemoryCgroup(0, layout=Layout(1, own))


def test_the_kill_clock_times_each_kill_from_the_start_of_its_block(tmp_path):
    own = tmp_path / "memory" / "jobs"
    own.mkdir(parents=True)
    cg = MemoryCgroup(2**30, layout=Layout(1, own), name="demo")
    events = own / "demo" / "memory.oom_control"
    events.write_text("oom_kill 5\n")  # kills before the block are not its own
    with KillClock(cg, every_s=0.01) as clock:
        events.write_text("oom_kill 7\n")
        tick = threading.Event()
        for _ in range(500):  # up to 5 s for the clock's thread to read it
            if clock.times_s or tick.wait(0.01):
                break
        assert len(clock.times_s) == 2
    assert all(0.0 <= t <= 5.0 for t in clock.times_s), clock.times_s
    with KillClock(cg, every_s=60.0) as clock:
        events.write_text("oom_kill 8\n")  # seen by the last reading, when the block ends
    assert len(clock.times_s) == 1


def _real_layout():
    layout = find_layout()
    if isinstance(layout, str):
        pytest.skip(layout)
    if not os.access(layout.own, os.W_OK):
        pytest.skip(f"{layout.own} is not writable here")
    return layout


def test_the_kernel_kills_a_process_over_the_limit():
    """Real: a child in a 64 MiB cgroup that touches 256 MiB is killed by the kernel and counted;
    one that stays under it exits normally."""
    cg = MemoryCgroup(64 * 2**20, layout=_real_layout(), name=f"trident-test-{os.getpid()}")
    try:
        def run(mib: int) -> int:
            code = f"b = bytearray({mib} * 2**20); b[::4096] = b'x' * len(b[::4096])"
            return subprocess.run([sys.executable, "-c", code],
                                  preexec_fn=lambda: (cg.path / "cgroup.procs").write_text(str(os.getpid()))).returncode

        assert run(8) == 0 and cg.oom_kills() == 0
        assert run(256) == -9
        assert cg.oom_kills() >= 1
        assert cg.peak_bytes() <= 64 * 2**20
    finally:
        cg.remove()
    assert not cg.path.exists()


def test_the_demo_applies_the_limit_where_it_can_and_says_so_where_it_cannot(tmp_path):
    from trident.demos.cgroup import limit_for_ray

    assert limit_for_ray(None) == (None, "")
    cg, note = limit_for_ray(2 * 2**30, "no memory cgroup for this process")
    assert cg is None and "trident's alone" in note and "no memory cgroup for this process" in note
    own = tmp_path / "memory" / "me"
    own.mkdir(parents=True)
    cg, note = limit_for_ray(2 * 2**30, Layout(1, own))
    assert cg is not None and (cg.path / "memory.limit_in_bytes").read_text() == str(2 * 2**30)
    assert "2.00 GiB" in note and "cgroup" in note and "alone" not in note
    (own / "file").write_text("")  # a cgroup cannot be made where a file stands in the way
    blocked, note = limit_for_ray(2 * 2**30, Layout(1, own / "file"))
    assert blocked is None and "trident's alone" in note
