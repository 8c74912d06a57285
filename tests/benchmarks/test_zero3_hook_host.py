"""benchmarks/zero3_hook_host.py on the hold-out traces: ZeRO-3's hooks show as host time between the forward's
ops and inside the backward's AccumulateGrad nodes, where ZeRO-1 (h05) shows neither."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[2]
KERNELS = ROOT / "measurements" / "h200-sxm-141gb-2026-11-28" / "kernels"


def _phases(run: str) -> dict:  # type: ignore[type-arg]
    tool = load_script(ROOT / "benchmarks" / "zero3_hook_host.py")
    return {p.phase: p for p in tool.phase_host(tool.read_events(str(KERNELS / f"{run}.trace.json.gz")))}


def test_zero3_hooks_are_host_time_between_forward_ops_and_inside_accumulate_grad() -> None:
    zero3, zero1 = _phases("h04"), _phases("h05")
    assert zero3["forward"].between_us > 0.5 * zero3["forward"].span_us  # Python hooks outside any aten op
    assert zero1["forward"].between_us < 0.25 * zero1["forward"].span_us
    acc = "torch::autograd::AccumulateGrad"
    per_tensor = {run: p["backward"].us_by_op[acc] / p["backward"].calls_by_op[acc] for run, p in
                  (("h04", zero3), ("h05", zero1))}
    assert zero3["backward"].calls_by_op[acc] == 244  # one per parameter tensor of the 20-layer model
    assert per_tensor["h04"] > 5 * per_tensor["h05"]  # the gradient hook (reduce / partition) runs inside it
    assert zero3["backward"].calls_by_op["PreBackwardFunctionForModuleBackward"] >= 140


def test_a_missing_or_foreign_file_is_refused_with_exit_2(tmp_path: Path, monkeypatch, capsys) -> None:
    """No traceback: the path and what the script reads are named."""
    import pytest

    tool = load_script(ROOT / "benchmarks" / "zero3_hook_host.py")
    not_a_trace = tmp_path / "table.txt"
    not_a_trace.write_text("# wall per step 1 ms\n")
    for path in (tmp_path / "absent.json.gz", not_a_trace):
        monkeypatch.setattr("sys.argv", ["zero3_hook_host.py", str(path)])
        with pytest.raises(SystemExit) as stop:
            tool.main()
        assert stop.value.code == 2
        assert str(path) in capsys.readouterr().err
