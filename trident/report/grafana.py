"""A Grafana dashboard for trident's series (:data:`trident.report.metrics.METRICS`).

``python -m trident.report.grafana > trident.json`` writes it; docs/grafana/trident.json is
this output (a test keeps the two the same). Import it in Grafana next to Ray's own Data
dashboard; it reads the Prometheus data source that scrapes Ray's metrics endpoint.
"""
from __future__ import annotations

import json
from typing import Any

from trident.report.metrics import METRICS

SEL = 'dataset=~"$dataset",operator=~"$operator"'
RUN_SEL = 'dataset=~"$dataset"'

# (title, unit, [(PromQL, legend)]); every series of METRICS appears in at least one panel
PANELS: tuple[tuple[str, str, tuple[tuple[str, str], ...]], ...] = (
    ("Replicas: target vs running", "short", (
        (f"ray_trident_target_replicas{{{SEL}}}", "{{operator}} target"),
        (f"ray_trident_running_replicas{{{SEL}}}", "{{operator}} running"),
        (f"ray_trident_pending_replicas{{{SEL}}}", "{{operator}} starting"))),
    ("Throughput: measured vs predicted (rows/s)", "rowsps", (
        (f"ray_trident_measured_rows_per_s{{{SEL}}}", "{{operator}} measured"),
        (f"ray_trident_predicted_rows_per_s{{{SEL}}}", "{{operator}} predicted by the plan"))),
    ("Heap per replica vs memory limit", "bytes", (
        (f"ray_trident_heap_per_replica_bytes{{{SEL}}}", "{{operator}} per replica"),
        (f"ray_trident_heap_bytes{{{SEL}}}", "{{operator}} all replicas"),
        (f"ray_trident_memory_limit_bytes{{{RUN_SEL}}}", "memory limit"))),
    ("Batch size (rows)", "short", ((f"ray_trident_batch_size{{{SEL}}}", "{{operator}}"),)),
    ("Input queue (blocks)", "short", ((f"ray_trident_input_queue_blocks{{{SEL}}}", "{{operator}}"),)),
    ("Decisions per minute, by kind", "short", (
        (f"sum by (kind) (increase(ray_trident_decisions_total{{{RUN_SEL}}}[1m]))", "{{kind}}"),)),
    ("Plans per 5 minutes, by kind", "short", (
        (f"sum by (kind) (increase(ray_trident_plans_total{{{RUN_SEL}}}[5m]))", "{{kind}}"),
        (f"sum (increase(ray_trident_history_plans_total{{{RUN_SEL}}}[5m]))", "from history"))),
    ("Regime changes per 5 minutes", "short", (
        (f"sum by (operator) (increase(ray_trident_regime_changes_total{{{SEL}}}[5m]))", "{{operator}}"),)),
    ("Fallbacks to stock Ray Data", "short", (
        (f"sum by (kind) (ray_trident_fallbacks_total{{{RUN_SEL}}})", "{{kind}}"),)),
    ("Arbiter: each run's budget", "short", (
        ("ray_trident_arbiter_budget_cpus", "{{run}} CPUs"),
        ("ray_trident_arbiter_budget_gpus", "{{run}} GPUs"))),
    ("Arbiter: each run's rate, time left and rank", "short", (
        ("ray_trident_arbiter_rows_per_s", "{{run}} rows/s"),
        ("ray_trident_arbiter_remaining_s", "{{run}} s left"),
        ("ray_trident_arbiter_rank", "{{run}} rank"))),
)


def _panel(i: int, title: str, unit: str, targets: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    return {
        "id": i + 1, "type": "timeseries", "title": title, "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": 8 * (i // 2)},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True}},
        "targets": [{"expr": expr, "legendFormat": legend, "refId": chr(ord("A") + j)}
                    for j, (expr, legend) in enumerate(targets)],
    }


def _variable(name: str, query: str) -> dict[str, Any]:
    return {"name": name, "type": "query", "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "current": {"text": "All", "value": "$__all"}}


def dashboard() -> dict[str, Any]:
    """The dashboard as Grafana's JSON model (schema 39)."""
    return {
        "title": "trident autoscaler", "uid": "trident-autoscaler", "schemaVersion": 39, "version": 1,
        "tags": ["trident", "ray", "ray-data"], "time": {"from": "now-30m", "to": "now"}, "refresh": "5s",
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus", "label": "Prometheus"},
            _variable("dataset", "label_values(ray_trident_running_replicas, dataset)"),
            _variable("operator", 'label_values(ray_trident_running_replicas{dataset=~"$dataset"}, operator)'),
        ]},
        "panels": [_panel(i, *p) for i, p in enumerate(PANELS)],
    }


def missing_series() -> list[str]:
    """Names in METRICS that no panel shows (empty when the dashboard is complete)."""
    exprs = " ".join(expr for _, _, targets in PANELS for expr, _ in targets)
    return [m.name for m in METRICS if f"ray_{m.name}" not in exprs]


if __name__ == "__main__":
    print(json.dumps(dashboard(), indent=1))
