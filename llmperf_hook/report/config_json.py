"""The `config` object of predict's JSON: issue 2's explain JSON when available, else the same flat keys."""

from __future__ import annotations

from typing import Any

from llmperf_hook.frameworks.training_config import TrainingConfig
from llmperf_hook.launch.parsed_job import ParsedJob


def _explain_renderer() -> Any:
    try:
        from llmperf_hook.frameworks import explain_json  # type: ignore[attr-defined]

        return explain_json
    except ImportError:
        pass
    try:
        from llmperf_hook.frameworks.explain import explain_json  # type: ignore[no-redef]

        return explain_json
    except ImportError:
        return None


def flat_config(cfg: TrainingConfig, job: ParsedJob | None) -> dict[str, Any]:
    """The explain keys (flat) with their sources, built here when the frameworks package offers no renderer."""
    m, p, b, o = cfg.model, cfg.parallel, cfg.batch, cfg.optimizer
    return {
        "world_size": cfg.world_size, "nnodes": cfg.nnodes, "nproc_per_node": cfg.nproc_per_node,
        "tp": p.tp, "pp": p.pp, "vpp": p.vpp, "cp": p.cp, "dp": p.dp, "ep": p.ep,
        "micro_batch_size": b.micro_batch_size, "global_batch_size": b.global_batch_size,
        "num_microbatches": b.num_microbatches, "num_layers": m.num_layers, "hidden_size": m.hidden_size,
        "ffn_hidden_size": m.ffn_hidden_size, "num_attention_heads": m.num_attention_heads,
        "num_query_groups": m.num_query_groups, "seq_length": m.seq_length,
        "padded_vocab_size": m.padded_vocab_size, "sequence_parallel": p.sequence_parallel,
        "recompute": cfg.recompute.granularity, "zero_stage": o.zero_stage, "precision": cfg.precision,
        "framework": cfg.framework, "launcher": cfg.launcher,
        "sources": {k: str(v) for k, v in cfg.sources.items()}, "warnings": list(cfg.warnings),
    }


def config_json(cfg: TrainingConfig, job: ParsedJob | None) -> dict[str, Any]:
    render = _explain_renderer()
    if render is None or job is None:
        return flat_config(cfg, job)
    return dict(render(cfg, job))
