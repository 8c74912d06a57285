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

from llmperf_hook.graph.fp8_tags import BLOCK_SCALING, CURRENT_SCALING, SP_GATHERED_TAG
from llmperf_hook.graph.op import COLLECTIVE_CLASSES, Op
from llmperf_hook.hardware.spec import ClusterSpec, HardwareSpec

MATH_CLASSES = frozenset({"gemm", "bmm", "router"})
KERNELS_PER_OP = {"fwd": 1, "recompute": 1, "bwd": 2, "step": 1}
"""Backward of a GEMM is two kernels (dgrad, wgrad); of an elementwise op one or two: take 2."""
CPU_ADAM_PARAMS_PER_S = 1.0e9
"""DeepSpeed CPUAdam throughput per GPU process with offload (Ren et al. 2021, ZeRO-Offload, Sec. 5.2: ~1 s
per billion parameters on a multi-core host shared by the node's GPUs); used for offload_optimizer = cpu/nvme."""
HOST_LINK_EFFICIENCY = 0.8
"""Share of the GPU <-> host link (HardwareSpec.host_link_bytes_per_s, per direction) that a large pinned copy reaches:
CUDA's bandwidthTest (cuda-samples, pinned, 32 MB transfers) reports ~25-26 GB/s host-to-device on PCIe Gen4 x16
(of 31.5) and ~50-55 GB/s on Gen5 x16 (of 63). NVLink-C2C is taken at the same share (an assumption: no figure of
ours measures it)."""


def host_link_rate(gpu: HardwareSpec) -> float:
    """Bytes per second of a host <-> GPU copy of offloaded parameters, gradients or checkpoints on `gpu`."""
    return gpu.host_link_bytes_per_s * HOST_LINK_EFFICIENCY


def host_copy_s(op: Op, gpu: HardwareSpec) -> float:
    """A copy between host and GPU memory (op class host_copy: ZeRO-3 offload_param's partition before its
    all-gather, DeepSpeed activation checkpoints in CPU): its bytes over the host link, plus one launch."""
    return op.dims.get("bytes", 0) / host_link_rate(gpu) + gpu.kernel_launch_s


def nvme_swap_s(op: Op, cluster: ClusterSpec) -> float:
    """DeepSpeed ZeRO-Infinity's NVMe traffic (op class nvme_swap): its read and write bytes at the host's NVMe
    bandwidth shared by the `ranks_per_host` ranks that swap at the same time (graph/nvme_swap_ops.py)."""
    ranks = max(1, op.dims.get("ranks_per_host", 1))
    return (op.dims.get("read_bytes", 0) * ranks / cluster.nvme_read_bytes_per_s
            + op.dims.get("write_bytes", 0) * ranks / cluster.nvme_write_bytes_per_s)


FP8_GEMM_CLASSES = frozenset({"gemm"})
"""Op classes Transformer Engine runs in FP8 under --fp8-format: the TE linear layers (QKV, projection, MLP,
expert GEMMs). The rest of an FP8 run computes in bf16: attention (TransformerConfig.fp8_dot_product_attention
defaults to False; TE's DotProductAttention is FP8 only with the recipe's fp8_dpa), and the LM head, which
Megatron-Core builds as tensor_parallel.ColumnParallelLinear, not a TE layer, outside MXFP8
(megatron/core/models/gpt/gpt_model.py, output_layer_cls)."""
BF16_IN_FP8_RUN_OPS = frozenset({"head.lm_head"})
FP8_GEMM_EFFICIENCY_RATIO = 0.776 / 0.838
"""Achievable share of the FP8 peak over that of the bf16 peak on one chip: GH200 (the only GPU with both in
../shared/validation/calibration/gemm_mamf_bf16_fp8_stas00.csv, stas00 mamf-finder) reaches 1535 / 1979 = 77.6 %
of its FP8 peak and 828.6 / 989 = 83.8 % of its bf16 peak. HardwareSpec.gemm_efficiency is the bf16 figure, so an
FP8 GEMM gets gemm_efficiency x 0.926 (H800 SXM FP8 at 8192 x 8192 x 16384, 1523-1541 TFLOP/s = 77-78 %, agrees)."""


def math_dtype(op: Op) -> str:
    """The dtype whose tensor-core peak prices `op`'s math: bf16 for the parts of an FP8 run that TE keeps in bf16."""
    if op.dtype == "fp8" and (op.op_class not in FP8_GEMM_CLASSES or op.name in BF16_IN_FP8_RUN_OPS):
        return "bf16"
    return op.dtype


FP8_QUANTIZE_BYTES_PER_ELEMENT = 4.0
"""HBM bytes per element of a Transformer Engine FP8 quantize of a GEMM operand: read the bf16 tensor (2) and
write its FP8 copy twice, row-wise for this GEMM and column-wise (transposed) for the weight-gradient GEMM
(1 + 1): tex.cast with rowwise_usage and columnwise_usage (transformer_engine/pytorch/csrc/extensions/cast.cu),
the fused cast-transpose of the FP8 recipe (Micikevicius et al. 2022, arXiv:2209.05433, Sec. 3: tensors are
scaled and cast before every FP8 GEMM)."""


FP8_AMAX_BYTES_PER_ELEMENT = 2.0
"""HBM bytes per element that FP8 current scaling (Megatron --fp8-recipe tensorwise; graph/fp8_tags.fp8_scaling_tag)
adds to each quantize: the scale comes from the tensor's own amax, so the bf16 tensor is read once by the amax
kernel before the cast reads it again (NVIDIA/TransformerEngine transformer_engine/pytorch/csrc/quantizer.cpp,
Float8CurrentScalingQuantizer::quantize_impl: nvte_compute_amax_with_config, then nvte_compute_scale_from_amax, then
nvte_quantize_v2: three kernels where delayed scaling's cast is one)."""
CURRENT_SCALING_EXTRA_KERNELS = 2
FP8_ROWWISE_CAST_BYTES_PER_ELEMENT = 3.0
"""A row-wise-only cast (read bf16 2, write FP8 1): what TE runs on a rank's shard before a sequence-parallel
all-gather under a per-tensor recipe (graph/fp8_tags.fp8_gathered_tag); a block recipe casts the shard both ways
(FP8_QUANTIZE_BYTES_PER_ELEMENT; graph/fp8_tags.BLOCK_SCALING)."""
FP8_TRANSPOSE_BYTES_PER_ELEMENT = 2.0
"""The column-wise copy made from a gathered per-tensor FP8 tensor in backward (read 1, write 1; TE distributed.py
_all_gather_fp8 _create_transpose, linear.py update_usage(columnwise_usage=True))."""


def fp8_quantize_s(op: Op, gpu: HardwareSpec) -> float:
    """Time of the memory-bound FP8 quantize kernels of an FP8 GEMM, not in the graph: forward (and its recompute)
    quantizes the activation input (m x k); backward quantizes the output gradient (m x n) that both the data- and
    the weight-gradient GEMM read. Weights are quantized once per step, not per micro-batch (TE's
    is_first_microbatch caching), so they are left out here. Current scaling adds its amax pass over what it casts.
    An operand sequence parallelism gathers is cast as the rank's 1/tp shard: row-wise, then transposed in backward,
    under a per-tensor recipe; both ways, with nothing left to transpose, under a block one
    (graph/fp8_tags.fp8_gathered_tag)."""
    m, n, k = op.dims.get("m", 0), op.dims.get("n", 0), op.dims.get("k", 0)
    scaling = op.tags.get("fp8_scaling")
    amax = FP8_AMAX_BYTES_PER_ELEMENT if scaling == CURRENT_SCALING else 0.0
    gathered, _, tp = op.tags.get(SP_GATHERED_TAG, "").partition("/")
    both_ways = scaling == BLOCK_SCALING  # the gather carries the column-wise copy too: nothing to transpose after it
    shard_cast = FP8_QUANTIZE_BYTES_PER_ELEMENT if both_ways else FP8_ROWWISE_CAST_BYTES_PER_ELEMENT
    shard = (shard_cast + amax) / int(tp or 1)
    transpose = 0.0 if both_ways else FP8_TRANSPOSE_BYTES_PER_ELEMENT
    if op.phase == "bwd":
        nbytes = (shard + transpose if gathered == "grad" else FP8_QUANTIZE_BYTES_PER_ELEMENT + amax) * m * n
        nbytes += transpose * m * k if gathered == "input" else 0.0
    else:
        nbytes = (shard if gathered == "input" else FP8_QUANTIZE_BYTES_PER_ELEMENT + amax) * m * k
    transposes = 1 if gathered and transpose and op.phase == "bwd" else 0
    kernels = 1 + (CURRENT_SCALING_EXTRA_KERNELS if amax else 0) + transposes
    return nbytes / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency) + kernels * gpu.kernel_launch_s


def sustained_math_floor_s(op: Op, gpu: HardwareSpec) -> float:
    """The least time a GEMM / batched GEMM can take on `gpu` in a training step: its FLOPs at the preset's best
    sustained matmul throughput (peak x gemm_efficiency, the MAMF figure each preset cites; FP8 x the FP8 ratio).
    A fitted profile prices isolated kernels timed for a few iterations, which run at boost clocks: the public
    A100 samples reach 293 TFLOP/s (0.94 of peak) where mamf-finder's repeated runs of the best shape sustain 271.2
    (0.87); a step's back-to-back GEMMs run at the sustained figure, so no profile answer goes below this."""
    if op.op_class not in MATH_CLASSES or op.flops <= 0:
        return 0.0
    fp8 = math_dtype(op) == "fp8"
    efficiency = gpu.gemm_efficiency * (FP8_GEMM_EFFICIENCY_RATIO if fp8 else 1.0)
    return op.flops / (gpu.peak_for(math_dtype(op)) * efficiency)


def compute_time_s(op: Op, gpu: HardwareSpec) -> float:
    kernels = KERNELS_PER_OP.get(op.phase, 1)
    memory_s = op.bytes_moved / (gpu.memory_bandwidth_bytes_per_s * gpu.memory_efficiency)
    if op.op_class == "optimizer" and op.tags.get("offload", "none") != "none":
        params = op.dims["params"]
        return params / CPU_ADAM_PARAMS_PER_S + params * (4 + 2) / host_link_rate(gpu)
    if op.op_class == "host_copy":
        return host_copy_s(op, gpu)
    if op.op_class in MATH_CLASSES:
        fp8 = math_dtype(op) == "fp8"
        efficiency = gpu.gemm_efficiency * (FP8_GEMM_EFFICIENCY_RATIO if fp8 else 1.0)
        math_s = op.flops / (gpu.peak_for(math_dtype(op)) * efficiency) + kernels * gpu.gemm_ramp_s
        quantize_s = fp8_quantize_s(op, gpu) if fp8 else 0.0
        return max(math_s, memory_s) + kernels * gpu.kernel_launch_s + quantize_s
    if op.op_class == "attention":
        math_s = op.flops / (gpu.peak_for(math_dtype(op)) * gpu.attention_efficiency) + kernels * gpu.gemm_ramp_s
        return max(math_s, memory_s) + kernels * gpu.kernel_launch_s
    # Host work the GPU waits for inside the op (graph/step_ops.py DEEPSPEED_HOST_S_PER_TENSOR).
    return memory_s + kernels * gpu.kernel_launch_s + float(op.tags.get("host_s", 0.0))


class RooflinePredictor:
    """Every compute op class, any phase and dtype: the always-available fallback."""

    name = "roofline"

    def supports(self, op_class: str, phase: str, dtype: str) -> bool:
        return op_class not in COLLECTIVE_CLASSES

    def predict_s(self, ops: Sequence[Op], cluster: ClusterSpec) -> Sequence[float]:
        return [nvme_swap_s(op, cluster) if op.op_class == "nvme_swap" else compute_time_s(op, cluster.gpu)
                for op in ops]
