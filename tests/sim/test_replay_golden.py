"""Replays of the shipped sample traces against small golden results (seed 0).

The goldens pin the simulator's behaviour; a change that moves them must say why.
"""
import json

import pytest

from trident.cli import main as trident_main
from trident.sim.compare import Entry, simulate
from trident.sim.engine import EngineConfig
from trident.sim.metrics import summarize
from trident.sim.traces import load_trace, scale_load

GOLDEN = {  # (trace, load, policy): (avg JCT s, avg queue s, makespan s)
    ("tiresias", 1.0, "fifo"): (726.9, 4.2, 4200.4),
    ("philly-gavel", 3.0, "fifo"): (216663.4, 173866.9, 3965625.0),
    ("philly-gavel", 3.0, "sjf"): (125470.0, 80770.8, 3927417.8),
    ("philly-gavel", 3.0, "gavel"): (113470.9, 70076.6, 2719159.3),
}


@pytest.mark.parametrize("trace, load, policy", list(GOLDEN))
def test_replay_matches_golden(trace, load, policy):
    t = load_trace(trace)
    r = simulate(Entry(policy), t.nodes, scale_load(t.jobs, load), EngineConfig(seed=0))
    m = summarize(r)
    assert m["jobs"] == len(t.jobs)
    assert (m["avg_jct_s"], m["avg_queue_s"], m["makespan_s"]) == pytest.approx(GOLDEN[trace, load, policy],
                                                                                abs=0.1)
    assert m["preemptions"] == 0 and m["wasted_gpu_pct"] == pytest.approx(0.0, abs=1e-6)


def test_cli_compare_writes_results_json_and_png(tmp_path, capsys):
    rc = trident_main(["simulate", "--trace", "tiresias", "--compare", "fifo,sjf,gavel", "--seed", "1",
                       "--load", "2", "--out", str(tmp_path), "--no-progress"])
    assert rc == 0
    out = capsys.readouterr().out
    assert "avg JCT s" in out and "gavel" in out
    doc = json.loads((tmp_path / "simulate-tiresias-load2-seed1.json").read_text())
    assert doc["benchmark"] == "simulate" and doc["baseline"] == "fifo"
    assert doc["workload"]["seed"] == 1 and doc["workload"]["load"] == 2.0
    assert [r["policy"] for r in doc["rows"]] == ["fifo", "sjf", "gavel"]
    for key in ("avg_jct_s", "p50_jct_s", "p99_jct_s", "avg_queue_s", "bounded_slowdown", "gpu_util_pct",
                "makespan_s", "preemptions", "futile_preemptions", "wasted_gpu_pct", "jobs"):
        assert key in doc["rows"][0]
    assert doc["rows"][0]["ratio_to_baseline"] == 1.0
    assert (tmp_path / "simulate-tiresias-load2-seed1.png").stat().st_size > 10_000


def test_cli_reports_a_bad_trace_spec(capsys):
    assert trident_main(["simulate", "--trace", "borg", "--no-progress"]) == 2
    assert "kind:PATH" in capsys.readouterr().err


def test_cli_output_is_its_own_no_solver_banner(tmp_path):
    """A fresh process (the solver prints its banner once per process): only trident's lines."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "trident.cli", "simulate", "--trace", "tiresias", "--compare",
                           "fifo/none/milp", "--no-progress", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "HiGHS" not in proc.stdout + proc.stderr and "Copyright" not in proc.stdout
    assert proc.stdout.splitlines()[0].startswith("trace tiresias:")
    assert proc.stdout.splitlines()[-1] == (f"wrote {tmp_path}/simulate-tiresias-load1-seed0.json and "
                                            f"{tmp_path}/simulate-tiresias-load1-seed0.png")
