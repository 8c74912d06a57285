"""bench_operator_accuracy's `--groups` / `--hardware`: only the named fit groups and GPUs are benchmarked, each
group still drawing from its own generator of `--seed` (a subset prints the rows of the full run)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))

import bench_operator_accuracy  # noqa: E402


def _run(monkeypatch, argv: list[str]) -> list[tuple[str, str, int]]:
    """(GPU, fit group, first draw of its generator) of every bench_group call main() makes; no file is read."""
    calls = []

    def fake_bench_group(hw, sets, frac, ref, rng, design, extrap, inner, **options):
        calls.append((hw.name, sets[0], int(rng.integers(1 << 30))))
        return []

    monkeypatch.setattr(bench_operator_accuracy, "read_reference_errors", lambda folder: {})
    monkeypatch.setattr(bench_operator_accuracy, "load_group", lambda data, hw, group: {"fwd": [group]})
    monkeypatch.setattr(bench_operator_accuracy, "bench_group", fake_bench_group)
    monkeypatch.setattr(sys, "argv", ["bench_operator_accuracy.py", "--random-only", *argv])
    bench_operator_accuracy.main()
    return calls


def test_groups_and_hardware_select_the_rows_and_keep_their_draws(monkeypatch) -> None:
    full = _run(monkeypatch, [])
    assert {c[0] for c in full} == {"a100-sxm4-80gb", "gh200-96gb"} and len(full) == 2 * len(
        bench_operator_accuracy.FIT_GROUPS)
    subset = _run(monkeypatch, ["--groups", "attention", "gemm", "--hardware", "a100-sxm4-80gb"])
    assert subset == [c for c in full if c[0] == "a100-sxm4-80gb" and c[1] in ("gemm", "attention")]
    assert [c[1] for c in subset] == ["gemm", "attention"]  # FIT_GROUPS order, not the command line's


def test_an_unknown_group_is_refused_with_exit_2(monkeypatch, capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        _run(monkeypatch, ["--groups", "gemms"])
    assert exc.value.code == 2 and "invalid choice: 'gemms'" in capsys.readouterr().err
