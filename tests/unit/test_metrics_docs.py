"""Every exported series is documented in docs/metrics.md and shown on the Grafana dashboard."""
import json
from pathlib import Path

from trident.report.metrics import ARBITER_TAGS, FALLBACK_EVENTS, METRICS, OP_TAGS, dataset_of
from trident.report.grafana import dashboard, missing_series
from trident.core.types import DECISION_KINDS

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_every_series_documented_with_its_exported_name():
    text = (DOCS / "metrics.md").read_text()
    for m in METRICS:
        exported = f"ray_{m.name}" + ("_total" if m.kind == "counter" else "")
        assert f"`{exported}`" in text, exported
    for kind in [k for k in DECISION_KINDS if k] + list(FALLBACK_EVENTS):
        assert f"`{kind}`" in text or kind in text, kind


def test_dashboard_file_is_the_generated_one_and_shows_every_series():
    assert missing_series() == []
    assert json.loads((DOCS / "grafana" / "trident.json").read_text()) == dashboard()
    ids = [p["id"] for p in dashboard()["panels"]]
    assert len(ids) == len(set(ids))


def test_names_and_labels():
    names = [m.name for m in METRICS]
    assert len(names) == len(set(names)) and all(n.startswith("trident_") for n in names)
    assert all(m.kind in ("gauge", "counter") for m in METRICS)
    assert all(set(m.tags) <= set(OP_TAGS) | {"kind"} or m.tags == ARBITER_TAGS for m in METRICS)
    assert dataset_of("dataset_0356fWLs_0-5dce1d") == "dataset_0356fWLs_0"
