"""Extrapolation warnings name the phase where forward and backward were sampled over different ranges. A CPU
profile of a tiny --budget printed, for one job,
    gemm: n in [8192, 32768] extends beyond the profiled range [80, 2680]; ...
    gemm: n in [8192, 32768] extends beyond the profiled range [80, 2928]; ...
one warning seemingly repeated with two contradicting ranges (they were bwd's and fwd's). Same ranges: one line."""

from __future__ import annotations

from dataclasses import replace

from llmperf_hook.graph.op import Op
from llmperf_hook.profile.predictor import _extrapolation_lines, _outside
from tests.profiling.test_packed_trees import _tiny_fit

OPS = [Op("big", "gemm", phase, {"m": 4096, "n": 32768, "k": 8192}) for phase in ("fwd", "bwd")]


def _entries(bwd_n_hi: float):
    fwd, _ = _tiny_fit()
    ranges = {"m": (88.0, 8192.0), "n": (80.0, 2928.0), "k": (64.0, 16384.0)}
    return (replace(fwd, phase="fwd", train_ranges=ranges),
            replace(fwd, phase="bwd", train_ranges={**ranges, "n": (80.0, bwd_n_hi)}))


def test_different_ranges_name_their_phases() -> None:
    fwd, bwd = _entries(2680.0)
    lines = _extrapolation_lines(_outside(bwd, OPS) + _outside(fwd, OPS))
    assert lines == ("gemm (bwd): n in [32768, 32768] extends beyond the profiled range [80, 2680]; extrapolated "
                     "along the roofline",
                     "gemm (fwd): n in [32768, 32768] extends beyond the profiled range [80, 2928]; extrapolated "
                     "along the roofline")


def test_same_ranges_give_one_unlabelled_line() -> None:
    fwd, bwd = _entries(2928.0)
    assert _extrapolation_lines(_outside(bwd, OPS) + _outside(fwd, OPS)) == (
        "gemm: n in [32768, 32768] extends beyond the profiled range [80, 2928]; extrapolated along the roofline",)
