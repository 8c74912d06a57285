"""Analytic compute cost model (the fallback when no fitted profile covers an op class).

Roofline (Williams et al. 2009): an op takes the longer of its math time and its memory time, plus a
fixed kernel cost. Math time uses the GPU's dense peak for the op's dtype times an achievable efficiency
(HardwareSpec.gemm_efficiency / attention_efficiency, documented per preset from calibration/ figures),
plus a per-GEMM ramp (HardwareSpec.gemm_ramp_s) that reproduces the fall-off of small GEMMs: with
t = flops / (peak * eff) + ramp, throughput rises as a saturating curve of the GEMM size (A100 cuBLAS: 89
TFLOP/s at 1024^3, ~265 at 4096^3 of 312). Memory time is bytes / (HBM bandwidth * memory_efficiency).
"""

from __future__ import annotations

from typing import Sequence

from llmperf_hook.graph.op import COLLECTIVE_CLASSES, Op
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec

MATH_CLASSES = frozenset({"gemm", "bmm", "router"})
KERNELS_PER_OP = {"fwd": 1, "recompute": 1, "bwd": 2, "step": 1}
"""Backward of a GEMM is two kernels (dgrad, wgrad); of an elementwise op one or two: take 2."""
CPU_ADAM_PARAMS_PER_S = 1.0e9
"""DeepSpeed CPUAdam throughput per GPU process with offload (Ren et al. 2021, ZeRO-Offload, Sec. 5.2: ~1 s
per billion parameters on a multi-core host shared by the node's GPUs); used for offload_optimizer = cpu/nvme."""
PCIE_BYTES_PER_S = 20e9
"""Host <-> GPU copy rate for offloaded gradients and parameters (PCIe Gen4 x16 ~25 GB/s peak, ~20 achieved)."""


def compute_time_s(op: Op, gpu: HardwareSpec) -> float:
    kernels = KERNELS_PER_OP.get(op.phase, 1)
    memory_s = op.bytes_moved / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    if op.op_class == "optimizer" and op.tags.get("offload", "none") != "none":
        params = op.dims["params"]
        return params / CPU_ADAM_PARAMS_PER_S + params * (4 + 2) / PCIE_BYTES_PER_S
    if op.op_class in MATH_CLASSES:
        math_s = op.flops / (gpu.peak_for(op.dtype) * gpu.gemm_efficiency) + kernels * gpu.gemm_ramp_s
        return max(math_s, memory_s) + kernels * gpu.kernel_launch_s
    if op.op_class == "attention":
        math_s = op.flops / (gpu.peak_for(op.dtype) * gpu.attention_efficiency) + kernels * gpu.gemm_ramp_s
        return max(math_s, memory_s) + kernels * gpu.kernel_launch_s
    # Host work the GPU waits for inside the op (graph/step_ops.py DEEPSPEED_HOST_S_PER_TENSOR).
    return memory_s + kernels * gpu.kernel_launch_s + float(op.tags.get("host_s", 0.0))


class RooflinePredictor:
    """Every compute op class, any phase and dtype: the always-available fallback."""

    name = "roofline"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return op_class not in COLLECTIVE_CLASSES

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        return [compute_time_s(op, cluster.gpu) for op in ops]
