"""Megatron-DeepSpeed's pipeline engine splits any layer count over PP, as DeepSpeed's PipelineModule does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmperf_hook.errors import ConfigError
from llmperf_hook.frameworks.resolve import resolve_job
from llmperf_hook.graph.stages import deepspeed_transformer_partition, layers_per_virtual_stage


@pytest.mark.parametrize("layers, stages", [(70, 12), (30, 4), (41, 8), (95, 16), (7, 3), (24, 5)])
@pytest.mark.parametrize("mixed_precision", [True, False])
def test_partition_is_deepspeeds_own(layers: int, stages: int, mixed_precision: bool) -> None:
    from deepspeed.runtime.utils import partition_balanced

    # GPTModelPipe's specs: _to_float16, embedding, the transformer layers, norm, head, float16_to_fp32 (fp16/bf16).
    weights = [0, 0] + [1] * layers + [0, 0] + [0] * int(mixed_precision)  # partition_method='type:transformer'
    parts = partition_balanced(weights, stages)
    expected = tuple(sum(weights[a:b]) for a, b in zip(parts[:-1], parts[1:]))
    assert deepspeed_transformer_partition(layers, stages, mixed_precision) == expected


def _bloom_argv(tmp_path: Path, *extra: str) -> list[str]:
    ds = tmp_path / "ds.json"
    ds.write_text(json.dumps({"train_micro_batch_size_per_gpu": 2, "train_batch_size": 2048,
                              "zero_optimization": {"stage": 1}, "bf16": {"enabled": True}}))
    return ["torchrun", "--nnodes", "48", "--nproc-per-node", "8", "pretrain_gpt.py",
            "--tensor-model-parallel-size", "4", "--pipeline-model-parallel-size", "12", "--num-layers", "70",
            "--hidden-size", "14336", "--num-attention-heads", "112", "--seq-length", "2048",
            "--max-position-embeddings", "2048", "--micro-batch-size", "2", "--global-batch-size", "2048", "--bf16",
            "--vocab-size", "250880", "--deepspeed", "--deepspeed_config", str(ds), "--zero-stage", "1", *extra]


def test_bloom_176b_layout_is_accepted_with_the_engines_split(tmp_path: Path) -> None:
    _, cfg = resolve_job(_bloom_argv(tmp_path), {})
    assert cfg.deepspeed_pipeline_engine
    assert layers_per_virtual_stage(cfg) == [6] * 10 + [5, 5]


def test_without_the_pipeline_engine_megatron_rule_holds(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not divisible by"):
        resolve_job(_bloom_argv(tmp_path)[:-5] + ["--bf16"], {})  # plain Megatron-LM: layers % PP == 0


def test_bigscience_fork_options_are_known_and_flagged_as_not_modelled(tmp_path: Path) -> None:
    # BLOOM's training script (bigscience-workshop/Megatron-DeepSpeed) adds options of its fork.
    argv = _bloom_argv(tmp_path, "--embed-layernorm", "--pp-partition-method", "type:transformer|embedding",
                       "--abort-on-unmet-fused-kernel-constraints", "--pad-vocab-size-to", "250880")
    _, cfg = resolve_job(argv, {})
    assert any("--pp-partition-method" in w for w in cfg.warnings)
    assert any("--embed-layernorm" in w for w in cfg.warnings)
    with pytest.raises(ConfigError, match="did you mean --embed-layernorm"):
        resolve_job(_bloom_argv(tmp_path, "--embed-layernom"), {})


def test_uneven_first_stage_is_split_over_its_virtual_chunks() -> None:
    # Megatron "Uneven PP" with VPP: stage 0 holds 20 layers (10 per chunk), stage 1 the other 28 (14 per chunk);
    # chunk v = vchunk * PP + stage. explain accepted this and predict used to refuse it.
    from tests.frameworks.helpers import megatron

    cfg = megatron("--num-layers", "48", "--pipeline-model-parallel-size", "2", "--decoder-first-pipeline-num-layers",
                   "20", "--num-virtual-stages-per-pipeline-rank", "2", "--global-batch-size", "16")
    assert layers_per_virtual_stage(cfg) == [10, 14, 10, 14]
    cfg = megatron("--num-layers", "30", "--pipeline-model-parallel-size", "4", "--decoder-first-pipeline-num-layers",
                   "6", "--decoder-last-pipeline-num-layers", "8", "--global-batch-size", "16")
    assert layers_per_virtual_stage(cfg) == [6, 8, 8, 8]
