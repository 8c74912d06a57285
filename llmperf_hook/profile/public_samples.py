"""Read the public operator samples (../shared/data/op-samples, MIT) into the graph's dims contract.

Each CSV is mapped onto an op class and its dims exactly as one TP rank sees them (README of the samples):
linear1..4 / linear_final -> gemm, baddbmm / bmm -> bmm, flash_atten -> attention (causal, no GQA),
ScaledUpperTriangMaskedSoftmax -> softmax (the fused kernel Megatron uses by default), softmax -> softmax_unfused,
fillmask -> masked_fill, layernorm / RMSlayernorm, gelu, RoPE -> rope, res_add -> residual_add, embedding,
parallel_cross_entropy_128 -> cross_entropy, optimizer files -> optimizer (params per rank).
The files are read where they are, never copied.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from llmperf_hook.errors import UsageError

GPT_NEOX_VOCAB = 50257
"""Vocabulary of the samples' GPT-NeoX tokenizer, padded to a multiple of 128 * mp (README)."""

ATTRIBUTION = ("Operator and NCCL samples from 'Efficient Fine-Grained GPU Performance Modeling for Distributed "
               "Deep Learning of LLM' (arXiv 2509.22832, HiPC 2025), Copyright (c) 2025 ICICLE, MIT License.")

Cols = Mapping[str, np.ndarray]


@dataclass(frozen=True)
class SampleSet:
    """All rows of one public CSV for one direction, as contract dims and seconds."""

    source: str
    """The file's operator name, e.g. "linear3" (what the authors' error table calls it)."""
    op_class: str
    phase: str
    """"fwd" | "bwd" (optimizer files: "fwd" standing for the single "dur" column)."""
    dims: Mapping[str, np.ndarray]
    time_s: np.ndarray
    raw: Mapping[str, np.ndarray]
    """The original columns (mp, b, l, dim, h, ...) for splits by hidden size and sequence length."""


def _padded_vocab_per_rank(mp: np.ndarray) -> np.ndarray:
    # Megatron/NeoX: pad to a multiple of make_vocab_size_divisible_by (128) * TP, then split over TP.
    mult = 128 * mp
    return np.ceil(GPT_NEOX_VOCAB / mult) * mult / mp


def _gemm(kind: str) -> Callable[[Cols], dict]:
    def dims(c: Cols) -> dict:
        mp, tokens, d = c["mp"], c["b"] * c["l"], c["dim"]
        kn = {"linear1": (d, 3 * d / mp), "linear2": (d / mp, d), "linear3": (d, 4 * d / mp),
              "linear4": (4 * d / mp, d), "linear_final": (d, _padded_vocab_per_rank(mp))}[kind]
        return {"m": tokens, "k": kn[0], "n": kn[1]}
    return dims


def _heads(c: Cols) -> tuple[np.ndarray, np.ndarray]:
    return c["b"] * c["h"] / c["mp"], c["dim"] / c["h"]


def _baddbmm(c: Cols) -> dict:
    batch, hd = _heads(c)
    return {"batch": batch, "m": c["l"], "n": c["l"], "k": hd}


def _bmm(c: Cols) -> dict:
    batch, hd = _heads(c)
    return {"batch": batch, "m": c["l"], "n": hd, "k": c["l"]}


def _flash(c: Cols) -> dict:
    h = c["h"] / c["mp"]
    return {"b": c["b"], "s": c["l"], "heads": h, "kv_heads": h, "head_dim": c["dim"] / c["h"],
            "causal": np.ones_like(h)}


def _softmax(c: Cols) -> dict:
    return {"rows": c["b"] * c["h"] / c.get("mp", np.ones_like(c["b"])) * c["l"], "cols": c["l"]}


def _norm(c: Cols) -> dict:
    return {"tokens": c["b"] * c["l"], "hidden": c["dim"]}


def _stage_params(c: Cols, first: bool, last: bool) -> np.ndarray:
    # GPT-NeoX layer: QKV 3d^2+3d, out d^2+d, MLP 8d^2+5d (weights split over mp), two LayerNorms 4d (replicated).
    d, mp = c["dim"], c["mp"]
    per_layer = (12 * d * d + 9 * d) / mp + 4 * d
    extra = (_padded_vocab_per_rank(mp) * d if first else 0) + (_padded_vocab_per_rank(mp) * d + 2 * d if last else 0)
    return c["encoders"] * per_layer + extra


def _stage_dims(c: Cols, first: bool, last: bool) -> dict:
    """Optimizer dims of one pipeline stage: all its parameters, its layers, and the word-embedding (first stage)
    or LM-head (last stage) parameters among them (features.OPTIONAL_DIMS)."""
    table = _padded_vocab_per_rank(c["mp"]) * c["dim"]
    return {"params": _stage_params(c, first, last), "layers": c["encoders"],
            "embedding_params": table * (float(first) + float(last))}


MAPPINGS: Mapping[str, tuple[str, Callable[[Cols], dict]]] = {
    **{k: ("gemm", _gemm(k)) for k in ("linear1", "linear2", "linear3", "linear4", "linear_final")},
    "baddbmm": ("bmm", _baddbmm), "bmm": ("bmm", _bmm), "flash_atten": ("attention", _flash),
    "ScaledUpperTriangMaskedSoftmax": ("softmax", _softmax), "softmax": ("softmax_unfused", _softmax),
    "fillmask": ("masked_fill", _softmax), "layernorm": ("layernorm", _norm), "RMSlayernorm": ("rmsnorm", _norm),
    "gelu": ("gelu", lambda c: {"elements": c["l"] * c["b"] * 4 * c["dim"] / c["mp"]}),
    "RoPE": ("rope", lambda c: {"tokens": c["b"] * c["l"], "heads": c["h"] / c["mp"], "head_dim": c["dim"] / c["h"]}),
    "res_add": ("residual_add", lambda c: {"elements": c["b"] * c["l"] * c["dim"]}),
    "embedding": ("embedding", lambda c: {"tokens": c["b"] * c["l"], "vocab": _padded_vocab_per_rank(c["mp"]),
                                          "hidden": c["dim"]}),
    "parallel_cross_entropy_128": ("cross_entropy", lambda c: {"tokens": c["b"] * c["l"],
                                                                "vocab": _padded_vocab_per_rank(c["mp"])}),
    "optimizer": ("optimizer", lambda c: {"params": c["params"]}),
    "firstStage_optimizer": ("optimizer", lambda c: _stage_dims(c, True, False)),
    "middleStage_optimizer": ("optimizer", lambda c: _stage_dims(c, False, False)),
    "lastStage_optimizer": ("optimizer", lambda c: _stage_dims(c, False, True)),
}


def read_csv_columns(path: Path) -> dict[str, np.ndarray]:
    with path.open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    if not rows:
        raise UsageError(f"{path} has no rows")
    return {k: np.asarray([float(r[k]) for r in rows]) for k in rows[0]}


def operator_files(data_dir: Path) -> dict[str, Path]:
    """{operator name: CSV path} of one GPU's operator folder (e.g. .../Perlmutter/operator)."""
    out = {}
    for path in sorted(data_dir.glob("*_fp16.csv")):
        name = path.stem.split("_", 1)[1].removesuffix("_fp16")
        if name in MAPPINGS:
            out[name] = path
    if not out:
        raise UsageError(f"no operator sample files (*_fp16.csv) under {data_dir}")
    return out


def read_sample_sets(path: Path, name: str) -> list[SampleSet]:
    """Both directions of one operator file (one set for the single-duration optimizer files)."""
    cols = read_csv_columns(path)
    op_class, to_dims = MAPPINGS[name]
    dims = {k: np.asarray(v, dtype=np.float64) for k, v in to_dims(cols).items()}
    pairs = [("fwd", "F_dur(us)"), ("bwd", "B_dur(us)")] if "F_dur(us)" in cols else \
        [("fwd", "dur(us)" if "dur(us)" in cols else "dur")]
    return [SampleSet(name, op_class, phase, dims, cols[col] * 1e-6, cols) for phase, col in pairs]


def read_reference_errors(data_dir: Path) -> dict[tuple[str, str], float]:
    """{(operator, "fwd"|"bwd"|"dur"): Best_error fraction} from NVIDIA<GPU>.csv (the authors' regressors)."""
    tables = [p for p in data_dir.glob("NVIDIA*.csv") if not p.stem.endswith("_fp16")]
    out: dict[tuple[str, str], float] = {}
    for table in tables:
        with table.open(newline="") as fh:
            for row in csv.DictReader(fh):
                out[(row["Function"], row["Propagation"])] = float(row["Best_error%"])
    return out
