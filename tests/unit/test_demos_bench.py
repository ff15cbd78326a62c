"""The pipeline benchmark's pure parts: regime-shifting inputs, the oracle's sweep, the plot."""
import json

import pytest

from trident.demos.bench import items_of, plot_results, static_splits, workloads


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


def test_plot_written(tmp_path):
    res = {"workload": {"name": "pdf-regimes", "mode": "calibrated"},
           "rows": [{"policy": "ray", "ratio_to_baseline": 1.0, "oom_kills": 2},
                    {"policy": "trident", "ratio_to_baseline": 1.4, "oom_kills": 0},
                    {"policy": "oracle", "ratio_to_baseline": 1.6}]}
    out = tmp_path / "b.png"
    plot_results([json.loads(json.dumps(res))], str(out))
    assert out.read_bytes()[:4] == b"\x89PNG"
