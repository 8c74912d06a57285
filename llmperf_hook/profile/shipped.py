"""What the shipped profiles are fitted from: hardware constants, fit groups and the sample-sanity rule.

Used by benchmarks/fit_shipped_profiles.py (writes configs/profiles/) and the accuracy benchmarks, so the
benchmark measures exactly the recipe that produced the shipped files.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from llmperf_hook.profile.build_profile import Samples, training_xy
from llmperf_hook.profile.features import RooflineConstants
from llmperf_hook.profile.public_samples import MAPPINGS, SampleSet, operator_files, read_sample_sets


@dataclass(frozen=True)
class ShippedHardware:
    """One GPU of the public samples."""

    name: str
    """Profile name = hardware name in configs/hardware (lower-case)."""
    folder: str
    """Cluster folder under op-samples/ ("Perlmutter", "Vista")."""
    cluster: str
    roofline: RooflineConstants
    fingerprint: Mapping[str, str]


# Datasheet peaks. A100-SXM4-80GB: 312 TFLOP/s dense fp16/bf16 tensor, 2,039 GB/s HBM2e, 108 SMs (NVIDIA A100
# datasheet, 2021). GH200 96 GB: H100-class GPU, 989 TFLOP/s dense fp16/bf16, 4.0 TB/s HBM3, 132 SMs (NVIDIA
# GH200 Grace Hopper Superchip datasheet, 2023).
SHIPPED: Mapping[str, ShippedHardware] = {
    "a100-sxm4-80gb": ShippedHardware("a100-sxm4-80gb", "Perlmutter", "perlmutter",
                                      RooflineConstants(312e12, 2039e9, 108, 2),
                                      {"device": "NVIDIA A100-SXM4-80GB", "num_sms": "108", "site": "NERSC Perlmutter"}),
    "gh200-96gb": ShippedHardware("gh200-96gb", "Vista", "vista", RooflineConstants(989e12, 4.0e12, 132, 2),
                                  {"device": "NVIDIA GH200 120GB (96 GB HBM3)", "num_sms": "132", "site": "TACC Vista"}),
}

FIT_GROUPS: Mapping[str, tuple[str, ...]] = {
    "gemm": ("linear1", "linear2", "linear3", "linear4", "linear_final"),
    "bmm": ("baddbmm", "bmm"),
    "attention": ("flash_atten",),
    "softmax": ("ScaledUpperTriangMaskedSoftmax",),
    "softmax_unfused": ("softmax",),
    "masked_fill": ("fillmask",),
    "layernorm": ("layernorm",),
    "rmsnorm": ("RMSlayernorm",),
    "gelu": ("gelu",),
    "rope": ("RoPE",),
    "residual_add": ("res_add",),
    "embedding": ("embedding",),
    "cross_entropy": ("parallel_cross_entropy_128",),
    # One Adam regressor for every pipeline stage: params plus the optional dims layers and embedding_params
    # (features.OPTIONAL_DIMS) tell a first/last stage (one huge embedding / LM-head tensor) from a middle one.
    # The A100 Adam-by-count file (timed with another harness, params only) is benchmarked as its own group.
    "optimizer": ("firstStage_optimizer", "middleStage_optimizer", "lastStage_optimizer"),
    "optimizer_by_count": ("optimizer",),
}
# Shipped: the classes of the graph's dims contract. softmax_unfused / masked_fill (kernels of the unfused
# attention path that the graph folds into "softmax") are benchmarked but not shipped, to keep profiles small.
BENCHMARK_ONLY = ("optimizer_by_count", "softmax_unfused", "masked_fill")
SHIPPED_GROUPS = tuple(g for g in FIT_GROUPS if g not in BENCHMARK_ONLY)

FASTER_THAN_PEAK = 0.9
"""Sanity rule: a sample faster than 0.9 x flops / peak would beat the datasheet peak; it is corrupt."""
EXACT_FLOP_CLASSES = frozenset({"gemm", "bmm", "attention"})
"""Classes whose FLOP count is exact, so the rule applies; byte counts of memory-bound kernels are estimates
(L2-resident tensors legitimately beat HBM bandwidth), so those are never dropped by it..."""
MIN_BYTES_PER_PARAM = {"optimizer": 16.0}
"""...except Adam, which must at least read and write its fp32 moments m and v (16 bytes per parameter) from
HBM: a step faster than that at the datasheet bandwidth is corrupt (the GH200 stage files are, mostly)."""
MAX_CORRUPT_FRACTION = 0.5
"""A fit group with more corrupt samples than this is not fitted at all (the class falls back to roofline)."""
MIN_STREAMING_SLOPE = 0.5
"""A bandwidth-bound step (Adam) streams a fixed number of bytes per parameter, so its time grows in proportion
to the parameter count (log-log slope 1) once that traffic exceeds the fixed overheads; overheads only pull the
slope towards 0 at small sizes, which the test excludes. Samples whose slope stays below halfway (0.5) do not
measure the op the dims describe: the GH200 stage-optimizer files grow about as layers x hidden (slope 0.06-0.23,
a 9.7-billion-parameter stage in 12 ms, i.e. 13 PB/s of Adam state), the A100 files as the parameters (0.73-0.89)."""


def load_group(data_root: Path, hw: ShippedHardware, group: str) -> dict[str, list[SampleSet]]:
    """{phase: sample sets} of one fit group that exist for this GPU (no entry when no file exists)."""
    files = operator_files(data_root / hw.folder / "operator")
    out: dict[str, list[SampleSet]] = {}
    for name in FIT_GROUPS[group]:
        if name in files and name in MAPPINGS:
            for s in read_sample_sets(files[name], name):
                out.setdefault(s.phase, []).append(s)
    return out


def plausible_mask(s: Samples, rc: RooflineConstants) -> np.ndarray:
    """True for samples with a positive finite time that do not beat the peak (EXACT_FLOP_CLASSES only)."""
    keep = np.isfinite(s.time_s) & (s.time_s > 0)
    if s.op_class in MIN_BYTES_PER_PARAM:
        floor_s = MIN_BYTES_PER_PARAM[s.op_class] * s.dims["params"] / rc.memory_bandwidth_bytes_per_s
        return keep & (s.time_s >= FASTER_THAN_PEAK * floor_s)
    if s.op_class not in EXACT_FLOP_CLASSES:
        return keep
    compute_only = RooflineConstants(rc.peak_flop_per_s, float("inf"), rc.num_sms, rc.dtype_bytes)
    ratio = np.full(s.time_s.shape, np.nan)
    _, y, _, _ = training_xy(s, compute_only)
    ratio[keep] = np.exp(y)
    return keep & (ratio >= FASTER_THAN_PEAK)


def streaming_slope(s: Samples, rc: RooflineConstants) -> float | None:
    """Log-log slope of time on parameters over the samples whose bandwidth floor (MIN_BYTES_PER_PARAM at the
    datasheet bandwidth) reaches the fastest sample's time; None for other classes or too few such samples."""
    if s.op_class not in MIN_BYTES_PER_PARAM:
        return None
    ok = np.isfinite(s.time_s) & (s.time_s > 0)
    params, t = s.dims["params"][ok], s.time_s[ok]
    floor_s = MIN_BYTES_PER_PARAM[s.op_class] * params / rc.memory_bandwidth_bytes_per_s
    big = floor_s >= t.min()
    if big.sum() < 10 or np.ptp(np.log(params[big])) < np.log(2.0):
        return None
    return float(np.polyfit(np.log(params[big]), np.log(t[big]), 1)[0])


def corrupt_reason(s: Samples, rc: RooflineConstants) -> str | None:
    """Why a whole fit group is unusable (most samples beat the peak, or a streaming op that does not scale with
    its bytes), or None."""
    dropped = 1.0 - float(plausible_mask(s, rc).mean())
    if dropped > MAX_CORRUPT_FRACTION:
        return f"{dropped:.0%} of the samples beat the datasheet peak"
    slope = streaming_slope(s, rc)
    if slope is not None and slope < MIN_STREAMING_SLOPE:
        return (f"time grows as params^{slope:.2f} where the bandwidth floor dominates (a streaming step grows as "
                f"params^1; rule: >= {MIN_STREAMING_SLOPE})")
    return None


MAX_STEADY_S_PER_TENSOR = 5e-6
"""A training step's fused Adam (apex / DeepSpeed FusedAdam, Megatron's) runs multi_tensor_apply: one kernel per
chunk of up to ~110 tensors, so each tensor adds well under this. Samples that pay more per tensor time the
optimizer's FIRST step, which allocates and zero-fills exp_avg / exp_avg_sq tensor by tensor (torch.zeros_like in
FusedAdam.step): not the step training repeats. The A100 stage-optimizer files pay 31 us per tensor (least squares
of time on parameters, tensors and a constant over the three files: 19.0 ps per parameter, i.e. 33 B at the
streaming bandwidth, an Adam pass plus the zero fill)."""
NEOX_TENSORS_PER_LAYER = 12
"""Weights and biases of a GPT-NeoX layer: QKV, attention output, MLP up and down, two LayerNorms."""


def first_step_reason(s: Samples) -> str | None:
    """Why optimizer samples time a first step (per-tensor cost over MAX_STEADY_S_PER_TENSOR), or None."""
    if s.op_class != "optimizer" or "layers" not in s.dims:
        return None
    tensors = NEOX_TENSORS_PER_LAYER * s.dims["layers"] + 2.0 * (s.dims.get("embedding_params", np.zeros_like(s.time_s)) > 0)
    design = np.column_stack([s.dims["params"], tensors, np.ones_like(tensors)])
    per_param_s, per_tensor_s, _ = np.linalg.lstsq(design, s.time_s, rcond=None)[0]
    if per_tensor_s <= MAX_STEADY_S_PER_TENSOR:
        return None
    return (f"{per_tensor_s * 1e6:.0f} us per parameter tensor ({per_param_s * 1e12:.1f} ps per parameter): the samples "
            f"time a first step that allocates the optimizer state, not the step training repeats (rule: <= "
            f"{MAX_STEADY_S_PER_TENSOR * 1e6:.0f} us)")


def clean(s: Samples, rc: RooflineConstants) -> tuple[Samples | None, float]:
    """(samples without the corrupt rows, or None if the group is corrupt (corrupt_reason); fraction dropped)."""
    mask = plausible_mask(s, rc)
    dropped = 1.0 - float(mask.mean())
    if corrupt_reason(s, rc) is not None:
        return None, dropped
    return Samples(s.op_class, s.phase, {k: v[mask] for k, v in s.dims.items()}, s.time_s[mask]), dropped
