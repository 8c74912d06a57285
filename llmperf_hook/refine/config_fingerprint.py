"""Which configuration a run was: a fingerprint of the job, equal for the same job launched again.

A calibration knows what it saw: the instrumented configuration gets its own measured ratio, the others only
the shared part (refine/shrinkage.py). "The same configuration" means the same work on the same layout: model
shape, parallel layout, batch (micro-batch, global batch, accumulation), precision, recomputation, ZeRO stage
and offloads, attention backend and schedule. Not part of it: the launcher, the script's path, where each value
came from, warnings.

The fingerprint is read from the explain JSON of the resolved job (frameworks.explain_json), which
`llmperf run` saves as prediction.json's "config": the same function computes it at refine time from the file
and at predict time from the TrainingConfig (through the same JSON, ~30 us), so both sides agree by
construction. A JSON without any of the keys (a hand-written or older prediction.json) has no fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Mapping

FINGERPRINT_KEYS = (
    "framework", "world_size", "nnodes", "nproc_per_node", "tp", "pp", "vpp", "cp", "dp", "ep", "etp",
    "micro_batch_size", "global_batch_size", "num_microbatches", "num_layers", "hidden_size", "ffn_hidden_size",
    "num_attention_heads", "num_query_groups", "kv_channels", "seq_length", "padded_vocab_size",
    "sequence_parallel", "recompute", "recompute_method", "recompute_num_layers", "zero_stage", "precision",
    "num_experts", "moe_router_topk", "moe_ffn_hidden_size", "swiglu", "normalization", "position_embedding",
    "untie_embeddings", "distributed_optimizer", "offload_optimizer", "offload_param", "overlap_grad_reduce",
    "overlap_param_gather", "attention_backend", "pipeline_schedule")
"""Keys of the explain JSON that make a job 'the same configuration' (a fixed list: a key added to the explain
JSON later does not change the fingerprints of stored runs)."""

IDENTITY_KEYS = ("num_layers", "hidden_size", "micro_batch_size")
"""Without these a JSON does not describe a job (e.g. {"framework": "deepspeed"}): no fingerprint."""


def fingerprint_from_config_json(config: Mapping[str, Any] | None) -> str | None:
    """16 hex digits of the SHA-256 of the fingerprint keys' values, or None when the JSON names no job."""
    if not isinstance(config, Mapping) or any(config.get(k) is None for k in IDENTITY_KEYS):
        return None
    canonical = json.dumps({k: config.get(k) for k in FINGERPRINT_KEYS}, sort_keys=True, default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def config_fingerprint(cfg: Any) -> str | None:
    """The fingerprint of a resolved TrainingConfig; None if its explain JSON cannot be built (never raises: it
    runs on the predict path)."""
    return fingerprint_from_config_json(config_explain(cfg))


def config_explain(cfg: Any) -> dict | None:
    """The explain JSON of a resolved TrainingConfig (what prediction.json saves as "config"); None if it cannot
    be built (never raises: it runs on the predict path)."""
    try:
        from llmperf_hook.frameworks import explain_json

        return dict(explain_json(cfg, None))
    except Exception:  # noqa: BLE001 - a fingerprint is optional; the shared calibration applies without one
        return None


def describe_config(config: Mapping[str, Any] | None) -> str:
    """'L2 h256 s128 mbs2 gbs4 z1 fp32 2 ranks' for notes; '' without a job."""
    if fingerprint_from_config_json(config) is None:
        return ""
    c = config or {}
    layout = "".join(f" {k}{c[k]}" for k in ("tp", "pp", "cp", "ep") if isinstance(c.get(k), int) and c[k] > 1)
    return (f"L{c.get('num_layers')} h{c.get('hidden_size')} s{c.get('seq_length')} mbs{c.get('micro_batch_size')} "
            f"gbs{c.get('global_batch_size')}{layout} z{c.get('zero_stage')} {c.get('precision')} "
            f"{c.get('world_size')} rank(s)")
