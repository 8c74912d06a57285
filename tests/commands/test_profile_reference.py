"""`llmperf profile --device cpu` records the machine's speed with the profile (reference_speed.json)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.commands import profile as profile_cmd
from llmperf_hook.instrument import reference_speed as rs


def _reading(cpu_s: float, where: str, concurrent: int = 1) -> rs.ReferenceReading:
    return rs.ReferenceReading(cpu_s, {"gemm_s": cpu_s}, 0.07, 1.7e9, concurrent, 0.3, rs.WORKLOAD, where)


def test_profile_reference_file_gathers_every_reading(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "framework_overhead.json").write_text(json.dumps({"reference": [
        _reading(0.0062, "framework-fp32-before").to_json(), _reading(0.0064, "framework-after").to_json()]}))
    monkeypatch.setattr(rs, "measure_reference", lambda where="", concurrent=1, diagnostics=False: _reading(0.0066, where))
    monkeypatch.setattr(rs, "measure_reference_concurrent",
                        lambda copies, where="": [_reading(0.007, where, copies) for _ in range(copies)])
    monkeypatch.setattr(profile_cmd.os, "cpu_count", lambda: 2)
    line = profile_cmd._write_reference(tmp_path, _reading(0.006, "profile-start"), threads=1)
    doc = json.loads((tmp_path / rs.PROFILE_FILE_NAME).read_text())
    assert [r["where"] for r in doc["readings"]] == ["profile-start", "framework-fp32-before", "framework-after",
                                                     "profile-end", "profile-end-2-copies", "profile-end-2-copies"]
    assert rs.profile_reference_cpu_s(doc, 1) == pytest.approx(0.0063)  # median of 6.0, 6.2, 6.4, 6.6 ms
    assert rs.profile_reference_cpu_s(doc, 2) == pytest.approx(0.007)
    assert doc["drift_during_profile"] == pytest.approx(0.0066 / 0.006)
    assert "1 at once 6.30 ms" in line and "2 at once 7.00 ms" in line and "x1.100" in line
