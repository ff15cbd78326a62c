"""The pipeline benchmark's pure parts: regime-shifting inputs, the oracle's sweep, the plot."""
import json

import pytest

from harness.bench import (
    REPLICA_OVERHEAD_BYTES,
    Cluster,
    in_order_bound,
    items_of,
    plot_results,
    static_splits,
    work_bound,
    workloads,
)
from harness.calibration import load_curves


@pytest.mark.parametrize("name", ["pdf-regimes", "video-regimes"])
def test_inputs_unique_ids_phases_in_order_blocks_as_declared(name):
    w = workloads(0.5)[name]
    blocks = items_of(w)
    rows = [r for b in blocks for r in b]
    assert [r["id"] for r in rows] == list(range(len(rows)))
    assert len(rows) == sum(p.rows for p in w.phases)
    order = [p.name for p in w.phases]
    seen = [r["phase"] for r in rows]
    assert sorted(seen, key=order.index) == seen  # one phase after the other
    for p in w.phases:
        sizes = [len(b) for b in blocks if b[0]["phase"] == p.name]
        assert all(s <= p.block_rows for s in sizes) and all(b[0]["phase"] == b[-1]["phase"] for b in blocks)


def test_regimes_shift_the_bottleneck():
    pdf = workloads()["pdf-regimes"]
    short, scanned = pdf.phases[0].pattern[0], pdf.phases[1].pattern[0]
    assert short.ocr_megapixels == 0 and scanned.ocr_megapixels > 0
    sd, hd = (p.pattern[0] for p in workloads()["video-regimes"].phases)
    assert hd.ocr_megapixels == pytest.approx(3 * sd.ocr_megapixels, rel=0.01)


def test_oracle_sweep_covers_extremes_and_half():
    assert static_splits(8) == [(1, 7), (4, 4), (7, 1)]
    assert all(o + e == 16 and o >= 1 and e >= 1 for o, e in static_splits(16))


def test_work_bound_follows_the_bottleneck_and_the_memory_limit():
    curves, w = load_curves(), workloads(1.0)["pdf-regimes"]
    total, split = work_bound(w, curves, Cluster())
    assert total == pytest.approx(sum(p["wall_s"] for p in split.values()), abs=0.05)
    assert split["short-text"]["embed_replicas"] > split["short-text"]["ocr_replicas"]  # no OCR work there
    assert split["long-scanned"]["ocr_replicas"] > split["long-scanned"]["embed_replicas"]
    # 8 GPUs but a 5 GiB limit: never more replicas than memory holds
    per = {k: curves[k].base_bytes + REPLICA_OVERHEAD_BYTES for k in ("ocr", "embed")}
    assert all(p["ocr_replicas"] * per["ocr"] + p["embed_replicas"] * per["embed"] <= 5 * 2**30 for p in split.values())
    assert any(p["ocr_replicas"] + p["embed_replicas"] < 8 for p in split.values())
    roomy, _ = work_bound(w, curves, Cluster(memory_limit_bytes=64 * 2**30))
    assert roomy < total
    assert work_bound(w, curves, Cluster(memory_limit_bytes=2**30))[0] == float("inf")


def test_in_order_bound_counts_the_rounds_of_the_last_long_batches():
    """Video: 24 SD clips then 8 HD clips, one per OCR batch, on the 5 OCR replicas the 5 GiB limit
    allows beside one embed replica. In input order, four replicas run five SD clips and one runs
    four; the HD clips then take two rounds on three of them: 5 SD + 2 HD on the last replica."""
    curves, w, cl = load_curves(), workloads(1.0)["video-regimes"], Cluster()
    sd, hd = (curves["ocr"].time_s(p.pattern[0].ocr_megapixels) * cl.time_scale for p in w.phases)
    assert in_order_bound(w, curves, cl) == pytest.approx(5 * sd + 2 * hd)
    assert in_order_bound(w, curves, cl) > work_bound(w, curves, cl)[0]  # 8 HD clips over 5 replicas: not 1.6 rounds
    roomy = Cluster(memory_limit_bytes=64 * 2**30)  # 7 OCR replicas: the 8th HD clip follows the 1st, after 3 SD
    assert in_order_bound(w, curves, roomy) == pytest.approx(3 * sd + 2 * hd)
    assert in_order_bound(w, curves, Cluster(memory_limit_bytes=2**30)) == float("inf")


def test_plot_written(tmp_path):
    res = {"workload": {"name": "pdf-regimes", "mode": "calibrated"},
           "rows": [{"policy": "ray", "ratio_to_baseline": 1.0, "oom_kills": 2},
                    {"policy": "trident", "ratio_to_baseline": 1.4, "oom_kills": 0},
                    {"policy": "oracle", "ratio_to_baseline": 1.6},
                    {"policy": "bound", "ratio_to_baseline": 1.9}]}
    out = tmp_path / "b.png"
    plot_results([json.loads(json.dumps(res))], str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv, says", [
    (["--scale", "-1"], "argument --scale: '-1' is not a finite number > 0"),
    (["--interval-s", "1e-9"], "argument --interval-s: '1e-9' is not a finite number >= 0.05"),
    (["--memory-limit", "lots"], "argument --memory-limit: 'lots' is not"),
])
def test_the_pipeline_benchmark_refuses_a_bad_argument_in_one_line(argv, says, capsys):
    import pipeline_bench

    with pytest.raises(SystemExit) as exit_:
        pipeline_bench.arguments().parse_args(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and says in err and err.count("\n") == 1, err
