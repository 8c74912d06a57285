"""The unaligned-width slowdown of a candidate's GEMMs, for the surrogate's step-time estimate (tune/surrogate.py).

The full prediction multiplies a GEMM whose leading dimension (n or k) is not a multiple of 16 bytes by the slowdown
measured on Hopper (predict/gemm_alignment.py alignment_factor: the LM head at an odd vocabulary width 6.9-7.5x
forward, ~5x backward). Which widths are unaligned depends on TP: the LM head's n is the padded vocabulary over TP
(Megatron `_vocab_size_with_padding`, candidate.padded_vocab_at: with --make-vocab-size-divisible-by 1, V = 50260
is 4-aligned at TP 1, 2-aligned at TP 2 and odd at TP 4 and 8), the layer GEMMs' n or k the QKV, attention and MLP
widths over TP. The surrogate priced every TP as aligned, so it shortlisted candidates whose head costs several
times its estimate; these factors are alignment_factor itself, evaluated once per distinct TP on the GEMMs one layer
and the head run per rank (graph/layer_ops.py's shapes), so the two agree on what is unaligned and at what price.

Each factor is the FLOP-weighted mean over the GEMMs (forward once, backward twice: the data and weight gradients,
Narayanan et al. eq. 3's 3x), and for a layer also over its non-GEMM FLOPs (the attention core: its head dim does not
change with TP), which stay at 1. Off Hopper, or for a dtype the measurement does not price, every factor is 1.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.graph.op import Op
from llmperf_hook.hardware.spec import HardwareSpec
from llmperf_hook.predict.gemm_alignment import ELEMENT_BYTES, alignment_factor, is_hopper
from llmperf_hook.tune.candidate import padded_vocab_at

_PHASE_WEIGHTS = (("fwd", 1.0), ("bwd", 2.0))
"""A GEMM's backward is two GEMMs of its forward's FLOPs (data and weight gradients)."""


def alignment_factors(cfg: TrainingConfig, gpu: HardwareSpec, tp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(layer compute factor, LM head factor) per row of the TP column: what the aligned estimate is multiplied by."""
    ones = np.ones(tp.shape)
    if not is_hopper(gpu) or cfg.precision not in ELEMENT_BYTES:
        return ones, ones
    layer, head = ones.copy(), ones.copy()
    for t in np.unique(tp).tolist():
        rows = tp == t
        layer[rows], head[rows] = _layer_factor(cfg, gpu, int(t)), _gemm_factor(cfg, gpu, *_head_dims(cfg, int(t)))
    return layer, head


def _head_dims(cfg: TrainingConfig, tp: int) -> tuple[int, int]:
    """(n, k) of the LM head's per-rank GEMM: the rank's vocabulary columns by the hidden size."""
    return padded_vocab_at(cfg, tp) // tp, cfg.model.hidden_size


def _layer_gemms(cfg: TrainingConfig, tp: int) -> Mapping[str, tuple[int, int, float]]:
    """name -> (n, k, forward FLOPs per token) of one dense layer's GEMMs on a rank (graph/layer_ops.py: QKV column-
    parallel, projection row-parallel, FC1 column-parallel with the gate under SwiGLU, FC2 row-parallel)."""
    m = cfg.model
    h, ffn = m.hidden_size, m.ffn_hidden_size
    q, kv = m.num_attention_heads * m.kv_channels, m.num_query_groups * m.kv_channels
    fc1 = ffn * (2 if m.swiglu else 1)
    return {"qkv": ((q + 2 * kv) // tp, h, 2.0 * h * (q + 2 * kv) / tp), "proj": (h, q // tp, 2.0 * q * h / tp),
            "fc1": (fc1 // tp, h, 2.0 * h * fc1 / tp), "fc2": (h, ffn // tp, 2.0 * ffn * h / tp)}


def _layer_factor(cfg: TrainingConfig, gpu: HardwareSpec, tp: int) -> float:
    """The GEMMs' FLOP-weighted factor over the layer's forward FLOPs per token (attention core included at 1)."""
    m = cfg.model
    gemms = _layer_gemms(cfg, tp)
    core = 2.0 * m.seq_length * m.num_attention_heads * m.kv_channels / tp  # QK^T and PV, causal half of 4*s*q
    total = sum(f for _, _, f in gemms.values()) + core
    # An MoE layer's expert GEMMs are split by expert TP, not TP: priced at 1 here (the dense MLP's FLOPs stand in).
    priced = {k: v for k, v in gemms.items() if not (m.num_experts and k in ("fc1", "fc2"))}
    extra = sum(f * (_gemm_factor(cfg, gpu, n, k) - 1.0) for n, k, f in priced.values())
    return 1.0 + extra / total if total > 0 else 1.0


def _gemm_factor(cfg: TrainingConfig, gpu: HardwareSpec, n: int, k: int) -> float:
    """alignment_factor of a GEMM of these widths, forward and backward weighted by their FLOPs."""
    dims = {"m": 4096, "n": n, "k": k}  # m never sets the alignment (gemm_alignment module docstring)
    weighted = sum(w * alignment_factor(Op("tune", "gemm", phase, dims, dtype=cfg.precision), gpu)
                   for phase, w in _PHASE_WEIGHTS)
    return weighted / sum(w for _, w in _PHASE_WEIGHTS)
