"""A fitted operator profile lent to a sibling GPU: same chip and clocks, other memory (A100 40 GB <- 80 GB).

The A100-SXM4-40GB and -80GB have the same 108 SMs, clocks and dense peaks (312 TFLOP/s bf16/fp16) and differ
in HBM: 1,555 vs 2,039 GB/s (NVIDIA A100 datasheet, configs/hardware/). A profile measured on one serves the
other: compute-bound op classes unchanged, memory-bound classes scaled by the bandwidth ratio (a kernel that
streams its bytes takes bandwidth-inverse time). Only GPUs of the same family (name prefix) with identical peak
tables are siblings, so H100 and GH200 (other power, clocks and HBM) are not.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Sequence

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec
from llmperf_hook.predict.op_times import OpClassPredictor

COMPUTE_BOUND_CLASSES = frozenset({"gemm", "bmm", "attention", "router"})
"""Classes whose time follows the SMs and clocks; every other compute class streams memory."""


class SiblingProfile:
    """`profile` (fitted on a sibling GPU) with memory-bound op times scaled by `memory_time_scale`."""

    def __init__(self, profile: OpClassPredictor, memory_time_scale: float) -> None:
        self._profile = profile
        self.memory_time_scale = memory_time_scale
        self.name = f"{profile.name} (sibling GPU; memory-bound ops x{memory_time_scale:.2f})"

    @property
    def meta(self) -> object:
        """The sibling's profile metadata (what its optimizer samples ran: predict/optimizer_bytes.py)."""
        return getattr(self._profile, "meta", None)

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return self._profile.supports(op_class, phase, dtype)

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        seconds = self._profile.predict_s(ops, cluster)
        return [t if op.op_class in COMPUTE_BOUND_CLASSES else t * self.memory_time_scale
                for op, t in zip(ops, seconds)]


_WRAPPED: dict[tuple[int, float], SiblingProfile] = {}
"""One wrapper per (profile object, scale): the op-time memo keys on the predictor object, so a refitted
profile (a new object) gets a new wrapper and is never answered from the old one's entries."""


def find_sibling_profile(gpu: HardwareSpec, dtype: str) -> OpClassPredictor | None:
    """The profile of a shipped sibling of `gpu` (same family and peaks), wrapped; None when there is none."""
    from llmperf_hook.predict import fitted

    sibling = _sibling_gpu(gpu.name, tuple(sorted(gpu.peak_flop_per_s.items())))
    if sibling is None:
        return None
    profile = fitted.find_profile(sibling.name, dtype)
    if profile is None:
        return None
    scale = sibling.memory_bandwidth_bytes_per_s / gpu.memory_bandwidth_bytes_per_s
    key = (id(profile), scale)
    if key not in _WRAPPED:
        if len(_WRAPPED) > 32:
            _WRAPPED.clear()
        _WRAPPED[key] = SiblingProfile(profile, scale)
    return _WRAPPED[key]


@lru_cache(maxsize=32)
def _sibling_gpu(name: str, peaks: tuple) -> HardwareSpec | None:
    """A shipped hardware preset of the same family with the same peaks that has a fitted profile directory."""
    from llmperf_hook.hardware.load import load_hardware
    from llmperf_hook.predict import fitted
    from llmperf_hook.resources import configs_dir

    family = name.lower().split("-")[0]
    for path in sorted((configs_dir() / "hardware").glob(f"{family}-*.yaml")):
        other = load_hardware(path.stem)
        same = other.name != name and tuple(sorted(other.peak_flop_per_s.items())) == peaks
        if same and any((d / "profile.json").is_file() for d in fitted.profile_dirs(other.name)):
            return other
    return None
