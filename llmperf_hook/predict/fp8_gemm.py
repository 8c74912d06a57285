"""FP8 GEMMs of a Transformer Engine run priced from the GPU's bf16 operator profile and a measured speed ratio.

An FP8 run's linear layers multiply e4m3/e5m2 operands on the FP8 tensor cores; no profile holds FP8 GEMMs (the
sampler times bf16), and the roofline prices every shape at the best-shape efficiency. Measured on one Hopper GPU
(H200 SXM, the H100's GH100 tensor cores; measurements/h200-sxm-141gb-2026-11-26/fp8_gemm.csv, taken by
benchmarks/measure_fp8_gemm.py) over eleven Llama-3 8B / 70B linear-layer shapes with 4,096-8,192 tokens,
cuBLASLt FP8 (per-tensor scales, torch._scaled_mm) runs 1.58-1.96x faster than bf16 on the same shape: the
shape's bf16 time from the profile, divided by that ratio, keeps the profile's shape effects (wave quantisation,
small-k GEMMs). Transformer Engine's forward GEMM uses the fast accumulator and its data- and weight-gradient
GEMMs the split (precise) one (transformer_engine/pytorch/module/linear.py: _2X_ACC_FPROP False, _2X_ACC_DGRAD and
_2X_ACC_WGRAD True), so forward and backward take the medians of those two measurements. The quantize kernel in
front of each FP8 GEMM is added as roofline.fp8_quantize_s prices it.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import ClusterSpec
from llmperf_hook.predict.op_times import OpClassPredictor
from llmperf_hook.predict.roofline import FP8_GEMM_CLASSES, fp8_quantize_s

FP8_SPEEDUP_OVER_BF16 = {"fwd": 1.796, "bwd": 1.743}
"""bf16 time / FP8 time of the same GEMM, median of the eleven shapes of fp8_gemm.csv: fast accumulation
(fp8_fast_speedup, 1.63-2.01) for the forward, precise (fp8_speedup, 1.58-1.96) for the backward."""


class Fp8GemmFromBf16Profile:
    """A bf16 operator profile answering the FP8 GEMMs of the same GPU (time / measured FP8 speed-up + quantize)."""

    def __init__(self, profile: OpClassPredictor) -> None:
        self._profile = profile
        self.name = f"{profile.name} (bf16 / fp8 speed-up)"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return dtype == "fp8" and op_class in FP8_GEMM_CLASSES and self._profile.supports(op_class, phase, "bf16")

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        bf16_s = self._profile.predict_s([replace(op, dtype="bf16") for op in ops], cluster)
        return [t / FP8_SPEEDUP_OVER_BF16["bwd" if op.phase == "bwd" else "fwd"] + fp8_quantize_s(op, cluster.gpu)
                for op, t in zip(ops, bf16_s)]


_WRAPPED: dict[int, Fp8GemmFromBf16Profile] = {}
"""One wrapper per profile object: the op-time memo keys on the predictor object (see sibling_profile._WRAPPED)."""


def fp8_gemm_predictor(profile: OpClassPredictor) -> Fp8GemmFromBf16Profile:
    if id(profile) not in _WRAPPED:
        if len(_WRAPPED) > 32:
            _WRAPPED.clear()
        _WRAPPED[id(profile)] = Fp8GemmFromBf16Profile(profile)
    return _WRAPPED[id(profile)]
