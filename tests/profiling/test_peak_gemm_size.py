"""The peak GEMM of a profile is sized so an emulated dtype (fp16 on most x86 CPUs, ~1 GFLOP/s) does not spend a short
--budget on its 1024-square GEMMs (25 s for the 6 timed on this EPYC, at the start and at every later refit)."""

import time

import pytest

from llmperf_hook.profile import local_hardware as lh

torch = pytest.importorskip("torch")


@pytest.mark.parametrize(("flop_per_s", "n"), [(1e9, 256), (1.5e10, 512), (8.5e10, 1024), (1e15, 1024)])
def test_gemm_size_follows_the_dtype_speed(monkeypatch: pytest.MonkeyPatch, flop_per_s: float, n: int) -> None:
    """At 1 GFLOP/s a 512 GEMM takes 0.27 s (over PEAK_GEMM_TARGET_S), a 256 one 34 ms; at fp32's 85 GFLOP/s the
    1024 GEMM (25 ms) is kept, as before."""
    monkeypatch.setattr(lh, "_best_time", lambda fn, device, reps=5: 2.0 * 256 ** 3 / flop_per_s)
    assert lh.peak_gemm_size("fp32", "cpu") == n


def test_fp16_peak_on_this_cpu_stays_within_seconds() -> None:
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    peak = lh.measure_peak_flop_per_s("fp16", "cpu")
    assert peak > 0 and time.perf_counter() - t0 < 6.0  # 25 s with the fixed 1024 GEMM where fp16 is emulated


def test_a_gpu_peak_gemm_keeps_its_full_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256 GEMM on a GPU takes its launch time (~5 us: a few TFLOP/s on an H100), which sized the bf16 peak GEMM
    at 4096 instead of the 8192 that reaches the peak. No probe runs (this test needs no GPU)."""
    monkeypatch.setattr(lh, "_best_time", lambda fn, device, reps=5: 5e-6)
    assert lh.peak_gemm_size("bf16", "cuda") == lh.GPU_PEAK_GEMM_N == 8192
