"""Signed errors, per-source MAPE, worst rows and failures."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from llmperf_hook.validate.scoring import RowResult, score_rows


def result(row_id: str, source: str, measured: float, predicted: float | None) -> RowResult:
    return RowResult(row_id=row_id, source_id=source, source=f"source {source}", model="m", layout="tp1",
                     measured_s=measured, predicted_s=predicted, cluster="c", argv=("torchrun",),
                     error="" if predicted is not None else "rejected")


def test_signed_error_sign() -> None:
    assert result("1", "A", 2.0, 2.2).signed_error == (2.2 - 2.0) / 2.0
    assert result("1", "A", 2.0, 1.5).signed_error == -0.25
    assert result("1", "A", 2.0, None).signed_error is None


def test_per_source_summaries() -> None:
    rows = [result("1", "A", 1.0, 1.1), result("2", "A", 1.0, 0.7), result("3", "B", 4.0, 4.0),
            result("4", "B", 1.0, None)]
    report = score_rows(rows, num_worst=1)
    a, b = report.sources
    assert (a.source_id, a.num_rows, a.num_scored) == ("A", 2, 2)
    assert math.isclose(a.mape or 0, 0.2) and math.isclose(a.bias or 0, -0.1)
    assert [r.row_id for r in a.worst] == ["2"]
    assert (b.num_rows, b.num_scored, b.mape) == (2, 1, 0.0)
    assert report.num_failed == 1
    assert math.isclose(report.overall_mape or 0, (0.1 + 0.3 + 0.0) / 3)
    assert math.isclose(report.mean_source_mape or 0, (0.2 + 0.0) / 2)


def test_all_failed_source_has_no_mape() -> None:
    report = score_rows([result("1", "A", 1.0, None)])
    assert report.sources[0].mape is None and report.overall_mape is None


pairs = st.lists(st.tuples(st.floats(0.01, 100.0), st.floats(0.01, 100.0)), min_size=1, max_size=30)


@given(pairs)
def test_mape_lies_between_the_smallest_and_largest_error(values: list[tuple[float, float]]) -> None:
    rows = [result(str(i), "A", m, p) for i, (m, p) in enumerate(values)]
    errors = [abs(p - m) / m for m, p in values]
    report = score_rows(rows)
    assert min(errors) - 1e-12 <= (report.overall_mape or 0) <= max(errors) + 1e-12
    assert score_rows(list(reversed(rows))).overall_mape == report.overall_mape or math.isclose(
        score_rows(list(reversed(rows))).overall_mape or 0, report.overall_mape or 0)
