"""The generalization benchmark's stand-ins (``benchmarks/generalization.py``): each operator's rows and
time are the drawn ones, and the seeds it runs are chosen by a rule (pure; no Ray)."""
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from trident.autoscaler.sim.generate import draw
from trident.autoscaler.sim.model import CPU, Regime, SimOperator

_path = Path(__file__).resolve().parents[2] / "benchmarks" / "generalization.py"
_spec = importlib.util.spec_from_file_location("generalization", _path)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)


def _run_as_tasks(drawn, block_rows=100):
    """Every operator's stand-in applied batch by batch, as tasks (no sleep): the keys out, sorted."""
    blocks = [{"id": np.arange(s, min(s + block_rows, drawn.spec.total_rows))}
              for s in range(0, drawn.spec.total_rows, block_rows)]
    for i, o in enumerate(drawn.spec.operators):
        fn = gen.stand_in(replace(o, kind="task"), i, "/nonexistent", 0.125)
        blocks = [fn(b) for b in blocks]
    return np.sort(np.concatenate([b["key"] for b in blocks]))


def test_the_stand_ins_filter_and_fan_out_to_exactly_the_expected_keys(monkeypatch):
    monkeypatch.setattr(gen.time, "sleep", lambda s: None)
    shaped = [d for d in (draw(seed, work_s=5.0) for seed in range(40))
              if {o.selectivity for o in d.spec.operators} & {0.5, 2.0, 3.0}][:3]
    assert shaped, "no drawn seed filters or fans out"
    for drawn in shaped:
        got, want = _run_as_tasks(drawn), gen.expected_keys(drawn)
        assert np.array_equal(got, want), drawn.describe()
        assert len(np.unique(got)) == len(got)
        sel = np.prod([o.selectivity for o in drawn.spec.operators])
        assert len(want) == pytest.approx(sel * drawn.spec.total_rows, rel=0.1)


def test_a_batch_sleeps_its_rows_over_the_drawn_rate_in_each_row_s_regime(monkeypatch):
    slept = []
    monkeypatch.setattr(gen.time, "sleep", slept.append)
    o = SimOperator(name="op", kind="task", peak_rows_per_s=((CPU, 100.0),), half_batch_rows=10.0, replicas=1,
                    regimes=(Regime(start=50.0, rate_scale=0.5),), regime_by="rows")
    fn = gen.stand_in(o, 1, "/nonexistent", 0.125)
    fn({"key": np.arange(40, 50), "pos": np.arange(40, 50)})  # 10 rows at 100 x 10/20 = 50 rows/s
    fn({"key": np.arange(45, 55), "pos": np.arange(45, 55)})  # 5 of them at half that
    assert slept == pytest.approx([10 / 50, 5 / 50 + 5 / 25])


def test_seeds_are_chosen_by_what_the_machine_can_host_in_order():
    chosen, skipped = gen.pick(0, 3, work_s=5.0, scan=200, max_nodes=4, max_actors=24, max_memory_gib=10.0,
                               scale=0.125)
    seeds = [d.seed for d in chosen]
    assert seeds == sorted(seeds) and len(seeds) == 3
    assert set(skipped) == set(range(seeds[-1] + 1)) - set(seeds)  # every seed before the last was taken or skipped
    assert all("nodes" in why or "actors" in why or "GiB" in why for why in skipped.values())
    for d in chosen:
        assert sum(n.count for n in d.spec.nodes) <= 4


def test_an_earlier_result_is_simulated_again_beside_its_real_walls(tmp_path, capsys):
    rows = [{"seed": 19, "policy": p, "wall_s": 27.8, "sim_vs_real": 0.61, "bound_s": 9.0} for p in gen.POLICIES]
    path = tmp_path / "generalization-1.json"
    path.write_text(__import__("json").dumps({"workload": {"work_s": 45.0}, "rows": rows}))
    assert gen.resimulate(path) == 0
    out = capsys.readouterr().out
    bound = gen.work_bound_s(gen.draw(19, work_s=45.0).spec)
    for p in gen.POLICIES:
        (line,) = [ln for ln in out.splitlines() if ln.split()[:2] == ["19", p]]
        sim = float(line.split()[3])
        assert 0 < sim < 27.8 * 2 and line.split()[5] == "0.61"
        assert line.split()[6:] == [f"{bound:.1f}", "9.0"]  # the bound now beside the one it was judged on
        assert f"{p}: median sim/real" in out and "within 15% on" in out
        assert f"median of the bound now {bound / 27.8:.2f}" in out
