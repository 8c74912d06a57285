"""Round-4 campaign: tune with Megatron flags whose validity depends on the searched layout."""

from __future__ import annotations

import dataclasses

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.frameworks.validation import validate_config
from llmperf_hook.tune.candidate import apply_candidate, candidate_of
from llmperf_hook.tune.megatron_argv import rewrite_megatron_argv

ARGV = ["torchrun", "--nnodes", "2", "--nproc-per-node", "8", "pretrain_gpt.py", "--num-layers", "16", "--hidden-size",
        "2048", "--num-attention-heads", "16", "--seq-length", "4096", "--max-position-embeddings", "4096",
        "--micro-batch-size", "1", "--global-batch-size", "256", "--vocab-size", "32000", "--bf16",
        "--tensor-model-parallel-size", "2", "--distribute-saved-activations", "--recompute-granularity", "full",
        "--recompute-method", "uniform", "--recompute-num-layers", "1"]


def test_distribute_saved_activations_is_dropped_where_the_tuned_layout_forbids_it() -> None:
    # Megatron needs TP > 1, full recompute and no SP for it: a TP-1 or selective candidate kept the flag in the
    # rewritten command, which explain (and Megatron) then refused.
    cfg = resolve_job(ARGV, {})[1]
    base = candidate_of(cfg)
    for new in (dataclasses.replace(base, tp=1), dataclasses.replace(base, recompute="selective", recompute_num_layers=None),
                dataclasses.replace(base, sequence_parallel=True)):
        validate_config(apply_candidate(cfg, new))
        out = rewrite_megatron_argv(ARGV, base, new, 16, "megatron")
        assert "--distribute-saved-activations" not in out
        resolve_job(out, {})  # the rewritten command is one Megatron (and explain) accepts
    kept = rewrite_megatron_argv(ARGV, base, dataclasses.replace(base, micro_batch_size=2), 16, "megatron")
    assert "--distribute-saved-activations" in kept
    assert resolve_job(kept, {})[1].recompute.distribute_saved_activations


def test_cpu_offloading_candidates_keep_megatron_rules() -> None:
    # TransformerConfig refuses --cpu-offloading with PP > 1 or any recompute: tune must not propose those.
    argv = [w for w in ARGV if w not in ("--distribute-saved-activations",)]
    argv = argv[:argv.index("--recompute-granularity")] + ["--cpu-offloading"]
    cfg = resolve_job(argv, {})[1]
    base = candidate_of(cfg)
    for new in (dataclasses.replace(base, pp=2), dataclasses.replace(base, recompute="selective")):
        with pytest.raises(ConfigError, match="cpu-offloading"):
            validate_config(apply_candidate(cfg, new))
    validate_config(apply_candidate(cfg, dataclasses.replace(base, micro_batch_size=2)))
