"""Complete the `sources` of a TrainingConfig so that every explain key says where its value came from.

The resolvers record the origin of each value they derive; the remaining keys are settings read straight from
one flag or ds_config key (or left at the framework's default), filled here from the flag table.
"""

from __future__ import annotations

from llmperf_hook.frameworks.deepspeed_config import DsSettings
from llmperf_hook.frameworks.flags import FlagValues
from llmperf_hook.provenance import Source, SourceKind

# explain key -> the flag destinations that set it, in the order the resolver reads them.
_FLAG_KEYS: dict[str, tuple[str, ...]] = {
    "swiglu": ("swiglu",), "normalization": ("normalization",),
    "position_embedding": ("use_rotary_position_embeddings", "position_embedding_type", "add_position_embedding"),
    "untie_embeddings": ("untie_embeddings_and_output_weights",), "overlap_grad_reduce": ("overlap_grad_reduce",),
    "overlap_param_gather": ("overlap_param_gather",), "offload_optimizer": ("optimizer_cpu_offload",),
    "distributed_optimizer": ("use_distributed_optimizer",), "num_experts": ("num_experts",),
    "recompute_method": ("recompute_method",), "recompute_num_layers": ("recompute_num_layers", "checkpoint_num_layers"),
}
# explain key -> DsSettings source key.
_DS_KEYS = {"offload_optimizer": "offload_optimizer", "offload_param": "offload_param", "overlap_grad_reduce": "overlap_comm"}


def fill_sources(src: dict[str, Source], flags: FlagValues, ds: DsSettings | None, framework: str) -> None:
    """Add an origin for every explain key the resolvers left without one (in place)."""
    from llmperf_hook.frameworks.explain_data import EXPLAIN_KEYS

    for key in EXPLAIN_KEYS:
        if key in src:
            continue
        if ds is not None and key in _DS_KEYS and _DS_KEYS[key] in ds.sources:
            src[key] = ds.sources[_DS_KEYS[key]]
            continue
        given = next((d for d in _FLAG_KEYS.get(key, ()) if flags.has(d)), None)
        if given is not None:
            src[key] = flags.source(given)
        elif key == "pipeline_schedule":
            src[key] = Source(SourceKind.DERIVED, "from PP and virtual stages")
        elif key == "overlap_grad_reduce" and ds is not None:
            src[key] = Source(SourceKind.DEFAULT, "DeepSpeed: overlap_comm on at ZeRO-3 only")
        else:
            src[key] = Source(SourceKind.DEFAULT, framework)
