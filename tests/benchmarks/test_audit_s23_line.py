"""benchmarks/audit_s23.py section 7: the robust (Theil-Sen) line gap = a + b x m per layout."""

from __future__ import annotations

from pathlib import Path

import pytest
from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]


def _audit():  # type: ignore[no-untyped-def]
    return load_script(ROOT / "benchmarks" / "audit_s23.py")


def test_line_is_exact_on_a_line_and_ignores_one_outlier_row() -> None:
    line = _audit()._line
    xs = [1.0, 2.0, 4.0, 8.0, 16.0, 32.0]
    a, b = line(xs, [0.3 + 0.01 * x for x in xs])
    assert (a, b) == (pytest.approx(0.3), pytest.approx(0.01))
    # 3.6B TP 8's shape: flat gaps with one row (m 1) measured at twice its neighbours' step time
    a, b = line(xs, [4.91, -0.00, -0.08, -0.09, -0.05, 2.52])
    assert abs(b) < 0.01 and abs(a) < 0.1
