"""Which steps one dtype's framework-cost readings time (cpu_framework_readings.py): the full plan, or a light one
where the dtype's steps are many times fp32's on this CPU.

Why. Every term of framework_overhead.json (cpu_framework.py, 1.-6.) is a cost per issued op unit, per byte, per
parameter tensor, per parameter, per step or per wire byte, or a ratio (compute_scale, concurrency). None is a cost
per GEMM flop: the reference GPTs' GEMMs are what a term is measured beside, not what it measures. On a CPU without
a native kernel for the dtype, those GEMMs are what a reading spends its time on: torch gives bf16 matmuls to oneDNN
only on CPUs with AVX512BW/VL/DQ (aten/src/ATen/native/mkldnn/Utils.h, mkldnn_bf16_device_check), and on an AVX2-only
AMD EPYC ATen's fallback runs an input gradient (dY @ W) at 1.2-1.3 GFLOP/s against ~77 for fp32's MKL
(/work/notes/h174.md). One full bf16 reading there took ~2.5-3 min of CPU against the 50 s a dtype gets in
`llmperf profile --budget 4` (cpu_framework.RESERVED_S less the end reading, over two dtypes), so no bf16 file was
ever written on that host and bf16 predictions carried no framework terms at all.

What changes in the light plan. The same terms, each measured in the dtype itself by the same differences, on
smaller steps: a GPT's GEMM flops per step are 2 x tokens x (12 h^2 x layers + h x vocab) (forward; the backward
twice that), its parameters ~12 h^2 x layers and its op count grows with layers alone, so the light shapes keep the
full plan's layers (1-4) and part of its parameter range and cut tokens and the largest hidden sizes (<= 256): the
light reference rows' forward GEMMs are 1.0 GFLOP a pass against the full plan's 7.3 (the formula summed over the
rows), 0.34-1.07 M parameters against 0.35-3.7 M. Where a step is compared with the fitted profile's prediction
(reference rows, bias shapes, DeepSpeed engines) it keeps >= 128 tokens and sequence >= 128: the regressors'
ranges begin at m = 72 and attention s = 72 (profile.json train_ranges), a tree model below its range predicts its
edge, and in a bf16 step of ~95 % GEMM time that error would land in the residual terms. Where measured steps are compared with measured steps (concurrency:
together / alone; transport: world size 2 / 1) 64 tokens do. Three repetitions per median, not five: the medians
over 3-7 readings are what outvote a disturbed one (cpu_framework_readings.py). The tiny pair (step 1) is the full
plan's; the AdamW rows (step 3: fp32 master tensors in every dtype) follow the reference shapes. Measured on the
AVX2-only EPYC (bf16, one thread, 28 Nov at load 8): a light reference pass 0.95 s of CPU, the full plan's ~8 s
(8.4 s with the tiny pair, /work/notes/h174.md); the probe's ratio 5.9-6.5.

When. fp32 always takes the full plan (its files are unchanged). Another dtype takes the light plan when one
forward+backward of PROBE_SHAPE in it costs more than LIGHT_ABOVE x fp32's, timed here before its readings (~0.3 s):
a reading is then over twice fp32's and no longer fits MIN_READINGS in a box fp32's fills. On a CPU with a native
bf16 kernel (AVX512-BF16, AMX) the ratio is near 1 and bf16 keeps the full plan. The file says which plan measured
each dtype, the ratio, and how each term was obtained (`reading_plan`, TERM_SOURCES). torch inside functions only.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from llmperf_hook.profile import cpu_engine_cost as ec
from llmperf_hook.profile import cpu_framework as cf
from llmperf_hook.profile import cpu_rank_transport as crt
from llmperf_hook.profile.cpu_framework import Shape


@dataclass(frozen=True)
class ReadingPlan:
    """The steps one dtype's readings time."""

    name: str
    """"full" or "light"."""
    reference: tuple[Shape, ...]
    """Step 2b's reference forward+backward rows (and step 3's AdamW rows, one per shape)."""
    bias: tuple[Shape, ...]
    """Step 2a's shapes whose ops are sampled alone (compute_scale)."""
    reps: int
    """Repetitions per median of a timed step (in process, concurrency children, DeepSpeed engines, transport)."""
    concurrency: tuple[Shape, ...]
    """Step 4's shapes (cpu_engine_cost.ConcurrencyReader)."""
    deepspeed: tuple[Shape, ...]
    """Step 5's engine shapes, one engine per ZeRO stage each (cpu_engine_workers)."""
    transport: tuple[tuple[int, Shape], ...]
    """Step 6's (ZeRO stage, shape) engines (cpu_rank_transport.TransportReader)."""


FULL = ReadingPlan("full", cf.REFERENCE_SHAPES, cf.BIAS_SHAPES, cf.REPS, ec.CONCURRENCY_SHAPES, ec.DEEPSPEED_SHAPES,
                   crt.TRANSPORT_ENGINES)
LIGHT = ReadingPlan(
    "light",
    # layers 1-4, hidden 96-256, 128-256 tokens, 0.34-1.07 M parameters, 48-138 op units
    reference=((1, 128, 128, 1), (2, 128, 128, 1), (1, 256, 128, 1), (3, 96, 128, 1), (4, 128, 128, 1),
               (1, 128, 256, 1)),
    bias=((2, 128, 128, 1), (1, 256, 128, 1)),  # hidden 128 and 256
    reps=3,
    concurrency=((1, 128, 64, 1), (2, 128, 64, 2), (1, 256, 64, 1)),
    deepspeed=((1, 128, 128, 1), (2, 128, 128, 1), (1, 256, 128, 1)),  # 0.34-1.07 M parameters
    transport=((0, (2, 256, 64, 1)), (1, (1, 256, 64, 1)), (3, (2, 128, 64, 1))),  # 1.9, 1.1, 0.54 M parameters
)
PLANS = {plan.name: plan for plan in (FULL, LIGHT)}

PROBE_SHAPE: Shape = (1, 128, 64, 1)
"""The step timed in fp32 and in the dtype to choose its plan (~4 ms fp32, ~45 ms bf16 on the AVX2-only EPYC)."""
PROBE_REPS = 3
LIGHT_ABOVE = 2.0
"""A dtype whose PROBE_SHAPE step costs more than this many times fp32's takes the light plan."""

TERM_SOURCES = {
    "full": "every term measured in this dtype on cpu_framework.py's full plan (REFERENCE_SHAPES, BIAS_SHAPES, "
            "cpu_engine_cost.CONCURRENCY_SHAPES / DEEPSPEED_SHAPES, cpu_rank_transport.TRANSPORT_ENGINES)",
    "light": {
        "per_unit_s": "measured in this dtype: the tiny pair (1 vs 9 layers, hidden 32) minus its ops sampled alone, "
                      "as in the full plan",
        "compute_scale": "measured in this dtype: the ops of the light bias shapes sampled alone against the fitted "
                         "profile's prediction of them",
        "per_byte_s, backward_per_param_s": "measured in this dtype: the light reference rows' forward+backward "
                                            "beyond per_unit_s and the ops at compute_scale (3 repetitions a median)",
        "optimizer_per_tensor_s, adam_per_param_s": "torch AdamW over fp32 master tensors (as in every dtype) at the "
                                                    "light reference shapes",
        "concurrency_slowdown": "measured in this dtype: the light concurrency shapes alone and two ranks at once",
        "deepspeed_step": "measured in this dtype: DeepSpeed engines (ZeRO 0-3, one process each) at the light "
                          "engine shapes against the prediction of the same models",
        "rank_transport": "measured in this dtype: gloo's transport CPU per wire byte of the light transport "
                          "engines at world size 2 beyond world size 1",
    },
}
"""How each term of a dtype's entry was obtained, by plan (written into the entry's `reading_plan`)."""


def step_ratio(dtype: str) -> float:
    """CPU seconds of one PROBE_SHAPE forward+backward in `dtype` over fp32's (medians of PROBE_REPS)."""
    fp32_s, dtype_s = (cf._median_s(cf.fwd_bwd_fn(PROBE_SHAPE, dt), PROBE_REPS) for dt in ("fp32", dtype))
    return dtype_s / max(fp32_s, 1e-9)


def choose_plan(dtype: str) -> tuple[ReadingPlan, float | None]:
    """(plan, the dtype's step ratio to fp32; None for fp32, which always takes FULL)."""
    if dtype == "fp32":
        return FULL, None
    ratio = step_ratio(dtype)
    return (LIGHT if ratio > LIGHT_ABOVE else FULL), ratio


def plan_record(plan: ReadingPlan, ratio: float | None) -> dict:
    """The entry's `reading_plan`: which steps measured it, why, and how each term was obtained."""
    return {"name": plan.name, "step_per_fp32": ratio, "probe_shape": list(PROBE_SHAPE), "light_above": LIGHT_ABOVE,
            "shapes": {k: v for k, v in asdict(plan).items() if k != "name"}, "terms": TERM_SOURCES[plan.name]}


def plan_of(entry: dict) -> ReadingPlan:
    """The plan that measured a file's dtype entry (FULL for files before it was recorded)."""
    return PLANS.get((entry.get("reading_plan") or {}).get("name", "full"), FULL)
