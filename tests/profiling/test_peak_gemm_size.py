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
    """Its own CPU time (one thread), not wall: three layouts took 2.2 s CPU here, and wall time at load 10-15 (other
    programs on the 2 cores) is several times that."""
    torch.set_num_threads(1)
    t0 = time.process_time()
    peak = lh.measure_peak_flop_per_s("fp16", "cpu")
    assert peak > 0 and time.process_time() - t0 < 6.0  # 25 s with the fixed 1024 GEMM where fp16 is emulated


def test_a_gpu_peak_gemm_keeps_its_full_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """A 256 GEMM on a GPU takes its launch time (~5 us: a few TFLOP/s on an H100), which sized the bf16 peak GEMM
    at 4096 instead of the 8192 that reaches the peak. No probe runs (this test needs no GPU)."""
    monkeypatch.setattr(lh, "_best_time", lambda fn, device, reps=5: 5e-6)
    assert lh.peak_gemm_size("bf16", "cuda") == lh.GPU_PEAK_GEMM_N == 8192


def test_the_peak_is_the_fastest_layout_of_a_training_steps_gemms(monkeypatch: pytest.MonkeyPatch) -> None:
    """bf16 on an AVX2-only EPYC (no oneDNN bf16 kernel: torch's fallback): nn.Linear's forward ("nt") 8.6 GFLOP/s,
    its input gradient ("nn", a @ b: the one layout measured before) 1.3, its weight gradient ("tn") 15. The peak
    is the fastest: a GEMM priced at a 1.3 GFLOP/s "peak" floored the testbed's bf16 steps 2x high (h174)."""
    speeds = {"nt": 8.6e9, "nn": 1.3e9, "tn": 15e9}
    timed = []
    monkeypatch.setattr(lh, "_layout_gemm", lambda layout, n, dtype, device: (layout, n))

    def best_time(fn, device, reps=5):
        layout, n = fn
        timed.append((layout, n))
        return 2.0 * n ** 3 / speeds[layout]

    monkeypatch.setattr(lh, "_best_time", best_time)
    assert lh.measure_peak_flop_per_s("bf16", "cpu") == pytest.approx(15e9)
    # each layout sized by its own speed (PEAK_GEMM_TARGET_S): the slow one at 256, the others at 512
    assert {layout: n for layout, n in timed if n != 256 or layout == "nn"} == {"nt": 512, "nn": 256, "tn": 512}


def test_each_layout_is_the_product_it_names() -> None:
    """"nt" = X @ W^T (F.linear), "nn" = dY @ W, "tn" = dY^T @ X: the three products of nn.Linear's forward and
    backward that op_sampler._gemm times."""
    a, b = torch.arange(6.0).reshape(2, 3), torch.arange(6.0, 12.0).reshape(2, 3)
    assert torch.equal(lh.layout_product("nt", a, b), a @ b.t())
    assert torch.equal(lh.layout_product("tn", a, b), a.t() @ b)
    assert torch.equal(lh.layout_product("nn", a, b.t()), a @ b.t())
