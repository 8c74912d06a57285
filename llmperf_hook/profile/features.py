"""Regressor features and roofline times per op class, from the graph's dims contract (graph/op.py).

A fitted profile predicts log(measured_s / roofline_s): the tree ensemble only learns the (bounded) efficiency
of a kernel, so a shape outside the sampled range still scales with its FLOPs and bytes instead of saturating
at the last leaf. The roofline (Williams et al., CACM 2009) is max(flops / peak, bytes / bandwidth) with the
constants stored in the profile itself (`RooflineConstants`), so a profile never depends on a YAML that may
change under it.

Pure numpy; imported on the predict path.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

FEATURE_SCHEMA_VERSION = 1
"""Bump when any feature formula changes: older profiles are then refused (ProfileError) instead of mispredicting."""

DTYPE_BYTES: Mapping[str, int] = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "fp8": 1}

# Tile edge of the tensor-core GEMM kernels (cuBLAS/CUTLASS 128x128 threadblock tiles) and of FlashAttention-2's
# query blocks (Dao, 2023, Sec. 3.1: block size 128): waves = tiles / SMs, the quantisation that makes GEMM time
# step-shaped rather than smooth in m and n.
TILE = 128.0


@dataclass(frozen=True)
class RooflineConstants:
    """The normaliser of the regression target; saved in the profile metadata."""

    peak_flop_per_s: float
    """Dense peak of the profiled dtype (datasheet for GPUs, measured for CPUs)."""
    memory_bandwidth_bytes_per_s: float
    num_sms: int
    """Streaming multiprocessors (GPU) or cores used (CPU): the unit of the wave count."""
    dtype_bytes: int


Dims = Mapping[str, np.ndarray]
Block = tuple[list[str], list[np.ndarray], np.ndarray, np.ndarray]
"""(feature names, feature columns, flops, bytes)."""


def _lg(x: np.ndarray) -> np.ndarray:
    return np.log2(np.maximum(np.asarray(x, dtype=np.float64), 1.0))


def _tiles(rows: np.ndarray, cols: np.ndarray, tr: float = TILE, tc: float = TILE) -> np.ndarray:
    return np.ceil(rows / tr) * np.ceil(cols / tc)


def _wave_features(prefix: str, tiles: np.ndarray, num_sms: int) -> tuple[list[str], list[np.ndarray]]:
    waves = tiles / num_sms
    # Fraction of the last wave that does useful work (1.0 = no tail effect).
    tail = waves / np.maximum(np.ceil(waves), 1.0)
    return [f"{prefix}_log_tiles", f"{prefix}_waves", f"{prefix}_wave_eff"], [_lg(tiles), waves, tail]


def _gemm(d: Dims, bwd: bool, rc: RooflineConstants, batch: np.ndarray | None = None) -> Block:
    m, n, k = (np.asarray(d[x], dtype=np.float64) for x in ("m", "n", "k"))
    bt = np.ones_like(m) if batch is None else np.asarray(batch, dtype=np.float64)
    e = rc.dtype_bytes
    # Forward: 2mnk FLOPs, reads A[m,k], B[k,n], writes C[m,n]. Backward = dgrad (m x k output) + wgrad
    # (k x n output): twice the FLOPs and bytes (Narayanan et al., SC'21, Sec. 5.1: backward = 2x forward).
    mult = 2.0 if bwd else 1.0
    flops = mult * 2.0 * bt * m * n * k
    nbytes = mult * bt * (m * k + k * n + m * n) * e
    names = ["log_m", "log_n", "log_k", "m_mod_128", "n_mod_128", "k_mod_64"]
    cols = [_lg(m), _lg(n), _lg(k), np.mod(m, 128.0), np.mod(n, 128.0), np.mod(k, 64.0)]
    # Shape ratios: cuBLAS picks its kernel (tile shape, split-k) from the aspect of the problem, so GEMMs of
    # equal size but another aspect (QKV n=3k vs MLP n=4k) run at different efficiency; trees split on a ratio
    # directly instead of approximating it from log_n and log_k (-0.2 to -0.5 points of A100 GEMM MAPE).
    names, cols = names + ["log_n_over_k", "log_m_over_n"], cols + [_lg(n) - _lg(k), _lg(m) - _lg(n)]
    if batch is not None:
        names, cols = names + ["log_batch"], cols + [_lg(bt)]
    # cuBLAS picks among several threadblock tiles; the wave tail of each candidate is a feature.
    for tr, tc in ((128.0, 128.0), (256.0, 128.0), (128.0, 256.0), (64.0, 128.0)):
        wn, wc = _wave_features(f"fwd{int(tr)}x{int(tc)}", bt * _tiles(m, n, tr, tc), rc.num_sms)
        names, cols = names + wn, cols + wc
    # Tried, not kept: log2 of the least padded work over six tile shapes (64-256 a side: ceil(tiles / SMs) x SMs x
    # tile area / (m n), the wave-quantised work of the best tiling). A100 GEMM forward, random split, seeds 0 / 1:
    # linear1..4, final 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 3.11 / 2.55 / 3.06 / 2.60 / 3.45 % and 3.29 / 2.45 /
    # 2.94 / 2.80 / 3.51 -> 3.27 / 2.47 / 2.95 / 2.80 / 3.51 %; extrapolation linear1 and final worse on both
    # (3.30 -> 3.33, 3.08 -> 3.14 %; 3.14 -> 3.19, 2.96 -> 3.09 %).
    # Tried, not kept: alignment to the 256-wide tiles, m mod 512, n mod 256, k mod 256 (the TP 16 LM head's n =
    # 3,200 is 12.5 tiles of 256). Seed 0: 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 3.12 / 2.57 / 3.00 / 2.58 / 3.42 %,
    # extrapolation linear1 3.30 -> 3.38 %; seed 1: 3.29 / 2.45 / 2.94 / 2.80 / 3.51 -> 3.22 / 2.52 / 2.93 / 2.79 /
    # 3.48 %, extrapolation linear1 / final 3.14 -> 3.24, 2.96 -> 3.07 %. The short GEMMs' error is cuBLAS changing
    # kernel at shape thresholds no size residue names (bench_operator_noise.py).
    # Tried, not kept (H201): log2 of the largest power of two dividing m, n and k, capped at 2^13 (power-of-two
    # leading dimensions map rows onto the same memory partitions; on the A100 linear3 line n 16,384 / k 4,096 the
    # big GEMMs stay at 0.73-0.84 of peak while k 6,144 and 8,192 reach 0.89-0.93). 25 %, seed 0, random /
    # extrapolation: A100 fwd 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 3.18 / 2.52 / 3.00 / 2.55 / 3.44 %, A100 bwd
    # 2.91 / 1.28 / 2.07 / 2.27 / 2.59 -> 2.86 / 1.16 / 1.88 / 2.21 / 2.44 %, GH200 fwd 2.37 / 1.63 / 1.96 / 1.53 /
    # 1.48 -> 2.33 / 1.59 / 1.93 / 1.49 / 1.48 %; but GH200 bwd 2.18 / 2.92 / 1.66 / 1.70 / 1.57 -> 2.23 / 3.07 /
    # 1.74 / 1.78 / 1.57 % (linear2 over 3 %), GH200 fwd extrapolation 2.13 / 1.68 / 1.70 / 1.59 / 1.43 -> 2.15 /
    # 1.73 / 1.79 / 1.55 / 1.46 %, A100 bwd extrapolation linear1 3.24 -> 3.28 %; no A100 fwd row reaches 3 %,
    # and a new GEMM schema refuses every profile fitted before it (the measured H100 / H200 ones too).
    # Tried, not kept: the compute roofline quantised to whole waves of 128 x 128 tiles (flops / wave_eff; dgrad
    # and wgrad each by their own output tiles) as the target's normaliser. 25 %, random, seed 0: A100 GEMM fwd
    # 3.20 / 2.62 / 3.08 / 2.67 / 3.47 -> 3.12 / 2.54 / 3.00 / 2.59 / 3.43 %, bwd mean 2.23 -> 2.11 %, batched matmul
    # fwd 6.79 / 4.37 -> 6.49 / 4.24 %, GH200 GEMM fwd mean 1.79 -> 1.73 %, but GH200 GEMM bwd 2.01 -> 2.09 %
    # (linear2 2.92 -> 3.09 %, over issue 4's 3 %; Hopper's cuBLAS tiles are not 128 x 128); seed 1: A100 GEMM fwd
    # 3.29 / 2.45 / 2.94 / 2.80 / 3.51 -> 3.28 / 2.52 / 2.95 / 2.78 / 3.52 %, GH200 GEMM bwd mean 2.29 -> 2.39 %: draw
    # noise, not worth a new schema for every GEMM profile. Among the largest A100
    # errors are cuBLAS kernel switches on single (n, k) lines (n 1,152 at k 4,608: 186-197 TFLOP/s, 253 at k
    # 3,072 / 6,144), 4-5 training rows each at 25 %: missed by 15.2 % (Huber / L1), by 12.5 % under L2, which
    # loses more on the long GEMMs' scatter (seed 0: 3.01 -> 3.40 % mean).
    if bwd:
        for tag, (r, c) in {"dgrad": (m, k), "wgrad": (k, n)}.items():
            wn, wc = _wave_features(tag, bt * _tiles(r, c), rc.num_sms)
            names, cols = names + wn, cols + wc
    return names, cols, flops, nbytes


def _bmm(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    return _gemm(d, bwd, rc, batch=d["batch"])


def _attention(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    b, s, h, kvh, hd, causal = (np.asarray(d[x], dtype=np.float64) for x in
                                ("b", "s", "heads", "kv_heads", "head_dim", "causal"))
    # FlashAttention-2 (Dao, 2023, Sec. 4): forward 4*b*h*s^2*d FLOPs, halved under a causal mask;
    # backward 2.5x forward (recomputation of the scores included).
    fwd_flops = 4.0 * b * h * s * s * hd * np.where(causal > 0, 0.5, 1.0)
    flops = fwd_flops * (2.5 if bwd else 1.0)
    qo = 2.0 * b * s * h * hd
    kv = 2.0 * b * s * kvh * hd
    nbytes = (qo + kv) * rc.dtype_bytes * (2.0 if bwd else 1.0)
    # FlashAttention-2 compiles kernels for head dims 32, 64, 96, ..., 256 and pads to the next one.
    hd_pad = np.ceil(hd / 32.0) * 32.0
    names = ["log_b", "log_s", "log_heads", "log_kv_heads", "log_head_dim", "causal", "s_mod_128", "head_dim_padded",
             "log_padded_flops"]
    cols = [_lg(b), _lg(s), _lg(h), _lg(kvh), _lg(hd), causal, np.mod(s, 128.0), hd_pad, _lg(fwd_flops * hd_pad / hd)]
    wn, wc = _wave_features("q", b * h * np.ceil(s / TILE), rc.num_sms)
    # Tried, not kept: the kernel's own tiling on sm80 (flash_fwd/bwd_launch_template.h: forward 128 x 128 tiles
    # up to head dim 64, else 128 x 64; backward over key blocks, 128 x 128 / 64 x 128 / 64 x 64 by head dim),
    # the waves of that grid, the causal mask's visited tiles over the unmasked work, and the total work over
    # the longest CTA's times the SMs (load balance). A100 random / extrapolation split MAPE, seeds 0 and 1:
    # backward 6.64 -> 6.49 / 6.55 -> 6.67 %, 6.52 -> 6.45 / 6.54 -> 6.48 %; forward 6.99 -> 7.07 / 6.82 ->
    # 6.83 %, 6.78 -> 6.81 / 6.89 -> 6.84 %: within the draws' noise (the rows' noise floor is 5.7 / 5.4 %).
    # Tried, not kept (H209): log2 of the sampled run's TP degree (the samples' mp; a job's TP is known at predict
    # time) for attention and GEMMs. A100 flash attention errors sit per mp at +1 / +3 / -4 / -3 / -3 % (mp 1..16),
    # but on runs the fit never saw (benchmarks/bench_tp_degree.py) the column removes little of it: A100 fwd 7.06 ->
    # 7.05 %, bwd 6.53 -> 6.45 %, GH200 fwd 1.90 -> 1.91 %, A100 GEMM fwd 3.20 -> 3.14 %, GH200 GEMM bwd 2.35 ->
    # 2.39 %; the random split's gains (inner 6.93 -> 6.84 % A100 fwd) come from rows of the same run, and the
    # extrapolation split loses (A100 flash fwd 6.82 -> 7.17 %; bench_operator_accuracy.py --tp-column).
    return names + wn, cols + wc, flops, nbytes


def _streaming(elements: np.ndarray, flop_per_elem: float, passes: float, rc: RooflineConstants) -> tuple:
    elements = np.asarray(elements, dtype=np.float64)
    return flop_per_elem * elements, passes * elements * rc.dtype_bytes


def _rows_cols(d: Dims, bwd: bool, rc: RooflineConstants, rows_key: str, cols_key: str,
               flop_per_elem: float, passes: tuple[float, float]) -> Block:
    rows, cols_ = (np.asarray(d[x], dtype=np.float64) for x in (rows_key, cols_key))
    flops, nbytes = _streaming(rows * cols_, flop_per_elem, passes[1] if bwd else passes[0], rc)
    # rows / cols: the attention batches (b x heads) of a [batches, s, s] softmax, the kernel's grid dimension.
    names = [f"log_{rows_key}", f"log_{cols_key}", f"{cols_key}_mod_128", f"log_{rows_key}_per_{cols_key}"]
    return names, [_lg(rows), _lg(cols_), np.mod(cols_, 128.0), _lg(rows / cols_)], flops, nbytes


def _fused_softmax(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    names, cols, flops, nbytes = _rows_cols(d, bwd, rc, "rows", "cols", 5.0, (2.0, 3.0))
    # Megatron's scaled_upper_triang_masked_softmax kernel is compiled per log2_elements: a row of `cols` keys is
    # padded to the next power of two across the warp's registers, so 1,100 keys cost about what 2,048 do
    # (megatron/fused_kernels/scaled_upper_triang_masked_softmax.h, next_power_of_two).
    c = np.maximum(np.asarray(d["cols"], dtype=np.float64), 1.0)
    pow2 = 2.0 ** np.ceil(np.log2(c))
    return names + ["log_cols_pow2", "cols_pad_eff"], cols + [np.log2(pow2), c / pow2], flops, nbytes


def _elementwise(d: Dims, bwd: bool, rc: RooflineConstants, flop_per_elem: float,
                 passes: tuple[float, float]) -> Block:
    el = np.asarray(d["elements"], dtype=np.float64)
    flops, nbytes = _streaming(el, flop_per_elem, passes[1] if bwd else passes[0], rc)
    return ["log_elements", "elements_mod_1024"], [_lg(el), np.mod(el, 1024.0)], flops, nbytes


def _rope(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    t, h, hd = (np.asarray(d[x], dtype=np.float64) for x in ("tokens", "heads", "head_dim"))
    # Rotates q and k: read both plus cos/sin, write both.
    flops, nbytes = _streaming(2.0 * t * h * hd, 3.0, 2.5, rc)
    return ["log_tokens", "log_heads", "log_head_dim"], [_lg(t), _lg(h), _lg(hd)], flops, nbytes


def _embedding(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    t, v, hid = (np.asarray(d[x], dtype=np.float64) for x in ("tokens", "vocab", "hidden"))
    # Forward gathers t rows and writes them; backward zeroes the [v, hidden] gradient and scatter-adds t rows.
    nbytes = (2.0 * t * hid + (v * hid if bwd else 0.0)) * rc.dtype_bytes
    flops = t * hid
    # The table size v*hidden sets how many pages the random row gather touches (TLB reach): on the GH200
    # samples the same gather of 5,120 tokens x 6,144 takes 115 us from a 1/16 table and 205 us from the whole one.
    names = ["log_tokens", "log_vocab", "log_hidden", "log_table_elements", "log_tokens_per_vocab"]
    cols = [_lg(t), _lg(v), _lg(hid), _lg(v * hid), _lg(t) - _lg(v)]
    if bwd:
        names, cols = names + ["sort_path"], cols + [(t > EMBEDDING_BWD_SORT_ABOVE).astype(np.float64)]
    # The GH200 samples are a hinge: the forward rises with t * hidden (~6.5 ps per element) up to a plateau of
    # ~108 us + the table's bytes at ~3.45 TB/s, flat in t beyond it; the backward joins the same plateau above
    # the sort threshold. That shape is a normaliser in place of the roofline (profile/hinge.py, chosen per model
    # on the inner split by build_profile.fit_with_floor), not a feature.
    # Counting the table's bytes in the forward roofline (with log(vocab / (2t + vocab)) as a feature): 2.01 ->
    # 2.03 % / 2.06 -> 2.05 %, no gain; not kept.
    # Tried for the GH200 backward, not kept (25 %, random / extrapolation, seeds 0 | 1; before 1.74 / 2.92 | 1.86 /
    # 2.99 %): the unsorted path's waves, ceil(ceil(hidden / 32) / SMs) and log2(tokens x waves) at <= 3,072 tokens
    # (embedding_backward_feature_kernel: one block per 32 columns walks every index): 1.87 / 3.09 | 1.83 / 2.69 %;
    # the forward regressor's out-of-fold prediction as a feature (above 8,192 tokens the samples' backward is
    # their forward + 0.3 %, median; 95 % within 1.5 %): 1.82 / 2.93 % (seed 0), as the normaliser 2.01 / 3.17 %.
    return names, cols, flops, nbytes


EMBEDDING_BWD_SORT_ABOVE = 3072
"""Indices above which PyTorch's CUDA embedding backward sorts them: up to 3,072 it runs
embedding_backward_feature_kernel, ceil(hidden / 32) blocks that each walk ALL the indices (no sort), above it a
radix sort of the indices and a segmented reduction (aten/src/ATen/native/cuda/Embedding.cu,
embedding_dense_backward_cuda: `if (num_indices <= 3072 && !scale_grad_by_freq)`). The two paths cost
differently: on the GH200 samples 3,072 tokens (hidden 2,048-8,192) take 212-444 us and 4,096 tokens 190-347 us.
As a feature (inner error, 20 % of each 25 % operator-benchmark training split, test rows unused): A100
embedding backward 4.55 -> 4.26 % (split draws of seed 1 / 2: 4.37 -> 4.13, 4.39 -> 4.13 %); GH200 2.24 -> 1.97 %
on the benchmark's draws but 2.31 -> 2.32, 2.66 -> 2.63 % on those of seeds 1 / 2 (no gain beyond the noise;
trained on 80 %, the reference's share, 1.34 -> 1.40 % against its 1.41 %)."""


def _cross_entropy(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    t, v = (np.asarray(d[x], dtype=np.float64) for x in ("tokens", "vocab"))
    # Vocab-parallel CE (Megatron): max, exp-sum and target gather over [t, v] logits (about 3 passes forward,
    # 2 backward), done in fp32 internally.
    flops, nbytes = _streaming(t * v, 5.0, 2.0 if bwd else 3.0, rc)
    return ["log_tokens", "log_vocab", "vocab_mod_128"], [_lg(t), _lg(v), np.mod(v, 128.0)], flops, nbytes


ROPE_TENSORS = 2
"""A profile's rope sample rotates two tensors of `heads` heads each, q and k (op_sampler._rope times one
[2, tokens, heads, head_dim] rotation; the public samples' RoPE is "rotary embedding on q and k" of
[l, b, h/mp, dim/h] each, data/op-samples README), while the graph's rope op counts every rotated head once:
heads = q heads + k heads of the rank (graph/layer_ops.py: heads + kv_heads, GQA included)."""


GELU_EXACT = "gelu_exact"
"""The profile class of the exact (erf) GELU, torch's F.gelu default; a profile's "gelu" samples the tanh approximation
(Megatron's fused bias_gelu_impl, megatron/core/fusions/fused_bias_gelu.py), op_sampler._elementwise."""


def profile_class(op_class: str, tags: Mapping[str, str]) -> str:
    """The profile class that holds a graph op's own samples: a gelu op tagged approximate "none" (graph/layer_ops
    GELU_TAG, the exact GELU) is GELU_EXACT's; every other op its own class's."""
    return GELU_EXACT if op_class == "gelu" and tags.get("approximate") == "none" else op_class


def profile_dims(op_class: str, dims: Mapping[str, float]) -> dict[str, float]:
    """A graph op's dims (graph/op.py contract) as the dims a profile's samples are keyed by. They agree except
    for rope, whose graph heads (q + k) are ROPE_TENSORS tensors of heads / ROPE_TENSORS each: passing them as
    they are priced a rope twice (a Llama-3-8B TP2 rope, 16 + 4 heads, was looked up as 2 x 20 rotated heads)."""
    if op_class != "rope":
        return dict(dims)
    return {**dims, "heads": dims["heads"] / ROPE_TENSORS}


UNKNOWN = -1.0
"""Feature value of an optional dim the caller did not give (below every real value: log2 sizes >= 0, shares
>= 0), so any tree learner separates known from unknown rows with one split; fitters add unknown-dim copies of
their training rows (build_profile.with_unknown_rows) so such ops still get the params-only answer."""


def _optional(d: Dims, key: str, like: np.ndarray) -> np.ndarray:
    value = d.get(key)
    return np.full(like.shape, np.nan) if value is None else np.asarray(value, dtype=np.float64) + 0.0 * like


def _optimizer(d: Dims, bwd: bool, rc: RooflineConstants) -> Block:
    p = np.asarray(d["params"], dtype=np.float64)
    layers, emb = _optional(d, "layers", p), _optional(d, "embedding_params", p)
    # Mixed-precision Adam: fp32 master weight, m, v read+written, fp16 grad read, fp16 weight written:
    # 4*3*2 + 2 + 2 = 28 bytes per parameter (ZeRO paper, Rajbhandari et al. 2020, Sec. 3.1 counts the states).
    # The multi-tensor Adam walks every tensor in 65,536-element chunks (apex multi_tensor_apply), so small
    # tensors (a high TP degree's shards) run below bandwidth: the time depends on the tensor sizes, which the
    # layers of the stage and its embedding/LM-head share give (A100 first-stage files: 0.13 ns/param at TP16
    # and hidden 2,048 vs 0.02 at TP1).
    layer_params = (p - np.nan_to_num(emb)) / np.maximum(layers, 1.0)
    cols = [_lg(p), _lg(layer_params), np.log2(np.maximum(layers, 1.0)), emb / np.maximum(p, 1.0), _lg(emb)]
    cols = [np.where(np.isnan(c), UNKNOWN, c) for c in cols]
    names = ["log_params", "log_layer_params", "log_layers", "embedding_share", "log_embedding_params"]
    return names, cols, 12.0 * p, 28.0 * p


Builder = Callable[[Dims, bool, RooflineConstants], Block]

BUILDERS: Mapping[str, Builder] = {
    "gemm": _gemm,
    "bmm": _bmm,
    "attention": _attention,
    "softmax": _fused_softmax,
    "softmax_unfused": lambda d, b, rc: _rows_cols(d, b, rc, "rows", "cols", 5.0, (2.0, 3.0)),
    "masked_fill": lambda d, b, rc: _rows_cols(d, b, rc, "rows", "cols", 1.0, (2.0, 2.0)),
    "layernorm": lambda d, b, rc: _rows_cols(d, b, rc, "tokens", "hidden", 8.0, (2.0, 4.0)),
    "rmsnorm": lambda d, b, rc: _rows_cols(d, b, rc, "tokens", "hidden", 6.0, (2.0, 4.0)),
    "gelu": lambda d, b, rc: _elementwise(d, b, rc, 8.0, (2.0, 3.0)),
    "gelu_exact": lambda d, b, rc: _elementwise(d, b, rc, 8.0, (2.0, 3.0)),
    "swiglu": lambda d, b, rc: _elementwise(d, b, rc, 6.0, (3.0, 5.0)),
    "residual_add": lambda d, b, rc: _elementwise(d, b, rc, 1.0, (3.0, 3.0)),
    "dropout": lambda d, b, rc: _elementwise(d, b, rc, 2.0, (3.0, 3.0)),
    "rope": _rope,
    "embedding": _embedding,
    "cross_entropy": _cross_entropy,
    "optimizer": _optimizer,
}
"""Op classes a profile can hold. softmax_unfused and masked_fill are the unfused attention path's kernels; gelu is the
tanh approximation and gelu_exact the erf GELU (predict/dispatch.gelu_variant prices a graph's gelu op by its tag)."""

REQUIRED_DIMS: Mapping[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"), "bmm": ("batch", "m", "n", "k"),
    "attention": ("b", "s", "heads", "kv_heads", "head_dim", "causal"),
    "softmax": ("rows", "cols"), "softmax_unfused": ("rows", "cols"), "masked_fill": ("rows", "cols"),
    "layernorm": ("tokens", "hidden"), "rmsnorm": ("tokens", "hidden"), "gelu": ("elements",), "gelu_exact": ("elements",),
    "swiglu": ("elements",), "residual_add": ("elements",), "dropout": ("elements",),
    "rope": ("tokens", "heads", "head_dim"), "embedding": ("tokens", "vocab", "hidden"),
    "cross_entropy": ("tokens", "vocab"), "optimizer": ("params",),
}
OPTIONAL_DIMS: Mapping[str, tuple[str, ...]] = {"optimizer": ("layers", "embedding_params")}
"""Dims a class uses when the op carries them (graph/op.py): optimizer `layers` = transformer layers whose
parameters the step updates, `embedding_params` = the word-embedding / LM-head parameters among `params` (0 on a
middle pipeline stage). Absent ones become UNKNOWN features."""
OPTIONAL_FEATURES = frozenset({"log_layer_params", "log_layers", "embedding_share", "log_embedding_params"})
"""Features computed from OPTIONAL_DIMS (UNKNOWN when the dims are absent)."""


@dataclass(frozen=True)
class FeatureBlock:
    """What a regressor sees for a batch of shapes of one op class and direction."""

    names: tuple[str, ...]
    matrix: np.ndarray
    """[num_shapes, num_features] float64."""
    roofline_s: np.ndarray
    """max(flops / peak, bytes / bandwidth) per shape: the target is log(time / roofline_s)."""


def build_features(op_class: str, bwd: bool, dims: Dims, rc: RooflineConstants) -> FeatureBlock:
    names, cols, flops, nbytes = BUILDERS[op_class](dims, bwd, rc)
    flops = np.maximum(flops, 1.0)
    nbytes = np.maximum(nbytes, 1.0)
    names = names + ["log_flops", "log_bytes", "log_intensity"]
    cols = cols + [_lg(flops), _lg(nbytes), np.log2(flops / nbytes)]
    roofline_s = np.maximum(flops / rc.peak_flop_per_s, nbytes / rc.memory_bandwidth_bytes_per_s)
    matrix = np.column_stack([np.broadcast_to(np.asarray(c, dtype=np.float64), flops.shape) for c in cols])
    return FeatureBlock(tuple(names), matrix, roofline_s)


def schema_hash(op_class: str, bwd: bool) -> str:
    """Hash of the feature names and schema version: a profile fitted with other features is refused."""
    probe = {k: np.full(1, 256.0) for k in REQUIRED_DIMS[op_class]}
    names = build_features(op_class, bwd, probe, RooflineConstants(1.0, 1.0, 1, 2)).names
    text = json.dumps({"v": FEATURE_SCHEMA_VERSION, "class": op_class, "bwd": bwd, "names": names})
    return hashlib.sha256(text.encode()).hexdigest()[:16]
