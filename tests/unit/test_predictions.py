"""Every plan is a prediction: each plan's expected output beside what came out once its targets
were reached; unreached plans are not measured."""
import dataclasses

import pytest

from test_report import record, snap
from trident.core.types import Decision, OperatorTarget, Plan
from trident.report.predictions import plan_checks, prediction_error
from trident.report.record import summarize
from trident.report.timeline import format_report

OP = "MapBatches(Embed)"


def _with_prediction(predicted):
    rec = record()
    e = rec.executions[0]
    e.snapshots = [snap(t, 30 * t, 1 if t < 3 else 3, 200 * 2**20) for t in range(1, 21)]  # 30 rows/s, 20 s
    e.ended_at_s = 20.5
    d = e.decisions[1]
    e.decisions[1] = dataclasses.replace(d, predicted_rows_per_s=((OP, predicted),))
    return rec


def test_a_plan_is_measured_from_its_target_reached_to_the_end():
    rec = _with_prediction(60.0)  # the snapshots put out 30 rows/s
    (check,) = plan_checks(rec.executions[0])
    assert check.reached_s == pytest.approx(5.1) and check.until_s == pytest.approx(20.5)
    assert dict(check.measured_rows_per_s)[OP] == pytest.approx(30.0)
    assert check.error == pytest.approx(1.0)
    assert summarize(rec)["prediction_error"] == pytest.approx(1.0)
    assert "predicted 60 rows/s, measured 30 over 5.1-20.5 s (100% off)" in format_report(rec)


def test_a_right_prediction_has_no_error_and_an_unreached_target_is_not_measured():
    rec = _with_prediction(30.0)
    assert prediction_error(plan_checks(rec.executions[0])) == pytest.approx(0.0)
    e = rec.executions[0]
    e.actions = [a for a in e.actions if a.kind != "target_reached"]
    assert plan_checks(e) == [] and summarize(rec)["prediction_error"] is None


def test_a_later_plan_ends_the_window_of_the_one_before():
    rec = _with_prediction(30.0)
    e = rec.executions[0]
    later = Plan(seq=2, targets=(OperatorTarget(name=OP, replicas=3),), reason="again", created_at_s=8.0)
    e.decisions.append(Decision(time_s=8.0, reason="again", plan=later, predicted_rows_per_s=((OP, 30.0),)))
    checks = plan_checks(e, min_window_s=2.0)
    assert [c.until_s for c in checks] == [pytest.approx(8.0)]  # the second one never reached its target
    assert plan_checks(e) == []  # 2.9 s: shorter than a rate window


def test_a_change_of_the_data_ends_the_window_of_the_plan_made_before_it():
    """A plan predicts for the data it was made on: rows that came out after a regime change
    (the operator 2x slower, say) do not count against it."""
    rec = _with_prediction(30.0)
    e = rec.executions[0]
    e.decisions.append(Decision(time_s=14.0, reason="observing", regime_changes=(OP,)))
    (check,) = plan_checks(e)
    assert check.until_s == pytest.approx(14.0) and check.error == pytest.approx(0.0)
    e.snapshots = [dataclasses.replace(s, operators=tuple(dataclasses.replace(o, rows_out_total=o.rows_out_total // 2)
                                                          for o in s.operators)) if s.time_s > 14 else s
                   for s in e.snapshots]  # what comes out after the change no longer matters
    assert plan_checks(e)[0].error == pytest.approx(0.0)
