"""``trident demo pdf --small --compare ray``: both runs on the same input, every document
exactly once, the side-by-side table, the plot paths, and none of Ray's log lines."""
import os
from pathlib import Path

import pytest

from trident.cli import main

pytest.importorskip("pypdf")
pytest.importorskip("rapidocr_onnxruntime")
os.environ["RAY_AUTH_MODE"] = "disabled"


def test_demo_pdf_small_compare_ray(tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = main(["demo", "pdf", "--small", "--no-samples", "--compare", "ray", "--cpus", "4"])
    out, err = capfd.readouterr()
    assert rc == 0, out + err
    demo = Path("trident-demo-pdf")  # the default output folder, in the current directory
    for policy in ("ray", "trident"):
        assert f"{policy}: 8 inputs, 7 processed, 1 skipped (encrypted), each exactly once" in out, out
        assert (demo / policy / "run.png").stat().st_size > 10_000
        assert f"plot: {demo / policy / 'run.png'}" in out
        assert (demo / policy / "documents.parquet").exists() and (demo / policy / "run.json").exists()
    table = out[out.index("wall time") - 200:].splitlines()
    header = next(line for line in table if "stock Ray Data" in line)
    assert "trident" in header and "speedup" in header
    assert any(line.startswith("tasks failed") for line in table)
    assert "what trident changed and why" in out
    # Ray's own log lines stay off the terminal without --verbose
    assert "streaming_executor" not in out + err and "core_worker" not in out + err
    assert (demo / "ray.log").exists() and f"Ray's log lines: {demo / 'ray.log'}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trident-demo-pdf"]


def test_demo_under_a_memory_limit_runs_ray_in_a_cgroup_where_it_can(tmp_path, capfd, monkeypatch):
    """``--memory-limit``: where a memory cgroup can be made, Ray's processes run in one of that
    size in both runs and the table counts the processes the kernel killed; elsewhere the demo
    says the limit is trident's alone. 6 GiB holds the small form (every document once)."""
    from trident.demos.cgroup import find_layout

    monkeypatch.chdir(tmp_path)
    rc = main(["demo", "pdf", "--small", "--no-samples", "--compare", "ray", "--cpus", "3",
               "--memory-limit", "6GiB"])
    out, err = capfd.readouterr()
    assert rc == 0, out + err
    for policy in ("ray", "trident"):
        assert f"{policy}: 8 inputs, 7 processed, 1 skipped (encrypted), each exactly once" in out, out
    layout = find_layout()
    if not isinstance(layout, str) and os.access(layout.own, os.W_OK):
        assert "memory limit 6.00 GiB: Ray's processes run in a memory cgroup" in out, out
        (row,) = [ln for ln in out.splitlines() if ln.startswith("processes OOM-killed (kernel)")]
        assert row.split()[-2:] == ["0", "0"], row  # 6 GiB holds the small form
        told = out[out.index("what trident changed and why"):]
        assert "what stock Ray Data did, for comparison:" in told, told
        assert told.count("no process OOM-killed") == 2, told  # each run's kills, timed where there were any
        assert not any(p.name.startswith("trident-demo-") for p in layout.own.iterdir())  # removed after
    else:
        assert "memory limit 6.00 GiB: trident's alone" in out, out
