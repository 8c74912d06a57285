"""The hardware YAML a CPU profile writes lists every dtype's peak, those of earlier fits included: a dtype missing
from it is priced at the highest peak listed (fp16 emulated at ~1 GFLOP/s on x86 priced at bf16's ~210)."""

import pytest

from llmperf_hook.profile import local_hardware, profile_fit
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.sampler import ProfileRequest


def _rc(peak: float) -> RooflineConstants:
    return RooflineConstants(peak, 2.5e10, 1, 4)


def test_peaks_of_every_fitted_dtype_are_kept_and_the_others_measured(monkeypatch: pytest.MonkeyPatch) -> None:
    """An fp32 refit of a profile that holds fp16 samples: fp16's measured peak stays in the YAML (it was dropped,
    and fp16 jobs went from 878 ms to 10.6 ms a step on the bf16 peak)."""
    measured: list[str] = []
    monkeypatch.setattr(local_hardware, "measure_peak_flop_per_s", lambda dt, dev: measured.append(dt) or 2.1e11)
    req = ProfileRequest(device="cpu", budget_min=1.0, dtype="fp32")
    peaks = profile_fit._peaks(req, {"fp32": _rc(8.9e10), "fp16": _rc(1.0e9)})
    assert peaks == {"fp32": 8.9e10, "fp16": 1.0e9, "bf16": 2.1e11} and measured == ["bf16"]
    measured.clear()
    assert set(profile_fit._peaks(req, {"fp32": _rc(8.9e10)})) == {"fp32", "bf16", "fp16"}  # fp16 measured on CPU too
    assert measured == ["bf16", "fp16"]
