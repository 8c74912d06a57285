"""GEMM, bmm and fused-attention widths that are not 16-byte aligned: which ops have them, what they cost on Hopper,
and the warning that names the fix.

The rule. NVIDIA's "Matrix Multiplication Background User's Guide" (DU-09799-001), section 2.2 "Tensor Core
Requirements", Table 1: since cuBLAS 11.0 Tensor Cores serve any dims, but most efficiently when the dims are
multiples of 16 bytes, 8 elements of fp16 / bf16. What must be aligned are the operands' leading dimensions. Our
GEMM is the row-major [m, k] x [k, n] of graph/op.py (torch.nn.functional.linear(X [m, k], W [n, k])): the forward
reads X and W with leading dimension k and writes Y [m, n] with n; its data gradient dY @ W reads dY with n; its
weight gradient dY^T @ X reads dY (transposed) with n and X with k. So k and n set it, m never does. A bmm (Megatron's
unfused attention: Q K^T with k = head dim and n = key length, P V with k = key length and n = head dim) the same;
Megatron's strided Q, K, V views (batch stride 3 x head dim) are aligned exactly when the head dim is. Fused (flash)
attention: the head dim; multi-latent attention's kernel reads two, d_qk + d_rope (Q, K: QK^T) and d_v (V, O: PV),
each checked (graph/mla_ops.HEAD_DIM_TAGS; its op's head_dim is their mean) and priced by the square-head
measurement. An op's alignment is the largest power of two up to 8 that divides all of its dims: 1, 2, 4 or 8
(aligned) elements. Only 16-bit dtypes are checked (FP8 GEMMs need 16 elements, fp32 4; neither measured).

The price. Measured on one H200 (torch 2.11, CUDA 13.0) by benchmarks/measure_gpu_alignment.py, per FLOP against
the aligned neighbour: measurements/h200-sxm-141gb-2026-11-27-c, Megatron's LM-head GEMMs at width n = 50257 (odd)
6.9-7.5x forward and ~5x backward, at 12564 / 6282 (4- / 2-aligned) 2.9-3.6x, at 25128 (8-aligned) ~1.0-1.1x; the
unfused attention bmm's at head dims 140 / 150 (4- / 2-aligned) 2.3-3.0x, SDPA flash attention 1.1-1.4x;
measurements/h200-sxm-141gb-2026-11-27-d, Megatron's linear with one of m, k, n varied: m costs nothing at any
alignment (0.91-1.25), an odd k 4-5x, a 2- or 4-aligned k 2.2-3.0x, n as the LM head. The medians are
configs/alignment/hopper.json (benchmarks/derive_alignment_slowdown.py writes it from the CSVs). Measured were n, k
and the head dim; a width class the file lacks (an odd head dim: only 2- and 4-aligned ones were timed) takes the
nearest larger measured alignment, a lower bound, since an odd width can use only kernels a 2-aligned one can use
too. It prices Hopper GPUs only (compute capability 9.0: H100 SXM and PCIe, H200, GH200, one SM90 architecture with
the same cuBLAS kernel families). Elsewhere (A100, L40S, B200, MI300X, CPU) the size is not measured: not priced,
only warned. The factor multiplies the op's time from whichever predictor priced it, unless that predictor is a
fitted profile whose model of the op's class, direction and dtype was trained on unaligned widths: `llmperf profile
--for -- <job>` samples the job's own shapes (profile/plan.py job_specs: GPT-2's n = 50257 head), and its trees
then answer part of the slowness themselves, which the factor would count twice. build_profile.fit_samples records
the count (ModelEntry.unaligned_samples). A model fitted before the record existed is read as its samples in the
store say (stored_samples_unaligned), and a shipped one as aligned-only, as they all are: the gemm / bmm n, k and
attention head dims of their samples (measurements/h100-sxm5-80gb-2026-11-26, -b, h200-sxm-141gb-2026-11-26, the
public Perlmutter and Vista operator files) are multiples of 8: profile/plan.py's grid rounds every dim to one, and
the public sets pad the vocabulary to 128 x TP.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from llmperf_hook.errors import UsageError
from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.attention_core_ops import flash_head_dim
from llmperf_hook.graph.mla_ops import HEAD_DIM_TAGS, mla_head_dim_tags
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import HardwareSpec
from llmperf_hook.resources import configs_dir
from llmperf_hook.store.location import default_store_path

ALIGNED_BYTES = 16
"""Matrix Multiplication Background User's Guide, Table 1 (cuBLAS >= 11.0): most efficient at multiples of 16 bytes."""
ELEMENT_BYTES = {"fp16": 2, "bf16": 2}
ALIGNED_ELEMENTS = ALIGNED_BYTES // 2
ALIGNED_DIMS: Mapping[str, tuple[str, ...]] = {"gemm": ("n", "k"), "bmm": ("n", "k"), "attention": ("head_dim",)}
"""The dims of each op class that are operands' leading dimensions (module docstring); n first, so an op with both
unaligned alike is priced by n's (the larger) measured slowdown."""
HOPPER_COMPUTE_CAPABILITY = 9.0
SLOWDOWN_FILE = ("alignment", "hopper.json")
MEASURED_IN = {"gemm": "measurements/h200-sxm-141gb-2026-11-27-c and -d",
               "gemm_k": "measurements/h200-sxm-141gb-2026-11-27-d"}
"""Where each hopper.json entry was measured (the others: DEFAULT_MEASURED_IN)."""
DEFAULT_MEASURED_IN = "measurements/h200-sxm-141gb-2026-11-27-c"


@dataclass(frozen=True)
class Misalignment:
    """The worst-aligned leading dimension of one op."""

    dim: str
    """The op's dims key (graph/op.py): "k", "n" or "head_dim"; an MLA core's tag "head_dim_qk" or "head_dim_v"."""
    width: int
    """Its value, in elements."""
    alignment_elements: int
    """Largest power of two up to ALIGNED_ELEMENTS dividing it (1, 2 or 4 here)."""


def element_alignment(width: int) -> int:
    """Largest power of two, at most ALIGNED_ELEMENTS, that divides `width` (a zero width is aligned)."""
    return min(width & -width, ALIGNED_ELEMENTS) if width > 0 else ALIGNED_ELEMENTS


def leading_widths(op: Op) -> dict[str, int]:
    """{name: width} of the op's leading dimensions: its ALIGNED_DIMS, or for an MLA core the kernel's two real
    head widths (graph/mla_ops.HEAD_DIM_TAGS: QK^T reads d_qk + d_rope, PV d_v), where its head_dim is the mean."""
    real = {t: int(op.tags[t]) for t in HEAD_DIM_TAGS if op.op_class == "attention" and t in op.tags}
    return real or {d: int(op.dims.get(d, 0)) for d in ALIGNED_DIMS.get(op.op_class, ())}


def misalignment(op: Op) -> Misalignment | None:
    """The op's worst-aligned leading dimension when it is below 16 bytes (16-bit dtypes only), else None."""
    if op.op_class not in ALIGNED_DIMS or op.dtype not in ELEMENT_BYTES:
        return None
    widths = leading_widths(op)
    worst = min(widths, key=lambda d: element_alignment(widths[d]))
    align = element_alignment(widths[worst])
    return Misalignment(worst, widths[worst], align) if align < ALIGNED_ELEMENTS else None


def is_hopper(gpu: HardwareSpec) -> bool:
    """The GPUs the H200 measurement prices (module docstring): compute capability 9.0."""
    return gpu.compute_capability == HOPPER_COMPUTE_CAPABILITY


@lru_cache(maxsize=1)
def measured_slowdowns() -> Mapping[str, Mapping]:
    """configs/alignment/hopper.json's "slowdown": {op class: {dtype: {phase: {alignment: {"median", ...}}}}}."""
    return json.loads(configs_dir().joinpath(*SLOWDOWN_FILE).read_text())["slowdown"]


def slowdown_table(op_class: str, dim: str) -> str:
    """The hopper.json entry that measured this op class with this dim unaligned: a GEMM's k has its own."""
    return "gemm_k" if op_class == "gemm" and dim == "k" else op_class


def measured_slowdown(table: str, dtype: str, phase: str, alignment_elements: int) -> tuple[float, int] | None:
    """(per-FLOP slowdown, the alignment it was measured at) from hopper.json's entry `table` (slowdown_table) for
    this dtype and phase ("recompute" is a forward), at the nearest measured alignment at or above
    `alignment_elements` (a lower bound above it); None where nothing was measured."""
    by_align = measured_slowdowns().get(table, {}).get(dtype, {}).get("bwd" if phase == "bwd" else "fwd", {})
    measured = sorted(int(a) for a in by_align if int(a) >= alignment_elements)
    if not measured:
        return None
    return float(by_align[str(measured[0])]["median"]), measured[0]


def alignment_factor(op: Op, gpu: HardwareSpec) -> float:
    """What `op`'s aligned-shape time is multiplied by on `gpu`: the measured slowdown on Hopper, else 1."""
    if op.op_class not in ALIGNED_DIMS or not is_hopper(gpu):
        return 1.0
    found = misalignment(op)
    price = None if found is None else measured_slowdown(slowdown_table(op.op_class, found.dim), op.dtype, op.phase,
                                                          found.alignment_elements)
    return 1.0 if price is None else price[0]


def unaligned_sample_count(op_class: str, dims: Mapping[str, Sequence[float]]) -> int | None:
    """How many of a profile's samples of `op_class` (dims arrays keyed as graph/op.py) have a leading dimension that
    is not a multiple of ALIGNED_ELEMENTS; None for a class without leading dims (ALIGNED_DIMS)."""
    lead = ALIGNED_DIMS.get(op_class)
    if lead is None:
        return None
    widths = np.stack([np.atleast_1d(np.asarray(dims[d], dtype=np.float64)) for d in lead]).astype(np.int64)
    return int(np.any(widths % ALIGNED_ELEMENTS != 0, axis=0).sum())


def learned_by_profile(op: Op, predictor: object) -> bool:
    """Whether `op` is unaligned and `predictor` is a fitted profile (profile/predictor.FittedProfile) whose model
    answering it (its class, the forward's model for a recompute, the dtype's stand-in) was trained on unaligned
    widths, so its answer already holds part of their cost (module docstring)."""
    meta = getattr(predictor, "meta", None)
    if meta is None or misalignment(op) is None:
        return False
    key = (op.op_class, "bwd" if op.phase == "bwd" else "fwd", meta.model_dtype(op.dtype))
    entry = next((m for m in meta.models if (m.op_class, m.phase, m.dtype) == key), None)
    if entry is None or entry.unaligned_samples is not None:
        return entry is not None and entry.unaligned_samples > 0
    from llmperf_hook.profile.profile_io import is_shipped

    directory = getattr(predictor, "directory", None)
    if directory is None or is_shipped(directory):  # aligned-only, as their samples show (module docstring)
        return False
    return stored_samples_unaligned(str(default_store_path()), meta.name, json.dumps(dict(meta.hardware),
                                                                                     sort_keys=True), key)


@lru_cache(maxsize=64)
def stored_samples_unaligned(store_path: str, name: str, fingerprint: str, key: tuple[str, str, str]) -> bool:
    """A user profile fitted before the count was recorded: whether the samples it was fitted from, as the store
    holds them (profile/sampler._samples_by_class: the sampler's rows of this name and fingerprint, and instrumented
    runs' rows), have an unaligned leading dimension. No store there: aligned-only, as before."""
    if not Path(store_path).is_file():
        return False
    from llmperf_hook.store import open_store

    op_class, phase, dtype = key
    try:
        with open_store(Path(store_path)) as store:
            rows = store.query_op_samples(name, dtype, op_class, phase)
    except UsageError:  # damaged, or a newer schema: predict warns of it (calibration_store_problem), not exit 2
        return False
    dims = [r.dims for r in rows if (r.source == "sampler" and r.fingerprint == fingerprint)
            or r.source.startswith("instrument:")]
    return bool(unaligned_sample_count(op_class, {d: [row.get(d, 0) for row in dims]
                                                  for d in ALIGNED_DIMS[op_class]}))


def alignment_warnings(ops: Iterable[Op], gpu: HardwareSpec | None,
                       learned: Callable[[Op], bool] = lambda op: False) -> tuple[str, ...]:
    """One warning per op name and unaligned width (its forward, backward and recompute are one); `gpu` None: no
    GPU is known (explain). `learned(op)`: the profile that priced it was trained on unaligned widths
    (learned_by_profile), so its answer is not multiplied."""
    seen: dict[tuple[str, str, int], tuple[Op, Misalignment, bool]] = {}
    for op in ops:
        if op.op_class in ALIGNED_DIMS:
            found = misalignment(op)
            if found is not None:
                # learned() only matters where the factor is priced: on Hopper (it may read the store)
                seen.setdefault((op.name, found.dim, found.width),
                                (op, found, gpu is not None and is_hopper(gpu) and learned(op)))
    return tuple(alignment_warning(op, found, gpu, by_profile) for op, found, by_profile in seen.values())


def alignment_warning(op: Op, found: Misalignment, gpu: HardwareSpec | None, learned: bool = False) -> str:
    """What is unaligned, what it costs on Hopper (measured), whether this prediction prices it, and the fix."""
    nbytes = found.alignment_elements * ELEMENT_BYTES[op.dtype]
    kernel = "the flash-attention kernel" if op.op_class == "attention" else "cuBLAS"
    what = (f"{op.name} ({op.op_class}, {op.dtype}): {found.dim} = {found.width} is aligned to "
            f"{found.alignment_elements} element{'s' if found.alignment_elements > 1 else ''} ({nbytes} bytes), not "
            f"{ALIGNED_ELEMENTS} ({ALIGNED_BYTES} bytes), so {kernel} cannot use its fastest Tensor Core kernels "
            f"(NVIDIA Matrix Multiplication Background guide, Tensor Core requirements)")
    cost = _measured_text(op, found)
    if gpu is None:
        priced = "`llmperf predict` prices it on Hopper GPUs (H100, H200, GH200) only, where it was measured"
    elif is_hopper(gpu) and learned:
        priced = (f"on {gpu.name} the operator profile's answer stands alone: it was fitted on unaligned widths of "
                  f"this class, so it holds their cost already")
    elif is_hopper(gpu):
        priced = f"priced on {gpu.name} (Hopper)" if cost else f"not priced on {gpu.name}: this case was not measured"
    else:
        priced = f"not priced on {gpu.name}: measured on Hopper only, its size on this GPU is not known"
    return f"{what}; {cost or 'its cost was not measured'}: {priced}. Fix: {_fix_text(op, found)}"


def _measured_text(op: Op, found: Misalignment) -> str:
    table = slowdown_table(op.op_class, found.dim)
    fwd = measured_slowdown(table, op.dtype, "fwd", found.alignment_elements)
    bwd = measured_slowdown(table, op.dtype, "bwd", found.alignment_elements)
    if fwd is None or bwd is None:
        return ""
    bound = "at least " if fwd[1] > found.alignment_elements else ""
    return (f"on an H200 such an op took {bound}{fwd[0]:.1f}x (forward) / {bwd[0]:.1f}x (backward) the time per FLOP "
            f"of an aligned one ({MEASURED_IN.get(table, DEFAULT_MEASURED_IN)})")


def _fix_text(op: Op, found: Misalignment) -> str:
    if op.name.endswith("lm_head"):  # the model's head and a multi-token-prediction head (mtp.lm_head) alike
        return ("pad the vocabulary so that each tensor-parallel rank's share is a multiple of 8. Megatron pads it "
                "to a multiple of --make-vocab-size-divisible-by x TP: keep its default 128 (a smaller value left "
                "this width). Hugging Face uses config.vocab_size as is (GPT-2's 50257): "
                "model.resize_token_embeddings(len(tokenizer), pad_to_multiple_of=64), as nanoGPT pads GPT-2 to "
                "50304 'for efficiency'.")
    if found.dim in HEAD_DIM_TAGS:  # MLA: the two widths are flags of their own (megatron/training/arguments.py)
        return ("make --qk-head-dim + --qk-pos-emb-head-dim (the scores' width) and --v-head-dim multiples of 8.")
    if op.op_class in ("bmm", "attention"):
        return ("choose a head count (or --kv-channels) that makes the head dim a multiple of 8, and a sequence "
                "length that is one.")
    return f"make {found.dim} = {found.width} a multiple of 8 (the model width it comes from, divided by TP)."


def config_alignment_warnings(cfg: TrainingConfig) -> tuple[str, ...]:
    """The same warnings for `llmperf explain`, which builds no graph and knows no GPU: the two widths a model's
    shape leaves unaligned in practice, the LM head's columns per TP rank (graph/vocab_ops.head_ops) and the
    attention's head dim (graph/layer_ops.attention_core: bmm's when unfused, else the fused kernel's head dim; MLA's
    two head widths, graph/mla_ops.mla_core)."""
    m, seq = cfg.model, cfg.model.seq_length
    dtype = "bf16" if cfg.precision == "fp8" else cfg.precision  # the LM head and attention of an FP8 run are bf16
    ops = [Op("head.lm_head", "gemm", "fwd", {"m": seq, "n": m.padded_vocab_size // cfg.parallel.tp,
                                               "k": m.hidden_size}, dtype=dtype)]
    if m.multi_latent_attention:  # its fused kernel's two head widths (graph/mla_ops.mla_core)
        ops.append(Op("attn.core", "attention", "fwd", {}, dtype=dtype, tags=mla_head_dim_tags(m)))
        return alignment_warnings(ops, None)
    d = m.kv_channels
    if cfg.attention_backend == "unfused":
        ops += [Op("attn.qk", "bmm", "fwd", {"batch": 1, "m": seq, "n": seq, "k": d}, dtype=dtype),
                Op("attn.av", "bmm", "fwd", {"batch": 1, "m": seq, "n": d, "k": seq}, dtype=dtype)]
    else:  # the width the fused kernel computes at: Megatron-DeepSpeed's Triton kernel pads it to a power of two
        ops.append(Op("attn.core", "attention", "fwd", {"head_dim": flash_head_dim(cfg, d)[0]}, dtype=dtype))
    return alignment_warnings(ops, None)
